"""Fixture archives in the corpora's real layouts, built from real speech.

Every builder returns the bytes of an archive laid out exactly as the published corpus is
(folder names, file names, transcript formats; see the importers' module docstrings), made
from the real recordings in ``tests/fixtures/speech/`` converted with the real ``sox`` binary
(SPHERE, FLAC, MP3). Each builder also returns the *known answers*: the utterances an importer
must produce, with their normalised transcripts and exact lengths, computed here from the source
clips and never from importer code. Archives are byte-for-byte deterministic (fixed mtimes,
gzip without a timestamp), so a mirror's checksums stay valid from run to run.

The clips are real LibriSpeech, SpeechBrain, CMU ARCTIC, TIMIT and AN4 recordings; only their
arrangement is made up (e.g. which clips form a TED "talk"). One TED segment is synthesised with
espeak-ng, because none of the real clips says a contraction ("i 'd"), which TED-LIUM splits.
"""

from __future__ import annotations

import atexit
import csv
import gzip
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np
import soundfile

SPEECH = Path(__file__).parent / "fixtures" / "speech"
RATE = 16000
#: TED-LIUM times have two decimals: every segment boundary is put on a 10 ms step.
CENTISECOND = RATE // 100
MTIME = 1_262_304_000  # 2010-01-01, any fixed time keeps the archives deterministic


# -- clips -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Clip:
    """A real recording (16 kHz mono) and its published transcript."""

    id: str
    path: Path
    transcript: str

    @property
    def samples(self) -> np.ndarray:
        data, rate = soundfile.read(str(self.path), dtype="int16")
        assert rate == RATE and data.ndim == 1, self.path
        return data

    @property
    def num_samples(self) -> int:
        return soundfile.info(str(self.path)).frames

    @property
    def seconds(self) -> float:
        return self.num_samples / RATE


@cache
def librispeech_clips() -> dict[str, Clip]:
    """The LibriSpeech utterances in the fixtures, by id (original FLAC preferred to WAV)."""
    clips = {}
    for folder, extension in (("librispeech", ".wav"), ("librispeech-flac", ".flac")):
        for line in (SPEECH / folder / "transcripts.txt").read_text().splitlines():
            utterance, words = line.split(" ", 1)
            clips[utterance] = Clip(utterance, SPEECH / folder / f"{utterance}{extension}", words)
    return clips


@cache
def speechbrain_clips() -> dict[str, Clip]:
    """SpeechBrain's sample sentences that have a transcript, by id (``spk1_snt1``...)."""
    clips = {}
    lines = (SPEECH / "speechbrain" / "TRANSCRIPTS.tsv").read_text().splitlines()
    for line in lines[1:]:
        utterance, _path, _seconds, text = line.split("\t")
        if text != "(no transcript)":
            clips[utterance] = Clip(utterance, SPEECH / "speechbrain" / f"{utterance}.wav", text)
    return clips


def arctic_clip() -> Clip:
    return Clip("arctic_a0024", SPEECH / "misc" / "arctic_a0024.wav",
                "it was my reports from the north which chiefly induced people to buy")


def ldc93s1_clip() -> Clip:
    return Clip("LDC93S1", SPEECH / "ldc93s1" / "LDC93S1.wav",
                "She had your dark suit in greasy wash water all year.")


def sox(*args: str | Path) -> None:
    subprocess.run(["sox", "-V1", *map(str, args)], check=True, capture_output=True)


def converted(source: Path, suffix: str, *options: str) -> bytes:
    """``source`` converted by sox into a ``suffix`` file (``.sph``, ``.flac``, ``.mp3``)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / f"out{suffix}"
        sox(source, *options, out)
        return out.read_bytes()


def decoded_samples(data: bytes, filetype: str) -> int:
    """Samples at 16 kHz mono that sox decodes ``data`` to: the length an MP3 really has (MP3
    encoders add padding, so it differs from the source clip's by some milliseconds)."""
    result = subprocess.run(
        ["sox", "-V1", "-t", filetype, "-", "-t", "raw", "-e", "signed-integer", "-b", "16",
         "-c", "1", "-r", str(RATE), "-"], input=data, capture_output=True, check=True)
    return len(result.stdout) // 2


@cache
def espeak_clip(text: str) -> Clip:
    """``text`` spoken by espeak-ng, as 16 kHz mono 16-bit (kept for the session)."""
    folder = Path(tempfile.mkdtemp(prefix="asrkit-espeak-"))
    atexit.register(shutil.rmtree, folder, True)
    raw, wav = folder / "raw.wav", folder / "clip.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "-w", str(raw), text], check=True,
                   capture_output=True)
    sox(raw, "-r", str(RATE), "-c", "1", "-b", "16", wav)
    return Clip("espeak", wav, text)


