"""One progress bar for a whole training run.

What a person watching a run wants to know is how far the *run* is and when it ends, whether
the loss is falling and whether the model transcribes yet, so the bar counts the run, not an
epoch: minutes of ``max_minutes`` when a time budget is set, else steps of ``max_steps``, else
steps of all epochs (estimated from the split's size until the first epoch has counted them).
Beside it: the epoch, a smoothed loss (one batch's loss jumps with its utterances' lengths),
the last dev WER/CER, and utterances and audio seconds trained per second of training.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tqdm import tqdm

if TYPE_CHECKING:
    from asrkit.config.train import TrainConfig
    from asrkit.train.clock import RunClock
    from asrkit.train.state import LoopState

#: Weight of the newest batch in the smoothed loss (about the last 20 batches count).
LOSS_SMOOTHING = 0.05


class RunProgress:
    """The run's bar and the running figures the metrics log shares with it; with a time
    budget, the bar shows the run's ``clock``, the one the loop stops by."""

    def __init__(self, config: TrainConfig, state: LoopState, steps_per_epoch: int | None,
                 clock: RunClock, enabled: bool = True) -> None:
        self.config = config
        self.steps_per_epoch = state.steps_per_epoch or steps_per_epoch
        self.clock = clock
        self.loss: float | None = None
        self.dev = ""
        self.utterances = self.audio = self.busy = 0.0
        self.by_time = bool(clock.max_minutes)
        if self.by_time:
            total: float | None = clock.budget_seconds
            unit, initial = "s", 0.0
            bar_format = ("{desc}: {percentage:3.0f}%|{bar}| {elapsed}<{remaining} of "
                          f"{clock.max_minutes:g} min, {{postfix}}")
        else:
            total, unit, initial = self._total_steps(), "step", state.global_step
            bar_format = None
        self.bar = tqdm(total=total, initial=initial, unit=unit, desc="train",
                        bar_format=bar_format, disable=not enabled, dynamic_ncols=True)
        if self.by_time and not self.bar.disable:  # tqdm's elapsed and remaining: the clock's
            self.bar.start_t -= clock.elapsed()

    def _total_steps(self) -> int | None:
        if self.config.max_steps:
            return int(self.config.max_steps)
        if self.steps_per_epoch:
            return int(self.steps_per_epoch * self.config.epochs)
        return None

    # -- what the loop reports ----------------------------------------------------------------

    def step(self, state: LoopState, loss: float, utterances: int, audio_seconds: float,
             seconds: float) -> None:
        if math.isfinite(loss):
            self.loss = loss if self.loss is None else (
                (1 - LOSS_SMOOTHING) * self.loss + LOSS_SMOOTHING * loss)
        self.utterances += utterances
        self.audio += audio_seconds
        self.busy += seconds
        if self.by_time:
            self.bar.update(min(self.clock.elapsed(), self.bar.total) - self.bar.n)
        else:
            self.bar.update(1)
        self.bar.set_postfix_str(self._postfix(state), refresh=False)

    def epoch_done(self, state: LoopState) -> None:
        """The first finished epoch gives the true steps an epoch: correct the total."""
        self.steps_per_epoch = state.steps_per_epoch
        if not self.by_time and not self.config.max_steps:
            self.bar.total = self._total_steps()
            self.bar.refresh()

    def evaluated(self, wer: float, cer: float) -> None:
        self.dev = f"dev WER {wer:.1%} CER {cer:.1%}"

    @property
    def utterances_per_second(self) -> float:
        return self.utterances / max(self.busy, 1e-9)

    @property
    def audio_per_second(self) -> float:
        return self.audio / max(self.busy, 1e-9)

    def _postfix(self, state: LoopState) -> str:
        parts = [f"step {state.global_step}", f"epoch {state.epoch + 1}/{self.config.epochs}"]
        if self.loss is not None:
            parts.append(f"loss {self.loss:.2f}")
        if self.dev:
            parts.append(self.dev)
        parts.append(f"{self.utterances_per_second:.1f} utt/s, "
                     f"{self.audio_per_second:.0f}x real time")
        return ", ".join(parts)

    # -- a context manager that closes the bar -------------------------------------------------

    def __enter__(self) -> RunProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.close()
