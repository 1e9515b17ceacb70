"""Pretraining by growth: start with fewer layers, add them on a schedule of epochs.

A deep stack trained from scratch can be slow to start (or not start) learning; RETURNN's
"pretrain" trains a shallow version first and adds layers as training goes. Here the model
declares which of its settings counts the layers that can be added
(:attr:`asrkit.types.ModelSpec.growable`, e.g. ds2's ``rnn_layers``), and the setting
``grow_epochs`` (``-o grow_epochs=1,2``) lists the epochs at whose end one layer is added: the
run starts with the configured count minus one per listed epoch and reaches it after the last.

A growth builds the bigger model and carries over, by weight path (which names the layer:
``ds2/bigru0/kernel``), every weight of the existing layers and their optimiser state (Adam's
moments, the step counters); the new layers keep their fresh initialisation. Existing layers keep
their names, so the variables of a checkpoint keep theirs. A run's size is a function of its
epoch counter (:meth:`Growth.layers_at`), so a resumed run builds the model at the size its
checkpoint was saved with and restores it exactly. The new layers' initial weights are drawn
from the seed and the epoch alone (:meth:`Growth.grow`), so a run resumed before a growth draws
them as the uninterrupted run did.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from asrkit.core.errors import AsrkitError
from asrkit.core.settings import MAX_SEED
from asrkit.train.checkpoints import KINDS, Checkpoints

if TYPE_CHECKING:

    from asrkit.config.train import TrainConfig
    from asrkit.runs.run import Run
    from asrkit.train.model import TrainedModel
    from asrkit.train.records import RunRecords
    from asrkit.train.state import LoopState
    from asrkit.types import ModelSpec


@dataclass(frozen=True)
class Growth:
    """A run's growth schedule: the setting that counts layers and the epochs that add one."""

    #: The model config's field that counts the layers that can be added.
    field: str
    #: The configured (final) number of layers.
    full: int
    #: The (1-based) epochs at whose end one layer is added, increasing.
    epochs: tuple[int, ...]

    @classmethod
    def of(cls, train: TrainConfig, spec: ModelSpec, model_config: Any) -> Growth | None:
        """The growth of a run with ``train``'s ``grow_epochs`` (None when it has none); a model
        that cannot grow, or a schedule that would leave no layer to start with, is an
        :class:`AsrkitError`."""
        epochs = tuple(train.grow_epochs)
        if not epochs:
            return None
        field = getattr(spec, "growable", "")
        if not field:
            raise AsrkitError(f"grow_epochs: the {spec.name} model cannot grow (it declares no "
                              "growable layer count)")
        full = getattr(model_config, field)
        if len(epochs) >= full:
            raise AsrkitError(
                f"grow_epochs={','.join(map(str, epochs))} adds {len(epochs)} layer(s) but "
                f"{spec.name} has only model.{field}={full}; list fewer epochs than layers")
        return cls(field, full, epochs)

    def layers_at(self, epoch: int) -> int:
        """Layers after ``epoch`` completed epochs (the loop state's ``epoch``)."""
        return self.full - len(self.epochs) + sum(1 for e in self.epochs if e <= epoch)

    def config_at(self, model_config: Any, epoch: int) -> Any:
        """``model_config`` with the layer count of ``epoch`` completed epochs."""
        return replace(model_config, **{self.field: self.layers_at(epoch)})

    def grows_after(self, epoch: int) -> bool:
        """Whether a layer is added when the ``epoch``-th epoch (1-based) ends."""
        return epoch in self.epochs

    def grow(self, trained: TrainedModel, state: LoopState, records: RunRecords) -> None:
        """Add a layer: the bigger model takes the existing layers' weights and optimiser
        state; the best checkpoint is chosen again among the bigger model's evaluations (it is
        what the run ends with, and what a plateau restores)."""
        layers = self.layers_at(state.epoch)
        # The new layers' initial weights depend on the seed and the epoch alone, so that a run
        # resumed before this growth draws them as the uninterrupted run did.
        trained.grow_to(self.config_at(trained.run.model_config, state.epoch),
                        seed=(trained.config.seed + state.epoch) % (MAX_SEED + 1))
        if trained.ema:
            state.ema_from_step = state.global_step
        state.best, state.best_ties, state.best_epoch, state.best_step = None, [], -1, -1
        state.evaluations_without_improvement = state.evaluations_since_lr_change = 0
        records.metrics({"event": "grow", "epoch": state.epoch, "layers": layers})
        if records.chief:
            tqdm.write(f"epoch {state.epoch}: grown to {layers} layers (model.{self.field})")


def saved_model_config(run: Run, kind: str = "latest") -> Any:
    """The model config of ``run``'s ``kind`` checkpoint (the other kind's when it has none):
    the run's own, at the size the checkpoint's epoch counter implies when the run grows."""
    growth = Growth.of(run.train, run.spec, run.model_config)
    if growth is None:
        return run.model_config
    # A watcher's best-by-METRIC checkpoint lives in RUN/watch (asrkit.evaluation.watch).
    checkpoints = Checkpoints(run.folder / ("watch" if kind.startswith("best-by-")
                                            else "checkpoints"))
    kinds = (kind, *(k for k in KINDS if k != kind)) if kind in KINDS else (kind,)
    for candidate in kinds:
        state = checkpoints.state(candidate)
        if state is not None:
            return growth.config_at(run.model_config, int(state.get("epoch", 0)))
    return growth.config_at(run.model_config, 0)


