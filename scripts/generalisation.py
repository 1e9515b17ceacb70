"""Does training generalise? A synthetic corpus, held-out sentences, minutes of CPU training.

1. Writes a few thousand English sentences from a small grammar, spoken by several espeak-ng
   voices at several speeds, as a folder with ``train/``, ``dev/`` and ``test/`` (the test and dev
   sentences never occur in train).
2. Imports it with ``asrkit import folder``.
3. Trains each model for ``--minutes`` on the CPU and evaluates it on the held-out test split.

Prints and writes (``--json``) the held-out CER and WER of each model. Needs espeak-ng and sox.

    python scripts/generalisation.py [--sentences 3000] [--minutes 10] [--models brnn,ds2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

SUBJECTS = ["the cat", "a dog", "my friend", "the old man", "her sister", "the small bird",
            "a teacher", "the farmer", "our neighbour", "the red fox", "his brother", "a child"]
VERBS = ["sees", "finds", "likes", "paints", "follows", "calls", "helps", "watches", "carries",
         "buys", "needs", "takes"]
OBJECTS = ["a green apple", "the blue house", "seven boxes", "the long river", "a warm coat",
           "the wooden door", "three letters", "a quiet garden", "the heavy stone",
           "a yellow car", "the bright moon", "two silver keys"]
ENDINGS = ["", " today", " in the morning", " near the park", " every day", " at night",
           " after lunch", " by the lake"]
VOICES = ["en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-029"]
SPEEDS = [140, 160, 180]


def sentences(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    found: set[str] = set()
    while len(found) < count:
        found.add(f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}"
                  f"{rng.choice(ENDINGS)}")
    return sorted(found)


def build(folder: Path, count: int, seed: int) -> None:
    if (folder / "done").exists():
        return
    rng = random.Random(seed)
    texts = sentences(count, seed)
    rng.shuffle(texts)
    held = max(50, count // 20)
    splits = {"test": texts[:held], "dev": texts[held:2 * held], "train": texts[2 * held:]}
    for split, lines in splits.items():
        for number, text in enumerate(lines):
            voice, speed = rng.choice(VOICES), rng.choice(SPEEDS)
            target = folder / split / voice / f"{split}{number:05d}.wav"
            target.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-w", str(target), text],
                           check=True)
            target.with_suffix(".txt").write_text(text + "\n")
    (folder / "done").write_text("")


def asrkit(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "asrkit", *args], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, default=3000)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--models", default="brnn,ds2")
    parser.add_argument("--work", type=Path, default=Path("synthetic-work"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    os.environ.setdefault("ASRKIT_HOME", str((args.work / "home").resolve()))
    corpus = args.work / "synthetic"
    started = time.monotonic()
    build(corpus, args.sentences, seed=1)
    print(f"corpus ready in {time.monotonic() - started:.0f} s")
    asrkit("import", "folder", str(corpus), "--name", "synthetic", "--no-progress")
    settings = {
        "brnn": ["-o", "model.n_hidden=256", "-o", "model.n_cell=256", "-o", "model.context=5",
                 "--batch-size", "16", "--learning-rate", "0.001"],
        "ds2": ["-o", "model.rnn_units=160", "-o", "model.conv_channels=16",
                "--batch-size", "16", "--learning-rate", "0.001"],
    }
    results = {}
    for model in args.models.split(","):
        run = args.work / "runs" / model
        if not (run / "report.json").exists():
            asrkit("train", "--model", model, "--dataset", "synthetic", "--epochs", "1000",
                   "-o", f"max_minutes={args.minutes}", "-o", "evaluate_dev=false",
                   "--run-dir", str(run), "--no-progress", *settings[model])
        asrkit("evaluate", str(run), "--split", "test", "--checkpoint", "latest",
               "--json", str(run / "test.json"), "--no-progress")
        report = json.loads((run / "test.json").read_text())
        state = json.loads((run / "checkpoints/latest.json").read_text())["state"]
        results[model] = {"cer": report["cer"], "wer": report["wer"],
                          "steps": state["global_step"], "epochs": state["epoch"],
                          "minutes": args.minutes, "test_utterances": report["utterances"]}
        print(f"{model}: held-out CER {report['cer']:.1%}, WER {report['wer']:.1%} after "
              f"{state['global_step']} steps ({args.minutes:g} min)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