# -- archives ----------------------------------------------------------------------------------


@dataclass
class Tar:
    """A tar archive built in memory, members in the order added, parent folders first."""

    members: list[tarfile.TarInfo] = field(default_factory=list)
    contents: dict[str, bytes] = field(default_factory=dict)
    folders: set[str] = field(default_factory=set)

    def _info(self, name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.mtime = kind, mode, MTIME
        info.uname = info.gname = "corpus"
        return info

    def folder(self, name: str) -> None:
        name = name.rstrip("/")
        if not name or name in self.folders:
            return
        self.folder(name.rsplit("/", 1)[0] if "/" in name else "")
        self.folders.add(name)
        self.members.append(self._info(name, tarfile.DIRTYPE, 0o755))

    def file(self, name: str, data: bytes | str) -> None:
        if isinstance(data, str):
            data = data.encode("utf-8")
        if "/" in name:
            self.folder(name.rsplit("/", 1)[0])
        info = self._info(name, tarfile.REGTYPE, 0o644)
        info.size = len(data)
        self.members.append(info)
        self.contents[name] = data

    def link(self, name: str, target: str) -> None:
        """A symbolic link ``name`` -> ``target`` (relative to the link's folder)."""
        self.folder(name.rsplit("/", 1)[0])
        info = self._info(name, tarfile.SYMTYPE, 0o777)
        info.linkname = target
        self.members.append(info)

    def bytes(self) -> bytes:
        raw = io.BytesIO()
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
            for info in self.members:
                data = self.contents.get(info.name)
                tar.addfile(info, io.BytesIO(data) if data is not None else None)
        return raw.getvalue()


def extract(data: bytes, into: Path) -> Path:
    """Unpack an archive built here (for the tests that read an extracted folder)."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
        tar.extractall(into, filter="tar")
    return into


@dataclass(frozen=True)
class Expected:
    """One utterance an importer must produce, as the dataset must hold it."""

    split: str
    id: str
    transcript: str  # normalised
    num_samples: int
    speaker: str
    #: The exact samples, where the fixture knows them (lossless sources).
    samples: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def seconds(self) -> float:
        return self.num_samples / RATE


@dataclass(frozen=True)
class Fixture:
    filename: str
    data: bytes
    expected: tuple[Expected, ...]

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def by_split(self) -> dict[str, list[Expected]]:
        out: dict[str, list[Expected]] = {}
        for item in self.expected:
            out.setdefault(item.split, []).append(item)
        return out


# -- LibriSpeech -------------------------------------------------------------------------------

#: Which of the fixture clips go into which subset archive. test-clean and test-other are the
#: subsets these utterances really come from; mini LibriSpeech's dev-clean-2 really holds
#: dev-clean speakers, but the importer reads only the layout, which is the same.
LIBRISPEECH_SUBSETS: dict[str, tuple[str, ...]] = {
    "test-clean": ("61-70968-0000", "61-70968-0001", "61-70968-0002", "1089-134691-0000",
                   "2830-3980-0043", "4507-16021-0012", "8455-210777-0068"),
    "test-other": ("2412-153948-0000",),
    "dev-clean-2": ("2830-3980-0043", "8455-210777-0068"),
}

#: Where the archives lie on the corpora's hosts, paths a mirror keeps (``--mirror URL``).
LIBRISPEECH_PATH = "resources/12"
TED_PATHS = {1: "resources/7/TEDLIUM_release1.tar.gz",
             2: "resources/19/TEDLIUM_release2.tar.gz",
             3: "resources/51/TEDLIUM_release-3.tgz"}
AN4_PATH = "databases/an4/an4_sphere.tar.gz"

#: A few real utterances a subset, for command lines written for the real corpus (the README's
#: quick start, the recipes): the 100 h subsets, then the others of the 960 h.
LIBRISPEECH_SMALL: dict[str, tuple[str, ...]] = {
    "train-clean-100": ("61-70968-0000", "61-70968-0001", "1089-134691-0000",
                        "2412-153948-0000", "4507-16021-0012"),
    "dev-clean": ("2830-3980-0043", "61-70968-0002"),
    "test-clean": ("8455-210777-0068", "4507-16021-0012"),
    # An utterance is in one subset of a split: the 960 h train and dev splits join subsets.
    "train-clean-360": ("2830-3980-0043",),
    "train-other-500": ("8455-210777-0068",),
    "dev-other": ("1089-134691-0000",),
}


def serve_librispeech(server, subsets: dict[str, Sequence[str]]) -> None:
    """Serve each subset's archive (of these utterances) where openslr has it, on ``server`` (a
    :class:`asrkit.testing.CorpusServer`)."""
    for subset, ids in subsets.items():
        fixture = librispeech(subset, ids)
        server.add_file(f"{LIBRISPEECH_PATH}/{fixture.filename}", fixture.data)


_LIBRISPEECH_README = """\
LibriSpeech ASR corpus (asrkit test fixture in the real layout)

