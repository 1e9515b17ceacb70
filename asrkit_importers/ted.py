"""``ted``: TED-LIUM releases 1, 2 and 3 (openslr 7, 19, 51), English TED talks.

Corpus facts (from the releases' own readmes and the published archives):

======= ================================================== ================ =====================
release URL (http://www.openslr.org/resources/...)         bytes            content
======= ================================================== ================ =====================
1       7/TEDLIUM_release1.tar.gz                          21,285,615,015   774 talks, 118 h
2       19/TEDLIUM_release2.tar.gz                         36,791,529,840   1,495 train talks, 207 h
3       51/TEDLIUM_release-3.tgz                           54,320,173,876   2,351 talks, 452 h
======= ================================================== ================ =====================

(sha256 values in :data:`RELEASES`). Licence CC BY-NC-ND 3.0; the talks are TED's property.

Layout: one NIST SPHERE recording (16 kHz mono 16-bit) and one STM transcript per talk::

    TEDLIUM_release1/   {train,dev,test}/{sph,stm}/<Talk>.{sph,stm}
    TEDLIUM_release2/   {train,dev,test}/{sph,stm}/<Talk>.{sph,stm}
    TEDLIUM_release-3/  data/{ctl,sph,stm}/   legacy/{train,dev,test}/{sph,stm}/
                        speaker-adaptation/   doc/  LM/   (legacy/train: links into data/)

STM lines are ``<talk> <channel> <speaker> <start> <end> <label> <words ...>`` (seconds). What
this importer does with them, and why:

* segments whose words are ``ignore_time_segment_in_scoring`` (this includes every
  ``inter_segment_gap`` line) are dropped: they have no transcript, so they cannot be trained on
  (Kaldi, Lhotse, SpeechBrain and DeepSpeech drop them too);
* release 1 train lines end with an utterance key in parentheses (``(AaronHuey_2010X-1613-2416)``):
  it is markup, not speech, and is removed;
* :meth:`TedImporter.normalize` removes the noise and silence tokens (``{NOISE}``, ``{SMACK}``,
  ``{BREATH}``, ``<sil>``, ``<unk>``, ...) and the pronunciation-variant marks (``word(2)`` ->
  ``word``); DeepSpeech kept them, and they then failed the alphabet check at training time.
  The core then joins TED-LIUM's split clitics (``i 'd`` -> ``i'd``) and lower-cases;
* utterances are named as Kaldi names them, ``"%s-%07d-%07d" % (talk, start*100, end*100)``, so
  results can be matched against Kaldi/ESPnet segmentations; a repeated segment (same talk, same
  times) is imported once;
* the labels (``<o,f0,male>``, ``<F0_M>``, ``<NA>``) are ignored; the speaker is the STM's
  speaker field (the talk id in train, a short name in dev/test).

Each talk's recording is decoded once and cut into its segments by time.

**Release 3: which split.** By default (``--train-set legacy``) train, dev and test are
``legacy/{train,dev,test}``. The legacy dev and test sets are the 19 talks that releases 1 and 2
used too, so word error rates stay comparable with every published TED-LIUM result, and
``legacy/train`` is, by construction of the distribution, free of those talks (it is also what
Lhotse uses). ``--train-set data`` trains on all of ``data/`` instead (2,351 talks, 452 h, as
Kaldi's ``s5_r3`` and torchaudio do) with the same legacy dev and test: about twice the training
audio. The readme lists the 19 dev/test talks apart from data/'s 2,351; should one of them be in
``data/`` anyway, it is left out of train, so test talks are never trained on. The "speaker
adaptation" distribution
is not imported: its dev/test sets are meant for adaptation experiments, not for comparison.
``legacy/train`` may hold links (per file, or to the whole folder) into ``data/``; both are read.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import click

from asrkit import hookimpl
from asrkit.api import AsrkitError, decode_text, quote
from asrkit.types import Importer, Resource, Utterance

OPENSLR = "http://www.openslr.org/resources/"


@dataclass(frozen=True)
class Release:
    root: str  # the archive's top folder
    url: str
    size: int
    sha256: str

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1]


RELEASES: dict[int, Release] = {
    1: Release("TEDLIUM_release1", OPENSLR + "7/TEDLIUM_release1.tar.gz", 21_285_615_015,
               "30301975fd8c5cac4040c261c0852f57cfa8adbbad2ce78e77e4986957445f27"),
    2: Release("TEDLIUM_release2", OPENSLR + "19/TEDLIUM_release2.tar.gz", 36_791_529_840,
               "93281b5fcaaae5c88671c9d000b443cb3c7ea3499ad12010b3934ca41a7b9c58"),
    3: Release("TEDLIUM_release-3", OPENSLR + "51/TEDLIUM_release-3.tgz", 54_320_173_876,
               "ad1e454d14d1ad550bc2564c462d87c7a7ec83d4dc2b9210f22ab4973b9eccdb"),
}
DEFAULT_RELEASE = 3
SPLITS = ("train", "dev", "test")
TRAIN_SETS = ("legacy", "data")

#: The STM "words" of a segment that carries no transcript.
IGNORED = "ignore_time_segment_in_scoring"
GAP_SPEAKER = "inter_segment_gap"
#: Noise/filler tokens: {NOISE} {SMACK} {BREATH} {COUGH} ..., and <sil> <unk> <s> </s> ...
_NOISE = re.compile(r"\{[^{}\s]*\}|<[^<>\s]*>")
#: Pronunciation variants ``word(2)``: the mark, not the word, goes.
_VARIANT = re.compile(r"(?<=\S)\(\d+\)")
#: Release 1's trailing utterance key ``(AaronHuey_2010X-1613-2416)``.
_KEY = re.compile(r"^\([^()\s]+\)$")


def kaldi_id(talk: str, start: float, end: float) -> str:
    """Kaldi's segment name ``"%s-%07d-%07d" % (talk, start*100, end*100)``, with the times
    rounded to centiseconds (``int(0.29 * 100)`` would be 28)."""
    return f"{talk}-{round(start * 100):07d}-{round(end * 100):07d}"


def parse_stm(text: str, name: str = "STM") -> Iterator[tuple[str, str, float, float, str]]:
    """``(talk, speaker, start, end, words)`` of every transcribed segment of an STM file.

    Comment lines (``;;``), gap lines and ``ignore_time_segment_in_scoring`` segments are left
    out, and release 1's trailing utterance keys are removed."""
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields or fields[0].startswith(";;"):
            continue
        if len(fields) < 5:
            raise AsrkitError(f"{name}:{number}: expected '<talk> <channel> <speaker> <start> "
                              f"<end> [<label>] <words>', got {quote(line.strip())}")
        talk, _channel, speaker, start, end, *rest = fields
        if rest and rest[0].startswith("<") and rest[0].endswith(">"):
            rest = rest[1:]  # the label: <o,f0,male>, <F0_M>, <NA>
        if rest and _KEY.match(rest[-1]):
            rest = rest[:-1]
        if speaker == GAP_SPEAKER or IGNORED in rest:
            continue
        try:
            begin, finish = float(start), float(end)
        except ValueError:
            raise AsrkitError(
                f"{name}:{number}: start/end are not numbers: {quote(line.strip())}"
            ) from None
        yield talk, speaker, begin, finish, " ".join(rest)


