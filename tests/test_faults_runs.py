"""Runs stay resumable: kills during checkpointing, two writers on one folder, reruns of the same
command, and damaged run or dataset files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from asrkit.train.checkpoints import SAVE_STAGES
from tests.conftest import FAULTS, TINY

#: One epoch of 4 steps on `sample`. Its saves: latest (step 2), latest (step 4), latest again at
#: the epoch's end (step 4), best (step 4), latest once more when training ends (step 4).
SHORT = ["train", "--epochs", "1", "--batch-size", "4", *TINY, "-o", "checkpoint_steps=2",
         "-o", "evaluate_dev=false", "--no-progress"]


@pytest.fixture
def home(datasets, monkeypatch):
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    return datasets


#: Set in a started training, ends it at a stage of a checkpoint save (tests/faults).
KILL_AT_SAVE = "ASRKIT_TEST_KILL_AT_SAVE"


def start(home: Path, *args: str | Path, env: dict | None = None) -> subprocess.Popen:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ASRKIT_")}
    environment.update(ASRKIT_HOME=str(home), **(env or {}))
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(FAULTS), environment.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.Popen([sys.executable, "-m", "asrkit", *map(str, args)], env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def pointed(run: Path) -> set[str]:
    return {json.loads((run / "checkpoints" / f"{kind}.json").read_text())["folder"]
            for kind in ("latest", "best") if (run / "checkpoints" / f"{kind}.json").exists()}


def test_a_kill_at_any_stage_of_a_checkpoint_save_leaves_a_resumable_run(home, asrkit_cli,
                                                                         tmp_path):
    """The third save rewrites the checkpoint of the same step (4): the old code deleted it
    before writing it again, so a kill then left latest.json naming nothing."""
    runs = {stage: tmp_path / stage for stage in SAVE_STAGES}
    killed = {stage: start(home, *SHORT, "--run-dir", run, env={KILL_AT_SAVE: f"{stage}:3"})
              for stage, run in runs.items()}
    for stage, process in killed.items():
        _, err = process.communicate(timeout=300)
        assert process.returncode == 9, f"{stage}: {err[-3000:]}"
    for stage, run in runs.items():
        for name in pointed(run):
            assert (run / "checkpoints" / name / "ckpt.index").exists(), (stage, name)
        before = asrkit_cli(["evaluate", run, "--checkpoint", "latest", "--split", "dev",
                             "--no-progress"])
        assert before.exit_code == 0, f"{stage}: {before.stderr[-3000:]}"
        resumed = asrkit_cli(["train", "--resume", run, "--no-progress"])
        assert resumed.exit_code == 0, f"{stage}: {resumed.stderr[-3000:]}"
        assert "finished after 4 steps" in resumed.stdout
        after = asrkit_cli(["evaluate", run, "--checkpoint", "latest", "--split", "dev",
                            "--no-progress"])
        assert after.exit_code == 0, f"{stage}: {after.stderr[-3000:]}"
        # Nothing is left behind but what the pointers name.
        folders = {p.name for p in (run / "checkpoints").glob("ckpt-*")}
        assert folders == pointed(run), stage
        assert not list((run / "checkpoints").glob("*.partial")), stage


def test_a_damaged_pointer_falls_back_to_the_other_checkpoint(home, asrkit_cli, tmp_path):
    run = tmp_path / "run"
    # Scored on dev, so that there is a best checkpoint to fall back to.
    trained = asrkit_cli([*SHORT, "-o", "evaluate_dev=true", "--run-dir", run])
    assert trained.exit_code == 0, trained.stderr[-3000:]
    latest, best = run / "checkpoints" / "latest.json", run / "checkpoints" / "best.json"

    latest.write_text('{"folder": "ckpt-0')  # cut short
    result = asrkit_cli(["evaluate", run, "--checkpoint", "latest", "--split", "dev",
                         "--no-progress"])
    assert result.exit_code == 0, result.stderr[-3000:]
    assert f"{latest} is damaged" in result.stderr and "using the best checkpoint" in result.stderr
    resumed = asrkit_cli(["train", "--resume", run, "--no-progress"])
    assert resumed.exit_code == 0, resumed.stderr[-3000:]
    assert json.loads(latest.read_text())["state"]["global_step"] == 4  # rewritten whole

    latest.write_text(json.dumps({"folder": "ckpt-000000004-gone", "state": {}}))
    best.write_text("")
    for args in (["evaluate", run, "--checkpoint", "latest", "--no-progress"],
                 ["train", "--resume", run, "--no-progress"]):
        failed = asrkit_cli(args)
        assert failed.exit_code == 1
        line = last_line(failed.stderr)
        assert line.startswith(f"asrkit: error: no usable checkpoint in {run / 'checkpoints'}")
        assert "ckpt-000000004-gone" in line and str(best) in line and "--run-dir" in line
        assert "Traceback" not in failed.stderr


def test_a_second_training_into_the_same_run_folder_is_refused(home, tmp_path):
    run = tmp_path / "run"
    args = ["train", "--epochs", "2", "--batch-size", "2", *TINY, "-o", "log_every=1",
            "-o", "evaluate_dev=false", "--no-progress", "--run-dir", run]
    first = start(home, *args)
    lock = run.with_name("run.lock")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and first.poll() is None:
        if lock.exists() and lock.read_text().strip():
            break
        time.sleep(0.05)
    assert first.poll() is None, first.communicate()[1][-3000:]
    second = start(home, *args)
    _, err = second.communicate(timeout=120)
    assert second.returncode == 1, err[-3000:]
    line = last_line(err)
    assert line.startswith(f"asrkit: error: {run} is in use by another training (pid {first.pid}")
    assert "Traceback" not in err
    assert first.poll() is None, "the first training ended before the second was refused"
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-3000:]
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()
             if json.loads(line)["event"] == "step"]
    assert steps == list(range(1, 2 * 8 + 1))
    assert not lock.exists()


def test_an_import_is_refused_while_another_holds_the_dataset(asrkit_home, asrkit_cli,
                                                              tmp_path):
    dataset = asrkit_home / "datasets" / "sample"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom asrkit.core.locks import folder_lock\n"
         f"with folder_lock({str(dataset)!r}, 'import'):\n"
         "    print('held', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        refused = asrkit_cli(["import", "sample", "--no-progress"])
        assert refused.exit_code == 1
        line = last_line(refused.stderr)
        assert line.startswith(f"asrkit: error: {dataset} is in use by another import "
                               f"(pid {holder.pid} on ")
    finally:
        holder.kill()
        holder.wait()
    # The holder died without letting go: its lock is stale, and taken over with a warning.
    assert json.loads(dataset.with_name("sample.lock").read_text())["pid"] == holder.pid
    imported = asrkit_cli(["import", "sample", "--no-progress"])
    assert imported.exit_code == 0, imported.stderr[-3000:]
    assert f"took over the stale lock of {dataset} from pid {holder.pid}" in imported.stderr
    assert not dataset.with_name("sample.lock").exists()


def test_rerunning_the_same_command_continues_the_run_and_other_settings_are_refused(
        home, asrkit_cli, tmp_path):
    run = tmp_path / "run"
    command = [*SHORT, "--run-dir", run]
    killed = start(home, *command, env={KILL_AT_SAVE: "switched:1"})  # killed after step 2
    _, err = killed.communicate(timeout=300)
    assert killed.returncode == 9, err[-3000:]
    assert json.loads((run / "checkpoints/latest.json").read_text())["state"]["global_step"] == 2

    again = asrkit_cli(command)
    assert again.exit_code == 0, again.stderr[-3000:]
    assert f"continuing the run in {run} (the same settings)" in again.stdout
    assert "finished after 4 steps" in again.stdout
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert {"event": "resume", "epoch": 0, "step": 2} in events

    other = asrkit_cli([*command, "--batch-size", "2"])
    assert other.exit_code == 1
    line = last_line(other.stderr)
    assert line.startswith(f"asrkit: error: {run} holds a run with other settings (batch_size")
    assert f"--resume {run}" in line and "--run-dir" in line


def test_damaged_dataset_files_are_one_line_errors(home, asrkit_cli, tmp_path):
    dataset = tmp_path / "copy"
    shutil.copytree(home / "datasets" / "sample", dataset)
    run = tmp_path / "run"
    trained = asrkit_cli([*SHORT, "--dataset", dataset, "--run-dir", run])
    assert trained.exit_code == 0, trained.stderr[-3000:]

    shard = dataset / "shards" / "test-00000-of-00001.tfrecord"
    whole = shard.read_bytes()
    shard.write_bytes(whole[:-1000])
    evaluated = asrkit_cli(["evaluate", run, "--no-progress"])
    assert evaluated.exit_code == 1
    assert last_line(evaluated.stderr).startswith(
        f"asrkit: error: {shard} is damaged (truncated record at ")
    assert "--force" in evaluated.stderr and "Traceback" not in evaluated.stderr
    shard.write_bytes(whole)

    shard = dataset / "shards" / "train-00001-of-00004.tfrecord"
    shard.write_bytes(shard.read_bytes()[:-1000])
    failed = asrkit_cli(["train", "--resume", run, "-o", "epochs=2", "--no-progress"])
    assert failed.exit_code == 1
    line = last_line(failed.stderr)
    assert line.startswith(f"asrkit: error: {shard} is damaged (truncated record at ")
    assert "--force" in line and f"--resume {run}" in line

    for text in ("", "[1, 2]", '{"name": '):
        (dataset / "dataset.json").write_text(text)
        for args in ([*SHORT, "--dataset", dataset, "--run-dir", tmp_path / "new"],
                     ["import", "sample", "--output", dataset, "--no-progress"]):
            result = asrkit_cli(args)
            assert result.exit_code == 1, (text, args)
            line = last_line(result.stderr)
            assert line.startswith(f"asrkit: error: {dataset / 'dataset.json'} is damaged")
            assert "--force" in line and "Traceback" not in result.stderr


RACER = """\
import os, sys, time
from asrkit.core.errors import AsrkitError
from asrkit.core.locks import folder_lock
folder, go = sys.argv[1], sys.argv[2]
open(go + "." + str(os.getpid()), "w").close()  # ready: imports done
while not os.path.exists(go):
    time.sleep(0.005)
