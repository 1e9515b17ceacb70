"""What a dataset and a run folder at a URL cost against local disk: the same import and the same
training, side by side, with their folders on local disk and at ``file://`` URLs of the same disk.

Why: at a URL asrkit reads and writes through TensorFlow's filesystem layer (``tf.io.gfile``)
and object-storage rules: an import is staged and uploaded, checkpoint pointers are replaced by
copy and delete, step records are written together, nothing is fsynced. ``file://`` takes all of
those code paths without a network, so the ratio is what asrkit's own path costs; a bucket adds
its network's latency and bandwidth on top, which no machine here can measure.

Each setting is one ``asrkit`` process, timed whole (TensorFlow's start included); settings
alternate for ``--rounds`` rounds and the median is kept. The training saves a checkpoint every
``--checkpoint-steps`` steps, so that the pointers' replacement is a real part of its time.

Usage::

    python benchmarks/bench_storage.py [--minutes 4] [--steps 60] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_data_service import TINY, environment, make_dataset_folder  # noqa: E402


def timed(env: dict[str, str], *args: str) -> float:
    """Seconds of one ``asrkit ARGS`` process."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "asrkit", *args], env=env,
                          capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"asrkit {' '.join(args)} failed: {done.stderr[-2000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=4.0, help="Audio in the corpus.")
    parser.add_argument("--steps", type=int, default=60, help="Steps of each training.")
    parser.add_argument("--checkpoint-steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="Print JSON for machines.")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        corpus = home / "corpus"
        make_dataset_folder(corpus, args.minutes, shards=8)
        env = environment(home)
        places = {"local disk": str(home / "local"), "file:// URL": f"file://{home}/url"}
        times: dict[str, dict[str, list[float]]] = {p: {"import": [], "train": []}
                                                    for p in places}
        for round_ in range(args.rounds):
            for place, root in places.items():
                times[place]["import"].append(timed(
                    env, "import", "sample", "--output", f"{root}/sample-{round_}",
                    "--no-progress"))
                dataset = copy_corpus(corpus, f"{root}/corpus-{round_}")  # not timed
                times[place]["train"].append(timed(
                    env, "train", "--dataset", dataset, "--run-dir", f"{root}/run-{round_}",
                    "--no-progress", "--batch-size", "4", "--epochs", "1000", *TINY,
                    "-o", "evaluate_dev=false", "-o", f"max_steps={args.steps}",
                    "-o", f"checkpoint_steps={args.checkpoint_steps}"))
        medians = {place: {task: statistics.median(values) for task, values in tasks.items()}
                   for place, tasks in times.items()}
    local, url = medians["local disk"], medians["file:// URL"]
    report = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
              "steps": args.steps, "checkpoint_steps": args.checkpoint_steps,
              "rounds": args.rounds, "seconds": medians,
              "url_over_local": {task: round(url[task] / local[task], 3) for task in local}}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for task in ("import", "train"):
        print(f"{task}: local {local[task]:.1f} s, file:// URL {url[task]:.1f} s "
              f"({url[task] / local[task]:.2f}x)")


def copy_corpus(corpus: Path, target: str) -> str:
    """The benchmark's corpus copied to ``target`` (a folder or a URL), so that the training
    reads its shards and listings from there."""
    from asrkit.core.files import copy_file
    from asrkit.core.storage import location

    place = location(target)
    for path in sorted(p for p in corpus.rglob("*") if p.is_file()):
        copy_file(path, place / str(path.relative_to(corpus)))
    return target


if __name__ == "__main__":
    main()
