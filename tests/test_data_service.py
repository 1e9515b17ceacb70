"""Training batches made by a tf.data service: dispatchers and workers started with
``asrkit data-service`` on 127.0.0.1, their batches against the local pipeline's, training
through them, and what a missing or dead dispatcher does."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from asrkit.config.pipeline import PipelineConfig
from asrkit.core.text import Alphabet
from asrkit.pipeline.batches import make_dataset
from tests.conftest import TINY, as_from_a_terminal, run_asrkit

#: Small batches of the whole `sample` train split, without evaluations.
TRAIN = ["train", "--no-progress", "--precision", "float32", *TINY, "-o", "evaluate_dev=false",
         "-o", "log_every=1"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(home: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASRKIT_")}
    if home is not None:
        env["ASRKIT_HOME"] = str(home)
    return env


class Server:
    """``asrkit data-service ARGS`` in a process of its own, once it has said where it listens."""

    def __init__(self, *args: str | int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "asrkit", "data-service", *map(str, args)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment(),
            preexec_fn=as_from_a_terminal)
        ready, _, _ = select.select([self.process.stdout], [], [], 180)
        self.line = self.process.stdout.readline() if ready else ""
        assert self.line.startswith("asrkit: tf.data service"), (
            self.line, self.process.poll(), self.process.stderr.read() if ready else "")

    def stop(self) -> str:
        """Ctrl-C it; what it printed then."""
        self.process.send_signal(signal.SIGINT)
        out, err = self.process.communicate(timeout=60)
        assert self.process.returncode == 0, err[-2000:]
        return out

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


def start_service(workers: int) -> tuple[str, Server, list[Server]]:
    """A dispatcher and ``workers`` workers; the dispatcher's address."""
    port = free_port()
    dispatcher = Server("dispatcher", "--port", port)
    assert f"listening on port {port}" in dispatcher.line
    address = f"127.0.0.1:{port}"
    started = [Server("worker", "--dispatcher", address, "--port", free_port(), "--host",
                      "127.0.0.1") for _ in range(workers)]
    return address, dispatcher, started


@pytest.fixture(scope="module")
def two_workers():
    """The address of a dispatcher with two workers; each stops cleanly on Ctrl-C after."""
    address, dispatcher, workers = start_service(2)
    yield address
    for worker in workers:
        assert worker.stop().strip().endswith("asrkit: tf.data service worker stopped")
    assert dispatcher.stop().strip().endswith("asrkit: tf.data service dispatcher stopped")


@pytest.fixture(scope="module")
def one_worker():
    address, dispatcher, workers = start_service(1)
    yield address
    workers[0].stop()
    dispatcher.stop()


def utterances(dataset) -> dict[str, np.ndarray]:
    """Each utterance's features (without padding) in ``dataset``'s batches, by id; an id
    twice fails."""
    found: dict[str, np.ndarray] = {}
    for batch in dataset.as_numpy_iterator():
        for key, features, length in zip(batch["ids"], batch["features"],
                                         batch["feature_lengths"], strict=True):
            assert key.decode() not in found, f"{key} twice in an epoch"
            found[key.decode()] = features[:length]
    return found


def batches(home: Path, config: PipelineConfig, seed: int):
    return make_dataset(home / "datasets" / "sample", "train", Alphabet(), "mfcc",
                        config=config, seed=seed)


BATCHING = PipelineConfig(batch_size=3, deterministic=True, with_text=True)
AUGMENTED = replace(BATCHING, speed_factors=(0.9, 1.1), vtlp_alpha=(0.9, 1.1),
                    reverb_rt60=(0.2, 0.6), reverb_prob=0.5, freq_masks=2, time_masks=2)


