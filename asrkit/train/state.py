"""The loop state: everything besides the weights that resuming a run exactly needs.

Every checkpoint saves it (as the pointer's JSON, :mod:`asrkit.train.checkpoints`), so it holds
only plain values; the schedule (:mod:`asrkit.train.schedules`) and the dev evaluations
(:mod:`asrkit.train.evaluations`) keep their memory here for the same reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


@dataclass
class LoopState:
    """Everything besides the weights that resuming needs; saved with every checkpoint."""

    epoch: int = 0
    step_in_epoch: int = 0
    global_step: int = 0
    lr_factor: float = 1.0
    #: The best dev score by ``best_by``, and the scores that break its ties (the other rate,
    #: the loss).
    best: float | None = None
    best_ties: list[float] = field(default_factory=list)
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

    def stop(self, reason: str) -> None:
        """The run ends after this step, for ``reason`` (what ``metrics.jsonl`` and the
        checkpoint record)."""
        self.finished, self.stop_reason = True, reason
