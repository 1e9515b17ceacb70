"""Dataset manifests: DeepSpeech CSVs and ``dataset.json``.

A CSV has DeepSpeech's three columns ``wav_filename,wav_filesize,transcript`` followed by
asrkit's extra columns ``duration`` (seconds) and ``speaker``; a relative ``wav_filename``
resolves against the CSV's own folder, so a dataset folder can be moved as a whole.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asrkit.errors import AsrkitError

CSV_COLUMNS = ("wav_filename", "wav_filesize", "transcript", "duration", "speaker")
DATASET_JSON = "dataset.json"


@dataclass(frozen=True)
class Row:
    wav_filename: str
    wav_filesize: int
    transcript: str
    duration: float | None = None
    speaker: str = ""


def write_durable(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` and wait until it is on disk (not only in the page cache)."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def sync_folder(folder: Path) -> None:
    """Make the names last created, renamed or removed in ``folder`` durable."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, so a reader never sees half of it,
    and a crash or power cut leaves either the old file or the new one."""
    partial = path.with_name(path.name + ".partial")
    write_durable(partial, text)
    os.replace(partial, path)
    sync_folder(path.parent)


def csv_text(rows: Iterable[Row]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in rows:
        duration = "" if row.duration is None else f"{row.duration:.4f}"
        writer.writerow([row.wav_filename, row.wav_filesize, row.transcript, duration, row.speaker])
    return buffer.getvalue()


def read_csv(path: str | Path) -> Iterator[Row]:
    """Rows of a DeepSpeech CSV (extra columns optional), with paths resolved against it."""
    path = Path(path)
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = {"wav_filename", "transcript"} - set(reader.fieldnames or [])
        if missing:
            raise AsrkitError(
                f"{path} is not a DeepSpeech CSV: it lacks the column(s) "
                f"{', '.join(sorted(missing))}"
            )
        for line, record in enumerate(reader, 2):
            try:
                size = int(record.get("wav_filesize") or 0)
                duration = float(record["duration"]) if record.get("duration") else None
            except ValueError:
                raise AsrkitError(f"{path}:{line}: a number column holds text") from None
            yield Row(record["wav_filename"], size, record["transcript"] or "", duration,
                      record.get("speaker") or "")


def write_json(path: Path, data: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def load_dataset_json(dataset: str | Path) -> dict[str, Any]:
    """A dataset's report; a damaged one (empty, cut short, edited by hand) is a one-line
    error that says to redo the import."""
    path = Path(dataset) / DATASET_JSON
    if not path.exists():
        raise AsrkitError(f"{Path(dataset)} is not an imported dataset (no {DATASET_JSON})")
    text = ""
    try:
        text = path.read_text(encoding="utf-8")
        report = json.loads(text)
        problem = "" if isinstance(report, dict) else "not a JSON object"
    except UnicodeDecodeError:
        problem = "not UTF-8 text"
    except json.JSONDecodeError as error:
        problem = "empty" if not text.strip() else f"not valid JSON: {error}"
    if problem:
        raise AsrkitError(f"{path} is damaged ({problem}); import the dataset again with --force")
    return report
