"""``folder``: any folder of audio files with their transcripts, ``asrkit import folder PATH``.

For the recordings a user made or collected, with no corpus-specific importer. Two layouts are
read (a listing wins when both are present):

1. **A transcript beside each recording**: ``x.wav`` and ``x.txt`` in the same folder, at any
   depth. The ``.txt`` holds the transcript (several lines are joined; at most 1 MiB, the words
   of some 17 hours of speech: a larger one is an error naming it). A recording without a
   ``.txt`` is listed in ``dataset.json`` as skipped ("empty transcript"), a ``.txt`` without a
   recording (a README) is ignored. The speaker is the name of the folder holding the file
   (none at the top level). The split is ``--split``; without it, a top-level folder named
   ``train``, ``dev`` or ``test`` gives it, and everything else is ``train``.
2. **A listing**: a ``.tsv`` (tab-separated) or ``.csv`` file at the top of the folder whose
   header names the audio file (``file``, ``path``, ``filename``, ``wav_filename`` or ``audio``)
   and the transcript (``transcript``, ``text`` or ``sentence``), and optionally ``split`` and
   ``speaker``. Paths are relative to the folder (absolute paths inside it work too). A row's
   split is its ``split`` column, else ``--split``, else the listing's name when it is
   ``train``, ``dev`` or ``test`` (``dev.tsv``), else ``train``. Several listings are read.

**Held-out splits.** When nothing says a split (no ``--split``, no ``train``/``dev``/``test``
folder, listing name or column), a folder of :data:`MIN_TO_HOLD_OUT` utterances or more is split
by itself: ``--test-fraction`` (10 %) goes to ``test``, ``--dev-fraction`` (10 %) to ``dev``, the
rest to ``train``, so that a run has a dev split to choose its best checkpoint by and ``asrkit
evaluate`` a test split to score, with no option given. The choice is seeded (``--split-seed``)
and stable: an utterance's split follows a hash of its id (or speaker), so adding recordings
never moves the others. When every utterance has a speaker and there are at least three, whole
speakers are held out, so that no speaker is heard in two splits (a model is then scored on
voices it never heard).

Any format sox reads is accepted (WAV, FLAC, MP3, Ogg, Opus, SPHERE, ...), at any rate and
channel count; everything is converted to 16 kHz mono 16-bit. The utterance id is the file's
path in the folder without the extension. The dataset is named by ``--name``, by default the
folder's own name.
"""

from __future__ import annotations

import csv
import hashlib
import io
import posixpath
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from asrkit import hookimpl
from asrkit.api import AsrkitError, decode_text, quote
from asrkit.types import DATASET_NAME, Importer, Resource, Utterance, safe_name

AUDIO_EXTENSIONS = (".wav", ".flac", ".mp3", ".ogg", ".opus", ".sph", ".nist", ".m4a", ".aiff",
                    ".aif", ".au")
FILE_COLUMNS = ("file", "path", "filename", "wav_filename", "audio")
TEXT_COLUMNS = ("transcript", "text", "sentence")
SPLIT_NAMES = ("train", "dev", "test")
DEFAULT_SPLIT = "train"
#: The fewest utterances a folder without splits is split from (fewer all go to ``train``: a
#: folder of five recordings has nothing to spare).
MIN_TO_HOLD_OUT = 10
#: Distinct speakers needed to hold out whole speakers (one each for test and dev, one to train).
MIN_SPEAKERS = 3


def check_split(split: str, where: str) -> str:
    """A split name becomes a file name (``<split>.csv``): letters, digits, ``._+-`` only."""
    if not DATASET_NAME.match(split):
        raise AsrkitError(f"{where}: split name {quote(split)} must be letters, digits, '.', '_', "
                          "'+' or '-'")
    return split


def dataset_name_from(path: Path) -> str:
    """A folder name usable as a dataset name."""
    name = safe_name(Path(path).resolve().name, "folder")
    return name


#: A listing's fields are paths and transcripts: a longer one is not a transcript (and csv's own
#: field limit is process-wide state that other code may raise).
MAX_FIELD_CHARS = 100_000
#: Largest transcript beside a recording, in bytes: an hour of speech is about 60 kB of text, so
#: a larger ``.txt`` is not the transcript of one recording (and every transcript is in memory
#: at once).
MAX_TRANSCRIPT_BYTES = 1 << 20


