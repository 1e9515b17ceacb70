"""The run's clock: the loop's stop, the schedule's horizon and the progress bar read one time
budget, counted from one start."""

from __future__ import annotations

import pytest

from asrkit.config.train import TrainConfig
from asrkit.train import clock
from asrkit.train.clock import RunClock
from asrkit.train.progress import RunProgress
from asrkit.train.schedules import Schedule
from asrkit.train.state import LoopState


@pytest.fixture
def now(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """A monotonic clock that moves only when the test moves it."""
    reading = [1000.0]
    monkeypatch.setattr(clock.time, "monotonic", lambda: reading[0])
    return reading


def test_elapsed_left_and_expired(now: list[float]) -> None:
    budget = RunClock.start(max_minutes=2)
    now[0] += 30
    assert (budget.elapsed(), budget.left(), budget.expired()) == (30, 90, False)
    now[0] += 90
    assert (budget.left(), budget.expired()) == (0, False)  # at the budget, not past it
    now[0] += 1
    assert (budget.left(), budget.expired()) == (0, True)
    assert (budget.elapsed(budget.started + 5), budget.left(budget.started + 5)) == (5, 115)


def test_without_a_budget_the_clock_never_expires(now: list[float]) -> None:
    budget = RunClock.start()
    now[0] += 10 ** 9
    assert not budget.expired()
    assert budget.left() == 0.0


def test_the_stop_the_schedule_and_the_bar_read_one_budget(now: list[float]) -> None:
    """The run spends 100 s before its first step (restoring, the model analysis). The stop,
    the cosine horizon and the bar all count those 100 s: the horizon ends where the loop
    stops, and the bar shows each step's elapsed time and is full at the stop. With clocks of
    their own, started after those 100 s, the horizon came out 100 steps long."""
    config = TrainConfig(lr_schedule="cosine", epochs=1000, max_minutes=10, lr_floor=0.0)
    budget = RunClock.start(config.max_minutes)
    now[0] += 100.0
    state = LoopState()
    schedule = Schedule(config, 10_000, budget)
    with RunProgress(config, state, 10_000, budget) as progress:
        while not budget.expired():  # the loop's stop (asrkit.train.loop)
            schedule.rate(state)
            now[0] += 1.0
            state.global_step += 1
            progress.step(state, 1.0, 1, 1.0, 1.0)
            assert progress.bar.n == pytest.approx(min(budget.elapsed(), 600))
        assert progress.bar.n == progress.bar.total == 600
    assert state.global_step == 501
    assert state.schedule_steps == pytest.approx(state.global_step, abs=2)
