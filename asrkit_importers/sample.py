"""``sample``: a tiny corpus of real speech shipped inside asrkit.

19 clips (about a minute) of read English from LibriSpeech, SpeechBrain's samples, LJSpeech,
CMU ARCTIC and the TIMIT sample utterance, with their transcripts; see ``sample_data/README.md``
for sources and licences. It needs no network, so the quick start and the tests run anywhere.
Splits: train 16, dev 2, test 1. The LJSpeech clips are 22.05 kHz, so the import also exercises
resampling.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from asrkit import hookimpl
from asrkit.api import decode_text
from asrkit.types import Importer, Resource, Utterance

DATA = Path(__file__).parent / "sample_data"
TRANSCRIPTS = "transcripts.tsv"


class SampleImporter(Importer):
    name = "sample"
    description = "A tiny built-in corpus of real speech (no download), for demos and tests."
    homepage = "https://github.com/asrkit/asrkit"
    license = "mixed: CC BY 4.0, public domain, Apache-2.0 (see sample_data/README.md)"

    def resources(self, options: Mapping[str, Any]) -> list[Resource]:
        return [Resource(filename="sample_data", path=str(DATA))]

    def is_metadata(self, member: str) -> bool:
        return member == TRANSCRIPTS

    def prepare(self, metadata: Mapping[str, bytes], members: Sequence[str],
                options: Mapping[str, Any]) -> Iterator[Utterance]:
        lines = decode_text(metadata[TRANSCRIPTS], TRANSCRIPTS).splitlines()
        for line in lines[1:]:
            filename, split, speaker, transcript = line.split("\t")
            yield Utterance(id=Path(filename).stem, split=split, audio=filename,
                            transcript=transcript, speaker=speaker)


@hookimpl
def register_importers(register: Any) -> None:
    register(SampleImporter())
