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


class ToyPlugin:
    """A plugin object registering the toy importer (one per distribution that claims it)."""

    @hookimpl
    def register_importers(self, register):
        register(ToyTarImporter())


def registered_twice():
    """The toy importer claimed by two third-party distributions: a withheld duplicate."""
    from asrkit.plugins import PluginSet
    from asrkit.registry import Provider

    plugins = PluginSet()
    plugins.add_module(ToyPlugin(), Provider("one", "dist-one", "1"))
    plugins.add_module(ToyPlugin(), Provider("two", "dist-two", "2"))
    return plugins