def _read_table(data: bytes, name: str) -> tuple[list[str], list[dict[str, str]]]:
    text = decode_text(data, name)
    if name.endswith(".tsv"):  # TSV listings (Common Voice's, SpeechBrain's) are never quoted
        reader = csv.DictReader(io.StringIO(text), delimiter="\t", quoting=csv.QUOTE_NONE)
    else:
        reader = csv.DictReader(io.StringIO(text))
    try:
        fields = [f.strip() for f in reader.fieldnames or []]
        rows = [{(k or "").strip().lower(): (v or "").strip() for k, v in row.items()
                 if isinstance(v, str)} for row in reader]
    except csv.Error as error:  # a field over csv's size limit, a NUL byte...
        raise AsrkitError(f"{name}:{reader.line_num}: cannot be read as a listing "
                          f"({quote(str(error))})") from None
    for number, row in enumerate(rows, start=2):
        longest = max((len(value) for value in row.values()), default=0)
        if longest > MAX_FIELD_CHARS:
            raise AsrkitError(f"{name}: row {number} has a field of {longest:,} characters, "
                              f"more than a transcript can be ({MAX_FIELD_CHARS:,})")
    return [f.lower() for f in fields], rows


def _pick(fields: list[str], wanted: Sequence[str]) -> str | None:
    return next((name for name in wanted if name in fields), None)


class FolderImporter(Importer):
    name = "folder"
    description = "A folder of audio files with transcripts (x.wav + x.txt, or a TSV/CSV list)."
    homepage = ""
    license = ""  # the recordings are the user's own: their licence is not known here
    max_metadata_bytes = 1 << 30  # listings of large collections run to hundreds of MB

    def options(self) -> list[click.Parameter]:
        return [
            click.Argument(["path"], type=click.Path(exists=True, file_okay=False,
                                                     path_type=Path)),
            click.Option(["--split"], default=None, metavar="NAME",
                         help="Put every utterance in this split [default: a split column, "
                              "else train/dev/test folders or listings, else train]."),
            click.Option(["--name"], default=None,
                         help="Dataset name [default: the folder's name]."),
            click.Option(["--dev-fraction"], type=click.FloatRange(0, 0.5), default=0.1,
                         show_default=True,
                         help="Without splits in the folder: the share held out as dev."),
            click.Option(["--test-fraction"], type=click.FloatRange(0, 0.5), default=0.1,
                         show_default=True,
                         help="Without splits in the folder: the share held out as test."),
            click.Option(["--split-seed"], type=click.IntRange(0), default=0,
                         show_default=True, help="Seed of that choice."),
        ]

    def dataset_name(self, options: Mapping[str, Any]) -> str:
        if options.get("name"):
            return str(options["name"])  # the engine checks that it is a valid name
        return dataset_name_from(Path(options["path"]))

    def resources(self, options: Mapping[str, Any]) -> list[Resource]:
        path = Path(options["path"])
        return [Resource(filename=path.name or str(path), path=str(path))]

    def is_metadata(self, member: str) -> bool:
        if member.endswith(".txt"):
            return True
        # Listings are read from the top of the folder only.
        return "/" not in member and member.endswith((".tsv", ".csv"))

    def prepare(self, metadata: Mapping[str, bytes], members: Sequence[str],
                options: Mapping[str, Any]) -> Iterator[Utterance]:
        forced = options.get("split")
        if forced:
            check_split(forced, "--split")
        listings = self._listings(metadata)
        if listings:
            found_here = list(self._from_listings(listings, options, forced))
        else:
            found_here = list(self._beside(metadata, members, forced))
        utterances = [(u, member) for u, member, _ in found_here]
        if not any(said for _, _, said in found_here):
            utterances = hold_out(utterances, options.get("dev_fraction", 0.0),
                                  options.get("test_fraction", 0.0),
                                  options.get("split_seed", 0))
        seen: set[tuple[str, str]] = set()
        taken: set[tuple[str, str]] = set()
        found = False
        for utterance, member in utterances:
            found = True
            if (utterance.split, member) in seen:
                continue  # listed twice
            seen.add((utterance.split, member))
            if (utterance.split, utterance.id) in taken:  # x.wav and x.flac side by side
                utterance = replace(utterance, id=member)
            taken.add((utterance.split, utterance.id))
            yield utterance
        if not found:
            raise AsrkitError(
                f"{options['path']} holds no audio with a transcript: put x.txt beside each "
                "x.wav, or list them in a TSV/CSV with columns file (or path) and transcript "
                "(or text, sentence)"
            )

    def _listings(self, metadata: Mapping[str, bytes]) -> dict[str, tuple[str, str, list]]:
        """Top-level tables that name a file and a transcript column."""
        found = {}
        for name in sorted(metadata):
            if not name.endswith((".tsv", ".csv")) or "/" in name:
                continue
            fields, rows = _read_table(metadata[name], name)
            file_column, text_column = _pick(fields, FILE_COLUMNS), _pick(fields, TEXT_COLUMNS)
            if file_column and text_column:
                found[name] = (file_column, text_column, rows)
        return found

    def _from_listings(self, listings: dict[str, tuple[str, str, list]],
                       options: Mapping[str, Any],
                       forced: str | None) -> Iterator[tuple[Utterance, str, bool]]:
        """Each listed utterance, its member, and whether a split was said for it."""
        root = Path(options["path"]).resolve()
        for name, (file_column, text_column, rows) in listings.items():
            stem = posixpath.splitext(name)[0]
            default = forced or (stem if stem in SPLIT_NAMES else DEFAULT_SPLIT)
            for line, row in enumerate(rows, 2):
                audio = row.get(file_column, "")
                if not audio:
                    raise AsrkitError(f"{name}:{line}: the {file_column} column is empty")
                member = _member(audio, root)
                split = check_split(row.get("split") or default, f"{name}:{line}")
                said = bool(forced or row.get("split") or stem in SPLIT_NAMES)
                yield Utterance(
                    id=posixpath.splitext(member)[0],
                    split=split,
                    audio=member,
                    transcript=row.get(text_column, ""),
                    speaker=row.get("speaker", ""),
                ), member, said

    def _beside(self, metadata: Mapping[str, bytes], members: Sequence[str],
                forced: str | None) -> Iterator[tuple[Utterance, str, bool]]:
        """Each recording with a transcript beside it, its member, and whether a split was said
        for it (``--split``, or a split folder)."""
        for member in sorted(members):
            stem, extension = posixpath.splitext(member)
            if extension.lower() not in AUDIO_EXTENSIONS or _hidden(member):
                continue
            text = decode_text(_transcript(metadata, stem + ".txt", member), stem + ".txt")
            folder = posixpath.dirname(member)
            top, _, rest = member.partition("/") if "/" in member else ("", "", member)
            in_split_folder = not forced and top in SPLIT_NAMES
            split = forced or (top if in_split_folder else DEFAULT_SPLIT)
            speaker = posixpath.basename(folder)
            yield Utterance(
                # train/spk1/a.wav is spk1/a: the split folder says the split, not the name.
                id=posixpath.splitext(rest)[0] if in_split_folder else stem,
                split=split,
                audio=member,
                transcript=" ".join(text.split()),
                speaker="" if speaker in SPLIT_NAMES and folder == top else speaker,
            ), member, bool(forced) or in_split_folder


