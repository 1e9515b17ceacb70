"""``librispeech``: LibriSpeech (openslr 12) and mini LibriSpeech (openslr 31), read English.

Corpus facts (from the corpus's own README and the published archives):

* Licence CC BY 4.0. Audio: 16 kHz mono 16-bit FLAC, one file per utterance.
* URL ``http://www.openslr.org/resources/12/<subset>.tar.gz``; openslr publishes each archive's
  size and sha256 (in :data:`SUBSETS`, verified before anything is read): dev-clean 337,926,286
  bytes (5.4 h), dev-other 314,305,928 (5.3 h), test-clean 346,663,984 (5.4 h), test-other
  328,757,843 (5.1 h), train-clean-100 6,387,309,499 (100.6 h), train-clean-360 23,049,477,885
  (363.6 h), train-other-500 30,593,501,606 (496.7 h).
* Mini LibriSpeech (openslr 31, "for regression testing"): ``dev-clean-2`` (about 126 MB) and
  ``train-clean-5`` (about 332 MB) at ``http://www.openslr.org/resources/31/<subset>.tar.gz``,
  same layout. openslr publishes only md5 sums for them (its ``md5sum.txt``; as copied by
  other toolkits' download scripts: dev-clean-2 ``6d7ab67ac6a1d2c993d050e16d61080d``,
  train-clean-5 ``5df7d4e78065366204ca6845bb08f490``); their exact sizes and sha256 are not
  published, and asrkit verifies sha256 only. So a
  download from openslr needs ``--no-verify``; a mirror that serves a ``SHA256SUMS`` beside the
  archives is verified against it.
* Every archive extracts to ``LibriSpeech/`` holding ``BOOKS.TXT CHAPTERS.TXT SPEAKERS.TXT
  LICENSE.TXT README.TXT`` and ``<subset>/<speaker>/<chapter>/<speaker>-<chapter>-<NNNN>.flac``
  with one ``<speaker>-<chapter>.trans.txt`` per chapter: ``<utt-id> <UPPER CASE WORDS>`` a line.
* Splits: ``train-*`` -> train, ``dev-*`` -> dev, ``test-*`` -> test; the speaker is the first
  field of the utterance id. Several subsets can be imported into one dataset
  (``--subset train-clean-100 --subset dev-clean``); its name joins them with ``+``.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import click

from asrkit import hookimpl
from asrkit.api import AsrkitError, decode_text, quote
from asrkit.types import Importer, Resource, Utterance

OPENSLR = "http://www.openslr.org/resources/"
TRANSCRIPT_SUFFIX = ".trans.txt"

#: subset -> (openslr resource number, published size in bytes, published sha256). ``None`` where
#: openslr publishes no value (mini LibriSpeech has md5 sums only, see the module docstring).
SUBSETS: dict[str, tuple[int, int | None, str | None]] = {
    "dev-clean": (12, 337_926_286,
                  "76f87d090650617fca0cac8f88b9416e0ebf80350acb97b343a85fa903728ab3"),
    "dev-other": (12, 314_305_928,
                  "12661c48e8c3fe1de2c1caa4c3e135193bfb1811584f11f569dd12645aa84365"),
    "test-clean": (12, 346_663_984,
                   "39fde525e59672dc6d1551919b1478f724438a95aa55f874b576be21967e6c23"),
    "test-other": (12, 328_757_843,
                   "d09c181bba5cf717b3dee7d4d592af11a3ee3a09e08ae025c5506f6ebe961c29"),
    "train-clean-100": (12, 6_387_309_499,
                        "d4ddd1d5a6ab303066f14971d768ee43278a5f2a0aa43dc716b0e64ecbbbf6e2"),
    "train-clean-360": (12, 23_049_477_885,
                        "146a56496217e96c14334a160df97fffedd6e0a04e66b9c5af0d40be3c792ecf"),
    "train-other-500": (12, 30_593_501_606,
                        "ddb22f27f96ec163645d53215559df6aa36515f26e01dd70798188350adcb6d2"),
    "dev-clean-2": (31, None, None),
    "train-clean-5": (31, None, None),
}
DEFAULT_SUBSETS = ("dev-clean",)


def split_of(subset: str) -> str:
    """``train-clean-100`` -> ``train``: the split is the subset name's first part."""
    return subset.split("-", 1)[0]


