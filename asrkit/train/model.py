"""The model being trained and everything bound to its variables.

The optimiser, the moving average of the weights (:mod:`asrkit.train.ema`), the checkpoints,
the compiled train step and the evaluation function all hold the model's variables (and those of
the training objective's head, when it has one: :meth:`asrkit.types.Objective.build`), so they
are built together (:class:`TrainedModel`) and rebuilt together when a growth
(:mod:`asrkit.train.growth`) replaces the model with a bigger one. The object itself stays the
same, so every part of the trainer that holds it sees the new model.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from asrkit.core.errors import AsrkitError
from asrkit.runs.scoring import make_predict
from asrkit.train.accumulate import AccumulatingStep
from asrkit.train.checkpoints import Checkpoints, networks, trainable_variables
from asrkit.train.ema import WeightAverage
from asrkit.train.finetune import freeze
from asrkit.train.precision import policy
from asrkit.train.snapshots import hand_over
from asrkit.train.step import Batch, make_optimizer, make_train_step

if TYPE_CHECKING:
    import keras
    import tensorflow as tf

    from asrkit.runs.run import Run
    from asrkit.train.state import LoopState

#: The compiled train step: a batch in, every replica's per-utterance losses out.
TrainStep = Callable[[Batch], "tf.Tensor"]


def seed_everything(seed: int) -> None:
    """Seed Python, numpy and Keras (initialisers, dropout). TensorFlow's graph-level seed is left
    unset: the input pipeline seeds its own ops, with seeds that are tensors (``seed + epoch``),
    which a graph-level seed would not accept."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(seed)
    tf.random.set_seed(None)


def carry_over(old: keras.Model | keras.optimizers.Optimizer,
               new: keras.Model | keras.optimizers.Optimizer) -> int:
    """Assign each variable of ``new`` the value of ``old``'s variable of the same path (a model
    and its grown version, or their optimisers); the others keep theirs. Returns how many were
    carried over. A path whose shape changed is an error: a growth adds layers, it does not
    reshape the existing ones."""
    by_path = {variable.path: variable for variable in old.variables}
    carried = 0
    for variable in new.variables:
        source = by_path.get(variable.path)
        if source is None:
            continue
        if tuple(source.shape) != tuple(variable.shape):
            raise AsrkitError(f"growth changed the shape of {variable.path} from "
                              f"{tuple(source.shape)} to {tuple(variable.shape)}")
        variable.assign(source.value)
        carried += 1
    return carried


class TrainedModel:
    """``run``'s model at ``model_config`` under ``strategy`` and ``precision``, with its
    optimiser, moving average, checkpoints and compiled functions; only the ``chief`` saves."""

    def __init__(self, run: Run, strategy: tf.distribute.Strategy, precision: str,
                 num_features: int, chief: bool, model_config: Any) -> None:
        self.run = run
        self.config = run.train
        self.strategy = strategy
        self.precision = precision
        self.num_features = num_features
        self.chief = chief
        self.build(model_config)

    def build(self, model_config: Any) -> None:
        """The model of ``model_config``, the objective's head (if any), and everything bound
        to their variables: the optimiser, the moving average, the checkpoints, the compiled
        steps (again after a growth)."""
        run, config = self.run, self.config
        self.objective, self.objective_config = run.objective, run.objective_config
        width = run.encoder_width()
        with self.strategy.scope(), policy(self.precision):
            self.model: keras.Model = run.spec.build(model_config, self.num_features, width)
            self.head: keras.Model | None = self.objective.build(self.objective_config, width,
                                                                 run.labels)
            if config.freeze:  # before the optimiser takes the trainable variables
                freeze(self.model, config.freeze)
            self.optimizer = make_optimizer(config,
                                            loss_scale=self.precision == "mixed_float16")
            self.optimizer.build(trainable_variables(self.model, self.head))
        self.model_config = model_config
        self.ema = (WeightAverage(self.strategy, self.model, config.ema_decay, self.head)
                    if config.ema_decay else None)
        self.checkpoints = Checkpoints(run.folder / "checkpoints", config.keep_checkpoints,
                                       on_saved=partial(hand_over, run.folder),
                                       **networks(self.model, self.head),
                                       optimizer=self.optimizer,
                                       **({"ema": self.ema.trackable} if self.ema else {}))
        #: Compiled for the batches' structure on first use (:meth:`compile_step`).
        self.train_step: TrainStep | AccumulatingStep | None = None
        self.predict = make_predict(self.model, run.spec, model_config, self.num_features,
                                    objective=self.objective,
                                    objective_config=self.objective_config, head=self.head)
        self.applied_lr: float | None = None

    def grow_to(self, model_config: Any, seed: int) -> None:
        """Rebuild at ``model_config`` (more layers), the new layers' initial weights drawn
        from ``seed``; the existing layers (and the objective's head) keep their weights and
        optimiser state, and the moving average starts again from the carried-over weights."""
        model, head, optimizer = self.model, self.head, self.optimizer
        seed_everything(seed)
        self.build(model_config)
        carry_over(model, self.model)
        if head is not None and self.head is not None:
            carry_over(head, self.head)
        carry_over(optimizer, self.optimizer)
        if self.ema:
            self.ema.reset()

    def compile_step(self, element_spec: dict[str, tf.TensorSpec]) -> TrainStep | AccumulatingStep:
        """The train step for batches of ``element_spec``, compiled once per build: with
        ``accumulate_steps``, one that gathers micro-batches."""
        config = self.config
        if self.train_step is None and config.accumulate_steps > 1:
            self.train_step = AccumulatingStep(self.strategy, self.model, self.optimizer,
                                               self.run.spec, self.model_config,
                                               config.accumulate_steps, element_spec,
                                               config.clip_norm, **self._objective())
        if self.train_step is None:
            self.train_step = make_train_step(self.strategy, self.model, self.optimizer,
                                              self.run.spec, self.model_config,
                                              element_spec, config.clip_norm,
                                              **self._objective())
        return self.train_step

    def _objective(self) -> dict[str, Any]:
        """The objective, its settings and its head, as the steps take them."""
        return {"objective": self.objective, "objective_config": self.objective_config,
                "head": self.head}

    @property
    def pending(self) -> int:
        """Micro-batches gathered and not yet applied (0 without accumulation)."""
        return getattr(self.train_step, "pending", 0)

    def flush(self) -> None:
        """Apply the micro-batches gathered (an epoch's last ones)."""
        if isinstance(self.train_step, AccumulatingStep):
            self.train_step.flush()

    def set_learning_rate(self, lr: float) -> None:
        """The optimiser's rate; a host-to-device write only when it changes."""
        if lr != self.applied_lr:
            self.optimizer.inner_optimizer.learning_rate.assign(lr)
            self.applied_lr = lr

    def updated(self, updates: int) -> None:
        """The weights were updated, the ``updates``-th time since the moving average started:
        move the average."""
        if self.ema:
            self.ema.update(updates)

    def averaged(self) -> contextlib.AbstractContextManager[None]:
        """The weights that are scored and exported inside: the moving average when kept."""
        return self.ema.applied() if self.ema else contextlib.nullcontext()

    def save(self, kind: str, state: LoopState) -> None:
        """Save a ``kind`` checkpoint with ``state`` (only the chief writes)."""
        if self.chief:
            self.checkpoints.save(kind, state.global_step, state.to_json())

