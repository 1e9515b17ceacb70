"""docs/own-recordings.md as a new user follows it: a folder of 20 recordings without splits,
then every command of the page, as written, in order (the long training of its step 3 aside)."""

from __future__ import annotations

import csv
import re
import shlex
import shutil
from pathlib import Path

from tests.conftest import ROOT
from tests.corpora import SPEECH

PAGE = ROOT / "docs" / "own-recordings.md"
#: The page's longer training (30 minutes) is the one command not run here.
NOT_RUN = ("max_minutes=30",)


def recordings(folder: Path, count: int = 20) -> None:
    """``count`` real recordings of the fixture clips, each with its transcript beside it."""
    items = [(SPEECH / "ldc93s1" / "LDC93S1.wav",
              "she had your dark suit in greasy wash water all year")]
    for corpus, suffix in (("librispeech", ".wav"), ("librispeech-flac", ".flac")):
        for line in (SPEECH / corpus / "transcripts.txt").read_text().splitlines():
            key, text = line.split(" ", 1)
            items.append((SPEECH / corpus / f"{key}{suffix}", text))
    with open(SPEECH / "speechbrain" / "TRANSCRIPTS.tsv") as listing:
        for row in list(csv.reader(listing, delimiter="\t"))[1:]:
            if row[3].strip():
                items.append((SPEECH / "speechbrain" / f"{row[0]}.wav", row[3]))
    folder.mkdir()
    for number, (source, text) in enumerate(items[:count]):
        target = folder / f"rec{number:02d}{source.suffix}"
        shutil.copyfile(source, target)
        target.with_suffix(".txt").write_text(text.lower())
    assert len(list(folder.glob("*.txt"))) == count


def page_commands() -> list[list[str]]:
    blocks = re.findall(r"```\n(.*?)```", PAGE.read_text(), flags=re.S)
    lines = [line.strip() for block in blocks for line in block.splitlines()]
    return [shlex.split(line)[1:] for line in lines
            if line.startswith("asrkit ") and not any(skip in line for skip in NOT_RUN)]


def test_the_page_runs_as_written_on_a_folder_of_twenty_recordings(asrkit_cli, asrkit_home,
                                                                    tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    recordings(tmp_path / "recordings")
    shutil.copyfile(SPEECH / "misc" / "new-home-in-the-stars-16k.wav",
                    tmp_path / "new-recording.wav")
    commands = page_commands()
    assert [c[0] for c in commands] == ["import", "train", "evaluate", "transcribe"]
    outputs = []
    for args in commands:
        result = asrkit_cli([*args, *(["--no-progress"] if args[0] != "transcribe" else [])])
        assert result.exit_code == 0, (args, result.stderr[-2000:])
        outputs.append(result.stdout)
    imported, trained, evaluated, transcribed = outputs
    assert "train 16 utt" in imported and "dev 2 utt" in imported and "test 2 utt" in imported
    assert "report: runs/brnn-1/report.txt" in trained
    assert evaluated.startswith("checkpoint: best (step ")
    assert "test: 2 utterances" in evaluated
    assert transcribed.strip()
