"""The run's clock: when this process's training began, and its time budget (``max_minutes``).

Three parts read the budget: the loop's stop check, the cosine schedule's horizon estimate
(:mod:`asrkit.train.schedules`) and the progress bar (:mod:`asrkit.train.progress`). Each once
started a clock of its own at a slightly different moment, so the bar could show time left when
the loop stopped, and the schedule planned for minutes the run did not have. One
:class:`RunClock`, started once per fit and handed to all three, makes them agree.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class RunClock:
    """Seconds since ``started`` (``time.monotonic``) against a budget of ``max_minutes``
    (0: none)."""

    started: float
    max_minutes: float = 0.0

    @classmethod
    def start(cls, max_minutes: float = 0.0) -> RunClock:
        """A clock that starts now."""
        return cls(time.monotonic(), max_minutes)

    @property
    def budget_seconds(self) -> float:
        """The budget in seconds (0: none)."""
        return self.max_minutes * 60

    def now(self) -> float:
        """The current reading, for a caller that needs one instant for several figures."""
        return time.monotonic()

    def elapsed(self, now: float | None = None) -> float:
        """Seconds since the clock started (until ``now``, when given)."""
        return (self.now() if now is None else now) - self.started

    def left(self, now: float | None = None) -> float:
        """Seconds of the budget left (never below 0; 0 without a budget)."""
        return max(0.0, self.budget_seconds - self.elapsed(now))

    def expired(self) -> bool:
        """Whether the run has spent its budget (never without one)."""
        return bool(self.max_minutes) and self.elapsed() > self.budget_seconds
