"""Multi-worker faults: peers that never come, and TF_CONFIGs that cannot work, each one line."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from tests.conftest import TINY
from tests.test_multiworker import free_port

#: What each worker is told to wait for the others (the default is 300 s).
TIMEOUT_S = 5


def test_unreachable_peers_stop_both_kinds_of_worker_within_the_timeout(datasets, tmp_path):
    # Worker 0 hosts the cluster's coordination service and waits for a worker 1 whose port has
    # nothing behind it; another worker 1 reaches a "worker 0" that accepts the connection and
    # never answers. Before the fix both waited for ever.
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASRKIT_")}
    env["ASRKIT_HOME"] = str(datasets)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        mute_leader = f"127.0.0.1:{silent.getsockname()[1]}"
        clusters = [(f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}", 0),
                    (f"{mute_leader},127.0.0.1:{free_port()}", 1)]
        started = time.monotonic()
        processes = [subprocess.Popen(
            [sys.executable, "-m", "asrkit", "train", "--epochs", "1", *TINY, "--no-progress",
             "-o", f"worker_timeout={TIMEOUT_S}", "--run-dir", str(tmp_path / f"run{index}"),
             "--workers", workers, "--worker-index", str(index)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for workers, index in clusters]
        results = [process.communicate(timeout=120) for process in processes]
        waited = time.monotonic() - started
    for process, (_, err), (workers, _) in zip(processes, results, clusters, strict=True):
        assert process.returncode == 1, err[-2000:]
        errors = [line for line in err.splitlines() if line.startswith("asrkit: error:")]
        assert errors == [err.strip().splitlines()[-1]], err[-2000:]
        assert errors[0].startswith(f"asrkit: error: not every worker of {workers} joined "
                                    f"within {TIMEOUT_S} s (worker_timeout"), errors
        assert "Traceback" not in err
    # Both start TensorFlow (several seconds on a busy machine) and then wait TIMEOUT_S.
    assert waited < 60, f"the workers took {waited:.0f} s to give up"


ADDRESSES = ["127.0.0.1:2222", "127.0.0.1:2223"]


@pytest.mark.parametrize(("tf_config", "message"), [
    ('{"cluster": {"worker": [', "TF_CONFIG is not valid JSON (Expecting value at character 24)"),
    ('["127.0.0.1:2222"]', 'TF_CONFIG must be a JSON object with "cluster" and "task"'),
    (json.dumps({"cluster": {"worker": ADDRESSES}}),
     'TF_CONFIG has a "cluster" but no "task" with "type" and "index"'),
    (json.dumps({"cluster": {"worker": ADDRESSES}, "task": {"type": "worker"}}),
     'TF_CONFIG has a "cluster" but no "task" with "type" and "index"'),
    (json.dumps({"cluster": {"worker": ADDRESSES}, "task": {"type": "worker", "index": 2}}),
     "TF_CONFIG: task index 2 is not one of the 2 worker tasks (0 to 1)"),
    (json.dumps({"cluster": {"worker": ADDRESSES}, "task": {"type": "chief", "index": 0}}),
     "TF_CONFIG: task type 'chief' is not a job of the cluster (worker)"),
    (json.dumps({"cluster": {"worker": "127.0.0.1:2222"}, "task": {"type": "worker",
                                                                   "index": 0}}),
     'TF_CONFIG: "cluster" must map job names to lists of "host:port"'),
    (json.dumps({"cluster": {"worker": ["gpu1", "gpu2"]}, "task": {"type": "worker",
                                                                   "index": 0}}),
     "TF_CONFIG: worker address 'gpu1' is not \"host:port\""),
])
def test_a_tf_config_that_cannot_work_is_one_line(datasets, asrkit_cli, monkeypatch, tmp_path,
                                                  tf_config, message):
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    monkeypatch.setenv("TF_CONFIG", tf_config)
    result = asrkit_cli(["train", *TINY, "--no-progress", "--run-dir", tmp_path / "run"])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [f"asrkit: error: {message}"]
    assert not (tmp_path / "run").exists()  # nothing trained, nothing written


def test_workers_without_ports_are_one_line(datasets, asrkit_cli, monkeypatch, tmp_path):
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    monkeypatch.delenv("TF_CONFIG", raising=False)
    result = asrkit_cli(["train", *TINY, "--run-dir", tmp_path / "run", "--workers",
                         "gpu1,gpu2:2222", "--worker-index", "0"])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        "asrkit: error: --workers: worker address 'gpu1' is not \"host:port\""]
    assert "TF_CONFIG" not in os.environ
