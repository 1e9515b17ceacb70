"""The training loop: CTC on ``tf.distribute`` towers, with exact resume.

One step: every replica (a GPU, or the CPU) runs the model on its own batch, computes the CTC
loss averaged over the *global* batch, and the gradients are summed across replicas and applied
once, so G devices behave like one batch G times larger (the notebook's towers); clipping acts
on that sum (:mod:`asrkit.train.gradients`). A step is one update of the weights: with
``accumulate_steps`` it gathers several batches (:mod:`asrkit.train.accumulate`). The learning
rate follows :mod:`asrkit.train.schedules`; :mod:`asrkit.train.ema` keeps a moving average of the
weights, which is what evaluation scores.

The optimiser is Adam wrapped in Keras' ``LossScaleOptimizer``: with mixed precision it scales
the loss as usual; in float32 its scale starts at 1, and either way it applies a step only when
every gradient is finite, so a batch with a non-finite loss changes nothing (the run names its
utterances and stops after ``max_bad_batches`` in a row).

Exact resume: each epoch's batches are a pure function of the seed and the epoch (a
deterministic pipeline seeded with ``seed + epoch``); a checkpoint stores the model, the
optimiser, and the loop state (epoch, step within it, learning-rate factor, early-stopping
counters). Resuming rebuilds the epoch's pipeline and skips the batches already trained on.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from dataclasses import dataclass, fields, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from asrkit.ctc import frames_needed
from asrkit.data.pipeline import PaddingMeter
from asrkit.errors import AsrkitError
from asrkit.evaluate import Evaluation, evaluate_dataset, make_predict, write_report
from asrkit.frames import fits, frame_seconds
from asrkit.settings import MAX_SEED
from asrkit.train import schedules
from asrkit.train.checkpoints import Checkpoints, append_metrics
from asrkit.train.clock import RunClock
from asrkit.train.ema import WeightAverage
from asrkit.train.growth import Growth, carry_over, saved_model_config
from asrkit.train.precision import choose_precision, policy
from asrkit.train.progress import RunProgress
from asrkit.train.snapshots import hand_over
from asrkit.train.step import make_optimizer, make_train_step
from asrkit.train.strategy import is_chief, is_multi_worker, make_strategy, uses_gpus

if TYPE_CHECKING:  # the engine is given a run; loading and saving runs is asrkit.runs's
    from asrkit.runs import Run

#: Utterances too short for their transcripts named in ``metrics.jsonl`` (the count is all).
TOO_SHORT_NAMED = 100


@dataclass
class LoopState:
    """Everything besides the weights that resuming needs; saved with every checkpoint."""

    epoch: int = 0
    step_in_epoch: int = 0
    global_step: int = 0
    lr_factor: float = 1.0
    best: float | None = None
    best_epoch: int = -1
    #: The global step of the best checkpoint, and of the last dev evaluation (-1: none yet).
    best_step: int = -1
    evaluated_step: int = -1
    #: Patience counters, in dev evaluations (each epoch end, every ``eval_every_*``, the stop).
    evaluations_without_improvement: int = 0
    evaluations_since_lr_change: int = 0
    bad_batches_in_a_row: int = 0
    steps_per_epoch: int | None = None
    #: The schedule's memory (:mod:`asrkit.train.schedules`): the previous dev score (newbob)
    #: and an estimated cosine horizon (0: none).
    last_score: float | None = None
    schedule_steps: int = 0
    #: The global step from which the checkpoint's moving average of the weights runs (-1: it
    #: holds none; :mod:`asrkit.train.ema`).
    ema_from_step: int = -1
    finished: bool = False
    stop_reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, saved: dict[str, Any]) -> LoopState:
        """The state a checkpoint saved; keys of older versions that no longer exist are
        dropped (their counters start again)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in saved.items() if k in known})


