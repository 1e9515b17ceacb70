"""The trainer: trains one run (new or resumed) to the end, writing everything into its folder.

:class:`Trainer` wires the parts, each in a module of its own:

- :mod:`asrkit.train.step`: one update of the weights, CTC on ``tf.distribute`` towers (the
  forward pass and loss that :mod:`asrkit.train.accumulate` shares), and the optimiser;
- :mod:`asrkit.train.model`: the model and everything bound to its variables (optimiser, moving
  average, checkpoints, compiled functions), rebuilt together by a growth
  (:mod:`asrkit.train.growth`);
- :mod:`asrkit.train.loop`: the step loop, each epoch's batches, and the stops;
- :mod:`asrkit.train.clock`: the time budget, one clock for the stop, the schedule
  (:mod:`asrkit.train.schedules`) and the progress bar (:mod:`asrkit.train.progress`);
- :mod:`asrkit.train.evaluations`: dev evaluations, the best checkpoint, plateaus, early stopping;
- :mod:`asrkit.train.failures`: Ctrl-C, lost workers, out of memory, non-finite losses;
- :mod:`asrkit.train.records` and :mod:`asrkit.train.report`: ``metrics.jsonl``, TensorBoard,
  the warning about utterances too short to align, and the final report.

Exact resume: each epoch's batches are a pure function of the seed and the epoch; a checkpoint
stores the model, the optimiser, and the loop state (:mod:`asrkit.train.state`: epoch, step
within it, learning-rate factor, early-stopping counters). Resuming rebuilds the epoch's pipeline
and skips the batches already trained on.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from tqdm import tqdm

from asrkit.models.analysis import write_model_analysis
from asrkit.pipeline.batches import PaddingMeter
from asrkit.runs.scoring import Evaluation
from asrkit.train.clock import RunClock
from asrkit.train.evaluations import DevEvaluations, SplitScorer
from asrkit.train.failures import out_of_memory_is_an_error, stop_on_interrupt
from asrkit.train.finetune import initialise
from asrkit.train.growth import Growth, saved_model_config
from asrkit.train.loop import StepLoop, estimated_steps_per_epoch, stop_at_max_steps
from asrkit.train.machine import machine_record
from asrkit.train.model import TrainedModel, seed_everything
from asrkit.train.precision import choose_precision
from asrkit.train.progress import RunProgress
from asrkit.train.records import RunRecords
from asrkit.train.report import final_report, warn_too_short
from asrkit.train.schedules import Schedule
from asrkit.train.state import LoopState
from asrkit.train.strategy import is_chief, make_strategy, uses_gpus

if TYPE_CHECKING:  # the engine is given a run; loading and saving runs is asrkit.runs.run's
    from asrkit.runs.run import Run

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
        self.records = RunRecords(run.folder, self.chief)
        num_features = run.num_features()
        # Pretraining by growth: the model's size follows the epoch counter of the checkpoint.
        self.growth = Growth.of(self.config, self.spec, run.model_config)
        self.trained = TrainedModel(run, self.strategy, self.precision, num_features,
                                    self.chief, saved_model_config(run, "latest"))
        self.scorer = SplitScorer(run, self.dataset_dir, self.extractor, self.trained, progress)
        self.dev = DevEvaluations(self.scorer, self.records)

    def evaluate(self, split: str, progress: bool | None = None) -> Evaluation:
        """Score the current weights (their moving average, when kept) on ``split``."""
        return self.scorer.evaluate(split, progress)

    def fit(self) -> LoopState:
        """Train to the end (or resume to the end); write the final report.

        Whatever stops the run (the epochs, ``max_steps``, ``max_minutes``, early stopping or
        Ctrl-C), its latest weights are saved and, when a dev split is evaluated, scored, so
        the best checkpoint is chosen among every scored one, the final weights included.
        """
        clock = RunClock.start(self.config.max_minutes)
        state = self._start()
        with out_of_memory_is_an_error(self.run):  # a full disk: continue with --resume
            self.records.metrics(machine_record(state.global_step, self.precision,
                                                self.replicas))
        self.records.open_summaries()
        steps_per_epoch = estimated_steps_per_epoch(self.run, self.dataset_dir, self.replicas)
        schedule = Schedule(self.config, steps_per_epoch, clock)
        bar = RunProgress(self.config, state, steps_per_epoch, clock, self.progress)
        self.dev.restart_cadence()
        with bar, stop_on_interrupt() as interrupt:
            loop = StepLoop(self.run, self.strategy, self.dataset_dir, self.extractor,
                            self.trained, self.growth, self.dev, self.records, schedule, clock,
                            bar, interrupt, PaddingMeter())
            loop.run_to_the_end(state)
        self.records.flush()
        if state.stop_reason == "interrupted":
            tqdm.write(f"asrkit: interrupted at step {state.global_step}; saved. Continue with: "
                       f"asrkit train --resume {self.run.folder}", file=sys.stderr)
            raise KeyboardInterrupt
        final_report(self.trained, self.scorer, state, self.records)
        return state

    def _start(self) -> LoopState:
        """The state to train from: the latest checkpoint's when resuming (its weights
        restored), else a new run's, whose folder gets its configuration and model analysis
        (and, fine-tuning, the source's weights)."""
        config, trained = self.config, self.trained
        restored = trained.checkpoints.restore("latest")
        state = LoopState.from_json(restored) if restored else LoopState()
        if not restored and config.init_from:
            # Fine-tuning: every worker loads the source's weights, before the moving average
            # (if any) starts from them.
            loaded = initialise(trained.model, config.init_from, config.init_reset,
                                trained.head, config.objective)
            if self.chief:
                tqdm.write(loaded)
        if not trained.ema:
            state.ema_from_step = -1
        elif state.ema_from_step < 0:  # a new run, or the average newly set on resume
            trained.ema.reset()
            state.ema_from_step = state.global_step
        if restored and not state.stop_reason.startswith("early stopping"):
            # A time or step budget, or the epoch count, may have been raised (-o on resume).
            state.finished, state.stop_reason = False, ""
        stop_at_max_steps(config.max_steps, state)
        if restored:
            self.records.metrics({"event": "resume", "epoch": state.epoch,
                                  "step": state.global_step})
        else:
            self._start_new_run()
        return state

    def _start_new_run(self) -> None:
        """A new run's folder: its configuration, model analysis and warnings."""
        config, trained = self.config, self.trained
        if self.chief:
            self.run.save()
            write_model_analysis(self.run.folder, trained.model, self.spec, trained.model_config,
                                 self.run.feature_config, self.extractor)
            warn_too_short(self.run, self.dataset_dir, self.extractor, config.train_split,
                           self.records)
        if config.init_from:
            self.records.metrics({"event": "init_from", "source": config.init_from,
                                  "reset": list(config.init_reset)})
