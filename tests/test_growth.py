"""Pretraining by growth (``-o grow_epochs=...``): the schedule, the weights carried over at a
growth step, exact resume across one, and the one-line errors."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from asrkit.config.train import TrainConfig
from asrkit.core.errors import AsrkitError
from asrkit.models.ds2 import DS2, DS2Config
from asrkit.train.growth import Growth
from asrkit.train.model import carry_over

#: A tiny ds2 of three GRU layers that starts with one and grows after epochs 1 and 2; no
#: dropout, so that a resumed run draws nothing an uninterrupted one would not; every step's
#: loss logged.
GROWING = ["--model", "ds2", "--batch-size", "8", "-o", "model.rnn_units=8",
           "-o", "model.conv_channels=2", "-o", "model.rnn_layers=3", "-o", "model.dropout=0",
           "-o", "grow_epochs=1,2", "-o", "preset=cpu", "-o", "evaluate_dev=false",
           "-o", "log_every=1", "--no-progress"]


@pytest.fixture
def sample(tiny_dataset, tmp_path, monkeypatch):
    """``--dataset`` of the imported ``sample`` corpus."""
    monkeypatch.setenv("ASRKIT_HOME", str(tmp_path / "home"))
    return ["--dataset", str(tiny_dataset)]


def test_layers_follow_the_schedule():
    growth = Growth.of(TrainConfig(model="ds2", grow_epochs=(1, 3)), DS2(),
                       DS2Config(rnn_layers=4))
    assert growth is not None
    assert [growth.layers_at(epoch) for epoch in range(6)] == [2, 3, 3, 4, 4, 4]
    assert growth.config_at(DS2Config(rnn_layers=4), 0) == DS2Config(rnn_layers=2)
    assert [e for e in range(1, 6) if growth.grows_after(e)] == [1, 3]
    assert Growth.of(TrainConfig(model="ds2"), DS2(), DS2Config()) is None


def test_existing_weights_carry_over_unchanged():
    small = DS2().build(DS2Config(rnn_layers=1, rnn_units=8, conv_channels=2), 40, 29)
    big = DS2().build(DS2Config(rnn_layers=2, rnn_units=8, conv_channels=2), 40, 29)
    fresh = {v.path: v.numpy().copy() for v in big.variables}
    carried = carry_over(small, big)
    # Every layer's weights (a dropout's random state has a name of its own in each model).
    old = {v.path: v.numpy() for v in small.variables if v.path.startswith("ds2/")}
    assert carried >= len(old) > 10
    for variable in big.variables:
        if not variable.path.startswith("ds2/"):
            continue
        if variable.path in old:
            assert np.array_equal(variable.numpy(), old[variable.path]), variable.path
        else:  # the new layer keeps its own initialisation
            assert variable.path.startswith("ds2/bigru1/")
            assert np.array_equal(variable.numpy(), fresh[variable.path])


def test_conformer_grows_by_blocks():
    from asrkit.models.conformer import Conformer, ConformerConfig

    small = ConformerConfig(d_model=8, num_heads=2, num_blocks=1, ff_multiplier=1,
                            conv_kernel=3, subsampling_channels=4)
    growth = Growth.of(TrainConfig(model="conformer", grow_epochs=(2,)), Conformer(),
                       replace(small, num_blocks=2))
    assert growth is not None and growth.config_at(replace(small, num_blocks=2), 1) == small
    old, new = Conformer().build(small, 40, 29), Conformer().build(growth.config_at(
        replace(small, num_blocks=2), 2), 40, 29)
    carry_over(old, new)
    before = {v.path: v.numpy() for v in old.variables if v.path.startswith("conformer/")}
    after = {v.path: v.numpy() for v in new.variables if v.path.startswith("conformer/")}
    assert {p for p in after if p not in before} == {p for p in after if "/block1/" in p}
    for path, value in before.items():
        assert np.array_equal(after[path], value), path


def _weights(run):
    from asrkit.evaluation.restore import load_run_model

    _, model, state = load_run_model(run, "latest")
    return {v.path: v.numpy() for v in model.variables}, state


def _events(run, kind):
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["event"] == kind]


def test_resume_across_a_growth_step_is_exact(sample, asrkit_cli, tmp_path):
    reference, stopped = tmp_path / "reference", tmp_path / "stopped"
    done = asrkit_cli(["train", "--epochs", "2", *GROWING, *sample, "--run-dir", reference])
    assert done.exit_code == 0, done.stderr[-3000:]
    assert _events(reference, "grow") == [{"event": "grow", "epoch": 1, "layers": 2},
                                          {"event": "grow", "epoch": 2, "layers": 3}]
    assert "epoch 1: grown to 2 layers (model.rnn_layers)" in done.stdout

    first = asrkit_cli(["train", "--epochs", "1", *GROWING, *sample, "--run-dir", stopped])
    assert first.exit_code == 0, first.stderr[-3000:]
    saved = json.loads((stopped / "checkpoints/latest.json").read_text())["state"]
    assert saved["epoch"] == 1  # stopped right after the first growth step
    between, _ = _weights(stopped)  # loaded at its size then: 2 of the 3 layers
    assert "ds2/bigru1/kernel" in between and "ds2/bigru2/kernel" not in between
    resumed = asrkit_cli(["train", "--resume", stopped, "-o", "epochs=2", "--no-progress"])
    assert resumed.exit_code == 0, resumed.stderr[-3000:]

    expected, expected_state = _weights(reference)
    got, got_state = _weights(stopped)
    assert got_state["global_step"] == expected_state["global_step"]
    assert any(path.startswith("ds2/bigru2/") for path in got)
    assert got.keys() == expected.keys()
    for path, value in expected.items():
        np.testing.assert_allclose(got[path], value, rtol=1e-5, atol=1e-6, err_msg=path)
    losses = [r["loss"] for r in _events(reference, "step")]
    assert [r["loss"] for r in _events(stopped, "step")] == pytest.approx(losses, rel=1e-5)
    assert _events(stopped, "grow") == _events(reference, "grow")


@pytest.mark.parametrize(("settings", "message"), [
    (["--model", "brnn", "-o", "grow_epochs=1"],
     "asrkit: error: grow_epochs: the brnn model cannot grow"),
    (["--model", "ds2", "-o", "grow_epochs=2,1"],
     "asrkit: error: grow_epochs=2,1: list the epochs in increasing order"),
    (["--model", "ds2", "-o", "grow_epochs=1,2", "-o", "model.rnn_layers=2"],
     "asrkit: error: grow_epochs=1,2 adds 2 layer(s) but ds2 has only model.rnn_layers=2"),
])
def test_a_model_that_cannot_grow_or_a_bad_schedule_is_a_one_line_error(
        sample, asrkit_cli, tmp_path, settings, message):
    result = asrkit_cli(["train", *settings, *sample, "--run-dir", tmp_path / "r", "--no-progress"])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith(message), lines[-1]


def test_a_schedule_from_epoch_zero_is_refused():
    with pytest.raises(AsrkitError):
        TrainConfig(grow_epochs=(0,))
