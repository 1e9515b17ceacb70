"""Datasets, runs and exports at a URL, read and written through TensorFlow's filesystem layer.

``ram://`` (TensorFlow's in-memory filesystem) stands in for a bucket inside one process: the
same commands give byte-identical results there and on local disk. ``file://`` URLs take the
same code paths (``StoragePath``: no fsync, ``.partial`` objects renamed into place, locks as
objects) on disk, so that a writer in another process can be killed midway, as ``kill -9``
kills it. TensorFlow's GCS client cannot be pointed at a local emulator (its endpoints are
compiled in); an unreachable bucket is tested through a proxy that refuses connections.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

from asrkit.core import files
from asrkit.core.errors import AsrkitError
from asrkit.core.files import append_line
from asrkit.core.locks import LockError, folder_lock, lock_path, unlock
from asrkit.core.storage import StorageError, StoragePath, location
from asrkit.train import checkpoints
from tests.conftest import FAULTS, SPEECH, TINY, ok

TRAIN = ["--model", "brnn", "--epochs", "1", "--batch-size", "4", *TINY,
         "-o", "checkpoint_steps=2", "--no-progress"]
AUDIO = SPEECH / "ldc93s1" / "LDC93S1.wav"


@pytest.fixture
def bucket() -> StoragePath:
    """A fresh folder of TensorFlow's in-memory filesystem (this process only)."""
    return StoragePath(f"ram://asrkit-test-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def home_cli(tmp_path, monkeypatch, make_plugins, asrkit_cli):
    """``cli(args)`` in this process, with an empty ``ASRKIT_HOME`` (where imports stage)."""
    from tests.conftest import add_commands

    monkeypatch.setenv("ASRKIT_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    plugins = add_commands(make_plugins(entry_points=True))
    return lambda args: asrkit_cli(args, plugins)


def tree(folder) -> dict[str, bytes]:
    """Every file under a local folder or URL, by its relative path, with its bytes."""
    import tensorflow as tf

    root = str(folder).rstrip("/")
    found = {}
    for parent, _, names in tf.io.gfile.walk(root):
        for name in names:
            path = f"{parent.rstrip('/')}/{name}"
            with tf.io.gfile.GFile(path, "rb") as f:
                found[path[len(root) + 1:]] = f.read()
    return found


# -- the path ----------------------------------------------------------------------------------


def test_a_url_behaves_as_a_path(bucket):
    folder = bucket / "ds"
    (folder / "a.txt").write_text("one\n")
    (folder / "sub" / "b.csv").write_text("two\n")
    assert (folder / "a.txt").read_text() == "one\n"
    assert (folder / "a.txt").exists() and folder.is_dir() and (folder / "a.txt").is_file()
    assert [p.name for p in folder.iterdir()] == ["a.txt", "sub"]
    assert [p.name for p in folder.glob("*.txt")] == ["a.txt"]
    assert [str(p) for p in folder.glob("sub/*.csv")] == [f"{bucket}/ds/sub/b.csv"]
    path = folder / "sub" / "b.csv"
    assert (path.name, path.stem, path.suffix) == ("b.csv", "b", ".csv")
    assert path.parent == folder / "sub" and str(path.with_suffix(".txt")).endswith("b.txt")
    (folder / "a.txt").replace(folder / "c.txt")
    assert not (folder / "a.txt").exists() and (folder / "c.txt").read_text() == "one\n"
    with pytest.raises(FileNotFoundError):
        (folder / "missing").read_text()
    (folder / "missing").unlink(missing_ok=True)
    assert isinstance(location(str(folder)), StoragePath)
    assert isinstance(location("runs/x"), Path)
    with pytest.raises(TypeError):  # never a local folder named "ram:" by accident
        Path(folder)


def test_an_unknown_scheme_is_one_line():
    with pytest.raises(StorageError) as error:
        StoragePath("nosuch://bucket/ds").exists()
    assert "nosuch" in str(error.value) and "\n" not in str(error.value)


def test_appending_to_an_object_rewrites_it_without_a_torn_line(bucket):
    path = bucket / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2, "lo')  # a writer killed mid-line
    append_line(path, '{"step": 3}')
    assert path.read_text() == '{"step": 1}\n{"step": 3}\n'


# -- the same commands, the same results -------------------------------------------------------


class Killed(BaseException):
    """A training ended at a stage of a checkpoint save (in this process, as ram:// needs)."""


def _kill_at(stage: str, number: int):
    def reached(at: str, save_number: int) -> None:
        if at == stage and save_number == number:
            raise Killed

    return reached


def _train_killed_and_resumed(cli, monkeypatch, dataset, run) -> str:
    """Train, ended in the middle of its second checkpoint save, then the same command again."""
    args = ["train", "--dataset", dataset, "--run-dir", run, *TRAIN]
    monkeypatch.setattr(checkpoints, "_reached", _kill_at("pointer", 2))
    assert cli(args).exit_code != 0
    monkeypatch.setattr(checkpoints, "_reached", lambda stage, number: None)
    return ok(cli(args)).stdout


def _variables(checkpoint_folder) -> dict[str, np.ndarray]:
    import tensorflow as tf

    reader = tf.compat.v1.train.NewCheckpointReader(f"{checkpoint_folder}/ckpt")
    # The object graph names Keras's objects, numbered per process ("adam_1"): not a value.
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name != "_CHECKPOINTABLE_OBJECT_GRAPH"}


def test_import_train_evaluate_transcribe_export_at_a_url_match_local_disk(
        bucket, tmp_path, home_cli, monkeypatch):
    cli = home_cli
    local = tmp_path / "disk"
    for root in (str(bucket), str(local)):
        ok(cli(["import", "sample", "--output", f"{root}/ds", "--no-progress"]))
    # The dataset: every file byte for byte (the import's own work state stays local).
    at_url, on_disk = tree(bucket / "ds"), tree(local / "ds")
    on_disk = {k: v for k, v in on_disk.items() if not k.startswith(".import/")}
    assert at_url.keys() == on_disk.keys()
    assert all(at_url[k] == on_disk[k] for k in on_disk if k != "dataset.json")
    assert json.loads(at_url["dataset.json"])["splits"] == json.loads(
        on_disk["dataset.json"])["splits"]

    results = {}
    for root in (str(bucket), str(local)):
        out = _train_killed_and_resumed(cli, monkeypatch, f"{root}/ds", f"{root}/runs/r")
        assert "continuing the run" in out
        ok(cli(["evaluate", f"{root}/runs/r", "--json", f"{root}/eval.json", "--no-progress"]))
        report = json.loads(location(f"{root}/eval.json").read_text())
        text = ok(cli(["transcribe", "--model", f"{root}/runs/r", AUDIO, "--json"])).stdout
        ok(cli(["export", f"{root}/runs/r", "--output", f"{root}/export"]))
        exported = ok(cli(["transcribe", "--model", f"{root}/export", AUDIO, "--json"])).stdout
        pointer = json.loads(location(f"{root}/runs/r/checkpoints/latest.json").read_text())
        weights = _variables(f"{root}/runs/r/checkpoints/{pointer['folder']}")
        results[root] = (report, json.loads(text), json.loads(exported), pointer["state"],
                         weights, tree(f"{root}/runs/r"))
    url, disk = results[str(bucket)], results[str(local)]
    for index in range(4):  # evaluation, transcripts (run and export), the loop's state
        assert _without_paths(url[index]) == _without_paths(disk[index])
    assert url[4].keys() == disk[4].keys()
    assert [k for k in disk[4] if not np.array_equal(url[4][k], disk[4][k])] == []
    # The run folders hold the same files (checkpoint folders differ only in their random
    # names); no .partial object and no lock is left.
    def shape(found: dict[str, bytes]) -> set[str]:
        return {k if not k.startswith("checkpoints/ckpt-") else
                "checkpoints/" + "-".join(k.split("/")[1].split("-")[:3]) + "/" + k.split("/")[-1]
                for k in found if not k.startswith("tensorboard/")}
    assert shape(url[5]) == shape(disk[5])
    assert not any(k.endswith(".partial") for k in url[5])
    assert not (bucket / "runs" / "r.lock").exists()


def _without_paths(value):
    """``value`` without the entries that name where it is (a path or URL) or when it ran."""
    if isinstance(value, dict):
        return {k: _without_paths(v) for k, v in value.items()
                if k not in ("path", "run", "model", "dataset", "seconds", "elapsed_seconds",
                             "wall_seconds", "time", "started", "audio", "file")}
    if isinstance(value, list):
        return [_without_paths(v) for v in value]
    return value


# -- killed writers ----------------------------------------------------------------------------


def _asrkit(home: Path, *args, env: dict | None = None) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ASRKIT_")}
    environment.update(ASRKIT_HOME=str(home), TF_CPP_MIN_LOG_LEVEL="3", **(env or {}))
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(FAULTS), environment.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run([sys.executable, "-m", "asrkit", *map(str, args)], env=environment,
                          capture_output=True, text=True, timeout=600, check=False)


def test_a_killed_upload_is_never_taken_for_a_finished_import(tmp_path):
    url = f"file://{tmp_path}/bucket/ds"
    home = tmp_path / "home"
    killed = _asrkit(home, "import", "sample", "--output", url, "--no-progress",
                     env={"ASRKIT_TEST_KILL_AFTER_COPIES": "5"})
    assert killed.returncode == 9
    uploaded = tree(url)
    assert "dataset.json" not in uploaded and len(uploaded) >= 5
    refused = _asrkit(home, "train", "--dataset", url, *TRAIN)
    assert refused.returncode == 1
    assert refused.stderr.strip().count("\n") == 0, refused.stderr
    assert "upload did not finish" in refused.stderr
    # The rerun takes over the killed importer's lock, keeps what is whole, finishes.
    again = _asrkit(home, "import", "sample", "--output", url, "--no-progress")
    assert again.returncode == 0, again.stderr
    assert "took over the stale lock" in again.stderr
    done = tree(url)
    assert "dataset.json" in done and not any(k.endswith(".partial") for k in done)
    staged = tree(next((home / "staging").iterdir()))
    assert {k: v for k, v in staged.items() if not k.startswith(".import/")} == done


def test_a_training_at_a_url_killed_during_a_save_continues(tmp_path):
    root = f"file://{tmp_path}/bucket"
    home = tmp_path / "home"
    assert _asrkit(home, "import", "sample", "--output", f"{root}/ds",
                   "--no-progress").returncode == 0
    args = ["train", "--dataset", f"{root}/ds", "--run-dir", f"{root}/runs/r", *TRAIN]
    killed = _asrkit(home, *args, env={"ASRKIT_TEST_KILL_AT_SAVE": "pointer:2"})
    assert killed.returncode == 9
    pointer = json.loads(StoragePath(f"{root}/runs/r/checkpoints/latest.json").read_text())
    assert pointer["state"]["global_step"] == 2  # the first save; the second never replaced it
    resumed = _asrkit(home, *args)
    assert resumed.returncode == 0, resumed.stderr
    assert "continuing the run" in resumed.stdout and "finished after 4 steps" in resumed.stdout
    left = tree(f"{root}/runs/r")
    assert not any(k.endswith(".partial") for k in left)
    assert not StoragePath(f"{root}/runs/r.lock").exists()


# -- locks -------------------------------------------------------------------------------------


def test_one_writer_at_a_url(bucket, capsys):
    folder = bucket / "runs" / "r"
    with (folder_lock(folder, "training"),
          pytest.raises(LockError, match="in use by another training"),
          folder_lock(folder, "training")):
        pass
    assert not lock_path(folder).exists()
    # A lock left by a process of this host that is gone is taken over, with a warning.
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    lock = lock_path(folder)
    lock.write_text(json.dumps({"pid": int(gone.stdout), "host": os.uname().nodename,
                                "started": 0, "command": "asrkit train"}))
    with folder_lock(folder, "training"):
        pass
    assert "took over the stale lock" in capsys.readouterr().err
    # Another host's is respected until `asrkit unlock --force`.
    lock.write_text(json.dumps({"pid": 1, "host": "elsewhere", "started": 0}))
    with pytest.raises(LockError, match="elsewhere"), folder_lock(folder, "training"):
        pass
    with pytest.raises(LockError, match="--force"):
        unlock(folder)
    assert unlock(folder, force=True)["host"] == "elsewhere"
    assert not lock.exists()


# -- exports -----------------------------------------------------------------------------------


def test_an_export_at_a_url_is_replaced_only_with_force_and_never_seen_half(
        bucket, home_cli, monkeypatch, tiny_run):
    cli = home_cli
    target = str(bucket / "export")
    ok(cli(["export", tiny_run, "--output", target]))
    refused = cli(["export", tiny_run, "--output", target])
    assert refused.exit_code == 1 and "--force" in refused.stderr
    # An upload killed half way: no asrkit.json, so nothing takes it for an export.
    (bucket / "export").rmtree()
    copies = iter(range(100))

    def killed(partial, final) -> None:
        if next(copies) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(files, "_before_rename", killed)
    assert cli(["export", tiny_run, "--output", target]).exit_code != 0
    monkeypatch.setattr(files, "_before_rename", lambda partial, final: None)
    assert (bucket / "export").is_dir() and not (bucket / "export" / "asrkit.json").exists()
    half = cli(["transcribe", "--model", target, AUDIO])
    assert half.exit_code == 1 and "neither a run folder" in half.stderr
    ok(cli(["export", tiny_run, "--output", target, "--force"]))
    ok(cli(["transcribe", "--model", target, AUDIO]))


# -- bad input ---------------------------------------------------------------------------------


def test_an_unreachable_bucket_is_one_line(tmp_path):
    # No network reaches Google here; a proxy that refuses connections makes the failure quick
    # and the same everywhere.
    env = {"https_proxy": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
           "GCS_RETRY_CONFIG_MAX_RETRIES": "0", "NO_GCE_CHECK": "true"}
    for args in (["train", "--dataset", "gs://asrkit-test-unreachable/ds", *TRAIN],
                 ["evaluate", "gs://asrkit-test-unreachable/runs/r"],
                 ["import", "sample", "--output", "gs://asrkit-test-unreachable/ds"]):
        result = _asrkit(tmp_path, *args, env=env)
        assert result.returncode == 1, result.stderr
        line = result.stderr.strip()
        assert line.count("\n") == 0 and "Traceback" not in line, line
        assert line.startswith("asrkit: error: cannot use gs://asrkit-test-unreachable/")
        assert "credentials" in line


def test_a_dataset_url_without_a_finished_import_is_refused(bucket):
    (bucket / "ds" / "train.csv").write_text("wav_filename,transcript\n")
    from asrkit.dataset.folders import resolve_dataset

    with pytest.raises(AsrkitError, match="upload did not finish"):
        resolve_dataset(str(bucket / "ds"))


def test_features_of_a_dataset_at_a_url_are_cached_on_local_disk(bucket, tmp_path, home_cli):
    cli = home_cli
    ok(cli(["import", "sample", "--output", bucket / "ds", "--no-progress"]))
    cache = tmp_path / "cache"
    ok(cli(["train", "--dataset", bucket / "ds", "--run-dir", bucket / "runs" / "c",
            "--model", "brnn", "--epochs", "2", "--batch-size", "4", *TINY,
            "-o", f"pipeline.cache={cache}", "-o", "evaluate_dev=false", "--no-progress"]))
    written = sorted(p.name for p in cache.iterdir())
    assert any(name.startswith("train-") for name in written), written


def test_a_bucket_folder_asrkit_did_not_write_is_never_written_into(bucket, home_cli):
    cli = home_cli
    (bucket / "mine" / "notes.txt").write_text("a user's\n")
    refused = cli(["import", "sample", "--output", bucket / "mine", "--no-progress"])
    assert refused.exit_code == 1 and "did not write (notes.txt)" in refused.stderr
    assert (bucket / "mine" / "notes.txt").read_text() == "a user's\n"
    # An upload killed in its very first copy left only the marker's .partial: not foreign.
    (bucket / "new" / ".asrkit-output.partial").write_text("")
    ok(cli(["import", "sample", "--output", bucket / "new", "--no-progress"]))


def test_fine_tuning_from_a_run_at_a_url(bucket, tmp_path, home_cli, monkeypatch):
    cli = home_cli
    ok(cli(["import", "sample", "--output", bucket / "ds", "--no-progress"]))
    ok(cli(["train", "--dataset", bucket / "ds", "--run-dir", bucket / "runs" / "source",
            *TRAIN]))
    tuned = ok(cli(["train", "--dataset", bucket / "ds", "--run-dir", tmp_path / "tuned",
                    "--init-from", f"{bucket}/runs/source:latest", "--epochs", "1",
                    "--batch-size", "4", "--no-progress"]))
    assert "finished after" in tuned.stdout
    config = json.loads((tmp_path / "tuned" / "config.json").read_text())
    assert config["train"]["init_from"] == f"{bucket}/runs/source:latest"


def test_step_records_at_a_url_are_written_together(bucket, monkeypatch):
    from asrkit.train import records

    now = [0.0]
    monkeypatch.setattr(records.time, "monotonic", lambda: now[0])
    written = records.RunRecords(bucket / "run", chief=True)
    path = bucket / "run" / "metrics.jsonl"
    for step, now[0] in ((1, 1.0), (2, 2.0)):
        written.metrics({"event": "step", "step": step})
    assert not path.exists()  # waiting
    now[0] = 40.0
    written.metrics({"event": "step", "step": 3})  # 30 s since the last write: all three
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2, 3]
    now[0] = 41.0
    written.metrics({"event": "step", "step": 4})  # waits
    written.metrics({"event": "evaluation", "step": 4})  # not a step: written at once
    assert [json.loads(line)["event"] for line in path.read_text().splitlines()] == [
        "step", "step", "step", "step", "evaluation"]