def _canonical(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple:
    """Subsets in the table's order, each once: ``--subset a --subset b`` and ``--subset b
    --subset a`` name the same dataset, so they must also be the same import."""
    chosen = set(value or DEFAULT_SUBSETS)
    return tuple(subset for subset in SUBSETS if subset in chosen)


class LibriSpeechImporter(Importer):
    name = "librispeech"
    description = "LibriSpeech read English audiobooks (openslr 12) and mini LibriSpeech (31)."
    homepage = "https://www.openslr.org/12"
    license = "CC BY 4.0"

    def options(self) -> list[click.Parameter]:
        return [
            click.Option(
                ["--subset"], type=click.Choice(list(SUBSETS)), multiple=True,
                default=DEFAULT_SUBSETS, show_default=True, callback=_canonical,
                help="Subset to import; repeat for several (train-* -> train, dev-* -> dev, "
                     "test-* -> test).",
            ),
        ]

    def _subsets(self, options: Mapping[str, Any]) -> tuple[str, ...]:
        subsets = tuple(options.get("subset") or DEFAULT_SUBSETS)
        unknown = [s for s in subsets if s not in SUBSETS]
        if unknown:
            raise AsrkitError(f"unknown LibriSpeech subset {unknown[0]!r}; choose from "
                              + ", ".join(SUBSETS))
        return subsets

    def dataset_name(self, options: Mapping[str, Any]) -> str:
        return "librispeech-" + "+".join(self._subsets(options))

    def resources(self, options: Mapping[str, Any]) -> list[Resource]:
        resources = []
        for subset in self._subsets(options):
            number, size, sha256 = SUBSETS[subset]
            filename = f"{subset}.tar.gz"
            resources.append(Resource(filename, f"{OPENSLR}{number}/{filename}", size, sha256))
        return resources

    def is_metadata(self, member: str) -> bool:
        # Only the chapter transcripts: BOOKS.TXT & co. are not needed, and .flac is audio.
        return member.endswith(TRANSCRIPT_SUFFIX)

    def prepare(self, metadata: Mapping[str, bytes], members: Sequence[str],
                options: Mapping[str, Any]) -> Iterator[Utterance]:
        wanted = set(self._subsets(options))
        found = {_subset_in(name) for name in metadata}
        missing = sorted(wanted - found)
        if missing:
            raise AsrkitError(
                f"no transcripts of {', '.join(missing)} in the sources: expected "
                f"LibriSpeech/{missing[0]}/<speaker>/<chapter>/<speaker>-<chapter>.trans.txt"
            )
        for name in sorted(metadata):
            subset = _subset_in(name)
            if subset is None or subset not in wanted:
                continue  # e.g. an extracted LibriSpeech/ folder holding other subsets too
            folder = posixpath.dirname(name)
            for number, line in enumerate(decode_text(metadata[name], name).splitlines(), 1):
                if not line.strip():
                    continue
                utterance_id, _, words = line.strip().partition(" ")
                if not words:
                    raise AsrkitError(f"{name}:{number}: expected '<utt-id> <WORDS>', got "
                                      f"{quote(line)}")
                yield Utterance(
                    id=utterance_id,
                    split=split_of(subset),
                    audio=f"{folder}/{utterance_id}.flac",
                    transcript=words,
                    speaker=utterance_id.split("-", 1)[0],
                )


def _subset_in(member: str) -> str | None:
    """The subset folder a member lies in, wherever the archive or folder is rooted."""
    for part in member.split("/"):
        if part in SUBSETS:
            return part
    return None


@hookimpl
def register_importers(register: Any) -> None:
    register(LibriSpeechImporter())
