"""When a run is scored and which checkpoint its report is about; Ctrl-C; the run's progress
bar; size presets."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, TINY, as_from_a_terminal


@pytest.fixture
def home(datasets, monkeypatch):
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    return datasets


def events(run: Path, kind: str) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["event"] == kind]


def test_dev_is_scored_on_a_cadence_at_epoch_ends_and_at_the_stop(home, asrkit_cli, tmp_path):
    run = tmp_path / "run"
    result = asrkit_cli(["train", "--epochs", "3", "--batch-size", "4", *TINY,
                         "-o", "eval_every_steps=3", "-o", "max_steps=7", "--run-dir", run,
                         "--no-progress"])
    assert result.exit_code == 0, result.stderr[-3000:]
    scored = [(e["step"], e["why"]) for e in events(run, "evaluation")]
    # 4 steps an epoch: the cadence at 3 and 6, the epoch end at 4, the stop at 7; never twice.
    assert scored == [(3, "cadence"), (4, "epoch"), (6, "cadence"), (7, "stop")]
    best = json.loads((run / "checkpoints/best.json").read_text())["state"]
    # The lowest dev WER, ties to the lower CER, then the lower loss (the first such on a tie).
    by_step = {e["step"]: (e["dev_wer"], e["dev_cer"], e["dev_loss"])
               for e in events(run, "evaluation")}
    assert best["global_step"] == min(by_step, key=by_step.get)
    report = json.loads((run / "report.json").read_text())
    assert report["checkpoint"] == {"kind": "best", "step": best["global_step"],
                                    "best_by": "wer", "dev_wer": best["best"]}
    assert (run / "report.txt").read_text().startswith(
        f"checkpoint: best (step {best['global_step']}, the lowest dev WER)")


def test_without_dev_scores_the_report_is_on_the_final_weights(home, asrkit_cli, tmp_path):
    """Never an older unscored checkpoint by surprise: with no dev evaluation there is no
    "best", and the report scores the latest weights."""
    run = tmp_path / "run"
    result = asrkit_cli(["train", "--epochs", "2", "--batch-size", "4", *TINY,
                         "-o", "evaluate_dev=false", "-o", "max_steps=6", "--run-dir", run,
                         "--no-progress"])
    assert result.exit_code == 0, result.stderr[-3000:]
    assert not (run / "checkpoints/best.json").exists()
    assert json.loads((run / "report.json").read_text())["checkpoint"] == {
        "kind": "latest", "step": 6}


def test_ctrl_c_saves_scores_and_resumes(home, tmp_path):
    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASRKIT_")}
    env.update(ASRKIT_HOME=str(home), TF_CPP_MIN_LOG_LEVEL="3")
    process = subprocess.Popen(
        [sys.executable, "-m", "asrkit", "train", "--epochs", "1000", "--batch-size", "4", *TINY,
         "-o", "log_every=1", "--run-dir", str(run), "--no-progress"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=as_from_a_terminal)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not (
                (run / "metrics.jsonl").exists() and len(events(run, "step")) >= 6):
            assert process.poll() is None, process.communicate()
            time.sleep(0.5)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=240)
    finally:
        process.kill()
    assert process.returncode == 130, err[-3000:]
    assert f"Continue with: asrkit train --resume {run}" in err
    assert "Traceback" not in err
    latest = json.loads((run / "checkpoints/latest.json").read_text())["state"]
    assert latest["stop_reason"] == "interrupted" and latest["global_step"] >= 6
    stop = events(run, "evaluation")[-1]
    assert stop["why"] == "stop" and stop["step"] == latest["global_step"]
    resumed = subprocess.run(
        [sys.executable, "-m", "asrkit", "train", "--resume", str(run), "-o",
         f"max_steps={latest['global_step'] + 2}", "--no-progress"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"finished after {latest['global_step'] + 2} steps" in resumed.stdout


def test_one_progress_bar_for_the_run(home, asrkit_cli, tmp_path):
    result = asrkit_cli(["train", "--epochs", "2", "--batch-size", "4", *TINY,
                         "--run-dir", tmp_path / "run"])
    assert result.exit_code == 0, result.stderr[-3000:]
    bar = result.stderr.replace("\r", "\n")
    final = [line for line in bar.splitlines() if line.startswith("train:")][-1]
    assert "8/8" in final  # steps of the whole run, the total known from the split's size
    for part in ("epoch 2/2", "loss", "dev WER", "utt/s", "x real time"):
        assert part in final


def test_time_budget_bar_counts_minutes(home, asrkit_cli, tmp_path):
    result = asrkit_cli(["train", "--epochs", "1", "--batch-size", "4", *TINY,
                         "-o", "max_minutes=30", "--run-dir", tmp_path / "run"])
    assert result.exit_code == 0, result.stderr[-3000:]
    assert "of 30 min" in result.stderr


def test_presets_auto_named_and_overridden(home, asrkit_cli, tmp_path):
    from asrkit import plugins

    spec = plugins.get("model", "brnn")
    assert {"cpu", "full"} <= set(spec.presets)
    run = tmp_path / "auto"
    result = asrkit_cli(["train", "--epochs", "1", "--batch-size", "4", *TINY,
                         "--run-dir", run, "--no-progress"])
    assert result.exit_code == 0, result.stderr[-3000:]
    assert "preset: cpu (no GPU" in result.stdout
    config = json.loads((run / "config.json").read_text())
    assert config["train"]["preset"] == "cpu"
    assert config["train"]["batch_size"] == 4  # --batch-size wins over the preset
    assert config["model"]["n_hidden"] == 32  # and -o over it
    overridden = {"train.batch_size", "model.n_hidden", "model.n_cell", "model.context"}
    for key, value in spec.presets["cpu"].items():
        if key not in overridden:
            section, name = key.split(".")
            assert config[section][name] == setting(section, name, value), key

    none = asrkit_cli(["train", "--epochs", "1", "--batch-size", "4", *TINY, "-o",
                       "preset=none", "--run-dir", tmp_path / "none", "--no-progress"])
    assert none.exit_code == 0 and "preset: none" in none.stdout
    wrong = asrkit_cli(["train", "-o", "preset=huge", "--run-dir", tmp_path / "x"])
    assert wrong.exit_code == 1
    assert "model 'brnn' has no preset 'huge' (presets: cpu, full" in wrong.stderr


def setting(section: str, name: str, value: str):
    """A preset's ``-o`` value as the run's config.json holds it."""
    from asrkit import plugins
    from asrkit.config.pipeline import PipelineConfig
    from asrkit.config.train import TrainConfig
    from asrkit.core.settings import override

    config = {"train": TrainConfig(), "pipeline": PipelineConfig(),
              "model": plugins.get("model", "brnn").Config(),
              "features": plugins.get("feature", "mfcc").Config()}[section]
    result = getattr(override(config, name, value), name)
    return list(result) if isinstance(result, tuple) else result


def test_evaluate_warns_when_the_latest_checkpoint_was_never_scored(home, asrkit_cli, tmp_path):
    run = tmp_path / "run"
    first = asrkit_cli(["train", "--epochs", "5", "--batch-size", "4", *TINY,
                        "-o", "max_steps=2", "--run-dir", run, "--no-progress"])
    assert first.exit_code == 0, first.stderr[-3000:]
    more = asrkit_cli(["train", "--resume", run, "-o", "max_steps=4", "-o", "evaluate_dev=false",
                       "--no-progress"])  # two more steps, never scored
    assert more.exit_code == 0, more.stderr[-3000:]
    best = asrkit_cli(["evaluate", run, "--split", "dev", "--json", "-", "--no-progress"])
    assert best.exit_code == 0, best.stderr[-3000:]
    assert json.loads(best.stdout)["checkpoint"] == {"kind": "best", "step": 2,
                                                     "best_by": "wer"}
    assert ("the latest (step 4) is newer and was never scored on dev: --checkpoint latest"
            in best.stderr)
    latest = asrkit_cli(["evaluate", run, "--split", "dev", "--checkpoint", "latest",
                         "--no-progress"])
    assert latest.exit_code == 0 and "never scored" not in latest.stderr
    assert latest.stdout.startswith("checkpoint: latest (step 4)")