def test_each_utterance_comes_once_an_epoch_with_the_local_pipelines_features(datasets,
                                                                              two_workers):
    """Augmentation off: the service's epoch holds the local epoch's utterances, each once,
    with the same features bit for bit."""
    served = replace(BATCHING, service=two_workers)
    for epoch_seed in (5, 6):
        local = utterances(batches(datasets, BATCHING, epoch_seed))
        remote = utterances(batches(datasets, served, epoch_seed))
        assert sorted(remote) == sorted(local) and len(local) == 16
        for key, features in local.items():
            np.testing.assert_array_equal(remote[key], features, err_msg=key)


def test_an_utterances_augmentation_does_not_depend_on_the_worker(datasets, one_worker,
                                                                  two_workers):
    """Augmentation on: each utterance is perturbed and masked as the seed, the epoch and its
    id draw it, whichever worker makes it: one worker making them all, or two sharing them."""
    alone = utterances(batches(datasets, replace(AUGMENTED, service=one_worker), 5))
    shared = utterances(batches(datasets, replace(AUGMENTED, service=two_workers), 5))
    assert set(shared) == set(alone) and len(alone) == 16
    for key, features in alone.items():
        np.testing.assert_array_equal(shared[key], features, err_msg=key)
    plain = utterances(batches(datasets, BATCHING, 5))
    changed = [key for key in plain if plain[key].shape != alone[key].shape
               or not np.array_equal(plain[key], alone[key])]
    assert len(changed) == 16  # SpecAugment masks every utterance
    next_epoch = utterances(batches(datasets, replace(AUGMENTED, service=two_workers), 6))
    assert any(next_epoch[key].shape != alone[key].shape for key in alone)  # new speeds


def step_losses(run: Path) -> list[float]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [row["loss"] for row in map(json.loads, lines) if row.get("event") == "step"]


