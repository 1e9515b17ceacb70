"""Decoding any audio to 16 kHz mono signed 16-bit PCM, and cutting segments.

Audio that libsndfile reads natively at 16 kHz (LibriSpeech FLAC, TED-LIUM and AN4 SPHERE,
WAV) is decoded in-process by ``soundfile``: a sox process per file costs more in start-up
than the decoding itself (see ``benchmarks/bench_import.py``). Anything else (other rates, several
channels, MP3, Opus, shortened SPHERE, ...) goes through the real ``sox`` binary, which
resamples with its high-quality resampler. A recording is decoded once and then cut into all of
its segments, so a talk with 200 segments is decoded once, not 200 times.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import wave
from pathlib import Path

import numpy as np

from asrkit.core.errors import AsrkitError
from asrkit.core.frames import SAMPLE_RATE

SAMPLE_WIDTH = 2

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


def decode(data: bytes, name: str) -> np.ndarray:
    """The samples of an encoded file as 16 kHz mono int16."""
    samples = _decode_native(data)
    if samples is not None:
        return samples
    try:
        return decode_with_sox(data, name)
    except AudioError:
        fallback = _decode_with_libsndfile(data)
        if fallback is None:
            raise
        return fallback


def _decode_with_libsndfile(data: bytes) -> np.ndarray | None:
    """16 kHz mono int16 of a file sox cannot read but libsndfile can (``None`` if neither):
    Debian's sox has no Opus handler, while the libsndfile that ``soundfile`` bundles reads Ogg
    Opus (and MP3). Channels are averaged, as sox mixes them; other rates are resampled by sox
    from raw float samples, which every sox reads."""
    try:
        import soundfile

        audio, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except Exception:  # libsndfile's errors are plain RuntimeErrors, or format-specific ones
        return None
    mono = audio.mean(axis=1).astype("<f4")
    if rate == SAMPLE_RATE:
        return np.clip(np.round(mono * 32768.0), -32768, 32767).astype(np.int16)
    command = [sox_binary(), "-R", "-V1", "-t", "f32", "-r", str(rate), "-c", "1", "-L", "-",
               "-t", "raw", "-e", "signed-integer", "-b", "16", "-c", "1",
               "-r", str(SAMPLE_RATE), "-L", "-"]
    result = subprocess.run(command, input=mono.tobytes(), capture_output=True, check=False)
    if result.returncode != 0:
        return None
    return np.frombuffer(result.stdout, dtype="<i2")


def _decode_native(data: bytes) -> np.ndarray | None:
    """Decode in-process when the file is already 16 kHz; ``None`` when sox is needed."""
    try:
        import soundfile
    except ImportError:  # pragma: no cover - soundfile is a dependency, but sox suffices
        return None
    try:
        with soundfile.SoundFile(io.BytesIO(data)) as f:
            if f.samplerate != SAMPLE_RATE or f.subtype not in ("PCM_16", "PCM_S8", "PCM_U8"):
                return None
            samples = f.read(dtype="int16", always_2d=True)
    except Exception:
        return None
    if samples.shape[1] == 1:
        return samples[:, 0].copy()
    return None  # mixing channels down is sox's job, so both paths give the same result


def decode_with_sox(data: bytes, name: str) -> np.ndarray:
    filetype = SOX_TYPES.get(Path(name).suffix.lower())
    command = [sox_binary(), "-R", "-V1"]
    command += ["-t", filetype] if filetype else []
    command += ["-", "-t", "raw", "-e", "signed-integer", "-b", "16", "-c", "1",
                "-r", str(SAMPLE_RATE), "-L", "-"]
    result = subprocess.run(command, input=data, capture_output=True, check=False)
    if result.returncode != 0 or (not result.stdout and data):
        message = " ".join(result.stderr.decode(errors="replace").split()) or "no output"
        raise AudioError(f"sox could not decode {name}: {message}")
    return np.frombuffer(result.stdout, dtype="<i2")


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


def read_wav(path: str | Path) -> np.ndarray:
    """Samples of a 16 kHz mono 16-bit WAV written by asrkit."""
    with wave.open(str(path), "rb") as w:
        if (w.getframerate(), w.getnchannels(), w.getsampwidth()) != (SAMPLE_RATE, 1, 2):
            raise AudioError(f"{path} is not 16 kHz mono 16-bit")
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