The corpus is split into several parts; each archive extracts to LibriSpeech/<subset>/.
<speaker>/<chapter>/<speaker>-<chapter>-<utterance>.flac and one
<speaker>-<chapter>.trans.txt per chapter.
"""


def librispeech(subset: str, ids: Sequence[str] | None = None) -> Fixture:
    """``<subset>.tar.gz`` as openslr serves it: ``LibriSpeech/`` with its .TXT files and
    ``<subset>/<speaker>/<chapter>/`` holding FLACs and the chapter's ``.trans.txt``."""
    clips = librispeech_clips()
    ids = tuple(ids or LIBRISPEECH_SUBSETS[subset])
    split = subset.split("-", 1)[0]
    tar = Tar()
    speakers = sorted({i.split("-")[0] for i in ids}, key=int)
    tar.file("LibriSpeech/BOOKS.TXT", ";; BOOKS.TXT\n;ID    |TITLE\n")
    tar.file("LibriSpeech/CHAPTERS.TXT", ";; CHAPTERS.TXT\n;ID    |READER|MINUTES| SUBSET\n"
             + "".join(f"{c:<7}| {s:<6}| 10.00 | {subset}\n"
                       for s, c in sorted({tuple(i.split("-")[:2]) for i in ids})))
    tar.file("LibriSpeech/LICENSE.TXT", "Creative Commons Attribution 4.0 International\n")
    tar.file("LibriSpeech/README.TXT", _LIBRISPEECH_README)
    tar.file("LibriSpeech/SPEAKERS.TXT", ";; SPEAKERS.TXT\n;ID  |SEX| SUBSET  |MINUTES| NAME\n"
             + "".join(f"{s:<5}| F | {subset} | 10.00 | reader {s}\n" for s in speakers))
    expected = []
    chapters: dict[tuple[str, str], list[str]] = {}
    for utterance in sorted(ids):
        speaker, chapter, _ = utterance.split("-")
        chapters.setdefault((speaker, chapter), []).append(utterance)
    for number, ((speaker, chapter), utterances) in enumerate(sorted(chapters.items())):
        folder = f"LibriSpeech/{subset}/{speaker}/{chapter}"
        transcript = "".join(f"{u} {clips[u].transcript}\n" for u in utterances)
        if number % 2:  # archives list members in no particular order: both orders occur
            tar.file(f"{folder}/{speaker}-{chapter}.trans.txt", transcript)
        for utterance in utterances:
            clip = clips[utterance]
            flac = (clip.path.read_bytes() if clip.path.suffix == ".flac"
                    else converted(clip.path, ".flac"))
            tar.file(f"{folder}/{utterance}.flac", flac)
            expected.append(Expected(split, utterance, clip.transcript.lower(), clip.num_samples,
                                     speaker, clip.samples))
        if not number % 2:
            tar.file(f"{folder}/{speaker}-{chapter}.trans.txt", transcript)
    return Fixture(f"{subset}.tar.gz", tar.bytes(), tuple(expected))


