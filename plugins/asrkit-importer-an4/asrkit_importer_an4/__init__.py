"""``an4``: the CMU AN4 "Census" database (1991), an asrkit importer in its own distribution.

It is asrkit's first-party example of the third-party path: a separate package that registers
an importer through the ``asrkit`` entry-point group and imports only asrkit's public API,
:mod:`asrkit.api` (docs/api.md). Installing it is all it takes for ``asrkit import an4`` to
exist.

Corpus facts:

* ``http://www.speech.cs.cmu.edu/databases/an4/an4_sphere.tar.gz`` (about 64 MB; a raw
  big-endian version, ``an4_raw.bigendian.tar.gz``, is not read here). CMU publishes no size or
  checksum for it, so asrkit cannot verify a download from CMU: pass ``--no-verify``, or use a
  ``--mirror`` that serves a ``SHA256SUMS`` beside the file. (A third-party training script pins
  sha256 ``a0525579493735d32b60fb6fa5975dd0eaacde087b0a4eeb7f13b7ef33077b12`` for NVIDIA's S3
  copy of the file; until it is confirmed against CMU's own file it is not used.)
* 948 training and 130 test utterances, about an hour: spoken digits, letters, dates and short
  commands, 16 kHz mono 16-bit NIST SPHERE. Free for any use under CMU's BSD-style licence
  (``an4/LICENSE``).
* Layout::

      an4/  README  LICENSE
            etc/  an4_train.transcription  an4_test.transcription  an4_train.fileids
                  an4_test.fileids  an4.dic  an4.filler  an4.phone  an4.ug.lm
            wav/  an4_clstk/<speaker>/<utt>.sph        (training)
                  an4test_clstk/<speaker>/<utt>.sph    (test)

* ``*.fileids``: one path a line, relative to ``wav/``, without extension
  (``an4_clstk/fash/an251-fash-b``). ``*.transcription``: one utterance a line, upper case,
  the id in parentheses at the end; training lines are wrapped in ``<s> ... </s>``::

      <s> MARCH THIRD NINETEEN TWENTY EIGHT </s> (cen8-fbbh-b)
      ELEVEN TWENTY SEVEN FIFTY SEVEN (cen8-fcaw-b)

The utterances of a split are those its ``.fileids`` lists (and any transcribed one it omits);
the speaker is the folder holding the file. A listed file without a transcript is skipped and
reported in ``dataset.json``; recordings that neither list names are not read.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from asrkit.api import AsrkitError, Importer, Resource, Utterance, hookimpl

__version__ = "0.1.0"

URL = "http://www.speech.cs.cmu.edu/databases/an4/an4_sphere.tar.gz"
#: split -> (the listings' stem under etc/, the audio folder under wav/)
SPLITS = {"train": ("an4_train", "an4_clstk"), "test": ("an4_test", "an4test_clstk")}
_LINE = re.compile(r"^(?P<words>.*?)\s*\((?P<id>[^()\s]+)\)\s*$")
#: Sentence markers, silence and ++NOISE++-style fillers (an4.filler lists <s> </s> <sil>).
_FILLER = re.compile(r"</?s>|<sil>|\+\+[^+\s]*\+\+")


def parse_transcription(text: str, name: str) -> dict[str, str]:
    """utterance id -> words, from an AN4 ``.transcription`` file."""
    out = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        match = _LINE.match(line)
        if match is None:
            raise AsrkitError(f"{name}:{number}: expected '<WORDS> (<utterance id>)', got "
                              f"{line.strip()!r}")
        out[match["id"]] = match["words"]
    return out


class AN4Importer(Importer):
    name = "an4"
    description = "CMU AN4 (Census, 1991): spoken digits, letters, dates and commands, ~1 h."
    homepage = "http://www.speech.cs.cmu.edu/databases/an4/"
    license = "CMU AN4 licence (BSD-style, any use)"
    splits = ("train", "test")

    def resources(self, options: Mapping[str, Any]) -> list[Resource]:
        # No size or sha256: CMU publishes none (see the module docstring).
        return [Resource("an4_sphere.tar.gz", URL)]

    def is_metadata(self, member: str) -> bool:
        return (posixpath.basename(posixpath.dirname(member)) == "etc"
                and member.endswith((".transcription", ".fileids")))

    def prepare(self, metadata: Mapping[str, bytes], members: Sequence[str],
                options: Mapping[str, Any]) -> Iterator[Utterance]:
        etc = next((posixpath.dirname(name) for name in sorted(metadata)
                    if name.endswith("/an4_train.transcription")
                    or name == "etc/an4_train.transcription"), None)
        if etc is None:
            raise AsrkitError("the archive holds no an4/etc/an4_train.transcription: is it "
                              "an4_sphere.tar.gz?")
        wav = posixpath.join(posixpath.dirname(etc), "wav")
        for split, (stem, folder) in SPLITS.items():
            transcription = posixpath.join(etc, f"{stem}.transcription")
            if transcription not in metadata:
                raise AsrkitError(f"the archive lacks {transcription}")
            texts = parse_transcription(metadata[transcription].decode("utf-8"), transcription)
            fileids = metadata.get(posixpath.join(etc, f"{stem}.fileids"), b"").decode("utf-8")
            paths = {posixpath.basename(line.strip()): line.strip()
                     for line in fileids.splitlines() if line.strip()}
            for utterance in texts:  # transcribed but not listed: its place follows the naming
                speaker = utterance.split("-")[1] if utterance.count("-") >= 2 else ""
                paths.setdefault(utterance, f"{folder}/{speaker}/{utterance}")
            for utterance, path in paths.items():
                yield Utterance(
                    id=utterance,
                    split=split,
                    audio=posixpath.join(wav, f"{path}.sph"),
                    transcript=texts.get(utterance, ""),
                    speaker=posixpath.basename(posixpath.dirname(path)),
                )

    def normalize(self, text: str) -> str:
        return " ".join(_FILLER.sub(" ", text).split())


@hookimpl
def register_importers(register: Any) -> None:
    register(AN4Importer())
