"""``commonvoice``: a Mozilla Common Voice release that the user downloaded.

Common Voice is downloaded from https://commonvoice.mozilla.org/datasets after agreeing not to
identify the speakers, so asrkit cannot fetch it: ``asrkit import commonvoice --archive
cv-corpus-<version>-<lang>.tar.gz`` (the archive, or the folder it was extracted to). The
dataset's licence is CC0 1.0.

Corpus facts (releases since 2019, "cv-corpus-<version>"):

* the archive holds one folder ``cv-corpus-<version>/<lang>/`` with ``clips/*.mp3`` (MP3, mono,
  48 kHz in most releases, 32 kHz in newer ones) and tab-separated listings ``train.tsv``,
  ``dev.tsv``, ``test.tsv``, ``validated.tsv``, ``invalidated.tsv``, ``other.tsv``,
  ``reported.tsv`` (newer releases add ``clip_durations.tsv``, ``validated_sentences.tsv``...);
* the listings' columns are named in their header: ``client_id path sentence up_votes down_votes
  age gender accent(s) locale segment``, newer releases add ``sentence_id``,
  ``sentence_domain``, ``variant``; columns are found by name, so any release reads;
* the fields are not quoted: a sentence may hold ``"`` characters, which are text.

Only ``train.tsv``, ``dev.tsv`` and ``test.tsv`` are imported: they are Common Voice's own
speaker-disjoint split of the validated clips (``validated.tsv`` is their superset, the other
listings hold clips that were voted down or not yet reviewed). The speaker is ``client_id``; the
utterance id is the clip's file name without ``.mp3``. Every clip is decoded and resampled to
16 kHz by sox. A listed clip missing from ``clips/`` is skipped and reported in
``dataset.json``.

The archive's path is not part of the dataset's name; pass ``--language`` (which is checked
against the archive's ``<lang>`` folder and names the dataset ``commonvoice-<lang>``) to import
several languages side by side.
"""

from __future__ import annotations

import csv
import io
import posixpath
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import click

from asrkit import hookimpl
from asrkit.api import AsrkitError, decode_text, quote
from asrkit.types import Importer, Resource, Utterance

LISTINGS = {"train.tsv": "train", "dev.tsv": "dev", "test.tsv": "test"}
CLIPS = "clips"


def read_listing(data: bytes, name: str) -> list[dict[str, str]]:
    """Rows of a Common Voice TSV as dicts by column name; fields are never quoted."""
    text = decode_text(data, name)
    reader = csv.DictReader(io.StringIO(text), delimiter="\t", quoting=csv.QUOTE_NONE)
    try:
        missing = {"client_id", "path", "sentence"} - set(reader.fieldnames or [])
        if missing:
            raise AsrkitError(
                f"{name} is not a Common Voice listing: it lacks the column(s) "
                + ", ".join(sorted(missing))
            )
        return list(reader)
    except csv.Error as error:  # a field over csv's size limit, a NUL byte...
        raise AsrkitError(f"{name}:{reader.line_num}: cannot be read as a listing "
                          f"({quote(str(error))})") from None


class CommonVoiceImporter(Importer):
    name = "commonvoice"
    description = "Mozilla Common Voice: a release you downloaded (--archive PATH, required)."
    homepage = "https://commonvoice.mozilla.org/datasets"
    license = "CC0 1.0"
    max_metadata_bytes = 1 << 30  # a large language's train.tsv is hundreds of megabytes

    def options(self) -> list[click.Parameter]:
        return [
            click.Option(["--language"], metavar="CODE", default=None,
                         help="The release's language (en, de, ...): checked against the "
                              "archive and used in the dataset's name, commonvoice-CODE."),
        ]

    def dataset_name(self, options: Mapping[str, Any]) -> str:
        language = options.get("language")
        return f"commonvoice-{language}" if language else "commonvoice"

    def resources(self, options: Mapping[str, Any]) -> list[Resource]:
        # No URL: the core asks for --archive, and verifies nothing but that it can be read.
        return [Resource("cv-corpus-<version>-<lang>.tar.gz (from "
                         "https://commonvoice.mozilla.org/datasets)")]

    def is_metadata(self, member: str) -> bool:
        return posixpath.basename(member) in LISTINGS

    def prepare(self, metadata: Mapping[str, bytes], members: Sequence[str],
                options: Mapping[str, Any]) -> Iterator[Utterance]:
        listings = sorted(name for name in metadata if posixpath.basename(name) in LISTINGS)
        if not listings:
            raise AsrkitError(
                "the archive holds no train.tsv, dev.tsv or test.tsv: is it a Common Voice "
                "release (cv-corpus-<version>-<lang>.tar.gz)?"
            )
        folders = sorted({posixpath.dirname(name) for name in listings})
        if len(folders) > 1:
            raise AsrkitError(
                "the archive holds several Common Voice languages (" + ", ".join(folders)
                + "); import one archive per language"
            )
        folder = folders[0]
        language = options.get("language")
        if language and posixpath.basename(folder) not in ("", language):
            raise AsrkitError(
                f"--language {language} but the archive holds {posixpath.basename(folder)!r}"
            )
        present = set(members)
        for name in listings:
            split = LISTINGS[posixpath.basename(name)]
            for row in read_listing(metadata[name], name):
                clip = row["path"]
                audio = posixpath.join(folder, CLIPS, clip)
                if audio not in present and not posixpath.splitext(clip)[1]:
                    audio += ".mp3"  # the first releases listed clips without the extension
                yield Utterance(
                    id=posixpath.splitext(posixpath.basename(clip))[0],
                    split=split,
                    audio=audio,
                    transcript=row["sentence"] or "",
                    speaker=row["client_id"] or "",
                )


@hookimpl
def register_importers(register: Any) -> None:
    register(CommonVoiceImporter())
