"""``asrkit evaluate RUN --watch``: a watcher process beside a real training process scores every
checkpoint exactly once, as ``asrkit evaluate`` would, keeps the best, and ends by itself; a
restarted watcher skips what is scored; a checkpoint the training deletes first is skipped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, TINY


@pytest.fixture
def home(datasets, monkeypatch):
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    return datasets


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "evaluations.jsonl").read_text().splitlines()]


def start(args: list[str], home: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASRKIT_")}
    env.update(ASRKIT_HOME=str(home), TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.Popen([sys.executable, "-m", "asrkit", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(path: Path, process: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.02)


def test_a_watcher_beside_a_training_scores_every_checkpoint_once(home, asrkit_cli, tmp_path):
    import tensorflow as tf

    run = tmp_path / "run"
    # 4 steps an epoch: checkpoints at steps 2, 4 (and the epoch end), 6, 8 (and the stop).
    trainer = start(["train", "--epochs", "2", "--batch-size", "4", *TINY, "-o",
                     "evaluate_dev=false", "-o", "checkpoint_steps=2", "--run-dir", str(run),
                     "--no-progress"], home)
    try:
        # The training is paused from its config's writing (long before its first step) until
        # the watcher holds its lock: from then on, every checkpoint must reach the watcher,
        # however fast the saves follow each other.
        wait_for(run / "config.json", trainer)
        trainer.send_signal(signal.SIGSTOP)
        watcher = start(["evaluate", str(run), "--watch", "--split", "dev", "--split", "test",
                         "--no-progress"], home)
        try:
            wait_for(run / "watch.lock", watcher)
            trainer.send_signal(signal.SIGCONT)
            _, trainer_err = trainer.communicate(timeout=240)
            out, err = watcher.communicate(timeout=240)
        finally:
            watcher.kill()
    finally:
        trainer.kill()
    assert trainer.returncode == 0, trainer_err[-3000:]
    assert watcher.returncode == 0, err[-3000:]
    assert "the training has finished" in out

    scored = records(run)
    assert sorted((r["step"], r["split"]) for r in scored) == [
        (step, split) for step in (2, 4, 6, 8) for split in ("dev", "test")]
    assert all("skipped" not in r and r["decoder"] == "greedy" for r in scored)
    for step in (2, 4, 6, 8):
        assert f"step {step}: dev WER" in out  # a line per checkpoint

    # The numbers are asrkit evaluate's on the same (the last) checkpoint.
    final = {r["split"]: r for r in scored if r["step"] == 8}
    result = asrkit_cli(["evaluate", run, "--checkpoint", "latest", "--split", "dev",
                         "--json", "-", "--no-progress"])
    assert result.exit_code == 0, result.stderr[-2000:]
    expected = json.loads(result.stdout)
    for key in ("wer", "cer", "word_errors", "char_errors", "words", "utterances"):
        assert final["dev"][key] == expected[key], key
    assert final["dev"]["loss"] == pytest.approx(expected["loss"], rel=1e-5)

    # The best checkpoint by dev WER, hard-linked beside a pointer.
    dev = [r for r in scored if r["split"] == "dev"]
    best = min(dev, key=lambda r: (r["wer"], r["step"]))
    pointer = json.loads((run / "watch/best-by-wer.json").read_text())
    assert pointer["state"]["watch"]["value"] == best["wer"]
    assert pointer["state"]["global_step"] == best["step"]
    assert (run / "watch" / pointer["folder"] / "ckpt.index").exists()
    assert [p.name for p in (run / "watch").glob("ckpt-*")] == [pointer["folder"]]
    assert not list((run / "watch/pending").iterdir())
    # ... which evaluate (as transcribe and export) loads by name, scoring what the watcher did.
    result = asrkit_cli(["evaluate", run, "--checkpoint", "best-by-wer", "--split", "dev",
                         "--json", "-", "--no-progress"])
    assert result.exit_code == 0, result.stderr[-2000:]
    kept = json.loads(result.stdout)
    assert kept["checkpoint"] == {"kind": "best-by-wer", "step": best["step"]}
    assert (kept["wer"], kept["cer"]) == (best["wer"], best["cer"])
    missing = asrkit_cli(["evaluate", run, "--checkpoint", "best-by-cer", "--no-progress"])
    assert missing.exit_code == 1 and "--watch --best-by cer" in missing.stderr

    # TensorBoard: the watcher's scalars beside the training's.
    events = list((run / "tensorboard/watch-greedy").glob("events.out.tfevents.*"))
    tags = {(value.tag, event.step) for path in events
            for event in tf.compat.v1.train.summary_iterator(str(path))
            for value in event.summary.value}
    assert {("dev/wer", s) for s in (2, 4, 6, 8)} <= tags
    assert ("test/loss", 8) in tags

    # Restarted with the last checkpoint's test result lost (killed while scoring it), it
    # scores that alone, and nothing it had scored again.
    lines = (run / "evaluations.jsonl").read_text().splitlines()
    (run / "evaluations.jsonl").write_text("\n".join(lines[:-1]) + "\n")  # test of step 8 lost
    result = asrkit_cli(["evaluate", run, "--watch", "--split", "dev", "--split", "test",
                         "--no-progress"])
    assert result.exit_code == 0, result.stderr[-2000:]
    assert "1 checkpoint scored" in result.stdout
    again = records(run)
    assert again[:-1] == scored[:-1]
    assert (again[-1]["step"], again[-1]["split"]) == (8, "test")
    assert again[-1]["wer"] == scored[-1]["wer"]


def test_a_checkpoint_deleted_before_the_watcher_reads_it_is_skipped(tmp_path):
    """The trainer's retention deletes the folder a pointer named a moment ago: the watcher
    notes it (in evaluations.jsonl too, so it is not looked for again) and carries on."""
    from asrkit.evaluation.watch import Watcher
    from asrkit.runs.run import load_run
    from asrkit.train.checkpoints import Checkpoints
    from tests.test_transcribe import make_tiny_run

    folder = make_tiny_run(tmp_path / "run")
    run = load_run(folder)
    model = run.spec.build(run.model_config, 26, run.alphabet.num_classes)
    checkpoints = Checkpoints(folder / "checkpoints", model=model)
    checkpoints.save("latest", 8, {"global_step": 8})
    seen = json.loads((folder / "checkpoints/latest.json").read_text())
    checkpoints.save("latest", 9, {"global_step": 9})  # removes step 8's folder
    assert not (folder / "checkpoints" / seen["folder"]).exists()

    notes: list[str] = []
    watcher = Watcher(folder, ["dev"], echo=notes.append)
    assert watcher.snapshot(seen["folder"], seen["state"]) is None
    assert notes == [f"asrkit: note: checkpoint of step 8 skipped: the training deleted it "
                     f"({seen['folder']}) before it could be read; a newer checkpoint replaced "
                     "it"]
    assert [(r["step"], r["split"], "skipped" in r) for r in records(folder)] == [
        (8, "dev", True)]
    assert Watcher(folder, ["dev"]).scored == {8}  # a restarted watcher does not look again
    latest = json.loads((folder / "checkpoints/latest.json").read_text())
    snapshot = watcher.snapshot(latest["folder"], latest["state"])
    assert snapshot is not None and snapshot.step == 9
    assert (snapshot.folder / "ckpt.index").stat().st_nlink >= 2  # a hard link, not a copy
    # Killed before scoring it, the next watcher finds the snapshot, even once the training
    # has deleted the checkpoint itself.
    checkpoints.save("latest", 10, {"global_step": 10})
    assert not (folder / "checkpoints" / latest["folder"]).exists()
    assert [s.step for s in Watcher(folder, ["dev"])._pending()] == [9]


def test_the_trainer_hands_each_checkpoint_to_a_running_watcher(tmp_path):
    """With a watcher's lock held, each save links the new checkpoint into ``watch/pending``
    before the older one is deleted, so that saves faster than the watcher's poll lose nothing;
    with none, a save leaves no trace there."""
    from functools import partial

    from asrkit.core.locks import folder_lock
    from asrkit.evaluation.watch import Watcher
    from asrkit.runs.run import load_run
    from asrkit.train.checkpoints import Checkpoints
    from asrkit.train.snapshots import hand_over
    from tests.test_transcribe import make_tiny_run

    folder = make_tiny_run(tmp_path / "run")
    run = load_run(folder)
    model = run.spec.build(run.model_config, 26, run.alphabet.num_classes)
    checkpoints = Checkpoints(folder / "checkpoints", on_saved=partial(hand_over, folder),
                              model=model)
    checkpoints.save("latest", 1, {"global_step": 1})
    assert not (folder / "watch").exists()  # no watcher: nothing handed over
    pointers = {}
    with folder_lock(folder / "watch", "watch"):
        for step in (2, 3, 4):
            checkpoints.save("latest", step, {"global_step": step})
            pointers[step] = json.loads((folder / "checkpoints/latest.json").read_text())
        pending = Watcher(folder, ["dev"])._pending()
    assert [s.step for s in pending] == [2, 3, 4]
    # The watcher's poll read step 3's pointer just before the save of step 4 deleted its
    # folder: the trainer's snapshot of it waits to be scored, so it is not skipped.
    notes: list[str] = []
    assert Watcher(folder, ["dev"], echo=notes.append).snapshot(
        pointers[3]["folder"], pointers[3]["state"]) is None
    assert notes == [] and not (folder / "evaluations.jsonl").exists()
    # The older latest ones are deleted (the tiny run's best stays).
    assert [p.name[:21] for p in (folder / "checkpoints").glob("ckpt-*-latest-*")] == [
        "ckpt-000000004-latest"]
    for snapshot in pending:
        assert snapshot.state == {"global_step": snapshot.step}
        assert (snapshot.folder / "ckpt.index").stat().st_nlink >= 1
    # The watcher's own poll of the same checkpoint keeps the snapshot that is there.
    latest = json.loads((folder / "checkpoints/latest.json").read_text())
    assert Watcher(folder, ["dev"]).snapshot(latest["folder"], latest["state"]).step == 4
    assert [s.step for s in Watcher(folder, ["dev"])._pending()] == [2, 3, 4]
    assert not list((folder / "watch/pending").glob("linking-*"))