try:
    with folder_lock(folder, "import"):
        print("won", flush=True)
        deadline = time.monotonic() + 60
        while not os.path.exists(go + ".release") and time.monotonic() < deadline:
            time.sleep(0.01)  # held until every other racer has tried, however slow it is
except AsrkitError as error:
    print(error, flush=True)
"""


def test_of_processes_racing_for_a_lock_exactly_one_wins(tmp_path):
    go = tmp_path / "go"
    racers = [subprocess.Popen([sys.executable, "-c", RACER, str(tmp_path / "data"), str(go)],
                               stdout=subprocess.PIPE, text=True) for _ in range(6)]
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("go.*"))) < len(racers):  # all started and waiting
        assert time.monotonic() < deadline
        time.sleep(0.05)
    go.touch()
    deadline = time.monotonic() + 60
    while sum(racer.poll() is not None for racer in racers) < len(racers) - 1:
        assert time.monotonic() < deadline, "the losers did not finish"
        time.sleep(0.05)
    (tmp_path / "go.release").touch()
    results = [racer.communicate(timeout=60)[0].strip() for racer in racers]
    assert results.count("won") == 1, results
    winner = racers[results.index("won")].pid
    for result in results:
        assert result == "won" or result.startswith(
            f"{tmp_path / 'data'} is in use by another import (pid {winner} on "), result


def test_a_lock_left_by_another_host_is_not_taken_over(tmp_path):
    from asrkit.core.errors import AsrkitError
    from asrkit.core.locks import folder_lock, lock_path

    folder = tmp_path / "run"
    lock_path(folder).write_text(json.dumps(
        {"pid": 1, "host": "elsewhere", "started": 0, "command": "asrkit train"}))
    refused = (r"locked by pid 1 on elsewhere, since 1970.*; once sure it has ended, run "
               r"`asrkit unlock .*run --force`")
    with pytest.raises(AsrkitError, match=refused), folder_lock(folder, "training"):
        pass
    assert lock_path(folder).exists()


def test_a_link_to_a_locked_folder_finds_the_same_lock(tmp_path):
    """`train --resume runs/x` and `train --resume link-to-x` must not both run (each would
    delete the other's checkpoints): the lock is taken on the folder's real path."""
    from asrkit.core.errors import AsrkitError
    from asrkit.core.locks import folder_lock, lock_held

    real = tmp_path / "runs" / "x"
    real.mkdir(parents=True)
    link = tmp_path / "link-to-x"
    link.symlink_to(real)
    (tmp_path / "linked-runs").symlink_to(tmp_path / "runs")
    with folder_lock(real, "training"):
        assert lock_held(link)
        for other in (link, tmp_path / "linked-runs" / "x"):
            with pytest.raises(AsrkitError, match="is in use by another training"), \
                    folder_lock(other, "training"):
                pass
    assert not lock_held(link)


def test_an_absurdly_nested_checkpoint_pointer_is_a_damaged_one(tmp_path):
    """A pointer of deeply nested JSON raised an uncaught RecursionError; it is damaged, like
    any pointer that is not one, and the other kind is used."""
    from asrkit.train.checkpoints import Checkpoints

    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for name in ("latest.json", "best.json", "history.json"):
        (folder / name).write_text("[" * 200_000)
    checkpoints = Checkpoints(folder)
    assert checkpoints.state("latest") is None and checkpoints.state("best") is None
    assert checkpoints.history() == []


def test_the_same_command_without_a_run_dir_continues_the_unfinished_run(home, asrkit_cli,
                                                                       tmp_path, monkeypatch):
    """``asrkit train --help`` promises that the same command continues a killed run: without
    --run-dir, that is the newest unfinished runs/<model>-<n> of the same settings; a finished
    run, or other settings, get a new folder."""
    monkeypatch.chdir(tmp_path)
    killed = start(home, *SHORT, env={KILL_AT_SAVE: "switched:1"})  # killed after step 2
    _, err = killed.communicate(timeout=300)
    assert killed.returncode == 9, err[-3000:]
    first = tmp_path / "runs" / "brnn-1"
    assert (first / "checkpoints" / "latest.json").exists()

    again = asrkit_cli(SHORT)
    assert again.exit_code == 0, again.stderr[-3000:]
    assert ("continuing the run in runs/brnn-1 (the same settings; --run-dir starts another)"
            in again.stdout)
    assert "finished after 4 steps" in again.stdout
    assert not (tmp_path / "runs" / "brnn-2").exists()

    finished = asrkit_cli(SHORT)  # brnn-1 has its report now: a new run
    assert finished.exit_code == 0, finished.stderr[-3000:]
    assert "run: runs/brnn-2" in finished.stdout
