"""Decoding any audio to 16 kHz mono signed 16-bit PCM, and cutting segments.

Audio that libsndfile reads natively at 16 kHz (LibriSpeech FLAC, TED-LIUM and AN4 SPHERE,
WAV) is decoded in-process by ``soundfile``: a sox process per file costs more in start-up
than the decoding itself (see ``benchmarks/bench_import.py``). Anything else (other rates, several
channels, MP3, Opus, shortened SPHERE, ...) goes through the real ``sox`` binary, which
resamples with its high-quality resampler. A recording is decoded once and then cut into all of
its segments, so a talk with 200 segments is decoded once, not 200 times.

Decoding is bounded in memory and time, since a small compressed file can hold hours of audio and
a decoder can hang: a caller that needs only the first ``limit`` samples (an import needs a clip
up to its longest kept length, a talk up to its last segment) gets them without the rest ever
being decoded or held, and a sox process that runs past :func:`sox_timeout` is killed and named.
Every sox process, this module's and a stream's (:mod:`asrkit.serving.audio_stream`), is a
:class:`SoxProcess`, so each of these bounds is kept in one place.
"""

from __future__ import annotations

import io
import math
import shutil
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from asrkit.core.errors import AsrkitError
from asrkit.core.frames import SAMPLE_RATE
from asrkit.core.process import LINGERED, OVERDUE, STALLED, Source, WatchedProcess
from asrkit.core.storage import Location, StoragePath, location

SAMPLE_WIDTH = 2
#: Least time sox is given to decode one file, in seconds: its start-up and a short clip take a
#: fraction of a second, so a minute means it is hung.
SOX_MIN_SECONDS = 60.0
#: Slowest input sox is expected to read, in bytes a second: it decodes MP3 (16 kB a second of
#: audio) and resamples 48 kHz stereo WAV (192 kB) tens of times faster than real time, and
#: this leaves room for a machine busy with an import's other workers. A file of 512 MiB (the
#: largest an import reads) gets 34 minutes.
SOX_BYTES_PER_SECOND = 256 << 10
#: Longest sox may go without writing a byte while a recording is streamed (``asrkit
#: transcribe``), counted only while asrkit waits for it: it writes a block of audio in
#: milliseconds, so a minute of silence means it is hung. Not a bound on the whole stream, which
#: lasts as long as the model takes over a recording of hours.
SOX_STALL_SECONDS = 60.0
#: A whole decode's output is read in pieces of this many bytes.
SOX_READ_BYTES = 1 << 16
#: sox's output: raw little-endian signed 16-bit mono (the rate follows it).
RAW_OUTPUT = ("-t", "raw", "-e", "signed-integer", "-b", "16", "-c", "1")

#: sox's name for a format, by file extension, where it cannot tell from a pipe.
SOX_TYPES = {".sph": "sph", ".nist": "sph", ".wav": "wav", ".flac": "flac", ".mp3": "mp3",
             ".ogg": "ogg", ".opus": "opus", ".aiff": "aiff", ".aif": "aiff", ".au": "au",
             ".m4a": "m4a", ".raw": "raw"}


class AudioError(AsrkitError):
    """The audio could not be decoded."""


def sox_binary() -> str:
    path = shutil.which("sox")
    if path is None:
        raise AsrkitError(
            "the sox program is not installed; install it (Debian/Ubuntu: apt-get install sox "
            "libsox-fmt-all; macOS: brew install sox) and rerun"
        )
    return path


def decode(data: bytes, name: str, limit: int | None = None) -> np.ndarray:
    """The samples of an encoded file as 16 kHz mono int16: its first ``limit`` samples at
    most (all without a limit). A longer file is decoded no further than that."""
    samples = _decode_native(data, limit)
    if samples is not None:
        return samples
    try:
        return decode_with_sox(data, name, limit)
    except AudioError:
        fallback = _decode_with_libsndfile(data, name, limit)
        if fallback is None:
            raise
        return fallback


def _decode_with_libsndfile(data: bytes, name: str, limit: int | None = None
                            ) -> np.ndarray | None:
    """16 kHz mono int16 of a file sox cannot read but libsndfile can (``None`` if neither):
    Debian's sox has no Opus handler, while the libsndfile that ``soundfile`` bundles reads Ogg
    Opus (and MP3). Channels are averaged, as sox mixes them; other rates are resampled by sox
    from raw float samples, which every sox reads. Only the frames the first ``limit`` samples
    come from are read."""
    try:
        import soundfile

        with soundfile.SoundFile(io.BytesIO(data)) as f:
            rate = f.samplerate
            frames = -1 if limit is None else math.ceil(limit * rate / SAMPLE_RATE) + 1
            audio = f.read(frames, dtype="float32", always_2d=True)
    except Exception:  # libsndfile's errors are plain RuntimeErrors, or format-specific ones
        return None
    mono = audio.mean(axis=1).astype("<f4")
    if rate == SAMPLE_RATE:
        return np.clip(np.round(mono[:limit] * 32768.0), -32768, 32767).astype(np.int16)
    arguments = ["-t", "f32", "-r", str(rate), "-c", "1", "-L", "-",
                 *RAW_OUTPUT, "-r", str(SAMPLE_RATE), "-L", "-"]
    try:
        result = run_sox(arguments, mono.tobytes(), name, limit)
    except AudioError:
        return None
    if result.returncode != 0 and not result.cut:
        return None
    return result.samples(limit)


