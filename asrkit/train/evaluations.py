"""Scoring the weights: on any split (:class:`SplitScorer`), and on dev as training goes
(:class:`DevEvaluations`: when, the best checkpoint, plateaus, early stopping).

A dev evaluation follows each epoch, every ``eval_every_steps`` updates or
``eval_every_minutes`` minutes (on one machine only: workers' clocks differ, and every worker
must evaluate at the same steps to take the same plateau decisions), and the stop, decoding with
``train.dev_decoder`` (the run's decoder unless set: a cheaper search leaves a short run more of
its minutes to train). Each one scores the weights that are exported (their moving average,
when kept); a better score than the best so far by ``min_delta`` saves them as the ``best``
checkpoint, which is what the run ends with. The learning rate reacts to the score
(:func:`asrkit.train.schedules.after_evaluation`: a plateau first reloads the best weights, as
DeepSpeech does), and ``early_stop_patience`` evaluations without improvement stop the run.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from asrkit.core.storage import Location
from asrkit.dataset.shards import shard_paths
from asrkit.pipeline.batches import make_dataset
from asrkit.runs.scoring import Evaluation, evaluate_dataset
from asrkit.train import schedules
from asrkit.train.strategy import is_multi_worker

if TYPE_CHECKING:
    import tensorflow as tf

    from asrkit.runs.run import Run
    from asrkit.train.model import TrainedModel
    from asrkit.train.progress import RunProgress
    from asrkit.train.records import RunRecords
    from asrkit.train.state import LoopState
    from asrkit.types import Decoder, FeatureExtractor


class SplitScorer:
    """Scores ``trained``'s weights on a split of ``run``'s dataset with the run's decoder (or
    another: the dev evaluations' own); each split's batches are built once (their order is
    fixed: no shuffling)."""

    def __init__(self, run: Run, dataset_dir: Location, extractor: FeatureExtractor,
                 trained: TrainedModel, progress: bool) -> None:
        self.run = run
        self.dataset_dir = dataset_dir
        self.extractor = extractor
        self.trained = trained
        self.progress = progress
        self.decoder: Decoder | None = None
        self.batches: dict[str, tf.data.Dataset] = {}

    def has_split(self, split: str) -> bool:
        return bool(shard_paths(self.dataset_dir, split))

    def evaluate(self, split: str, progress: bool | None = None,
                 decoder: Decoder | None = None) -> Evaluation:
        run = self.run
        if self.decoder is None:
            self.decoder = run.decoder  # with the run's decoder settings
        if split not in self.batches:  # built once: its order is fixed, no shuffling
            self.batches[split] = make_dataset(
                self.dataset_dir, split, run.labels, self.extractor, run.feature_config,
                run.pipeline.for_evaluation())
        with self.trained.averaged():  # what is exported
            return evaluate_dataset(self.trained.predict, self.batches[split],
                                    decoder or self.decoder,
                                    run.labels, split,
                                    self.progress if progress is None else progress)


def ranked(best_by: str, dev: Mapping[str, float]) -> list[float]:
    """``dev``'s ``best_by`` score (``dev`` maps ``wer``, ``cer`` and ``loss``), then the
    scores that break its ties: the other error rate, then the loss. A young model writes
    nothing, so its WER and CER sit at 100 % for many evaluations while its loss falls; without
    the loss to break the tie that would count as no progress (the first of them kept as best,
    plateaus and early stopping acting on a model still learning)."""
    order = {"wer": ("wer", "cer", "loss"), "cer": ("cer", "wer", "loss"), "loss": ("loss",)}
    return [dev[name] for name in order[best_by]]


def improves(score: float, ties: list[float], state: LoopState, min_delta: float) -> bool:
    """Whether ``score`` (with its tie-breaking ``ties``, :func:`ranked`) beats the best so
    far: lower by more than ``min_delta``, or equal and better on the ties."""
    if state.best is None:
        return True
    if score < state.best - min_delta:
        return True
    return score == state.best and ties < state.best_ties


class DevEvaluations:
    """The dev evaluations of one run: when they are due, and what follows each score."""

    def __init__(self, scorer: SplitScorer, records: RunRecords) -> None:
        self.scorer = scorer
        self.trained = scorer.trained
        self.config = scorer.run.train
        self.records = records
        #: ``train.dev_decoder``, or the run's decoder.
        self.decoder = scorer.run.dev_decoder
        #: When the last dev evaluation ended (or the training began), for the minutes cadence.
        self.last = time.monotonic()

    def restart_cadence(self) -> None:
        """Count ``eval_every_minutes`` from now (the loop begins)."""
        self.last = time.monotonic()

    def due(self, state: LoopState) -> bool:
        """By steps, or by minutes on one machine: workers' clocks differ, and every worker
        must evaluate at the same steps to take the same plateau decisions."""
        steps, minutes = self.config.eval_every_steps, self.config.eval_every_minutes
        if steps and state.global_step % steps == 0:
            return True
        return (bool(minutes) and not is_multi_worker()
                and time.monotonic() - self.last >= minutes * 60)

    def evaluate(self, state: LoopState, why: str, bar: RunProgress) -> None:
        """Score the current weights on dev; keep them as ``best`` when the score improved;
        reduce the learning rate on a plateau; stop early when patience runs out."""
        config, trained = self.config, self.trained
        self.last = time.monotonic()
        if not (config.evaluate_dev and self.scorer.has_split(config.dev_split)):
            return
        dev = self.scorer.evaluate(config.dev_split, progress=False,  # the run's bar is enough
                                   decoder=self.decoder)
        self.last = time.monotonic()
        state.evaluated_step = state.global_step
        record: dict[str, Any] = {"event": "evaluation", "why": why, "epoch": state.epoch,
                                  "step": state.global_step, "dev_loss": dev.loss,
                                  "dev_wer": dev.wer, "dev_cer": dev.cer,
                                  "decoder": dev.decoder}
        score, *ties = ranked(config.best_by, {"wer": dev.wer, "cer": dev.cer,
                                                "loss": dev.loss})
        self.records.scalars({f"dev/{name}": record[f"dev_{name}"]
                              for name in ("loss", "wer", "cer")}, state.global_step)
        bar.evaluated(dev.wer, dev.cer)
        when = (f"end of epoch {state.epoch}" if why == "epoch"
                else f"epoch {state.epoch + 1}, {why}")
        tqdm.write(f"step {state.global_step} ({when}): dev loss {dev.loss:.3f}, "
                   f"WER {dev.wer:.2%}, CER {dev.cer:.2%}")
        improved = improves(score, ties, state, config.min_delta)
        if improved:
            state.best, state.best_ties = score, ties
            state.best_epoch, state.best_step = state.epoch, state.global_step
            state.evaluations_without_improvement = state.evaluations_since_lr_change = 0
        else:
            state.evaluations_without_improvement += 1
            state.evaluations_since_lr_change += 1
        lr_change = schedules.after_evaluation(config, state, dev.loss)
        if lr_change:
            if lr_change == "plateau" and trained.checkpoints.state("best") is not None:
                trained.checkpoints.restore("best")  # reload the best weights first, as DeepSpeech
            record["lr_factor"] = state.lr_factor
        stop = config.early_stop_patience
        if stop and state.evaluations_without_improvement >= stop:
            state.stop(f"early stopping: no improvement in {stop} evaluations")
        record["best_step"] = state.best_step
        self.records.metrics(record)
        if improved:
            trained.save("best", state)
