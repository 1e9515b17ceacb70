"""DeepSpeech's smoke test on several real clips, not only LDC93S1.

For each clip: a one-utterance dataset (``asrkit import folder``), ``brnn`` at the notebook's
settings with ``n_hidden = n_cell = 100`` and batch 1 (``-o preset=full``), trained on that one
utterance for up to ``--epochs`` epochs with the utterance scored every ``--every`` steps;
reports the first step whose greedy transcript is exact, for each clip and seed.

    python benchmarks/bench_smoke.py [--epochs 250] [--seeds 0] [--json smoke.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

SPEECH = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "speech"
CLIPS = {
    "LDC93S1": ("ldc93s1/LDC93S1.wav", "she had your dark suit in greasy wash water all year"),
    "new-home": ("misc/new-home-in-the-stars-16k.wav", "we must find a new home in the stars"),
    "arctic_a0024": ("misc/arctic_a0024.wav",
                     "it was my reports from the north which chiefly induced people to buy"),
    "2830-3980-0043": ("librispeech/2830-3980-0043.wav", None),
    "61-70968-0002": ("librispeech/61-70968-0002.wav", None),
}


def transcript(name: str, text: str | None) -> str:
    if text is not None:
        return text
    for line in (SPEECH / "librispeech" / "transcripts.txt").read_text().splitlines():
        key, _, words = line.partition(" ")
        if key == name:
            return words.lower()
    raise KeyError(name)


def asrkit(*args: str) -> None:
    result = subprocess.run([sys.executable, "-m", "asrkit", *args], capture_output=True,
                            text=True, check=False)
    if result.returncode != 0:
        sys.exit(f"asrkit {' '.join(args)} failed:\n{result.stderr[-3000:]}")


def first_exact(run: Path) -> int | None:
    for line in (run / "metrics.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["event"] == "evaluation" and event["dev_wer"] == 0 and event["dev_cer"] == 0:
            return int(event["step"])
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=250)
    parser.add_argument("--every", type=int, default=5, help="score every this many steps")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--work", type=Path, default=Path("bench-work/smoke"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("ASRKIT_HOME", str((args.work / "home").resolve()))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    results = []
    for name, (path, text) in CLIPS.items():
        folder = args.work / "clips" / name
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(SPEECH / path, folder / "clip.wav")
        (folder / "clip.txt").write_text(transcript(name, text) + "\n")
        asrkit("import", "folder", str(folder), "--name", f"smoke-{name}", "--split", "test",
               "--no-progress")
        for seed in map(int, args.seeds.split(",")):
            run = args.work / "runs" / f"{name}-{seed}"
            shutil.rmtree(run, ignore_errors=True)
            asrkit("train", "--model", "brnn", "--dataset", f"smoke-{name}", "--epochs",
                   str(args.epochs), "--batch-size", "1", "--seed", str(seed),
                   "-o", "preset=full", "-o", "model.n_hidden=100", "-o", "model.n_cell=100",
                   "-o", "train_split=test", "-o", "dev_split=test",
                   "-o", f"eval_every_steps={args.every}", "--run-dir", str(run),
                   "--no-progress")
            step = first_exact(run)
            results.append({"clip": name, "seed": seed, "first_exact_step": step})
            print(f"{name} seed {seed}: " + (f"exact at step {step}" if step else
                                              f"not exact within {args.epochs} epochs"),
                  flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    exact = sum(r["first_exact_step"] is not None for r in results)
    print(f"{exact}/{len(results)} runs exact within {args.epochs} epochs")


if __name__ == "__main__":
    main()
