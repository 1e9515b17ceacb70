"""Several workers on TensorFlow's own engine (MultiWorkerMirroredStrategy), on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from tests.conftest import TINY

SCRIPT = Path(__file__).parent / "scripts" / "multiworker_step.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cluster() -> str:
    return f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}"


def test_two_workers_equal_one_worker_with_the_same_global_batch(tmp_path):
    workers = cluster()
    processes = [subprocess.Popen([sys.executable, str(SCRIPT), workers, str(i),
                                   str(tmp_path / f"w{i}.npz")], stderr=subprocess.PIPE)
                 for i in range(2)]
    reference = subprocess.run([sys.executable, str(SCRIPT), "-", "-", str(tmp_path / "r.npz")],
                               capture_output=True, check=False)
    assert reference.returncode == 0, reference.stderr.decode()[-2000:]
    for process in processes:
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, err.decode()[-2000:]
    w0, w1, ref = (np.load(tmp_path / f"{n}.npz") for n in ("w0", "w1", "r"))
    assert int(w0["replicas"]) == 2 and int(ref["replicas"]) == 1
    keys = [k for k in ref.files if k.startswith("arr_")]
    assert max(np.abs(w0[k] - w1[k]).max() for k in keys) == 0  # workers agree exactly
    update = float(ref["max_update"])
    assert update > 1e-3  # the steps really changed the weights
    assert max(np.abs(w0[k] - ref[k]).max() for k in keys) < 1e-5 * update


def test_dead_worker_stops_the_other_and_both_resume(datasets, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASRKIT_")}
    env["ASRKIT_HOME"] = str(datasets)
    run = tmp_path / "run"
    common = ["--no-progress", "--run-dir", str(run)]
    args = ["train", "--epochs", "3", "--batch-size", "2", *TINY, "-o", "checkpoint_steps=2",
            "-o", "worker_timeout=30", "-o", "evaluate_dev=false", *common]

    def start(arguments: list[str], workers: str, index: int) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "asrkit", *arguments, "--workers",
                                 workers, "--worker-index", str(index)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    workers = cluster()
    chief, other = start(args, workers, 0), start(args, workers, 1)
    latest = run / "checkpoints" / "latest.json"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and chief.poll() is None:
        if latest.exists() and json.loads(latest.read_text())["state"]["global_step"] >= 4:
            break
        time.sleep(0.1)
    assert chief.poll() is None, chief.communicate()[1][-2000:]
    other.send_signal(signal.SIGKILL)
    other.wait()
    killed = time.monotonic()
    _, err = chief.communicate(timeout=120)
    waited = time.monotonic() - killed
    assert chief.returncode == 1
    assert err.strip().splitlines()[-1].startswith(
        "asrkit: error: lost contact with another worker"), err[-2000:]
    assert f"--resume {run}" in err
    assert waited < 60, f"the surviving worker took {waited:.0f} s to stop"

    workers = cluster()
    resumed = [start(["train", "--resume", str(run), "--no-progress"], workers, i)
               for i in range(2)]
    for process in resumed:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-2000:]
        assert "all epochs done" in out
    state = json.loads(latest.read_text())["state"]
    assert state["epoch"] == 3 and state["global_step"] == 3 * state["steps_per_epoch"]
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    # Only the chief writes: one line per epoch and one resume, not two.
    assert [e["epoch"] for e in events if e["event"] == "epoch"] == [0, 1, 2]
    assert len([e for e in events if e["event"] == "resume"]) == 1
