"""A minimal importer used to test the engine on its own: a ``toy.tar.gz`` holding
``toy/transcripts.tsv`` (``file<TAB>split<TAB>text`` lines) and the audio files it names.
Lines may add ``<TAB>start<TAB>end`` (seconds) to cut a segment out of a longer file."""

from __future__ import annotations

from asrkit import hookimpl
from asrkit.types import Importer, Resource, Utterance

URL = "http://toy.invalid/corpora/toy.tar.gz"


class ToyTarImporter(Importer):
    name = "toy"
    description = "A toy corpus in a tar archive (tests)."

    def resources(self, options):
        return [Resource("toy.tar.gz", URL)]

    def is_metadata(self, member):
        return member == "toy/transcripts.tsv"

    def prepare(self, metadata, members, options):
        for line in metadata["toy/transcripts.tsv"].decode().splitlines():
            file, split, text, *times = line.split("\t")
            start, end = (float(t) for t in times) if times else (None, None)
            stem = file.rsplit(".", 1)[0]
            uid = stem if start is None else f"{stem}-{round(start * 100):05d}"
            yield Utterance(id=uid, split=split, audio=f"toy/{file}", transcript=text,
                            speaker=stem.split("_")[0], start=start, end=end)


@hookimpl
def register_importers(register):
    register(ToyTarImporter())
