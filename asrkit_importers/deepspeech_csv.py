"""``csv``: DeepSpeech CSV manifests, ``asrkit import csv FILE.csv [FILE2.csv ...]``.

The CSV is what DeepSpeech users and many other tools already exchange: header
``wav_filename,wav_filesize,transcript`` (more columns allowed, e.g. ``speaker``), one utterance
a row. A relative ``wav_filename`` resolves against the CSV's own folder; absolute paths are read
as they are. ``wav_filesize`` is not trusted: asrkit converts every file (any format and rate sox
reads) to 16 kHz mono 16-bit and measures it again.

Splits come from the CSV's name unless ``--split`` is given: ``train.csv`` -> train, and a name
holding a split word (``librivox-train-clean-100.csv`` -> train, ``ted-dev.csv`` -> dev,
``cv_validation.csv`` -> dev) gives that split; any other name is its own split
(``ldc93s1.csv`` -> ldc93s1). Several CSVs may fill one split. The utterance id is the audio
file's name without its extension (its path, when two files of a split share a name).

The audio is read from the smallest folder that holds every CSV and every audio file they
name; when that is the filesystem's root (the CSVs and the audio share no folder), the import
stops and says so rather than walking the whole disk. The dataset is named by ``--name``, by
default the name of the first CSV's folder.
"""

from __future__ import annotations

import csv
import io
import os
import posixpath
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from asrkit import hookimpl
from asrkit.api import AsrkitError, decode_text, quote
from asrkit.types import DATASET_NAME, Importer, Resource, Utterance, safe_name

#: Words in a CSV's name that say which split it is.
SPLIT_WORDS = {"train": "train", "training": "train", "dev": "dev", "valid": "dev",
               "validation": "dev", "val": "dev", "test": "test"}


def split_from_name(stem: str) -> str:
    """``train`` -> train, ``librivox-dev-clean`` -> dev, ``ldc93s1`` -> ldc93s1."""
    lowered = stem.lower()
    for word in re.split(r"[-_.\s]+", lowered):
        if word in SPLIT_WORDS:
            return SPLIT_WORDS[word]
    return safe_name(lowered, "train")


def _abs(path: str | Path) -> str:
    """Absolute and normalised, links kept: member names are the links' names too."""
    return os.path.normpath(os.path.abspath(path))


def read_manifest(data: bytes, name: str) -> list[dict[str, str]]:
    reader = csv.DictReader(io.StringIO(decode_text(data, name)))
    try:
        missing = {"wav_filename", "transcript"} - set(reader.fieldnames or [])
        if missing:
            raise AsrkitError(f"{name} is not a DeepSpeech CSV: it lacks the column(s) "
                              + ", ".join(sorted(missing)))
        return list(reader)
    except csv.Error as error:  # a field over csv's size limit, a NUL byte...
        raise AsrkitError(f"{name}:{reader.line_num}: cannot be read as a CSV "
                          f"({quote(str(error))})") from None


def _read_bounded(path: str, limit: int) -> bytes:
    """A CSV's bytes, refused by name when it is larger than any manifest."""
    size = os.stat(path).st_size
    if size > limit:
        raise AsrkitError(f"{path} is {size:,} bytes, more than any manifest ({limit:,} at "
                          "most); refusing to read it")
    return Path(path).read_bytes()


def _audio_path(csv_path: str, row: dict[str, str], line: int) -> str:
    """The row's audio file, absolute: a relative name is relative to the CSV's folder."""
    wav = (row.get("wav_filename") or "").strip()
    if not wav:
        raise AsrkitError(f"{csv_path}:{line}: wav_filename is empty")
    return _abs(os.path.join(os.path.dirname(csv_path), wav))  # an absolute wav stays as it is


class DeepSpeechCsvImporter(Importer):
    name = "csv"
    description = "DeepSpeech CSV manifests (wav_filename,wav_filesize,transcript)."
    homepage = "https://deepspeech.readthedocs.io/en/latest/TRAINING.html"
    license = ""  # the recordings are the user's own: their licence is not known here
    max_metadata_bytes = 1 << 30  # a manifest of a 1,000-hour corpus is ~100 MB

    def options(self) -> list[click.Parameter]:
        return [
            click.Argument(["files"], nargs=-1, required=True,
                           type=click.Path(exists=True, dir_okay=False, path_type=Path)),
            click.Option(["--split"], default=None, metavar="NAME",
                         help="Put every row in this split [default: from each CSV's name]."),
            click.Option(["--name"], default=None,
                         help="Dataset name [default: the first CSV's folder name]."),
        ]

    def dataset_name(self, options: Mapping[str, Any]) -> str:
        if options.get("name"):
            return str(options["name"])  # the engine checks that it is a valid name
        first = Path(_abs(self._files(options)[0])).parent.name
        return safe_name(first, "csv")

    def _files(self, options: Mapping[str, Any]) -> list[str]:
        files = [_abs(f) for f in options.get("files") or ()]
        if not files:
            raise AsrkitError("name at least one CSV file")
        return files

    def root(self, options: Mapping[str, Any]) -> str:
        """The smallest folder holding every CSV and the audio they name."""
        paths = []
        for path in dict.fromkeys(self._files(options)):
            rows = read_manifest(_read_bounded(path, self.max_metadata_bytes), path)
            paths.append(os.path.dirname(path))
            paths.extend(os.path.dirname(_audio_path(path, row, line))
                         for line, row in enumerate(rows, 2))
        root = os.path.commonpath(paths)
        if os.path.dirname(root) == root:
            raise AsrkitError(
                "the CSVs and their audio share no folder below the filesystem's root; move "
                "them under one folder (or write relative paths) and rerun"
            )
        return root

    def resources(self, options: Mapping[str, Any]) -> list[Resource]:
        root = self.root(options)
        return [Resource(filename=os.path.basename(root), path=root)]

    def is_metadata(self, member: str) -> bool:
        return member.endswith(".csv")

    def prepare(self, metadata: Mapping[str, bytes], members: Sequence[str],
                options: Mapping[str, Any]) -> Iterator[Utterance]:
        root = self.root(options)
        forced = options.get("split")
        if forced and not DATASET_NAME.match(forced):
            raise AsrkitError(f"--split {forced!r}: use letters, digits, '.', '_', '+', '-'")
        seen: set[tuple[str, str]] = set()
        taken: set[tuple[str, str]] = set()
        for path in dict.fromkeys(self._files(options)):
            member = Path(os.path.relpath(path, root)).as_posix()
            if member not in metadata:
                raise AsrkitError(f"{path} could not be read")
            split = forced or split_from_name(Path(path).stem)
            rows = read_manifest(metadata[member], path)
            for line, row in enumerate(rows, 2):
                name = Path(os.path.relpath(_audio_path(path, row, line), root)).as_posix()
                if (split, name) in seen:
                    continue  # the same file listed twice
                seen.add((split, name))
                utterance = Utterance(
                    id=posixpath.splitext(posixpath.basename(name))[0],
                    split=split,
                    audio=name,
                    transcript=row.get("transcript") or "",
                    speaker=row.get("speaker") or "",
                )
                if (split, utterance.id) in taken:
                    utterance = replace(utterance, id=posixpath.splitext(name)[0])
                taken.add((split, utterance.id))
                yield utterance


@hookimpl
def register_importers(register: Any) -> None:
    register(DeepSpeechCsvImporter())