def _release(options: Mapping[str, Any]) -> int:
    release = int(options.get("release") or DEFAULT_RELEASE)
    if release not in RELEASES:
        raise AsrkitError(f"TED-LIUM has releases 1, 2 and 3, not {release}")
    return release


def _train_set(options: Mapping[str, Any]) -> str:
    train_set = options.get("train_set") or "legacy"
    if train_set != "legacy" and _release(options) != 3:
        raise AsrkitError("--train-set data exists only in TED-LIUM release 3")
    return train_set


class TedImporter(Importer):
    name = "ted"
    description = "TED-LIUM English TED talks, releases 1, 2 and 3 (openslr 7, 19, 51)."
    homepage = "https://www.openslr.org/51"
    license = "CC BY-NC-ND 3.0"
    splits = SPLITS

    def options(self) -> list[click.Parameter]:
        return [
            click.Option(["--release"], type=click.Choice(["1", "2", "3"]),
                         default=str(DEFAULT_RELEASE), show_default=True,
                         help="TED-LIUM release."),
            click.Option(["--train-set"], type=click.Choice(TRAIN_SETS), default="legacy",
                         show_default=True,
                         help="Release 3 only: train on legacy/train (release 2's talks, "
                              "comparable results) or on all of data/ (452 h). Dev and test "
                              "are legacy/dev and legacy/test either way."),
        ]

    def dataset_name(self, options: Mapping[str, Any]) -> str:
        suffix = "-data" if _train_set(options) == "data" else ""
        return f"ted-{_release(options)}{suffix}"

    def resources(self, options: Mapping[str, Any]) -> list[Resource]:
        release = RELEASES[_release(options)]
        return [Resource(release.filename, release.url, release.size, release.sha256)]

    def is_metadata(self, member: str) -> bool:
        # Only STMs of the distributions read here: not LM/ (gigabytes of text), not the
        # dictionary, not speaker-adaptation/.
        return member.endswith(".stm") and "/speaker-adaptation/" not in f"/{member}"

    def folders(self, options: Mapping[str, Any]) -> dict[str, str]:
        """split -> the folder (holding ``sph/`` and ``stm/``) it is read from, relative to the
        release's top folder."""
        if _release(options) != 3:
            return {split: split for split in SPLITS}
        train = "data" if _train_set(options) == "data" else "legacy/train"
        return {"train": train, "dev": "legacy/dev", "test": "legacy/test"}

    def prepare(self, metadata: Mapping[str, bytes], members: Sequence[str],
                options: Mapping[str, Any]) -> Iterator[Utterance]:
        release = RELEASES[_release(options)]
        root = _find_root(members, release.root)
        present = set(members)
        if not any(m.endswith(".stm") for m in present):
            raise AsrkitError(
                f"the archive holds no STM transcripts: is it {release.filename} (TED-LIUM "
                f"release {_release(options)})?"
            )
        seen: set[tuple[str, str]] = set()
        folders = self.folders(options)
        held_out = {stem for split in ("dev", "test")
                    for stem in _stems(_join(root, folders[split]), present)}
        for split, folder in folders.items():
            base = _join(root, folder)
            # legacy/train links into data/: per file (read through the link's target) or as
            # whole folders (then its talks are data/'s).
            fallback = _join(root, "data") if folder == "legacy/train" else None
            stems = _stems(base, present)
            if not stems and fallback and _join(base, "stm") in present:
                stems = _stems(fallback, present)
            if not stems:
                raise AsrkitError(
                    f"the archive has no talks in {_join(base, 'stm')}/: is it "
                    f"{release.filename} (TED-LIUM release {_release(options)})?"
                )
            if split == "train":
                stems = [stem for stem in stems if stem not in held_out]
            for stem in stems:
                places = [base] + ([fallback] if fallback else [])
                stm = next((path for path in (_join(p, "stm", stem + ".stm") for p in places)
                            if path in metadata), None)
                if stm is None:
                    raise AsrkitError(
                        f"{_join(base, 'stm', stem + '.stm')} is a link whose target is not in "
                        "the archive; the archive is incomplete"
                    )
                sph = next((path for path in (_join(p, "sph", stem + ".sph") for p in places)
                            if path in present), _join(base, "sph", stem + ".sph"))
                text = decode_text(metadata[stm], stm)
                for talk, speaker, start, end, words in parse_stm(text, stm):
                    utterance_id = kaldi_id(talk, start, end)
                    if (split, utterance_id) in seen:
                        continue  # the same segment listed twice
                    seen.add((split, utterance_id))
                    yield Utterance(id=utterance_id, split=split, audio=sph, transcript=words,
                                    speaker=speaker, start=start, end=end)

    def normalize(self, text: str) -> str:
        text = _NOISE.sub(" ", text)
        text = _VARIANT.sub("", text)
        return " ".join(text.split())


def _find_root(members: Sequence[str], root: str) -> str:
    """The release's top folder as named in the sources ('' when the user passed that folder
    itself with --archive)."""
    for member in members:
        if member == root or member.startswith(root + "/"):
            return root
    return ""


def _join(*parts: str) -> str:
    return "/".join(part for part in parts if part)


def _stems(folder: str, present: set[str]) -> list[str]:
    """The talks whose STM is directly in ``folder/stm/`` (links included), sorted."""
    prefix = _join(folder, "stm") + "/"
    return sorted(m[len(prefix):-len(".stm")] for m in present
                  if m.startswith(prefix) and m.endswith(".stm") and "/" not in m[len(prefix):])


@hookimpl
def register_importers(register: Any) -> None:
    register(TedImporter())
