"""The step loop: batches in, updates of the weights, and the stops.

Each epoch's batches are a pure function of the seed and the epoch (a deterministic pipeline
seeded with ``seed + epoch``: :func:`epoch_batches`), so a resumed run rebuilds the interrupted
epoch and skips the batches it already trained on. A step is one update of the weights; with
``accumulate_steps`` it gathers several batches first (:mod:`asrkit.train.accumulate`). After
each update the loop logs, saves the ``latest`` checkpoint and evaluates on dev when they are
due, and stops at ``max_steps``, at the end of the time budget (the run's
:class:`~asrkit.train.clock.RunClock`) or on Ctrl-C; each epoch ends with a dev evaluation (and
a growth, when one is due). Whatever stops the run, its latest weights are saved and, when a
dev split is evaluated, scored, so the best checkpoint is chosen among every scored one, the
final weights included.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from asrkit.core.frames import frame_seconds
from asrkit.core.storage import Location
from asrkit.dataset.folders import load_dataset_json
from asrkit.pipeline.batches import (
    PaddingMeter,
    dataset_options,
    estimated_batches,
    make_dataset,
)
from asrkit.pipeline.service import ServiceError, TimedBatches
from asrkit.train.failures import (
    Interrupt,
    NonFiniteLosses,
    finite_mask,
    lost_workers_are_errors,
    out_of_memory_is_an_error,
)
from asrkit.train.strategy import is_multi_worker

if TYPE_CHECKING:
    import tensorflow as tf

    from asrkit.runs.run import Run
    from asrkit.train.clock import RunClock
    from asrkit.train.evaluations import DevEvaluations
    from asrkit.train.growth import Growth
    from asrkit.train.model import TrainedModel
    from asrkit.train.progress import RunProgress
    from asrkit.train.records import RunRecords
    from asrkit.train.schedules import Schedule
    from asrkit.train.state import LoopState
    from asrkit.train.step import Batch
    from asrkit.types import FeatureExtractor


def estimated_steps_per_epoch(run: Run, dataset_dir: Location, replicas: int) -> int | None:
    """Steps an epoch from the split's utterance count, before the first epoch has counted
    them (bucketing adds up to one partial batch per bucket)."""
    config = run.train
    if run.pipeline.batch_seconds:  # batch sizes follow the lengths
        batches = estimated_batches(dataset_dir, config.train_split, run.pipeline)
        return max(1, math.ceil(batches / replicas)) if batches else None
    try:
        count = load_dataset_json(dataset_dir)["splits"][config.train_split]["utterances"]
    except (KeyError, OSError, ValueError, TypeError):
        return None
    return max(1, math.ceil(count / (config.batch_size * replicas)))


def epoch_batches(run: Run, strategy: tf.distribute.Strategy, dataset_dir: Location,
                  extractor: FeatureExtractor, start: int, stop: int,
                  skip_steps: int) -> tf.distribute.DistributedDataset:
    """Distributed batches of epochs ``start`` to ``stop - 1``, minus the first
    ``skip_steps`` steps. Each epoch's order depends on the seed and the epoch alone, so a
    resumed run replays the interrupted epoch exactly; all epochs live in one dataset, so
    none pays for building a pipeline. Each batch carries its ``epoch``."""
    import tensorflow as tf

    pipeline = replace(run.pipeline, deterministic=True, with_text=True)
    config, replicas = run.train, strategy.num_replicas_in_sync

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        per_pipeline = replicas // context.num_input_pipelines
        if pipeline.service:
            data = service_epochs(context)
            return data.skip(skip_steps * per_pipeline).with_options(
                dataset_options(pipeline, context))

        # Plain Python building a pipeline: AutoGraph must not rewrite its conditionals.
        @tf.autograph.experimental.do_not_convert
        def epoch(number: tf.Tensor) -> tf.data.Dataset:
            data = make_dataset(dataset_dir, config.train_split, run.labels, extractor,
                                run.feature_config, pipeline, context,
                                seed=number + config.seed)
            return data.map(lambda batch: {**batch, "epoch": number})

        data = tf.data.Dataset.range(start, stop).flat_map(epoch)
        data = data.skip(skip_steps * per_pipeline)
        return data.with_options(dataset_options(pipeline, context))

    def service_epochs(context: tf.distribute.InputContext) -> tf.data.Dataset:
        # The service's workers make each epoch, one job an epoch; the batches come in the
        # order they are done, so a resumed epoch skips as many batches, not the same ones.
        data = None
        for number in range(start, stop):
            made = make_dataset(dataset_dir, config.train_split, run.labels, extractor,
                                run.feature_config, pipeline, context, seed=number + config.seed)
            epoch = tf.constant(number, tf.int64)
            part = made.map(lambda batch, n=epoch: {**batch, "epoch": n})
            data = part if data is None else data.concatenate(part)
        return data

    return strategy.distribute_datasets_from_function(dataset_fn)


class StepLoop:
    """One fit's loop over steps and epochs, from ``state`` to the stop (:meth:`run`)."""

    def __init__(self, run: Run, strategy: tf.distribute.Strategy, dataset_dir: Location,
                 extractor: FeatureExtractor, trained: TrainedModel, growth: Growth | None,
                 dev: DevEvaluations, records: RunRecords, schedule: Schedule,
                 clock: RunClock, bar: RunProgress, interrupt: Interrupt,
                 padding: PaddingMeter) -> None:
        self.run = run
        self.config = run.train
        self.strategy = strategy
        self.replicas = strategy.num_replicas_in_sync
        self.dataset_dir = dataset_dir
        self.extractor = extractor
        self.trained = trained
        self.growth = growth
        self.dev = dev
        self.records = records
        self.schedule = schedule
        self.clock = clock
        self.bar = bar
        self.interrupt = interrupt
        self.padding = padding
        self.non_finite = NonFiniteLosses(strategy, self.config.max_bad_batches,
                                          records.metrics, run.folder)

    def run_to_the_end(self, state: LoopState) -> None:
        """Train until a stop (or the last epoch); then save, and score the final weights on
        dev unless they were just scored."""
        config = self.config
        while not state.finished and state.epoch < config.epochs:
            # With several replicas a step takes several batches, which must not straddle
            # two epochs: then each epoch gets a dataset of its own.
            # So must a growth, which rebuilds the step.
            # So must the tf.data service, which is given one epoch at a time.
            whole = self.replicas == 1 and not self.growth and not self.run.pipeline.service
            stop = config.epochs if whole else state.epoch + 1
            with lost_workers_are_errors(self.run.folder), out_of_memory_is_an_error(self.run):
                self._train(state, stop)
        if not state.finished:
            state.stop(state.stop_reason or "all epochs done")
        self.trained.save("latest", state)  # first, so that nothing can lose the last steps
        if state.evaluated_step != state.global_step:
            self.dev.evaluate(state, "stop", self.bar)
            self.trained.save("latest", state)

    def _train(self, state: LoopState, stop: int) -> None:
        if not self.run.pipeline.service:
            self._train_on(self._batches(state, stop), state)
            return
        try:
            with contextlib.closing(TimedBatches(self._batches(state, stop),
                                                 self.run.pipeline)) as batches:
                self._train_on(batches, state)
        except ServiceError as error:
            if not state.global_step:  # nothing trained: the same command again
                raise
            raise self._service_lost(error, state) from None

    def _batches(self, state: LoopState, stop: int) -> tf.distribute.DistributedDataset:
        return epoch_batches(self.run, self.strategy, self.dataset_dir, self.extractor,
                             state.epoch, stop, state.step_in_epoch)

    def _service_lost(self, error: ServiceError, state: LoopState) -> ServiceError:
        """The error that stops a run whose tf.data service went away, its steps saved (by a
        single worker: several would each wait for the others' part of the save)."""
        if not is_multi_worker():
            self.trained.save("latest", state)
        saved = "" if is_multi_worker() else f"saved at step {state.global_step}: "
        return ServiceError(f"{error}; {saved}once it runs again, continue with: asrkit train "
                            f"--resume {self.run.folder}")

    def _train_on(self, batches: tf.distribute.DistributedDataset | TimedBatches,
                  state: LoopState) -> None:
        config, trained = self.config, self.trained
        # The same step for every batch here: a growth ends the dataset with its epoch.
        train_step = trained.compile_step(batches.element_spec)
        last_save = time.monotonic()
        for batch in batches:
            epoch = int(self.strategy.experimental_local_results(batch["epoch"])[0])
            if epoch != state.epoch:
                self._end_of_epoch(state)
                if state.finished:
                    return
            lr = self.schedule.rate(state)
            trained.set_learning_rate(lr)
            began = time.monotonic()
            losses = train_step(batch).numpy()
            self.non_finite.check(losses, batch, state)
            state.step_in_epoch += 1  # batches read: where a resumed epoch continues
            finite = finite_mask(losses)
            loss = float(losses[finite].mean()) if finite.any() else math.nan
            updated = not trained.pending  # else a micro-batch gathered
            if updated:
                self._updated(state)
            self.bar.step(state, loss, len(losses), self._audio_seconds(batch),
                          time.monotonic() - began)
            if not updated:
                continue
            if state.global_step % config.log_every == 0:
                self._log_step(state, loss, lr)
            if self._checkpoint_due(state, last_save):
                trained.save("latest", state)
                last_save = time.monotonic()
            if self.dev.due(state):
                self.dev.evaluate(state, "cadence", self.bar)
            stop_at_max_steps(config.max_steps, state)
            if self.clock.expired():
                state.stop(f"max_minutes {self.clock.max_minutes:g}")
            if self.interrupt.requested:
                state.stop("interrupted")
            if state.finished:
                return
        self._end_of_epoch(state)

    def _updated(self, state: LoopState) -> None:
        """The weights were updated (a step, or ``accumulate_steps`` micro-batches): count it,
        and move their moving average."""
        state.global_step += 1
        self.trained.updated(state.global_step - state.ema_from_step)

    def _log_step(self, state: LoopState, loss: float, lr: float) -> None:
        self.records.metrics({
            "event": "step", "epoch": state.epoch, "step": state.global_step, "loss": loss,
            "loss_smoothed": self.bar.loss, "lr": lr,
            "utterances_per_second": self.bar.utterances_per_second,
            "audio_seconds_per_second": self.bar.audio_per_second})
        self.records.scalars({"train/loss": loss, "train/learning_rate": lr}, state.global_step)

    def _checkpoint_due(self, state: LoopState, last_save: float) -> bool:
        every = self.config.checkpoint_steps
        if every and state.global_step % every == 0:
            return True
        return time.monotonic() - last_save >= self.config.checkpoint_minutes * 60

    def _audio_seconds(self, batch: Batch) -> float:
        """Seconds of audio in a batch, from its frame counts."""
        step = frame_seconds(self.run.feature_config)
        lengths = [x.numpy() for x in
                   self.strategy.experimental_local_results(batch["feature_lengths"])]
        for part, features in zip(lengths, self.strategy.experimental_local_results(
                batch["features"]), strict=True):
            self.padding.add(part, features.shape[1])  # each epoch's metrics report it
        return float(sum(int(x.sum()) for x in lengths)) * step

    def _end_of_epoch(self, state: LoopState) -> None:
        """Count the epoch's steps, evaluate on dev, and move to the next epoch."""
        trained = self.trained
        if trained.pending:  # an epoch's last micro-batches: one update
            trained.flush()
            self._updated(state)
            stop_at_max_steps(self.config.max_steps, state)
        state.steps_per_epoch = state.step_in_epoch
        self.bar.epoch_done(state)
        self.records.metrics({"event": "epoch", "epoch": state.epoch, "step": state.global_step,
                              "padding": self.padding.take()})
        state.epoch, state.step_in_epoch = state.epoch + 1, 0
        if self.growth and self.growth.grows_after(state.epoch):
            self.growth.grow(trained, state, self.records)
        if state.evaluated_step != state.global_step:  # not just scored by the cadence
            self.dev.evaluate(state, "epoch", self.bar)
        trained.save("latest", state)


def stop_at_max_steps(max_steps: int, state: LoopState) -> None:
    """Stop when ``state`` has made ``max_steps`` updates (0: no such limit)."""
    if max_steps and state.global_step >= max_steps:
        state.stop(f"max_steps {max_steps}")

