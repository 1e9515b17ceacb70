"""Dataset manifests: DeepSpeech CSVs (``dataset.json`` is read by :mod:`asrkit.dataset.folders`).

A CSV has DeepSpeech's three columns ``wav_filename,wav_filesize,transcript`` followed by
asrkit's extra columns ``duration`` (seconds) and ``speaker``; a relative ``wav_filename``
resolves against the CSV's own folder, so a dataset folder can be moved as a whole.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from asrkit.core.errors import AsrkitError
from asrkit.core.storage import Location, location

CSV_COLUMNS = ("wav_filename", "wav_filesize", "transcript", "duration", "speaker")


@dataclass(frozen=True)
class Row:
    wav_filename: str
    wav_filesize: int
    transcript: str
    duration: float | None = None
    speaker: str = ""


def csv_text(rows: Iterable[Row]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in rows:
        duration = "" if row.duration is None else f"{row.duration:.4f}"
        writer.writerow([row.wav_filename, row.wav_filesize, row.transcript, duration, row.speaker])
    return buffer.getvalue()


def read_csv(path: str | Location) -> Iterator[Row]:
    """Rows of a DeepSpeech CSV (extra columns optional), with paths resolved against it."""
    path = location(path)
    with path.open(newline="", encoding="utf-8") as f:
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