# -- TED-LIUM ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seg:
    """One stretch of a talk: a gap (silence, an ``inter_segment_gap`` line), a clip with its
    STM words and the transcript the importer must make of them, or a clip whose STM words are
    ``ignore_time_segment_in_scoring`` (audio present, no transcript: must be dropped)."""

    clip: Clip | None = None
    words: str = ""
    expected: str | None = None
    gap: float = 0.0
    ignored: bool = False
    #: Release 1 train lines end with the utterance key in parentheses.
    key: bool = False


@dataclass(frozen=True)
class Talk:
    name: str
    speaker: str
    label: str
    segments: tuple[Seg, ...]
    #: Repeat the first transcribed line (the same segment listed twice).
    duplicate: bool = False


def _padded(samples: np.ndarray) -> np.ndarray:
    """The clip followed by silence up to the next 10 ms step."""
    pad = -len(samples) % CENTISECOND
    return np.concatenate([samples, np.zeros(pad, dtype=np.int16)])


def _seconds(samples: int) -> str:
    return f"{samples / RATE:.2f}"


def build_talk(talk: Talk, split: str) -> tuple[bytes, str, list[Expected]]:
    """The talk's SPHERE recording (clips and silences concatenated, converted by sox), its STM
    and the utterances the importer must cut from it."""
    pieces, lines, expected = [], [], []
    cursor = 0
    for seg in talk.segments:
        if seg.gap:
            length = round(seg.gap * 100) * CENTISECOND
            pieces.append(np.zeros(length, dtype=np.int16))
            lines.append(f"{talk.name} 1 inter_segment_gap {_seconds(cursor)} "
                         f"{_seconds(cursor + length)} <o,,unknown> "
                         "ignore_time_segment_in_scoring")
            cursor += length
            continue
        assert seg.clip is not None
        audio = _padded(seg.clip.samples)
        pieces.append(audio)
        start, end = cursor, cursor + len(audio)
        words = "ignore_time_segment_in_scoring" if seg.ignored else seg.words
        if seg.key:
            words += f" ({talk.name}-{start // CENTISECOND}-{end // CENTISECOND})"
        lines.append(f"{talk.name} 1 {talk.speaker} {_seconds(start)} {_seconds(end)} "
                     f"{talk.label} {words}")
        if not seg.ignored:
            utterance = f"{talk.name}-{start // CENTISECOND:07d}-{end // CENTISECOND:07d}"
            expected.append(Expected(split, utterance, seg.expected or "", len(audio),
                                     talk.speaker, audio))
        cursor = end
    if talk.duplicate:
        first = next(i for i, line in enumerate(lines) if "ignore_time" not in line)
        lines.insert(first + 1, lines[first])
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "talk.wav"
        soundfile.write(str(wav), np.concatenate(pieces), RATE, subtype="PCM_16")
        sph = converted(wav, ".sph")
    return sph, "\n".join(lines) + "\n", expected


def _ted_talks(release: int) -> dict[str, list[Talk]]:
    """split -> talks, with the STM variants each release really has."""
    ls = librispeech_clips()
    label = {1: "<o,f0,female>", 2: "<o,f0,female>", 3: "<NA>"}[release]
    dev_label = {1: "<F0_M>", 2: "<F0_M>", 3: "<o,f0,male>"}[release]
    clitic = espeak_clip("I'd like to share a discovery that I've made")
    train = Talk("911Mothers_2010W", "911Mothers_2010W", label, (
        Seg(gap=0.5),
        Seg(ls["2830-3980-0043"], "experience {NOISE} proves this" if release != 3
            else "experience proves <unk> this", "experience proves this", key=release == 1),
        Seg(ls["4507-16021-0012"], "why should(2) one halt on the way <sil>" if release != 3
            else "why should one halt on the way", "why should one halt on the way",
            key=release == 1),
    ), duplicate=release == 2)
    dev = Talk("AlGore_2009", "AlGore", dev_label, (
        Seg(clitic, "i 'd like to share a discovery that i 've made {SMACK}",
            "i'd like to share a discovery that i've made"),
        Seg(ls["8455-210777-0068"], "your power is sufficient i said",
            "your power is sufficient i said"),
    ))
    test = Talk("AimeeMullins_2009P", "AimeeMullins", "<o,f0,female>", (
        Seg(gap=1.0),
        Seg(ls["61-70968-0002"], "a golden fortune and a happy life",
            "a golden fortune and a happy life"),
        Seg(ldc93s1_clip(), ignored=True),
        Seg(ls["1089-134691-0000"], "he could wait no longer", "he could wait no longer"),
    ))
    talks = {"train": [train], "dev": [dev], "test": [test]}
    if release == 3:  # a talk in data/ only: not part of legacy/train
        arctic = arctic_clip()
        talks["data"] = [train, Talk("AaronHuey_2010X", "AaronHuey_2010X", "<NA>", (
            Seg(arctic, arctic.transcript.replace("people", "<unk> people"), arctic.transcript),
        ))]
    return talks


