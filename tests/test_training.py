"""The training engine: towers, the DeepSpeech smoke test, exact resume, guards, evaluation."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from asrkit.core.files import write_json
from asrkit.core.metrics import corpus_score
from asrkit.dataset.shards import ShardRecord, write_shard
from tests.conftest import SPEECH, TINY


@pytest.fixture
def home(datasets, monkeypatch):
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    return datasets


def test_towers_match_one_device_with_the_doubled_batch():
    script = Path(__file__).parent / "scripts" / "towers.py"
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            check=False, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["max_update"] > 1e-3  # the step really changed the weights
    # Plain descent (tests/scripts/comparison.py): the weights differ as the gradients do.
    assert figures["max_difference"] < 1e-5 * figures["max_update"]


def test_ldc93s1_smoke_test_learns_the_utterance(home, asrkit_cli, tmp_path):
    """DeepSpeech's smoke test: a narrow brnn, batch 1, on the one utterance, to an exact
    transcription (it first decodes exactly after about 215 steps)."""
    run = tmp_path / "smoke"
    started = time.monotonic()
    result = asrkit_cli(["train", "--dataset", "ldc93s1", "--epochs", "300", "--batch-size", "1",
                         "-o", "preset=full", "-o", "model.n_hidden=100", "-o", "model.n_cell=100",
                         "-o", "evaluate_dev=false", "--run-dir", run, "--no-progress"])
    assert result.exit_code == 0, result.stderr[-3000:]
    report = json.loads((run / "report.json").read_text())
    print(f"smoke test: 300 steps in {time.monotonic() - started:.0f} s")
    assert report["results"][0]["hypothesis"] == (
        "she had your dark suit in greasy wash water all year")
    assert report["wer"] == 0.0


def test_train_then_evaluate(home, asrkit_cli, tmp_path):
    run = tmp_path / "run"
    result = asrkit_cli(["train", "--epochs", "2", "--batch-size", "4", *TINY,
                         "-o", "checkpoint_steps=3", "--run-dir", run, "--no-progress"])
    assert result.exit_code == 0, result.stderr[-3000:]
    assert "finished after 8 steps" in result.stdout
    config = json.loads((run / "config.json").read_text())
    assert config["model"]["n_hidden"] == 32 and config["train"]["dataset"] == "sample"
    assert json.loads((run / "plugins.json").read_text())["plugins"]
    assert (run / "alphabet.txt").exists() and list((run / "tensorboard").iterdir())
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [e["step"] for e in events if e["event"] == "epoch"] == [4, 8]
    scored = [e for e in events if e["event"] == "evaluation"]
    assert [(e["step"], e["why"]) for e in scored] == [(4, "epoch"), (8, "epoch")]
    assert "dev_wer" in scored[0]
    assert json.loads((run / "checkpoints/latest.json").read_text())["state"]["global_step"] == 8

    longer = asrkit_cli(["train", "--resume", run, "-o", "epochs=3", "--no-progress"])
    assert longer.exit_code == 0, longer.stderr[-3000:]
    assert "finished after 12 steps" in longer.stdout
    assert json.loads((run / "config.json").read_text())["train"]["epochs"] == 3

    evaluated = asrkit_cli(["evaluate", run, "--split", "dev", "--json", "-", "--no-progress"])
    assert evaluated.exit_code == 0, evaluated.stderr[-3000:]
    report = json.loads(evaluated.stdout)
    assert report["utterances"] == 2 and report["split"] == "dev"
    assert set(report["samples"]) == {"best", "median", "worst"}
    assert report["words"] == sum(len(r["reference"].split()) for r in report["results"])
    beam = asrkit_cli(["evaluate", run, "--split", "dev", "--decoder", "beam",
                       "-o", "decoder.beam_width=4", "--json", "-", "--no-progress"])
    assert beam.exit_code == 0 and json.loads(beam.stdout)["decoder"] == "beam"
    wrong = asrkit_cli(["evaluate", run, "--decoder", "beam", "-o", "decoder.width=4"])
    assert wrong.exit_code == 1 and "unknown setting 'width'" in wrong.stderr
    text = asrkit_cli(["evaluate", run, "--split", "dev", "--no-progress"])
    assert "ref: we must find a new home in the stars" in text.stdout


def test_ds2_trains_with_subsampling(home, asrkit_cli, tmp_path):
    from asrkit.models.ds2 import DS2, DS2Config

    assert DS2().output_length(DS2Config(), 101) == 51
    run = tmp_path / "ds2"
    result = asrkit_cli(["train", "--model", "ds2", "--epochs", "1", "--batch-size", "8",
                         "-o", "model.rnn_units=32", "-o", "model.conv_channels=4",
                         "--run-dir", run, "--no-progress"])
    assert result.exit_code == 0, result.stderr[-3000:]
    assert json.loads((run / "config.json").read_text())["train"]["model"] == "ds2"
    assert (run / "report.json").exists()
    # Every weight is in the checkpoint: a restored model equals the trained one.
    from asrkit.evaluation.restore import load_run_model

    _, first, _ = load_run_model(run, "latest")
    _, second, _ = load_run_model(run, "latest")
    assert len(first.weights) == len(second.weights) > 12
    for a, b in zip(first.weights, second.weights, strict=True):
        assert (a.numpy() == b.numpy()).all(), a.path


def test_unknown_setting_is_a_one_line_error(home, asrkit_cli, tmp_path):
    result = asrkit_cli(["train", "-o", "model.n_hiden=3", "--run-dir", tmp_path / "r"])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1].startswith(
        "asrkit: error: unknown setting 'n_hiden' for BRNNConfig")


def test_killed_training_resumes_to_the_same_step_count(home, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASRKIT_")}
    env["ASRKIT_HOME"] = str(home)
    args = [sys.executable, "-m", "asrkit", "train", "--epochs", "3", "--batch-size", "2", *TINY,
            "-o", "checkpoint_steps=2", "-o", "evaluate_dev=false", "--no-progress"]
    reference = tmp_path / "reference"
    done = subprocess.run([*args, "--run-dir", str(reference)], env=env, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    expected = json.loads((reference / "checkpoints/latest.json").read_text())["state"]

    run = tmp_path / "killed"
    latest = run / "checkpoints" / "latest.json"
    process = subprocess.Popen([*args, "--run-dir", str(run)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and process.poll() is None:
        if latest.exists():
            state = json.loads(latest.read_text())["state"]
            if state["epoch"] == 1 and state["step_in_epoch"] >= 2:  # mid-way through epoch 2
                break
        time.sleep(0.02)
    assert process.poll() is None, "training ended before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.wait()
    killed_at = json.loads(latest.read_text())["state"]
    assert killed_at["global_step"] < expected["global_step"]

    resumed = subprocess.run([*args, "--resume", str(run)], env=env, capture_output=True,
                             text=True, check=False)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    final = json.loads(latest.read_text())["state"]
    assert final["global_step"] == expected["global_step"] == 3 * 8
    assert final["epoch"] == 3 and final["steps_per_epoch"] == 8
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert {"event": "resume", "epoch": 1, "step": killed_at["global_step"]} in events
    assert (run / "report.json").exists()


def test_non_finite_losses_are_skipped_and_named(home, asrkit_cli, tmp_path):
    """Utterances far too short for their transcripts make CTC infinite: their batches are
    skipped and named; when nothing else is left the run stops with one line."""
    import wave

    with wave.open(str(SPEECH / "speechbrain/spk1_snt1.wav"), "rb") as w:
        audio = w.readframes(w.getnframes())
    dataset = tmp_path / "bad"
    good = [ShardRecord(f"good{i}", audio, "the child almost hurt the small dog") for i in range(3)]
    bad = [ShardRecord("bad0", audio[:3200], "a transcript much longer than a tenth of a second")]
    write_shard(dataset / "shards/train-00000-of-00001.tfrecord", good + bad)
    write_json(dataset / "dataset.json", {"name": "bad"})
    run = tmp_path / "run"
    result = asrkit_cli(["train", "--dataset", dataset, "--epochs", "1", "--batch-size", "1",
                         *TINY, "-o", "evaluate_dev=false", "-o", "pipeline.bucketing=false",
                         "--run-dir", run, "--no-progress"])
    assert result.exit_code == 0, result.stderr[-3000:]
    assert "non-finite loss" in result.stderr and "bad0" in result.stderr
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [e["utterances"] for e in events if e["event"] == "non_finite_loss"] == [["bad0"]]

    only_bad = tmp_path / "only_bad"
    write_shard(only_bad / "shards/train-00000-of-00001.tfrecord", bad * 3)
    write_json(only_bad / "dataset.json", {"name": "only_bad"})
    failed = asrkit_cli(["train", "--dataset", only_bad, "--epochs", "1", "--batch-size", "1",
                         *TINY, "-o", "max_bad_batches=2", "-o", "pipeline.bucketing=false",
                         "--run-dir", tmp_path / "run2", "--no-progress"])
    assert failed.exit_code == 1
    assert failed.stderr.strip().splitlines()[-1].startswith(
        "asrkit: error: 2 batches in a row had a non-finite loss")


def test_corpus_wer_and_cer_equal_jiwer():
    import random

    import jiwer

    rng = random.Random(3)
    words = ["the", "a", "cat", "sat", "on", "mat", "dog", "ran", "far", "away", "house"]
    refs = [" ".join(rng.choices(words, k=rng.randint(1, 12))) for _ in range(300)]
    hyps = [" ".join(w for w in r.split() if rng.random() > 0.2) + rng.choice(["", " cat"])
            for r in refs]
    hyps = [h.strip() or "a" for h in hyps]
    total = corpus_score(refs, hyps)
    assert total.wer == pytest.approx(jiwer.wer(refs, hyps), abs=1e-12)
    assert total.cer == pytest.approx(jiwer.cer(refs, hyps), abs=1e-12)