def hold_out(utterances: list[tuple[Utterance, str]], dev_fraction: float,
             test_fraction: float, seed: int) -> list[tuple[Utterance, str]]:
    """``utterances`` (all in ``train``) with ``test_fraction`` of them moved to ``test`` and
    ``dev_fraction`` to ``dev`` (at least one each when asked for), whole speakers at a time
    when every utterance has one and there are :data:`MIN_SPEAKERS`; ``train`` always keeps a
    group. Groups are taken in the order of a seeded hash of their key, so the choice depends on
    the seed and each group's own name, not on what else is in the folder."""
    if len(utterances) < MIN_TO_HOLD_OUT or not (dev_fraction or test_fraction):
        return utterances
    speakers = {u.speaker for u, _ in utterances}
    by_speaker = "" not in speakers and len(speakers) >= MIN_SPEAKERS

    def key(utterance: Utterance) -> str:
        return utterance.speaker if by_speaker else utterance.id

    sizes: dict[str, int] = {}
    for utterance, _ in utterances:
        sizes[key(utterance)] = sizes.get(key(utterance), 0) + 1
    order = sorted(sizes, key=lambda k: hashlib.sha256(f"{seed}\0{k}".encode()).hexdigest())
    chosen: dict[str, str] = {}
    taken = 0
    for split, fraction in (("test", test_fraction), ("dev", dev_fraction)):
        wanted = max(1, round(len(utterances) * fraction)) if fraction else 0
        count = 0
        while count < wanted and taken < len(order) - 1:
            chosen[order[taken]] = split
            count += sizes[order[taken]]
            taken += 1
    return [(replace(u, split=chosen.get(key(u), u.split)), member) for u, member in utterances]


def _transcript(metadata: Mapping[str, bytes], name: str, recording: str) -> bytes:
    """The transcript ``name`` of ``recording`` (empty when there is none); one larger than
    :data:`MAX_TRANSCRIPT_BYTES` is an error naming it."""
    data = metadata.get(name, b"")
    if len(data) > MAX_TRANSCRIPT_BYTES:
        raise AsrkitError(
            f"{quote(name)} is {len(data):,} bytes, more than the transcript of one recording "
            f"can be ({MAX_TRANSCRIPT_BYTES:,} at most); shorten it, or rename it if it is not "
            f"the transcript of {quote(recording)}"
        )
    return data


def _hidden(member: str) -> bool:
    """Under a hidden folder (``.git/annex/objects/``, a dataset's ``.import/``) or hidden."""
    return any(part.startswith(".") for part in member.split("/"))


def _member(audio: str, root: Path) -> str:
    """A listed path as a member name of the folder (relative, POSIX)."""
    audio = audio.replace("\\", "/")
    if posixpath.isabs(audio):
        try:
            return Path(audio).resolve().relative_to(root).as_posix()
        except ValueError:
            return audio  # outside the folder: reported as "audio file missing"
    return posixpath.normpath(audio)


@hookimpl
def register_importers(register: Any) -> None:
    register(FolderImporter())