TED_FILES = {1: ("TEDLIUM_release1", "TEDLIUM_release1.tar.gz", "TEDLIUM.150K.dic"),
             2: ("TEDLIUM_release2", "TEDLIUM_release2.tar.gz", "TEDLIUM.152k.dic"),
             3: ("TEDLIUM_release-3", "TEDLIUM_release-3.tgz", "TEDLIUM.152k.dic")}


@cache
def ted(release: int) -> Fixture:
    """The release's archive. Releases 1 and 2: ``<root>/{train,dev,test}/{sph,stm}/``.
    Release 3: ``data/{sph,stm}`` (all training talks), ``legacy/train/{sph,stm}`` holding
    symbolic links into ``data/``, and real ``legacy/{dev,test}``. Known answers: the legacy
    splits; for release 3 the talks of ``data/`` are listed with split ``data``."""
    root, filename, dictionary = TED_FILES[release]
    tar = Tar()
    tar.file(f"{root}/readme", f"This is the TED-LIUM corpus release {release} "
             "(asrkit test fixture in the real layout).\n")
    tar.file(f"{root}/{dictionary}", "experience IH K S P IH R IY AH N S\nproves P R UW V Z\n")
    expected: list[Expected] = []
    built: dict[str, tuple[bytes, str, list[Expected]]] = {}
    for split, talks in _ted_talks(release).items():
        for talk in talks:
            if talk.name not in built:
                built[talk.name] = build_talk(talk, split)
            sph, stm, answers = built[talk.name]
            if release == 3 and split == "train":
                folder = f"{root}/legacy/train"
                for kind in ("sph", "stm"):  # links, as in the real release
                    tar.link(f"{folder}/{kind}/{talk.name}.{kind}",
                             f"../../../data/{kind}/{talk.name}.{kind}")
                expected += answers
                continue
            folder = (f"{root}/data" if split == "data" else
                      f"{root}/legacy/{split}" if release == 3 else f"{root}/{split}")
            tar.file(f"{folder}/sph/{talk.name}.sph", sph)
            tar.file(f"{folder}/stm/{talk.name}.stm", stm)
            expected += [Expected("data" if split == "data" else split, a.id, a.transcript,
                                  a.num_samples, a.speaker, a.samples) for a in answers]
    if release == 3:
        # The other folders of release 3, which the importer must leave alone.
        tar.file(f"{root}/doc/README", "TED-LIUM 3 paper and notes\n")
        tar.file(f"{root}/LM/README", "language model data (gigabytes in the real release)\n")
        tar.file(f"{root}/speaker-adaptation/dev/stm/AlGore_2009.stm", built["AlGore_2009"][1])
    # Real archives list folders in directory order: release 3's legacy/ comes after data/.
    order = sorted(tar.members, key=lambda info: _ted_order(info.name))
    tar.members = order
    return Fixture(filename, tar.bytes(), tuple(expected))


def _ted_order(name: str) -> tuple[int, str]:
    parts = name.split("/")
    return (0 if len(parts) < 2 else 1, name)


# -- Common Voice ------------------------------------------------------------------------------

#: The columns of two generations of Common Voice listings.
CV_COLUMNS = {
    "5.1": ("client_id", "path", "sentence", "up_votes", "down_votes", "age", "gender",
            "accent", "locale", "segment"),
    "17.0": ("client_id", "path", "sentence_id", "sentence", "sentence_domain", "up_votes",
             "down_votes", "age", "gender", "accents", "variant", "locale", "segment"),
}
CV_FOLDERS = {"5.1": "cv-corpus-5.1-2020-06-22", "17.0": "cv-corpus-17.0-2024-03-15"}

