"""Learning-rate schedules: each formula at chosen steps, newbob's rule, exact resume."""

from __future__ import annotations

import json
import math

import pytest

from asrkit.config.train import TrainConfig
from asrkit.core.errors import AsrkitError
from asrkit.train import clock as run_clock
from asrkit.train import schedules
from asrkit.train.clock import RunClock
from asrkit.train.state import LoopState
from tests.conftest import TINY


@pytest.fixture
def home(datasets, monkeypatch):
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    return datasets


def rate(config: TrainConfig, step: int, **state: object) -> float:
    return schedules.learning_rate(config, LoopState(global_step=step, **state))


def test_constant_warms_up_linearly_then_stays():
    config = TrainConfig(learning_rate=0.01, warmup_steps=4)
    assert [rate(config, s) for s in (0, 1, 3, 4, 1000)] == pytest.approx(
        [0.0025, 0.005, 0.01, 0.01, 0.01])
    assert rate(config, 1000, lr_factor=0.1) == pytest.approx(0.001)


def test_cosine_warms_up_then_falls_to_its_floor_at_the_horizon():
    config = TrainConfig(learning_rate=0.01, lr_schedule="cosine", warmup_steps=10,
                         lr_decay_steps=110, lr_floor=0.1)

    def formula(step: int) -> float:
        progress = (step - 10) / 100
        return 0.01 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))

    assert rate(config, 4) == pytest.approx(0.005)  # warm-up: (4 + 1) / 10
    for step in (10, 35, 60, 85, 110):
        assert rate(config, step) == pytest.approx(formula(step))
    assert rate(config, 60) == pytest.approx(0.0055)  # half way: between 0.01 and 0.001
    assert rate(config, 110) == rate(config, 5000) == pytest.approx(0.001)


def test_cosine_horizon_is_max_steps_else_the_epochs_updates():
    assert schedules.horizon(TrainConfig(lr_schedule="cosine", max_steps=70),
                             LoopState()) == 70
    config = TrainConfig(lr_schedule="cosine", epochs=5, accumulate_steps=2)
    state = LoopState()
    schedule = schedules.Schedule(config, 9, RunClock.start())  # estimated: 5 updates an epoch
    schedule.rate(state)
    assert state.schedule_steps == 25
    state.steps_per_epoch = 11  # the first epoch counted its batches: 6 updates an epoch
    schedule.rate(state)
    assert state.schedule_steps == 30


def test_a_time_budget_horizon_leaves_out_the_compiling_steps(monkeypatch):
    """Steps 1-5 take 20 s (compiling, filling the pipeline), the rest 1 s: the horizon is what
    the budget allows at 1 s a step, not at the average of the first steps."""
    clock = [1000.0]
    monkeypatch.setattr(run_clock.time, "monotonic", lambda: clock[0])
    config = TrainConfig(lr_schedule="cosine", epochs=1000, max_minutes=10)
    schedule = schedules.Schedule(config, 10_000, RunClock.start(config.max_minutes))
    state = LoopState()
    while not state.schedule_steps:
        schedule.rate(state)
        clock[0] += 20.0 if state.global_step < schedules.PROBE_FROM else 1.0
        state.global_step += 1
    assert state.global_step == schedules.PROBE_FROM + schedules.PROBE_STEPS + 1
    spent = 20.0 * schedules.PROBE_FROM + schedules.PROBE_STEPS
    assert state.schedule_steps == pytest.approx(
        schedules.PROBE_FROM + schedules.PROBE_STEPS + 600 - spent, abs=2)
    # A resumed process keeps the horizon its run estimated, however fast it goes.
    steps = state.schedule_steps
    resumed = schedules.Schedule(config, 10_000, RunClock.start(config.max_minutes))
    clock[0] += 500
    resumed.rate(state)
    assert state.schedule_steps == steps


def test_a_time_budget_horizon_counts_the_dev_evaluations(monkeypatch):
    """Updates take 1 s and a 60 s dev evaluation follows every 300 (a 30-minute ds2 run has
    nine): the horizon, estimated again at every update, ends where the budget ends, so the
    rate reaches its floor then. Estimated once from the first updates' speed it was 21 % long
    in such a run."""
    clock = [1000.0]
    monkeypatch.setattr(run_clock.time, "monotonic", lambda: clock[0])
    config = TrainConfig(lr_schedule="cosine", epochs=1000, max_minutes=60, lr_floor=0.0)
    budget = RunClock.start(config.max_minutes)
    schedule = schedules.Schedule(config, 300, budget)
    state = LoopState()
    horizons = []
    while not budget.expired():  # the loop's stop
        schedule.rate(state)
        horizons.append(state.schedule_steps)
        clock[0] += 20.0 if state.global_step < schedules.PROBE_FROM else 1.0
        state.global_step += 1
        if state.global_step % 300 == 0:
            clock[0] += 60.0
    first = next(h for h in horizons if h)
    assert first > 1.15 * state.global_step  # what the speed without evaluations promises
    assert state.schedule_steps == pytest.approx(state.global_step, rel=0.02)
    assert rate(config, state.global_step - 1, schedule_steps=state.schedule_steps) < (
        0.01 * config.learning_rate)