class Trainer:
    """Trains one run (new or resumed) to the end, writing everything into its folder."""

    def __init__(self, run: Run, progress: bool = True) -> None:

        self.run = run
        self.config = run.train
        self.progress = progress
        seed_everything(self.config.seed)
        self.strategy = make_strategy(self.config.devices, self.config.worker_timeout)
        self.precision, self.precision_note = choose_precision(
            self.config.precision, on_gpus=uses_gpus(self.strategy))
        self.chief = is_chief()
        self.replicas = self.strategy.num_replicas_in_sync
        self.spec = run.spec
        self.extractor = run.extractor
        self.dataset_dir = run.dataset
        self.num_features = run.num_features()
        # Pretraining by growth: the model's size follows the epoch counter of the checkpoint.
        self.growth = Growth.of(self.config, self.spec, run.model_config)
        self._build(saved_model_config(run, "latest"))
        self.decoder: Any = None
        self.eval_batches: dict[str, Any] = {}
        self.padding = PaddingMeter()

    def _build(self, model_config: Any) -> None:
        """The model of ``model_config`` and everything bound to its variables: the optimiser,
        the moving average, the checkpoints, the compiled steps (again after a growth)."""
        with self.strategy.scope(), policy(self.precision):
            self.model = self.spec.build(model_config, self.num_features,
                                         self.run.labels.num_classes)
            if self.config.freeze:  # before the optimiser takes the trainable variables
                from asrkit.train.finetune import freeze

                freeze(self.model, self.config.freeze)
            self.optimizer = make_optimizer(self.config,
                                            loss_scale=self.precision == "mixed_float16")
            self.optimizer.build(self.model.trainable_variables)
        self.model_config = model_config
        self.ema = (WeightAverage(self.strategy, self.model, self.config.ema_decay)
                    if self.config.ema_decay else None)
        self.checkpoints = Checkpoints(self.run.folder / "checkpoints",
                                       self.config.keep_checkpoints,
                                       on_saved=partial(hand_over, self.run.folder),
                                       model=self.model, optimizer=self.optimizer,
                                       **({"ema": self.ema.trackable} if self.ema else {}))
        self.train_step: Any = None  # compiled for the batches' structure on first use
        self.predict = make_predict(self.model, self.spec, model_config, self.num_features)
        self.applied_lr: float | None = None

    def _grow(self, state: LoopState) -> None:
        """Add a layer (:mod:`asrkit.train.growth`): the bigger model takes the existing layers'
        weights and optimiser state; the best checkpoint is chosen again among the bigger
        model's evaluations (it is what the run ends with, and what a plateau restores)."""
        assert self.growth is not None
        model, optimizer = self.model, self.optimizer
        layers = self.growth.layers_at(state.epoch)
        # The new layers' initial weights depend on the seed and the epoch alone, so that a run
        # resumed before this growth draws them as the uninterrupted run did.
        seed_everything((self.config.seed + state.epoch) % (MAX_SEED + 1))
        self._build(self.growth.config_at(self.run.model_config, state.epoch))
        carry_over(model, self.model)
        carry_over(optimizer, self.optimizer)
        if self.ema:
            self.ema.reset()
            state.ema_from_step = state.global_step
        state.best, state.best_epoch, state.best_step = None, -1, -1
        state.evaluations_without_improvement = state.evaluations_since_lr_change = 0
        self._metrics({"event": "grow", "epoch": state.epoch, "layers": layers})
        if self.chief:
            tqdm.write(f"epoch {state.epoch}: grown to {layers} layers "
                       f"(model.{self.growth.field})")

    # -- data ---------------------------------------------------------------------------------

    def batches(self, start: int, stop: int, skip_steps: int) -> Any:
        """Distributed batches of epochs ``start`` to ``stop - 1``, minus the first
        ``skip_steps`` steps. Each epoch's order depends on the seed and the epoch alone, so a
        resumed run replays the interrupted epoch exactly; all epochs live in one dataset, so
        none pays for building a pipeline. Each batch carries its ``epoch``."""
        import tensorflow as tf

        from asrkit.data.pipeline import dataset_options, make_dataset

        pipeline = replace(self.run.pipeline, deterministic=True, with_text=True)
        run, config = self.run, self.config

        def dataset_fn(context: Any) -> Any:
            # Plain Python building a pipeline: AutoGraph must not rewrite its conditionals.
            @tf.autograph.experimental.do_not_convert
            def epoch(number: Any) -> Any:
                data = make_dataset(self.dataset_dir, config.train_split, run.labels,
                                    self.extractor, run.feature_config, pipeline, context,
                                    seed=number + config.seed)
                return data.map(lambda batch: {**batch, "epoch": number})

            per_pipeline = self.replicas // context.num_input_pipelines
            data = tf.data.Dataset.range(start, stop).flat_map(epoch)
            data = data.skip(skip_steps * per_pipeline)
            return data.with_options(dataset_options(pipeline, context))

        return self.strategy.distribute_datasets_from_function(dataset_fn)

    def evaluate(self, split: str, progress: bool | None = None) -> Evaluation:
        from asrkit.data.pipeline import make_dataset

        if self.decoder is None:
            self.decoder = self.run.decoder  # with the run's decoder settings
        if split not in self.eval_batches:  # built once: its order is fixed, no shuffling
            self.eval_batches[split] = make_dataset(
                self.dataset_dir, split, self.run.labels, self.extractor,
                self.run.feature_config, self.run.pipeline.for_evaluation())
        with self.ema.applied() if self.ema else contextlib.nullcontext():  # what is exported
            return evaluate_dataset(self.predict, self.eval_batches[split], self.decoder,
                                    self.run.labels, split,
                                    self.progress if progress is None else progress)

    # -- the loop -----------------------------------------------------------------------------

    def fit(self) -> LoopState:
        """Train to the end (or resume to the end); write the final report.

        Whatever stops the run (the epochs, ``max_steps``, ``max_minutes``, early stopping or
        Ctrl-C), its latest weights are saved and, when a dev split is evaluated, scored, so
        the best checkpoint is chosen among every scored one, the final weights included.
        """
        import tensorflow as tf

        self.clock = RunClock.start(self.config.max_minutes)
        restored = self.checkpoints.restore("latest")
        state = LoopState.from_json(restored) if restored else LoopState()
        if not restored and self.config.init_from:
            # Fine-tuning: every worker loads the source's weights, before the moving average
            # (if any) starts from them.
            from asrkit.train.finetune import initialise

            loaded = initialise(self.model, self.config.init_from, self.config.init_reset)
            if self.chief:
                tqdm.write(loaded)
        if not self.ema:
            state.ema_from_step = -1
        elif state.ema_from_step < 0:  # a new run, or the average newly set on resume
            self.ema.reset()
            state.ema_from_step = state.global_step
        if restored and not state.stop_reason.startswith("early stopping"):
            # A time or step budget, or the epoch count, may have been raised (-o on resume).
            state.finished, state.stop_reason = False, ""
        if self.config.max_steps and state.global_step >= self.config.max_steps:
            state.finished, state.stop_reason = True, f"max_steps {self.config.max_steps}"
        if restored:
            self._metrics({"event": "resume", "epoch": state.epoch, "step": state.global_step})
        else:
            if self.chief:
                from asrkit.analysis import write_model_analysis

                self.run.save()
                write_model_analysis(self.run.folder, self.model, self.spec,
                                     self.model_config, self.run.feature_config,
                                     self.extractor)
                self._report_too_short(self.config.train_split)
            if self.config.init_from:
                self._metrics({"event": "init_from", "source": self.config.init_from,
                               "reset": list(self.config.init_reset)})
        self.writer = (tf.summary.create_file_writer(str(self.run.folder / "tensorboard"))
                       if self.chief else tf.summary.create_noop_writer())
        steps_per_epoch = self._estimated_steps_per_epoch()
        self.schedule = schedules.Schedule(self.config, steps_per_epoch, self.clock)
        self.bar = RunProgress(self.config, state, steps_per_epoch, self.clock, self.progress)
        self.last_evaluation = time.monotonic()
        with self.bar, self._stop_on_interrupt():
            while not state.finished and state.epoch < self.config.epochs:
                # With several replicas a step takes several batches, which must not straddle
                # two epochs: then each epoch gets a dataset of its own.
                # So must a growth, which rebuilds the step.
                stop = (self.config.epochs if self.replicas == 1 and not self.growth
                        else state.epoch + 1)
                with self._lost_workers_are_errors(), self._out_of_memory_is_an_error():
                    self._train(state, stop)
            if not state.finished:
                state.finished = True
                state.stop_reason = state.stop_reason or "all epochs done"
            self._save("latest", state)  # first, so that nothing can lose the last steps
            if state.evaluated_step != state.global_step:
                self._evaluate_dev(state, "stop")
                self._save("latest", state)
        if state.stop_reason == "interrupted":
            tqdm.write(f"asrkit: interrupted at step {state.global_step}; saved. Continue with: "
                       f"asrkit train --resume {self.run.folder}", file=sys.stderr)
            raise KeyboardInterrupt
        self._final_report(state)
        return state

    def _estimated_steps_per_epoch(self) -> int | None:
        """Steps an epoch from the split's utterance count, before the first epoch has counted
        them (bucketing adds up to one partial batch per bucket)."""
        from asrkit.data.pipeline import estimated_batches
        from asrkit.datasets import load_dataset_json

        if self.run.pipeline.batch_seconds:  # batch sizes follow the lengths
            batches = estimated_batches(self.dataset_dir, self.config.train_split,
                                        self.run.pipeline)
            return max(1, math.ceil(batches / self.replicas)) if batches else None
        try:
            count = load_dataset_json(self.dataset_dir)["splits"][self.config.train_split][
                "utterances"]
        except (KeyError, OSError, ValueError, TypeError):
            return None
        return max(1, math.ceil(count / (self.config.batch_size * self.replicas)))

    @contextlib.contextmanager
    def _stop_on_interrupt(self) -> Any:
        """Ctrl-C finishes the step under way, then the run stops as at any other stop (saved,
        scored, resumable); a second Ctrl-C stops at once."""
        import signal
        import threading

        self.interrupted = False
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.getsignal(signal.SIGINT)

        def interrupt(signum: int, frame: Any) -> None:
            if self.interrupted:
                signal.signal(signal.SIGINT, previous)
                raise KeyboardInterrupt
            self.interrupted = True
            tqdm.write("asrkit: stopping after this step (saving; Ctrl-C again to stop at once)",
                       file=sys.stderr)

        signal.signal(signal.SIGINT, interrupt)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    def _train(self, state: LoopState, stop: int) -> None:
        last_save = time.monotonic()
        batches = self.batches(state.epoch, stop, state.step_in_epoch)
        if self.train_step is None and self.config.accumulate_steps > 1:
            from asrkit.train.accumulate import AccumulatingStep

            self.train_step = AccumulatingStep(self.strategy, self.model, self.optimizer,
                                               self.spec, self.model_config,
                                               self.config.accumulate_steps, batches.element_spec,
                                               self.config.clip_norm)
        if self.train_step is None:
            self.train_step = make_train_step(self.strategy, self.model, self.optimizer,
                                              self.spec, self.model_config,
                                              batches.element_spec, self.config.clip_norm)
        for batch in batches:
            epoch = int(self.strategy.experimental_local_results(batch["epoch"])[0])
            if epoch != state.epoch:
                self._end_of_epoch(state)
                if state.finished:
                    return
            lr = self.schedule.rate(state)
            if lr != self.applied_lr:  # a host-to-device write only when it changes
                self.optimizer.inner_optimizer.learning_rate.assign(lr)
                self.applied_lr = lr
            began = time.monotonic()
            losses = self.train_step(batch).numpy()
            self._check_finite(losses, batch, state)
            state.step_in_epoch += 1  # batches read: where a resumed epoch continues
            finite = finite_mask(losses)
            loss = float(losses[finite].mean()) if finite.any() else math.nan
            updated = not getattr(self.train_step, "pending", 0)  # else a micro-batch gathered
            if updated:
                self._updated(state)
            self.bar.step(state, loss, len(losses), self._audio_seconds(batch),
                          time.monotonic() - began)
            if not updated:
                continue
            if state.global_step % self.config.log_every == 0:
                self._log_step(state, loss, lr)
            if self._checkpoint_due(state, last_save):
                self._save("latest", state)
                last_save = time.monotonic()
            if self._evaluation_due(state):
                self._evaluate_dev(state, "cadence")
            if self.config.max_steps and state.global_step >= self.config.max_steps:
                state.finished, state.stop_reason = True, f"max_steps {self.config.max_steps}"
            if self.clock.expired():
                state.finished = True
                state.stop_reason = f"max_minutes {self.clock.max_minutes:g}"
            if self.interrupted:
                state.finished, state.stop_reason = True, "interrupted"
            if state.finished:
                return
        self._end_of_epoch(state)

    def _updated(self, state: LoopState) -> None:
        """The weights were updated (a step, or ``accumulate_steps`` micro-batches): count it,
        and move their moving average."""
        state.global_step += 1
        if self.ema:
            self.ema.update()

    def _evaluation_due(self, state: LoopState) -> bool:
        """By steps, or by minutes on one machine: workers' clocks differ, and every worker
        must evaluate at the same steps to take the same plateau decisions."""
        steps, minutes = self.config.eval_every_steps, self.config.eval_every_minutes
        if steps and state.global_step % steps == 0:
            return True
        return (bool(minutes) and not is_multi_worker()
                and time.monotonic() - self.last_evaluation >= minutes * 60)

    def _log_step(self, state: LoopState, loss: float, lr: float) -> None:
        import tensorflow as tf

        self._metrics({
            "event": "step", "epoch": state.epoch, "step": state.global_step, "loss": loss,
            "loss_smoothed": self.bar.loss, "lr": lr,
            "utterances_per_second": self.bar.utterances_per_second,
            "audio_seconds_per_second": self.bar.audio_per_second})
        with self.writer.as_default():
            tf.summary.scalar("train/loss", loss, step=state.global_step)
            tf.summary.scalar("train/learning_rate", lr, step=state.global_step)

    @contextlib.contextmanager
    def _lost_workers_are_errors(self) -> Any:
        """With several workers, a collective that fails or times out means a worker died or
        hung: say so in one line, and how to continue."""
        import tensorflow as tf

        lost = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError,
                tf.errors.CancelledError, tf.errors.AbortedError, tf.errors.InternalError)
        try:
            yield
        except lost as error:
            if not is_multi_worker():
                raise
            raise AsrkitError(
                f"lost contact with another worker ({type(error).__name__}); restart "
                f"every worker with --resume {self.run.folder} to continue from the last "
                "checkpoint"
            ) from None

    @contextlib.contextmanager
    def _out_of_memory_is_an_error(self) -> Any:
        """Out of memory, and a full disk (which TensorFlow reports as resource exhausted too, or
        as an unknown error; Python as OSError ENOSPC), each as one line saying what to do."""
        import errno
        import shutil

        import tensorflow as tf

        try:
            yield
        except (tf.errors.OpError, OSError) as error:
            if (getattr(error, "errno", None) == errno.ENOSPC
                    or "No space left on device" in str(error)):
                free = shutil.disk_usage(self.run.folder).free
                raise AsrkitError(
                    f"disk full: no space left on device writing into {self.run.folder} "
                    f"({free / 2**20:.0f} MiB free there); free some space, then continue with "
                    f"--resume {self.run.folder}"
                ) from None
            seconds = self.run.pipeline.batch_seconds
            if isinstance(error, tf.errors.ResourceExhaustedError) and seconds:
                raise AsrkitError(
                    f"out of memory with batches of {seconds:g} s of padded audio per device; "
                    f"continue with --resume {self.run.folder} -o pipeline.batch_seconds=... "
                    "(smaller)"
                ) from None
            if isinstance(error, tf.errors.ResourceExhaustedError):
                raise AsrkitError(
                    f"out of memory with batches of {self.config.batch_size} utterances per "
                    "device; use a smaller --batch-size (or import with a lower --max-duration), "
                    f"then continue with --resume {self.run.folder}"
                ) from None
            raise

    # -- output: only the chief writes -------------------------------------------------------

    def _metrics(self, record: dict[str, Any]) -> None:
        if self.chief:
            append_metrics(self.run.folder, record)

    def _save(self, kind: str, state: LoopState) -> None:
        if self.chief:
            self.checkpoints.save(kind, state.global_step, state.to_json())

    def _audio_seconds(self, batch: Any) -> float:
        """Seconds of audio in a batch, from its frame counts."""
        step = frame_seconds(self.run.feature_config)
        lengths = [x.numpy() for x in
                   self.strategy.experimental_local_results(batch["feature_lengths"])]
        for part, features in zip(lengths, self.strategy.experimental_local_results(
                batch["features"]), strict=True):
            self.padding.add(part, features.shape[1])  # each epoch's metrics report it
        return float(sum(int(x.sum()) for x in lengths)) * step

    def _report_too_short(self, split: str) -> None:
        """Warn once, before training, of the utterances of ``split`` that CTC cannot align
        with this run's features and model (:func:`asrkit.frames.fits`, from the split's CSV).
        The import checked only the loosest case, every 10 ms frame kept; a model that
        subsamples time needs longer audio. Training leaves them out of the loss and names them
        as it meets them."""
        short = too_short(self.run, self.dataset_dir, split)
        if not short:
            return
        seconds = frame_seconds(self.run.feature_config, self.spec, self.run.model_config)
        self._metrics({"event": "too_short", "split": split, "count": len(short),
                       "utterances": short[:TOO_SHORT_NAMED]})
        tqdm.write(f"asrkit: warning: {len(short)} utterance(s) of {split} are too short for "
                   f"their transcripts at {self.spec.name}'s {seconds * 1000:g} ms output "
                   f"frames ({self.extractor.name} features); CTC cannot align them: "
                   f"{', '.join(short[:3])}{', ...' if len(short) > 3 else ''}",
                   file=sys.stderr)

    def _checkpoint_due(self, state: LoopState, last_save: float) -> bool:
        every = self.config.checkpoint_steps
        if every and state.global_step % every == 0:
            return True
        return time.monotonic() - last_save >= self.config.checkpoint_minutes * 60

    def _check_finite(self, losses: Any, batch: Any, state: LoopState) -> None:
        bad = ~finite_mask(losses)
        if not bad.any():
            state.bad_batches_in_a_row = 0
            return
        ids = [i.decode() for part in self.strategy.experimental_local_results(batch["ids"])
               for i in part.numpy()]
        named = [ids[i] for i in range(len(ids)) if bad[i]]
        state.bad_batches_in_a_row += 1
        self._metrics({"event": "non_finite_loss", "step": state.global_step,
                       "utterances": named})
        tqdm.write(f"asrkit: warning: non-finite loss at step {state.global_step}; skipped "
                   f"utterances: {', '.join(named)}", file=sys.stderr)
        if state.bad_batches_in_a_row >= self.config.max_bad_batches:
            raise AsrkitError(
                f"{state.bad_batches_in_a_row} batches in a row had a non-finite loss; lower the "
                "learning rate (-o learning_rate=...) or check the utterances named in "
                f"{self.run.folder / 'metrics.jsonl'}"
            )

    def _end_of_epoch(self, state: LoopState) -> None:
        """Count the epoch's steps, evaluate on dev, and move to the next epoch."""
        if getattr(self.train_step, "pending", 0):  # an epoch's last micro-batches: one update
            self.train_step.flush()
            self._updated(state)
            if self.config.max_steps and state.global_step >= self.config.max_steps:
                state.finished, state.stop_reason = True, f"max_steps {self.config.max_steps}"
        state.steps_per_epoch = state.step_in_epoch
        self.bar.epoch_done(state)
        self._metrics({"event": "epoch", "epoch": state.epoch, "step": state.global_step,
                       "padding": self.padding.take()})
        state.epoch, state.step_in_epoch = state.epoch + 1, 0
        if self.growth and self.growth.grows_after(state.epoch):
            self._grow(state)
        if state.evaluated_step != state.global_step:  # not just scored by the cadence
            self._evaluate_dev(state, "epoch")
        self._save("latest", state)

    def _evaluate_dev(self, state: LoopState, why: str) -> None:
        """Score the current weights on dev; keep them as ``best`` when the score improved;
        reduce the learning rate on a plateau; stop early when patience runs out."""
        import tensorflow as tf

        self.last_evaluation = time.monotonic()
        if not (self.config.evaluate_dev and self._has_split(self.config.dev_split)):
            return
        dev = self.evaluate(self.config.dev_split, progress=False)  # the run's bar is enough
        self.last_evaluation = time.monotonic()
        state.evaluated_step = state.global_step
        record: dict[str, Any] = {"event": "evaluation", "why": why, "epoch": state.epoch,
                                  "step": state.global_step, "dev_loss": dev.loss,
                                  "dev_wer": dev.wer, "dev_cer": dev.cer}
        metric = {"loss": dev.loss, "wer": dev.wer, "cer": dev.cer}[self.config.early_stop_metric]
        with self.writer.as_default():
            for name in ("loss", "wer", "cer"):
                tf.summary.scalar(f"dev/{name}", record[f"dev_{name}"], step=state.global_step)
        self.bar.evaluated(dev.wer, dev.cer)
        when = (f"end of epoch {state.epoch}" if why == "epoch"
                else f"epoch {state.epoch + 1}, {why}")
        tqdm.write(f"step {state.global_step} ({when}): dev loss {dev.loss:.3f}, "
                   f"WER {dev.wer:.2%}, CER {dev.cer:.2%}")
        improved = state.best is None or metric < state.best - self.config.min_delta
        if improved:
            state.best, state.best_epoch, state.best_step = metric, state.epoch, state.global_step
            state.evaluations_without_improvement = state.evaluations_since_lr_change = 0
        else:
            state.evaluations_without_improvement += 1
            state.evaluations_since_lr_change += 1
        lr_change = schedules.after_evaluation(self.config, state, metric)
        if lr_change:
            if lr_change == "plateau" and self.checkpoints.state("best") is not None:
                self.checkpoints.restore("best")  # reload the best weights first, as DeepSpeech
            record["lr_factor"] = state.lr_factor
        stop = self.config.early_stop_patience
        if stop and state.evaluations_without_improvement >= stop:
            state.finished = True
            state.stop_reason = f"early stopping: no improvement in {stop} evaluations"
        record["best_step"] = state.best_step
        self._metrics(record)
        if improved:
            self._save("best", state)

    def _has_split(self, split: str) -> bool:
        from asrkit.data.shards import shard_paths

        return bool(shard_paths(self.dataset_dir, split))

    def _final_report(self, state: LoopState) -> None:
        """Evaluate the best dev-scored checkpoint (every stop scores the final weights, so it
        is never an older unscored one), or the final weights when no dev split is scored."""
        best = self.checkpoints.state("best") if state.best_step >= 0 else None
        if best is not None:
            self.checkpoints.restore("best")
            checkpoint = {"kind": "best", "step": best["global_step"],
                          f"dev_{self.config.early_stop_metric}": best["best"]}
        else:
            checkpoint = {"kind": "latest", "step": state.global_step}
        for split in ("test", self.config.dev_split):
            if self._has_split(split):
                evaluation = self.evaluate(split)
                evaluation.checkpoint = checkpoint
                if self.chief:
                    write_report(evaluation, self.run.folder)
                self._metrics({"event": "report", "checkpoint": checkpoint, **{
                    k: v for k, v in evaluation.to_json().items()
                    if k in ("split", "wer", "cer", "loss", "utterances")}})
                return