def epochs_steps(run: Path) -> list[int]:
    """Steps of each finished epoch."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    ends = [row["step"] for row in rows if row.get("event") == "epoch"]
    return [b - a for a, b in zip([0, *ends], ends, strict=False)]


def test_training_on_one_worker_equals_the_local_pipelines(datasets, one_worker, tmp_path):
    """With nothing that orders the utterances (no shuffling or bucketing, the 16 utterances
    in one batch) the service's batch holds the local batch's utterances, so the losses are
    the same, to the rounding of sums taken in another order."""
    args = [*TRAIN, "--batch-size", "16", "-o", "max_steps=3", "-o", "pipeline.shuffle=false",
            "-o", "pipeline.bucketing=false"]
    local = run_asrkit(*args, "--run-dir", str(tmp_path / "local"), env=environment(datasets),
                       timeout=600)
    assert local.returncode == 0, local.stderr[-2000:]
    served = run_asrkit(*args, "--run-dir", str(tmp_path / "served"), "-o",
                        f"pipeline.service={one_worker}", env=environment(datasets),
                        timeout=600)
    assert served.returncode == 0, served.stderr[-2000:]
    expected, losses = step_losses(tmp_path / "local"), step_losses(tmp_path / "served")
    assert len(expected) == 3 and expected[0] != expected[2]
    np.testing.assert_allclose(losses, expected, rtol=1e-4)


def test_training_on_two_workers_sees_each_utterance_once_an_epoch(datasets, two_workers,
                                                                     tmp_path):
    """16 utterances in batches of 4: 4 steps an epoch, wherever they were made (twice the
    data would be 8 steps, and a lost file fewer)."""
    run = tmp_path / "run"
    result = run_asrkit(*TRAIN, "--batch-size", "4", "--epochs", "2", "-o",
                        "pipeline.bucketing=false", "-o", f"pipeline.service={two_workers}",
                        "--run-dir", str(run), env=environment(datasets), timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    steps = epochs_steps(run)
    assert steps == [4, 4]


def last_line(text: str) -> str:
    assert "Traceback" not in text, text[-3000:]
    return text.strip().splitlines()[-1]


def test_a_dispatcher_killed_mid_run_stops_training_in_one_line_and_it_resumes(datasets,
                                                                               tmp_path):
    address, dispatcher, (worker,) = start_service(1)
    run = tmp_path / "run"
    training = subprocess.Popen(
        [sys.executable, "-m", "asrkit", *TRAIN, "--batch-size", "2", "--epochs", "100", "-o",
         f"pipeline.service={address}", "-o", "pipeline.service_timeout=10", "--run-dir",
         str(run)], env=environment(datasets), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and training.poll() is None:
        if (run / "metrics.jsonl").exists() and len(step_losses(run)) >= 5:
            break
        time.sleep(0.2)
    assert training.poll() is None, training.communicate()[1][-2000:]
    dispatcher.kill()
    _, err = training.communicate(timeout=180)
    line = last_line(err)
    assert training.returncode == 1
    assert line.startswith("asrkit: error: ") and "tf.data service" in line, line
    assert f"continue with: asrkit train --resume {run}" in line, line
    saved = json.loads((run / "checkpoints" / "latest.json").read_text())["state"]["global_step"]
    assert f"saved at step {saved}:" in line and saved >= 5, line
    # A worker whose dispatcher is gone still stops on Ctrl-C.
    assert worker.stop().strip().endswith("stopped")
    # Resumed on another service, the interrupted epoch skips the batches it trained on: it
    # ends with as many steps as every whole epoch (the buckets fix that number).
    state = json.loads((run / "checkpoints" / "latest.json").read_text())["state"]
    address, dispatcher, (worker,) = start_service(1)
    resumed = run_asrkit("train", "--resume", str(run), "--no-progress", "-o",
                         f"pipeline.service={address}", "-o", f"epochs={state['epoch'] + 1}",
                         env=environment(datasets), timeout=600)
    worker.stop()
    dispatcher.stop()
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    steps = epochs_steps(run)
    assert len(steps) == state["epoch"] + 1 and len(set(steps)) == 1, (steps, state)


def test_a_dispatcher_that_is_not_there_is_one_line(datasets, tmp_path):
    port = free_port()
    train = [*TRAIN, "--batch-size", "4", "-o", "max_steps=1"]
    result = run_asrkit(*train, "--run-dir", str(tmp_path / "a"), "-o",
                        f"pipeline.service=127.0.0.1:{port}", env=environment(datasets),
                        timeout=300)
    assert result.returncode == 1
    assert last_line(result.stderr) == (
        f"asrkit: error: cannot reach the tf.data service dispatcher at 127.0.0.1:{port} "
        "(Connection refused): start one with asrkit data-service dispatcher, or correct -o "
        "pipeline.service")
    result = run_asrkit(*train, "-o", "pipeline.service=http://host", env=environment(datasets))
    assert result.returncode == 1
    assert last_line(result.stderr) == (
        "asrkit: error: pipeline.service must be a dispatcher's address HOST:PORT or "
        "grpc://HOST:PORT, not 'http://host'")
    result = run_asrkit("data-service", "worker", "--dispatcher", f"127.0.0.1:{port}")
    assert result.returncode == 1
    assert last_line(result.stderr).startswith(
        f"asrkit: error: cannot reach the tf.data service dispatcher at 127.0.0.1:{port} ")


def test_a_port_that_never_answers_is_one_line_after_the_timeout(datasets, tmp_path):
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        result = run_asrkit(*TRAIN, "--batch-size", "4", "-o", "max_steps=1", "--run-dir",
                            str(tmp_path / "a"), "-o", f"pipeline.service=127.0.0.1:{port}",
                            "-o", "pipeline.service_timeout=5", env=environment(datasets),
                            timeout=300)
    assert result.returncode == 1
    assert last_line(result.stderr) == (
        f"asrkit: error: the tf.data service at 127.0.0.1:{port} did not take the input "
        "pipeline within 5 s (pipeline.service_timeout): check that its dispatcher and workers "
        "run (asrkit data-service dispatcher, asrkit data-service worker)")
