"""Confidence intervals of WER and CER and the paired comparison of two runs
(``asrkit.core.bootstrap``, ``asrkit evaluate --compare``): the intervals equal a plain
reference bootstrap on the same seed; the paired test finds a clear difference (p < 0.05) and
none between a run and itself (p > 0.05); the commands report both."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from asrkit.core.bootstrap import paired_test, rate_interval

FIXTURE = Path(__file__).parent / "fixtures" / "runs" / "brnn-before-run-config"


def utterances(seed: int, count: int, error_rate: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    totals = rng.integers(3, 40, count)
    return rng.binomial(totals, error_rate), totals


def reference_interval(errors, totals, samples: int, seed: int, level: float = 0.95):
    """The bootstrap written out plainly: one resample at a time, in a loop."""
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(errors), size=(samples, len(errors)))
    rates = []
    for row in draws:
        rates.append(sum(errors[i] for i in row) / sum(totals[i] for i in row))
    return np.quantile(rates, [(1 - level) / 2, (1 + level) / 2])


def test_the_interval_equals_a_plain_reference_bootstrap_on_the_same_seed():
    errors, totals = utterances(1, 120, 0.2)
    found = rate_interval(errors.tolist(), totals.tolist(), samples=500, seed=7)
    low, high = reference_interval(errors, totals, 500, 7)
    assert found.rate == pytest.approx(errors.sum() / totals.sum())
    assert (found.low, found.high) == pytest.approx((low, high), rel=1e-12)
    assert found.low < found.rate < found.high


def test_a_larger_test_set_gives_a_narrower_interval():
    small = rate_interval(*[a.tolist() for a in utterances(2, 50, 0.2)])
    large = rate_interval(*[a.tolist() for a in utterances(2, 2000, 0.2)])
    assert large.high - large.low < (small.high - small.low) / 3


def test_the_paired_test_sees_a_clear_difference_and_none_between_a_run_and_itself():
    rng = np.random.default_rng(3)
    totals = rng.integers(5, 30, 300)
    worse = rng.binomial(totals, 0.25)
    better = rng.binomial(totals, 0.15)
    clear = paired_test(worse.tolist(), better.tolist(), totals.tolist())
    assert clear.p_value < 0.05 and clear.difference.low > 0
    same = paired_test(worse.tolist(), worse.tolist(), totals.tolist())
    assert same.p_value > 0.05 and same.difference.rate == 0
    # Two runs that differ on a few utterances by chance: no evidence either way.
    noisy = worse.copy()
    noisy[:3] += 1
    noisy[3:6] = np.maximum(noisy[3:6] - 1, 0)
    assert paired_test(noisy.tolist(), worse.tolist(), totals.tolist()).p_value > 0.05


@pytest.fixture
def two_runs(datasets, monkeypatch, tmp_path):
    """The fixture run (a tiny brnn) in two folders: the same weights, so the same errors on
    every utterance."""
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    first, second = tmp_path / "a", tmp_path / "b"
    shutil.copytree(FIXTURE, first)
    shutil.copytree(FIXTURE, second)
    return first, second


def test_evaluate_reports_intervals_and_compares_two_runs(two_runs, asrkit_cli):
    first, second = two_runs
    scored = asrkit_cli(["evaluate", first, "--split", "dev", "--json", "-", "--no-progress"])
    assert scored.exit_code == 0, scored.stderr[-3000:]
    report = json.loads(scored.stdout)
    low, high = report["intervals"]["wer"]
    assert low <= report["wer"] <= high and report["intervals"]["level"] == 0.95
    text = asrkit_cli(["evaluate", first, "--split", "dev", "--no-progress"])
    assert "95% bootstrap interval: WER" in text.stdout

    compared = asrkit_cli(["evaluate", first, "--compare", second, "--split", "dev", "--json",
                           "-", "--no-progress"])
    assert compared.exit_code == 0, compared.stderr[-3000:]
    result = json.loads(compared.stdout)
    assert result["wer"]["difference"] == 0 and result["wer"]["p_value"] == 1.0
    assert [r["run"] for r in result["runs"]] == [str(first), str(second)]
    shown = asrkit_cli(["evaluate", first, "--compare", second, "--split", "dev",
                        "--no-progress"])
    assert "no difference beyond chance" in shown.stdout

    refused = asrkit_cli(["evaluate", first, "--compare", second, "--watch"])
    assert refused.exit_code != 0 and "--compare" in refused.stderr
