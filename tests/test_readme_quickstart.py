"""The README's quick start, run as written: every command of its shell block, in order, each in a
fresh ``python -m asrkit`` process, against LibriSpeech archives in the real layout served over
HTTP on 127.0.0.1 (``ASRKIT_MIRROR``), in an empty working directory and ``ASRKIT_HOME``.

Nothing of a command line is changed: ``talk.mp3`` (the user's recording) is made in the working
directory from a fixture clip, the paths (``runs/``, ``plots/``, ``lm.arpa``) are relative to it,
and ``ASRKIT_MAX_STEPS`` keeps the trainings to a few steps. A README edit that breaks the chain
(a renamed run, a setting the next command needs) fails here.
"""

from __future__ import annotations

import json
import re
import shlex
import time

import pytest

from tests import corpora
from tests.conftest import ROOT, run_asrkit

#: The fixture subsets: a few real utterances each, the subsets' names as the README's.
SUBSETS = {subset: corpora.LIBRISPEECH_SMALL[subset]
           for subset in ("train-clean-100", "dev-clean", "test-clean")}
#: Steps per training: one epoch is one batch here (the cpu preset's 8 utterances), so five
#: steps keep the five checkpoints that ``asrkit average --last 5`` averages.
STEPS = 5


def quick_start() -> list[str]:
    """The command lines of the README's quick start (the ``sh`` block under ``## Quick
    start``), ``\\`` continuations joined, comments and ``source`` lines left out."""
    text = (ROOT / "README.md").read_text()
    section = re.search(r"^## Quick start\n(.*?)(?=^## )", text, re.S | re.M)
    assert section, "README.md has no '## Quick start' section"
    block = re.search(r"^```sh\n(.*?)^```", section.group(1), re.S | re.M)
    assert block, "README.md's quick start has no ```sh block"
    commands, pending = [], ""
    for line in block.group(1).splitlines():
        line = pending + line.strip()
        if line.split("#", 1)[0].rstrip().endswith("\\"):  # a continuation (before any comment)
            pending = line.split("#", 1)[0].rstrip()[:-1] + " "
            continue
        pending = ""
        words = shlex.split(line, comments=True)
        if words and words[0] not in ("source", "."):
            commands.append(shlex.join(words))
    return commands


@pytest.mark.timeout(600)
def test_readme_quick_start(tmp_path, corpus_server):
    commands = quick_start()
    assert len(commands) >= 10 and all(c.startswith("asrkit ") for c in commands), commands
    assert any(c.endswith(" -o keep_checkpoints=5") for c in commands)  # continuations joined
    corpora.serve_librispeech(corpus_server, SUBSETS)
    work = tmp_path / "work"
    work.mkdir()
    corpora.sox(corpora.librispeech_clips()["61-70968-0000"].path, work / "talk.mp3")
    env = {"ASRKIT_HOME": str(tmp_path / "home"), "ASRKIT_MIRROR": corpus_server.url,
           "ASRKIT_MAX_STEPS": str(STEPS)}

    timings, outputs = [], {}
    for command in commands:
        words = shlex.split(command)
        assert words[0] == "asrkit", command
        started = time.monotonic()
        result = run_asrkit(*words[1:], env=env, cwd=work, timeout=300)
        timings.append(f"{time.monotonic() - started:6.1f} s  {command}")
        assert result.returncode == 0, (
            f"README quick start: `{command}` failed (exit {result.returncode})\n"
            f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}")
        outputs[command] = result
    print("\n".join(timings))  # what each step costs, with -s

    dataset = tmp_path / "home" / "datasets" / "librispeech-dev-clean+test-clean+train-clean-100"
    splits = json.loads((dataset / "dataset.json").read_text())["splits"]
    assert {s: splits[s]["utterances"] for s in splits} == {"train": 5, "dev": 2, "test": 2}
    run = work / "runs" / "brnn-1"
    train = next(r for c, r in outputs.items() if c.startswith("asrkit train --model"))
    assert f"ASRKIT_MAX_STEPS={STEPS}" in train.stderr
    assert f"finished after {STEPS} steps" in train.stdout
    assert not (work / "runs" / "brnn-2").exists()  # the resume continued brnn-1
    assert (run / "checkpoints" / "averaged.json").is_file()
    assert list((work / "plots").glob("*.png"))
    assert "\\data\\" in (work / "lm.arpa").read_text()
    transcribe = next(r for c, r in outputs.items() if c.startswith("asrkit transcribe"))
    assert json.loads(transcribe.stdout)["file"] == "talk.mp3"
    assert list((run / "export").rglob("*.tflite"))
