"""Training steps per second when the input pipeline is the bottleneck: batches made in the
training process against batches made by a tf.data service with one and with two workers.

Why: ``-o pipeline.service=ADDRESS`` moves decoding, augmentation and features to other
processes (other machines, in real use). The model here is tiny (``brnn`` with 32 units) and
the augmentation heavy (speed perturbation, VTLP and reverberation of every utterance), so the
step rate is the rate at which batches come. On one machine the workers share its cores with
the trainer: the service cannot add CPUs there, so this measures what it costs (or gains by
running the pipeline in other processes), not what more machines give.

Each setting is one ``asrkit train`` process; its step rate is taken between the ``--skip``-th
and the last of ``--steps`` steps, from the times their lines appear in ``metrics.jsonl``
(tracing and the first batches excluded). The servers are started with ``asrkit data-service``
on 127.0.0.1 before the timing.

Usage::

    python benchmarks/bench_data_service.py [--minutes 4] [--steps 24] [--skip 6] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_pipeline import make_corpus, write_corpus  # noqa: E402

#: Every utterance sped up or slowed down, warped (VTLP) and reverberated.
HEAVY = ["-o", "pipeline.speed_factors=0.9,1.0,1.1", "-o", "pipeline.vtlp_alpha=0.9,1.1",
         "-o", "pipeline.reverb_rt60=0.3,0.9", "-o", "pipeline.reverb_prob=1"]
TINY = ["-o", "model.n_hidden=32", "-o", "model.n_cell=32", "-o", "model.context=2"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def asrkit(*args: str) -> list[str]:
    return [sys.executable, "-m", "asrkit", *args]


def environment(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASRKIT_")}
    env["ASRKIT_HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def server(env: dict[str, str], *args: str) -> subprocess.Popen:
    """``asrkit data-service ARGS``, once it has printed its start-up line."""
    process = subprocess.Popen(asrkit("data-service", *args), stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, env=env)
    ready, _, _ = select.select([process.stdout], [], [], 300)
    if not ready or not process.stdout.readline().startswith("asrkit: tf.data service"):
        raise SystemExit(f"asrkit data-service {' '.join(args)} did not start")
    return process


def step_rate(env: dict[str, str], dataset: Path, run: Path, steps: int, skip: int,
              batch_size: int, extra: list[str]) -> float:
    """Steps per second of one training between step ``skip`` and step ``steps``."""
    command = asrkit("train", "--dataset", str(dataset), "--run-dir", str(run), "--no-progress",
                     "--batch-size", str(batch_size), "--epochs", "1000", *TINY, *HEAVY,
                     "-o", "evaluate_dev=false", "-o", "log_every=1", "-o",
                     f"max_steps={steps}", "-o", "checkpoint_minutes=1000", *extra)
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    seen: dict[int, float] = {}
    metrics = run / "metrics.jsonl"
    while True:
        done = process.poll() is not None
        if metrics.exists():
            for line in metrics.read_text().splitlines():
                row = json.loads(line)
                if row.get("event") == "step":
                    seen.setdefault(row["step"], time.monotonic())
        if done:
            break
        time.sleep(0.02)
    _, err = process.communicate()
    if process.returncode != 0 or skip not in seen or steps not in seen:
        raise SystemExit(f"training failed: {err[-2000:]}")
    return (steps - skip) / (seen[steps] - seen[skip])


def make_dataset_folder(folder: Path, minutes: float, shards: int) -> None:
    """A dataset of real speech (the fixtures' clips joined): ``minutes`` of it in the train
    split's ``shards`` shards, two utterances in a test split for the final report."""
    from asrkit.dataset.shards import ShardRecord, shard_name, write_shard

    utterances = make_corpus(minutes)
    write_corpus(folder, utterances, shards)
    write_shard(folder / "shards" / shard_name("test", 0, 1),
                [ShardRecord(uid, pcm.tobytes(), text) for uid, pcm, text in utterances[:2]])
    for split, part in (("train", utterances), ("test", utterances[:2])):  # the lengths
        rows = [f"{uid}.wav,{44 + 2 * len(pcm)},{text},{len(pcm) / 16000:.4f}"
                for uid, pcm, text in part]
        (folder / f"{split}.csv").write_text(
            "\n".join(["wav_filename,wav_filesize,transcript,duration", *rows]) + "\n")
    splits = {"train": {"utterances": len(utterances)}, "test": {"utterances": 2}}
    (folder / "dataset.json").write_text(json.dumps({"splits": splits}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=4.0, help="Audio in the corpus.")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=24, help="Steps of each training.")
    parser.add_argument("--skip", type=int, default=6, help="Steps before the timing starts.")
    parser.add_argument("--json", action="store_true", help="Print JSON for machines.")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        dataset = home / "corpus"
        make_dataset_folder(dataset, args.minutes, args.shards)
        env = environment(home)
        dispatcher_port = free_port()
        servers = [server(env, "dispatcher", "--port", str(dispatcher_port))]
        address = f"127.0.0.1:{dispatcher_port}"
        rows = []
        try:
            for workers in (0, 1, 2):
                while len(servers) - 1 < workers:
                    servers.append(server(env, "worker", "--dispatcher", address, "--port",
                                          str(free_port()), "--host", "127.0.0.1"))
                extra = ["-o", f"pipeline.service={address}"] if workers else []
                rate = step_rate(env, dataset, home / f"run-{workers}", args.steps, args.skip,
                                 args.batch_size, extra)
                name = (f"tf.data service, {workers} worker{'s' if workers > 1 else ''}"
                        if workers else "local pipeline")
                rows.append({"pipeline": name, "workers": workers, "steps_per_s": rate})
                if not args.json:
                    print(f"{name:<28} {rate:6.2f} steps/s", flush=True)
        finally:
            for process in reversed(servers):
                process.send_signal(signal.SIGINT)
                process.wait(timeout=60)
    local = rows[0]["steps_per_s"]
    for row in rows:
        row["vs_local"] = row["steps_per_s"] / local
    result = {"cpus": os.cpu_count(), "machine": platform.processor() or platform.machine(),
              "minutes": args.minutes, "batch_size": args.batch_size, "steps": args.steps,
              "skip": args.skip, "rows": rows}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for row in rows:
            print(f"{row['pipeline']:<28} {row['vs_local']:5.2f}x the local pipeline")


if __name__ == "__main__":
    main()