def finite_mask(values: Any) -> Any:
    import numpy as np

    return np.isfinite(values)


def too_short(run: Run, dataset_dir: Any, split: str) -> list[str]:
    """The audio files of ``split`` (from ``<split>.csv``; none without it) that are too short
    for their transcripts with ``run``'s features and model."""
    from pathlib import Path

    from asrkit.data.manifest import read_csv
    from asrkit.data.pipeline import WAV_HEADER_BYTES
    from asrkit.types import SAMPLE_RATE

    path = Path(dataset_dir) / f"{split}.csv"
    if not path.is_file():
        return []
    short = []
    for row in read_csv(path):
        samples = (round(row.duration * SAMPLE_RATE) if row.duration is not None
                   else max(0, (row.wav_filesize - WAV_HEADER_BYTES) // 2))
        try:
            needed = frames_needed(run.labels.encode(row.transcript))
        except AsrkitError:  # the pipeline names the characters the labels cannot spell
            continue
        if not fits(samples, needed, run.feature_config, run.spec, run.model_config):
            short.append(Path(row.wav_filename).stem)
    return short


def seed_everything(seed: int) -> None:
    """Seed Python, numpy and Keras (initialisers, dropout). TensorFlow's graph-level seed is left
    unset: the input pipeline seeds its own ops, with seeds that are tensors (``seed + epoch``),
    which a graph-level seed would not accept."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(seed)
    tf.random.set_seed(None)
