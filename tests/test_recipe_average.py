"""``asrkit average``: the mean of a run's last checkpoints, usable like any checkpoint."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import TINY


def assert_mean_of_the_last_two(run, history, averaged, key, build) -> None:
    """``averaged``'s weights are the mean of the network saved as ``key`` in the run's last
    two checkpoints (each read into a fresh network from ``build()``), which differ."""
    import tensorflow as tf

    each = []
    for entry in history[-2:]:
        reference = build()
        tf.train.Checkpoint(**{key: reference}).read(
            str(run / "checkpoints" / entry["folder"] / "ckpt")).expect_partial()
        each.append([w.numpy() for w in reference.trainable_variables])
    for i, weight in enumerate(averaged.trainable_variables):
        np.testing.assert_allclose(weight.numpy(), (each[0][i] + each[1][i]) / 2,
                                   rtol=1e-6, atol=1e-7)
    assert any(not np.allclose(a, b) for a, b in zip(*each, strict=True))  # really two


@pytest.fixture
def home(datasets, monkeypatch):
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    return datasets


def test_average_of_the_last_checkpoints_is_their_mean_and_evaluates(home, asrkit_cli,
                                                                     tmp_path):

    from asrkit.evaluation.restore import load_run_model

    run = tmp_path / "run"
    result = asrkit_cli(["train", "--epochs", "2", "--batch-size", "4", *TINY,
                         "-o", "keep_checkpoints=3", "-o", "checkpoint_steps=1",
                         "-o", "learning_rate=0.01", "-o", "evaluate_dev=false",
                         "--run-dir", run, "--no-progress"])
    assert result.exit_code == 0, result.stderr[-3000:]
    history = json.loads((run / "checkpoints/history.json").read_text())
    assert [entry["step"] for entry in history] == [6, 7, 8]  # step 8 saved thrice, kept once
    named = {p.name for p in (run / "checkpoints").iterdir() if p.name.startswith("ckpt-")}
    assert {entry["folder"] for entry in history} <= named and len(named) <= 4  # + the best

    too_many = asrkit_cli(["average", run, "--last", "4"])
    assert too_many.exit_code == 1
    assert "keeps 3 checkpoint(s), not the 4 to average" in too_many.stderr
    assert "-o keep_checkpoints=4" in too_many.stderr

    averaged = asrkit_cli(["average", run, "--last", "2"])
    assert averaged.exit_code == 0, averaged.stderr[-3000:]
    assert "steps 7, 8" in averaged.stdout

    loaded_run, model, state = load_run_model(run, "averaged")
    assert state["averaged_steps"] == [7, 8]
    assert_mean_of_the_last_two(run, history, model, "model", lambda: loaded_run.spec.build(
        loaded_run.model_config, loaded_run.extractor.num_features(loaded_run.feature_config),
        loaded_run.alphabet.num_classes))

    evaluated = asrkit_cli(["evaluate", run, "--split", "dev", "--checkpoint", "averaged",
                            "--json", "-", "--no-progress"])
    assert evaluated.exit_code == 0, evaluated.stderr[-3000:]
    report = json.loads(evaluated.stdout)
    assert report["utterances"] == 2
    assert report["checkpoint"] == {"kind": "averaged", "step": 8, "averaged_steps": [7, 8]}

    # training on keeps the averaged checkpoint
    longer = asrkit_cli(["train", "--resume", run, "-o", "epochs=3", "--no-progress"])
    assert longer.exit_code == 0, longer.stderr[-3000:]
    assert load_run_model(run, "averaged")[2]["averaged_steps"] == [7, 8]


def test_without_an_averaged_checkpoint_the_error_says_how_to_make_one(home, asrkit_cli,
                                                                      tmp_path):
    run = tmp_path / "run"
    result = asrkit_cli(["train", "--epochs", "1", "--batch-size", "4", *TINY,
                         "-o", "max_steps=1", "-o", "evaluate_dev=false", "--run-dir", run,
                         "--no-progress"])
    assert result.exit_code == 0, result.stderr[-3000:]
    evaluated = asrkit_cli(["evaluate", run, "--split", "dev", "--checkpoint", "averaged"])
    assert evaluated.exit_code == 1
    assert "has no averaged checkpoint" in evaluated.stderr
    assert "asrkit average" in evaluated.stderr
    nothing_kept = asrkit_cli(["average", run, "--last", "1"])
    assert nothing_kept.exit_code == 1 and "keeps 0 checkpoint(s)" in nothing_kept.stderr


@pytest.mark.parametrize(("settings", "decoder"), [
    (["objective=transducer", "objective.pred_dim=16", "objective.joint_dim=16"],
     "transducer-beam"),
    (["objective=attention", "objective.d_model=16", "objective.heads=2", "objective.layers=1",
      "objective.ff_dim=32"], "attention-beam")], ids=["transducer", "attention"])
def test_a_runs_average_holds_the_mean_of_its_objectives_head_too(home, asrkit_cli, tmp_path,
                                                                  settings, decoder):
    """A transducer's prediction and joint networks, an attention decoder and its CTC output,
    are averaged with the encoder, and the averaged checkpoint decodes with the run's
    decoder."""

    from asrkit.evaluation.restore import restore_networks
    from asrkit.runs.run import load_run

    run = tmp_path / "run"
    objective = [item for setting in settings for item in ("-o", setting)]
    result = asrkit_cli(["train", "--epochs", "2", "--batch-size", "4", *TINY, *objective,
                         "-o", "keep_checkpoints=3",
                         "-o", "checkpoint_steps=1", "-o", "learning_rate=0.01",
                         "-o", "evaluate_dev=false", "--run-dir", run, "--no-progress"])
    assert result.exit_code == 0, result.stderr[-3000:]
    averaged = asrkit_cli(["average", run, "--last", "2"])
    assert averaged.exit_code == 0, averaged.stderr[-3000:]

    loaded = load_run(run)
    _, head, state = restore_networks(loaded, "averaged")
    history = json.loads((run / "checkpoints/history.json").read_text())
    assert state["averaged_steps"] == [entry["step"] for entry in history[-2:]]
    assert head is not None and head.trainable_variables
    assert_mean_of_the_last_two(run, history, head, "head", lambda: loaded.objective.build(
        loaded.objective_config, loaded.encoder_width(), loaded.labels))

    evaluated = asrkit_cli(["evaluate", run, "--split", "dev", "--checkpoint", "averaged",
                            "--json", "-", "--no-progress"])
    assert evaluated.exit_code == 0, evaluated.stderr[-3000:]
    report = json.loads(evaluated.stdout)
    assert report["decoder"] == decoder
    assert report["checkpoint"]["kind"] == "averaged"