def _decode_native(data: bytes, limit: int | None = None) -> np.ndarray | None:
    """Decode in-process when the file is already 16 kHz; ``None`` when sox is needed."""
    try:
        import soundfile
    except ImportError:  # pragma: no cover - soundfile is a dependency, but sox suffices
        return None
    try:
        with soundfile.SoundFile(io.BytesIO(data)) as f:
            if f.samplerate != SAMPLE_RATE or f.subtype not in ("PCM_16", "PCM_S8", "PCM_U8"):
                return None
            if f.channels != 1:
                return None  # mixing channels down is sox's job: both paths give the same
            samples = f.read(-1 if limit is None else limit, dtype="int16", always_2d=True)
    except Exception:
        return None
    return samples[:, 0].copy()


def decode_with_sox(data: bytes, name: str, limit: int | None = None) -> np.ndarray:
    """The samples sox decodes ``data`` to (its type told by ``name``'s extension): the first
    ``limit`` at most, sox being stopped once it has written them."""
    filetype = SOX_TYPES.get(Path(name).suffix.lower())
    arguments = ["-t", filetype] if filetype else []
    arguments += ["-", *RAW_OUTPUT, "-r", str(SAMPLE_RATE), "-L", "-"]
    result = run_sox(arguments, data, name, limit)
    if not result.cut and (result.returncode != 0 or (not result.output and data)):
        raise AudioError(f"sox could not decode {name}: {result.message or 'no output'}")
    return result.samples(limit)


@dataclass
class SoxResult:
    """What a sox process wrote: its output (cut short when it went past what was wanted, so
    ``returncode`` is then the kill's), its exit status, and its messages on one line."""

    output: bytearray
    returncode: int
    message: str
    cut: bool

    def samples(self, limit: int | None) -> np.ndarray:
        """The output as int16 samples, the first ``limit`` at most (a copy, so that the
        buffer, grown a piece at a time and so larger than its bytes, is let go)."""
        count = len(self.output) // SAMPLE_WIDTH
        count = count if limit is None else min(count, limit)
        return np.frombuffer(self.output, dtype="<i2", count=count).copy()


def sox_timeout(size: int) -> float:
    """How long sox may take over an input of ``size`` bytes: :data:`SOX_MIN_SECONDS`, or more
    for a large file (:data:`SOX_BYTES_PER_SECOND`)."""
    return max(SOX_MIN_SECONDS, size / SOX_BYTES_PER_SECOND)


class SoxProcess(WatchedProcess):
    """sox converting one file (``name``, which its errors name) to what ``arguments`` say,
    run and read as :class:`~asrkit.core.process.WatchedProcess` does: the one way asrkit runs
    sox, for a whole decode (:meth:`decoding`) and a stream (:meth:`streaming`) alike."""

    def __init__(self, arguments: list[str], source: Source, name: str, *,
                 stall: float | None = None, deadline: float | None = None,
                 limit: int | None = None) -> None:
        super().__init__([sox_binary(), "-R", "-V1", *arguments], source, stall=stall,
                         deadline=deadline, limit=limit)
        self.name = name

    @classmethod
    def decoding(cls, arguments: list[str], data: bytes, name: str,
                 limit: int | None = None) -> SoxProcess:
        """sox decoding ``data`` in one go (its first ``limit`` bytes of output at most): the
        whole run is bounded by :func:`sox_timeout`, since it is read as fast as it comes."""
        return cls(arguments, data, name, deadline=sox_timeout(len(data)), limit=limit)

    @classmethod
    def streaming(cls, arguments: list[str], source: Source, name: str) -> SoxProcess:
        """sox read as its reader needs it (a recording transcribed window by window): the run
        lasts as long as the reader takes, so only :data:`SOX_STALL_SECONDS` without output,
        counted while the reader waits, is a hang."""
        return cls(arguments, source, name, stall=SOX_STALL_SECONDS)

    def timed_out(self, kind: str, seconds: float) -> AudioError:
        what = {STALLED: f"produced nothing for {seconds:.0f} s while decoding {self.name}",
                OVERDUE: f"took more than {seconds:.0f} s to decode {self.name}",
                LINGERED: f"did not exit {seconds:.0f} s after decoding {self.name}"}[kind]
        return AudioError(f"sox {what}, so it was stopped (a damaged file can hang it); "
                          "check the file")


def run_sox(arguments: list[str], data: bytes, name: str, limit: int | None) -> SoxResult:
    """Run sox on ``data``, keeping at most ``limit`` samples of its output: sox is stopped once
    it has written more, so a recording of hours is never held whole. A sox that runs past
    :func:`sox_timeout` is stopped, and an :class:`AudioError` names ``name`` and the time."""
    most = None if limit is None else limit * SAMPLE_WIDTH
    output = bytearray()
    with SoxProcess.decoding(arguments, data, name, most) as sox:
        while chunk := sox.read(SOX_READ_BYTES):
            output += chunk
        returncode = sox.finish()
    return SoxResult(output, returncode, sox.message(), sox.cut)


def cut(samples: np.ndarray, start: float | None, end: float | None) -> np.ndarray:
    """Samples between ``start`` and ``end`` seconds (rounded to the nearest sample)."""
    first = 0 if start is None else max(0, round(start * SAMPLE_RATE))
    last = len(samples) if end is None else min(len(samples), round(end * SAMPLE_RATE))
    return samples[first:last]


def wav_bytes(samples: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(SAMPLE_WIDTH)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(samples.astype("<i2").tobytes())
    return buffer.getvalue()


def read_wav(path: str | Location) -> np.ndarray:
    """Samples of a 16 kHz mono 16-bit WAV written by asrkit (a local file, or at a URL)."""
    where = location(path)
    source = io.BytesIO(where.read_bytes()) if isinstance(where, StoragePath) else str(where)
    with wave.open(source, "rb") as w:
        if (w.getframerate(), w.getnchannels(), w.getsampwidth()) != (SAMPLE_RATE, 1, 2):
            raise AudioError(f"{path} is not 16 kHz mono 16-bit")
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