#: clip -> (split, sentence as Common Voice writes it, normalised transcript).
CV_CLIPS = {
    "spk1_snt1": ("train", "The child almost hurt the small dog.",
                  "the child almost hurt the small dog"),
    "spk1_snt2": ("train", "Drop the tue when you add the figures.",
                  "drop the tue when you add the figures"),
    "spk1_snt3": ("train", '"At that high level, the air is pure."',
                  "at that high level the air is pure"),
    "spk2_snt1": ("dev", "We are sure that one wore is enough.",
                  "we are sure that one wore is enough"),
    "spk2_snt2": ("test", "What joy there is in living!", "what joy there is in living"),
}
#: Listed in train.tsv, absent from clips/: skipped as "audio file missing".
CV_MISSING = "common_voice_en_20000000"


def _cv_clip_name(index: int) -> str:
    return f"common_voice_en_{19000000 + index}"


@cache
def commonvoice(version: str = "5.1", language: str = "en") -> Fixture:
    """A release archive: ``cv-corpus-<version>/<lang>/clips/*.mp3`` (48 kHz MP3s made by sox
    from real speech) and the TSV listings, unquoted, with the release's columns. The real
    Common Voice clip in the fixtures is listed only in ``other.tsv`` (its sentence is not
    known), which the importer must not read."""
    folder = f"{CV_FOLDERS[version]}/{language}"
    columns = CV_COLUMNS[version]
    clips = speechbrain_clips()
    tar = Tar()
    rows: dict[str, list[dict[str, str]]] = {"train": [], "dev": [], "test": [], "other": []}
    expected = []
    mp3s: dict[str, bytes] = {}
    for index, (source, (split, sentence, normalised)) in enumerate(CV_CLIPS.items()):
        name = _cv_clip_name(index)
        clip = clips[source]
        mp3 = converted(clip.path, ".mp3", "-r", "48000", "-C", "64")
        mp3s[name] = mp3
        client = hashlib.sha512(source.split("_")[0].encode()).hexdigest()
        rows[split].append({"client_id": client, "path": f"{name}.mp3", "sentence": sentence})
        expected.append(Expected(split, name, normalised, decoded_samples(mp3, "mp3"), client))
    rows["train"].append({"client_id": hashlib.sha512(b"spk3").hexdigest(),
                          "path": f"{CV_MISSING}.mp3", "sentence": "This clip is missing."})
    real = SPEECH / "commonvoice" / "common_voice_en_651325.mp3"
    mp3s[real.stem] = real.read_bytes()
    rows["other"].append({"client_id": hashlib.sha512(b"cv").hexdigest(),
                          "path": real.name, "sentence": "(sentence not known)"})
    for name in sorted(mp3s):
        tar.file(f"{folder}/clips/{name}.mp3", mp3s[name])
    listings = {**rows, "validated": rows["train"] + rows["dev"] + rows["test"],
                "invalidated": [], "reported": []}
    for listing, entries in sorted(listings.items()):
        if listing == "reported":
            tar.file(f"{folder}/reported.tsv", "sentence_id\tsentence\tlocale\treason\n")
            continue
        lines = ["\t".join(columns)]
        for entry in entries:
            values = {"up_votes": "2", "down_votes": "0", "age": "twenties", "gender": "",
                      "accent": "", "accents": "", "locale": language, "segment": "",
                      "sentence_id": hashlib.sha256(entry["sentence"].encode()).hexdigest(),
                      "sentence_domain": "", "variant": "", **entry}
            lines.append("\t".join(values[c] for c in columns))
        tar.file(f"{folder}/{listing}.tsv", "\n".join(lines) + "\n")
    # Release 5.1 was served as <lang>.tar.gz, newer ones as cv-corpus-<version>-<lang>.tar.gz.
    filename = (f"{language}.tar.gz" if version == "5.1"
                else f"{CV_FOLDERS[version]}-{language}.tar.gz")
    return Fixture(filename, tar.bytes(), tuple(expected))


# -- AN4 ---------------------------------------------------------------------------------------

AN4_MINI = SPEECH / "an4-mini" / "mini_an4_downloads.tar.gz"
#: The real AN4 subset's utterances: (split, id, transcript, speaker, samples).
AN4_EXPECTED = (
    ("train", "an152-mwhw-b", "start", "mwhw", 16000),
    ("train", "an251-fash-b", "yes", "fash", 16000),
    ("train", "an253-fash-b", "go", "fash", 11200),
    ("train", "cen8-fbbh-b", "march third nineteen twenty eight", "fbbh", 44800),
    ("train", "cen8-mwhw-b", "eleven seventeen fifty one", "mwhw", 35200),
    ("test", "cen8-fcaw-b", "eleven twenty seven fifty seven", "fcaw", 46400),
    ("test", "cen8-mmxg-b", "october twenty four nineteen seventy", "mmxg", 36800),
)


