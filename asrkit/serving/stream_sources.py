"""Where a stream's audio comes from: a file (at its own pace or in real time), 16-bit PCM or a
WAV stream on standard input, a microphone. Each is an iterator of int16 blocks of 16 kHz mono
audio, a block at a time in memory; a source that cannot give that is refused in one line
before any audio is read."""

from __future__ import annotations

import sys
import time
import wave
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import numpy as np

from asrkit.core.errors import AsrkitError
from asrkit.core.frames import SAMPLE_RATE
from asrkit.serving.audio_stream import AudioStream, first_decoder

#: Seconds of audio a block holds: short, so that a stream's updates come as the audio does.
STREAM_BLOCK_SECONDS = 0.1
#: What raw audio on standard input must be (and how sox writes it).
RAW_FORMAT = "16-bit signed little-endian PCM, 16 kHz, mono"
SOX_HINT = "sox INPUT -t raw -r 16000 -c 1 -b 16 -e signed-integer -"


@contextmanager
def file_blocks(path: Path, block_seconds: float = STREAM_BLOCK_SECONDS
                ) -> Iterator[Iterator[np.ndarray]]:
    """A file of any format as 16 kHz mono int16 blocks, decoded as it is read
    (:class:`asrkit.serving.audio_stream.AudioStream`)."""
    with AudioStream(path, first_decoder(path), block_seconds=block_seconds) as blocks:
        yield blocks


def stdin_blocks(stream: BinaryIO | None = None, block_seconds: float = STREAM_BLOCK_SECONDS
                 ) -> Iterator[np.ndarray]:
    """Audio on standard input as int16 blocks: a WAV stream (its header says what it holds;
    16 kHz mono 16-bit only) or raw :data:`RAW_FORMAT`. The blocks end when the input closes;
    an odd last byte is dropped."""
    stream = stream if stream is not None else sys.stdin.buffer
    size = 2 * max(1, int(block_seconds * SAMPLE_RATE))
    head = _read(stream, 4)
    if head == b"RIFF":
        yield from _wav_blocks(_Prefixed(head, stream), size)
        return
    pending = head
    while True:
        data = _read(stream, size)
        pending += data
        whole = len(pending) // 2 * 2
        if whole:
            yield np.frombuffer(pending[:whole], "<i2").copy()
            pending = pending[whole:]
        if not data:
            return


def _wav_blocks(stream: BinaryIO, size: int) -> Iterator[np.ndarray]:
    try:
        reader = wave.open(stream, "rb")  # noqa: SIM115 (read to the end below)
    except (wave.Error, EOFError) as error:
        raise AsrkitError(f"standard input starts as a WAV file but is not one ({error})"
                          ) from None
    rate, channels, width = reader.getframerate(), reader.getnchannels(), reader.getsampwidth()
    if (rate, channels, width) != (SAMPLE_RATE, 1, 2):
        raise AsrkitError(f"standard input is WAV at {rate} Hz, {channels} channel(s), "
                          f"{8 * width}-bit; a stream must be 16 kHz mono 16-bit: convert it "
                          f"on the way with `{SOX_HINT}`")
    while True:
        data = reader.readframes(size // 2)
        if not data:
            return
        yield np.frombuffer(data[: len(data) // 2 * 2], "<i2").copy()


def check_raw_format(rate: int, channels: int) -> None:
    """A one-line error when raw standard input is said to be in another format than
    :data:`RAW_FORMAT`."""
    if (rate, channels) != (SAMPLE_RATE, 1):
        raise AsrkitError(f"raw audio on standard input at {rate} Hz and {channels} channel(s) "
                          f"cannot stream: it must be {RAW_FORMAT}; convert it on the way with "
                          f"`{SOX_HINT}`")


def paced(blocks: Iterable[np.ndarray], rate: int = SAMPLE_RATE) -> Iterator[np.ndarray]:
    """``blocks`` no faster than real time: each when the audio before its end has played, as a
    microphone would give them."""
    start, played = time.monotonic(), 0
    for block in blocks:
        played += len(block)
        delay = start + played / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        yield block


def microphone_blocks(device: str | None = None, block_seconds: float = STREAM_BLOCK_SECONDS
                      ) -> Iterator[np.ndarray]:
    """The default (or ``device``) microphone as int16 blocks, until interrupted. Needs the
    optional ``sounddevice`` library (``pip install 'asrkit[microphone]'``) and PortAudio."""
    try:
        import sounddevice
    except (ImportError, OSError) as error:
        raise AsrkitError(f"--microphone needs the sounddevice library and PortAudio "
                          f"({error}): pip install 'asrkit[microphone]'") from None
    frames = max(1, int(block_seconds * SAMPLE_RATE))
    try:
        stream = sounddevice.InputStream(samplerate=SAMPLE_RATE, channels=1, dtype="int16",
                                         blocksize=frames, device=device)
    except Exception as error:  # no such device, no input device at all
        raise AsrkitError(f"cannot open the microphone{f' {device!r}' if device else ''}: "
                          f"{' '.join(str(error).split())}") from None
    with stream:
        while True:
            data, _overflowed = stream.read(frames)
            yield np.asarray(data, np.int16).reshape(-1).copy()


def _read(stream: BinaryIO, size: int) -> bytes:
    """Up to ``size`` bytes, fewer only at the end of the input."""
    chunks, left = [], size
    while left:
        data = stream.read(left)
        if not data:
            break
        chunks.append(data)
        left -= len(data)
    return b"".join(chunks)


class _Prefixed:
    """A byte stream with bytes already read put back in front (``wave`` reads the header)."""

    def __init__(self, prefix: bytes, stream: BinaryIO) -> None:
        self._prefix, self._stream = prefix, stream

    def read(self, size: int = -1) -> bytes:
        if size < 0:
            data, self._prefix = self._prefix + self._stream.read(), b""
            return data
        head, self._prefix = self._prefix[:size], self._prefix[size:]
        return head + (self._stream.read(size - len(head)) if size > len(head) else b"")