def test_noam_follows_its_formula():
    config = TrainConfig(learning_rate=2.0, lr_schedule="noam", warmup_steps=100,
                         noam_d_model=256)
    for step in (1, 50, 100, 101, 400, 10_000):  # step counted from 1
        expected = 2.0 * 256 ** -0.5 * min(step ** -0.5, step * 100 ** -1.5)
        assert rate(config, step - 1) == pytest.approx(expected)
    assert max(rate(config, s) for s in range(300)) == pytest.approx(rate(config, 99))
    with pytest.raises(AsrkitError, match="warmup_steps"):
        TrainConfig(lr_schedule="noam")


def test_settings_checked_together_may_come_in_any_order():
    """``-o lr_schedule=noam -o warmup_steps=N``: noam is checked with its warm-up, not before
    the next ``-o`` sets it."""
    from asrkit.core.settings import apply

    config = apply(TrainConfig(), [("lr_schedule", "noam"), ("warmup_steps", "100")])
    assert (config.lr_schedule, config.warmup_steps) == ("noam", 100)
    assert apply(TrainConfig(), [("epochs", "3"), ("epochs", "5")]).epochs == 5  # later wins
    with pytest.raises(AsrkitError, match="noam needs warmup_steps"):
        apply(TrainConfig(), [("warmup_steps", "100"), ("lr_schedule", "noam"),
                              ("warmup_steps", "0")])


def test_newbob_decays_only_after_a_poor_evaluation():
    config = TrainConfig(learning_rate=0.1, lr_schedule="newbob", newbob_threshold=0.05,
                         newbob_factor=0.5)
    state = LoopState()
    factors = []
    # the first evaluation has nothing to compare with; then 20%, 2% (poor), 10%, worse (poor)
    for score in (10.0, 8.0, 7.84, 7.0, 7.5):
        why = schedules.after_evaluation(config, state, score)
        factors.append((state.lr_factor, why))
    assert factors == [(1.0, ""), (1.0, ""), (0.5, "newbob"), (0.5, ""), (0.25, "newbob")]
    assert rate(config, 50, lr_factor=state.lr_factor) == pytest.approx(0.025)
    # any other schedule ignores the scores
    other = LoopState()
    for score in (10.0, 11.0, 12.0):
        schedules.after_evaluation(TrainConfig(), other, score)
    assert other.lr_factor == 1.0


def test_plateau_acts_with_any_schedule():
    config = TrainConfig(lr_schedule="cosine", plateau_patience=2, plateau_factor=0.1)
    state = LoopState(evaluations_since_lr_change=1)
    assert schedules.after_evaluation(config, state, 1.0) == ""
    state.evaluations_since_lr_change = 2
    assert schedules.after_evaluation(config, state, 1.0) == "plateau"
    assert state.lr_factor == pytest.approx(0.1) and state.evaluations_since_lr_change == 0


def test_the_schedules_memory_is_saved_with_the_loop_state():
    state = LoopState(global_step=7, lr_factor=0.25, last_score=3.5, schedule_steps=40)
    again = LoopState.from_json(json.loads(json.dumps(state.to_json())))
    config = TrainConfig(lr_schedule="cosine", warmup_steps=2, lr_floor=0.2)
    assert schedules.learning_rate(config, again) == schedules.learning_rate(config, state)
    assert (again.last_score, again.schedule_steps) == (3.5, 40)


def step_rates(run) -> dict[int, float]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return {e["step"]: e["lr"] for e in map(json.loads, lines) if e["event"] == "step"}


def test_a_resumed_run_continues_the_schedule_exactly(home, asrkit_cli, tmp_path):
    """newbob (every evaluation but the first improves by less than 100%, so each decays) with a
    warm-up: stopped after 4 steps and resumed to 8, the rates are those of one run to 8."""
    settings = ["--epochs", "2", "--batch-size", "4", *TINY, "-o", "lr_schedule=newbob",
                "-o", "newbob_threshold=1", "-o", "warmup_steps=3", "-o", "eval_every_steps=2",
                "-o", "log_every=1", "--no-progress"]
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    result = asrkit_cli(["train", *settings, "-o", "max_steps=8", "--run-dir", whole])
    assert result.exit_code == 0, result.stderr[-3000:]
    result = asrkit_cli(["train", *settings, "-o", "max_steps=4", "--run-dir", parts])
    assert result.exit_code == 0, result.stderr[-3000:]
    result = asrkit_cli(["train", "--resume", parts, "-o", "max_steps=8", "--no-progress"])
    assert result.exit_code == 0, result.stderr[-3000:]
    rates = step_rates(whole)
    assert sorted(rates) == list(range(1, 9))
    assert rates == step_rates(parts)
    assert rates[1] < rates[3] and rates[5] < rates[3]  # warmed up, then decayed