def an4() -> Fixture:
    """``an4_sphere.tar.gz`` with the real archive's root ``an4/``, from the real AN4 subset
    (whose members lie under ``downloads/an4/``, beside ESPnet's noise files, left out here)."""
    tar = Tar()
    with tarfile.open(AN4_MINI, "r:gz") as source:
        for info in source:
            if not info.name.startswith("downloads/an4/") or not info.isfile():
                continue
            handle = source.extractfile(info)
            assert handle is not None
            tar.file(info.name[len("downloads/"):], handle.read())
    expected = tuple(Expected(split, utterance, text, samples, speaker)
                     for split, utterance, text, speaker, samples in AN4_EXPECTED)
    return Fixture("an4_sphere.tar.gz", tar.bytes(), expected)


# -- checking an imported dataset --------------------------------------------------------------

CSV_HEADER = ["wav_filename", "wav_filesize", "transcript", "duration", "speaker"]
#: 1 ms at 16 kHz.
ONE_MS = RATE // 1000


def check_dataset(dataset: Path, expected: Iterable[Expected],
                  tolerance: int = ONE_MS) -> dict:
    """Assert that ``dataset`` holds exactly the ``expected`` utterances: per split, the CSV
    (DeepSpeech columns plus duration and speaker; sizes are the files' sizes), the WAVs (16 kHz
    mono, lengths within ``tolerance`` samples, the exact samples where known), the shards (the
    same ids, transcripts, speakers and audio) and the counts in ``dataset.json``. Returns the
    report."""
    from asrkit.dataset.audio import read_wav
    from asrkit.dataset.shards import read_records, shard_paths

    report = json.loads((dataset / "dataset.json").read_text())
    by_split: dict[str, list[Expected]] = {}
    for item in expected:
        by_split.setdefault(item.split, []).append(item)
    assert sorted(report["splits"]) == sorted(by_split), report["splits"]
    for split, items in by_split.items():
        with open(dataset / f"{split}.csv", newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
        assert rows[0] == CSV_HEADER
        assert report["splits"][split]["utterances"] == len(items) == len(rows) - 1, split
        by_id = {Path(row[0]).stem: row for row in rows[1:]}
        assert sorted(by_id) == sorted(item.id for item in items), split
        for item in items:
            wav_filename, size, transcript, duration, speaker = by_id[item.id]
            assert wav_filename == f"audio/{split}/{item.id}.wav"
            wav = dataset / wav_filename
            assert int(size) == wav.stat().st_size
            assert transcript == item.transcript, item.id
            assert speaker == item.speaker, item.id
            samples = read_wav(wav)
            assert abs(len(samples) - item.num_samples) <= tolerance, (item.id, len(samples))
            assert abs(float(duration) - item.seconds) <= tolerance / RATE + 5e-5, item.id
            if item.samples is not None:
                np.testing.assert_array_equal(samples, item.samples, err_msg=item.id)
        shards = shard_paths(dataset, split)
        assert [f"shards/{p.name}" for p in shards] == report["splits"][split]["shards"]
        records = {r.id: r for shard in shards for r in read_records(shard)}
        assert sorted(records) == sorted(by_id), split
        for utterance, record in records.items():
            row = by_id[utterance]
            assert record.transcript == row[2] and record.speaker == row[4]
            assert record.audio == read_wav(dataset / row[0]).tobytes()
    return report


def import_args(name: str, *args: str | Path, mirror: str | None = None,
                jobs: int = 1) -> list[str]:
    """``asrkit import NAME ARGS`` with quiet progress, ``--jobs`` and ``--mirror``."""
    out = ["import", name, *map(str, args), "--no-progress", "--jobs", str(jobs)]
    return out + (["--mirror", mirror] if mirror else [])


def copy_clips(clips: Iterable[Clip], folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for clip in clips:
        target = folder / clip.path.name
        shutil.copyfile(clip.path, target)
        out.append(target)
    return out
