"""``ldc93s1``: the TIMIT sample utterance, DeepSpeech's smoke-test corpus.

Downloads ``LDC93S1.wav`` (16 kHz mono 16-bit, 46,797 samples, 93,638 bytes) and its transcript
``LDC93S1.txt`` (``0 46797 She had your dark suit in greasy wash water all year.``), published
freely by the LDC. As in DeepSpeech's smoke test, the one utterance is the train, dev and test
split: the point is to show that a model can learn it exactly.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from asrkit import hookimpl
from asrkit.api import AsrkitError, decode_text, quote
from asrkit.types import Importer, Resource, Utterance

BASE = "https://catalog.ldc.upenn.edu/desc/addenda/"


class LDC93S1Importer(Importer):
    name = "ldc93s1"
    description = "The TIMIT sample utterance LDC93S1 as train, dev and test (a smoke test)."
    homepage = "https://catalog.ldc.upenn.edu/LDC93S1"
    license = "LDC sample, freely published"

    def resources(self, options: Mapping[str, Any]) -> list[Resource]:
        return [
            Resource("LDC93S1.wav", BASE + "LDC93S1.wav", 93_638,
                     "c7e8b51db10ec6a2aea8c92376f2b88af14c2b4950ed82db3d605a4b718c8f35"),
            Resource("LDC93S1.txt", BASE + "LDC93S1.txt", 62,
                     "0b4ffafce18d6ec0df273c0189202a7c186cd0bbb9b40659490f5f2ad99e70a5"),
        ]

    def is_metadata(self, member: str) -> bool:
        return member == "LDC93S1.txt"

    def prepare(self, metadata: Mapping[str, bytes], members: Sequence[str],
                options: Mapping[str, Any]) -> Iterator[Utterance]:
        text = decode_text(metadata["LDC93S1.txt"], "LDC93S1.txt")
        try:
            first, last, sentence = text.split(" ", 2)
            start, end = int(first) / 16000, (int(last) + 1) / 16000
        except ValueError:
            raise AsrkitError(f"LDC93S1.txt: expected '<first sample> <last sample> <words>', "
                              f"got {quote(text.strip())}") from None
        for split in self.splits:
            yield Utterance(id="LDC93S1", split=split, audio="LDC93S1.wav",
                            transcript=sentence.strip(), speaker="LDC93S1", start=start, end=end)


@hookimpl
def register_importers(register: Any) -> None:
    register(LDC93S1Importer())
