"""A recording as a stream of 16 kHz mono int16 blocks, so that memory holds a block, not a file.

Why: decoding a file whole before transcribing it holds its encoded bytes and all of its
samples at once; a 10-hour 48 kHz stereo recording is gigabytes. A stream holds one block
(:data:`BLOCK_SECONDS`) and whatever its reader keeps.

A stream's samples are exactly those :func:`asrkit.dataset.audio.decode` returns for the whole
file, because it picks its decoder the same way and in the same order:

``native``
    16 kHz mono 8- or 16-bit PCM that libsndfile reads: read in-process (``soundfile``).
``sox``
    Anything else: a ``sox`` process reads the file and writes raw PCM to a pipe, mixing the
    channels down and resampling.
``libsndfile``
    What sox cannot read but libsndfile can (Ogg Opus, which Debian's sox lacks): libsndfile
    decodes in-process, the channels are averaged, and a sox process fed by a thread resamples.

Every sox process is a :class:`asrkit.dataset.audio.SoxProcess`, the one that decodes an import's
files: it is killed, if still running, and reaped when its stream is closed, whether it finished,
failed or was abandoned by its reader (an error in the model, an interrupt), so none outlives the
stream or lingers as a zombie. One that writes nothing for
:data:`asrkit.dataset.audio.SOX_STALL_SECONDS` while the stream waits for it is hung: it is
killed, and the stream ends with a one-line :class:`AudioError` naming the file. One that has
written all its output and does not exit within
:data:`asrkit.core.process.EXIT_SECONDS` is killed too.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from asrkit.core.frames import SAMPLE_RATE
from asrkit.dataset.audio import RAW_OUTPUT, SOX_TYPES, AudioError, SoxProcess

#: Samples read at a time: small next to any window, large enough that reading costs nothing.
BLOCK_SECONDS = 1.0
#: The decoders, in the order they are tried.
NATIVE, SOX, LIBSNDFILE = "native", "sox", "libsndfile"
#: libsndfile subtypes read in-process when at the right rate (what ``dataset.audio`` reads so).
NATIVE_SUBTYPES = ("PCM_16", "PCM_S8", "PCM_U8")


class AudioStream:
    """The samples of one file as int16 blocks, from one decoder. Use it as a context manager:
    leaving it stops the decoder's sox process, however the reading ended."""

    def __init__(self, path: Path, decoder: str, rate: int = SAMPLE_RATE,
                 block_seconds: float = BLOCK_SECONDS) -> None:
        self.path = path
        self.decoder = decoder
        self.rate = rate
        self.block = max(1, int(block_seconds * rate))
        self._blocks: Iterator[np.ndarray] | None = None

    def __enter__(self) -> Iterator[np.ndarray]:
        read = {NATIVE: self._native, SOX: self._sox, LIBSNDFILE: self._libsndfile}[self.decoder]
        self._blocks = read()
        return self._blocks

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the blocks. A reader holds its sox process in a ``with`` inside the file
        libsndfile reads, so the process is stopped and reaped, and its feeder thread ended,
        before that file is closed: no thread reads a closed file."""
        if isinstance(self._blocks, Generator):
            self._blocks.close()

    def _native(self) -> Iterator[np.ndarray]:
        import soundfile

        with soundfile.SoundFile(str(self.path)) as f:
            while len(block := f.read(self.block, dtype="int16", always_2d=True)):
                yield block[:, 0].copy()

    def _sox(self) -> Iterator[np.ndarray]:
        filetype = SOX_TYPES.get(self.path.suffix.lower())
        arguments = ["-t", filetype] if filetype else []
        arguments += ["-", *RAW_OUTPUT, "-r", str(self.rate), "-L", "-"]
        # sox reads the file as its standard input, as dataset.audio feeds it the bytes, so that
        # no file name can be taken for one of sox's special names ("-d", "-n").
        with SoxProcess.streaming(arguments, self.path, self.path.name) as sox:
            yield from self._read(sox, f"sox could not decode {self.path.name}", required=True)

    def _libsndfile(self) -> Iterator[np.ndarray]:
        import soundfile

        with soundfile.SoundFile(str(self.path)) as f:
            blocks = (b.mean(axis=1).astype("<f4")
                      for b in f.blocks(self.block, dtype="float32", always_2d=True))
            if f.samplerate == self.rate:
                for mono in blocks:
                    yield np.clip(np.round(mono * 32768.0), -32768, 32767).astype(np.int16)
                return
            arguments = ["-t", "f32", "-r", str(f.samplerate), "-c", "1", "-L", "-",
                         *RAW_OUTPUT, "-r", str(self.rate), "-L", "-"]
            source = (mono.tobytes() for mono in blocks)  # written to sox by its feeder thread
            with SoxProcess.streaming(arguments, source, self.path.name) as sox:
                yield from self._read(sox, f"sox could not resample {self.path.name}",
                                      required=False)
                if sox.input_error is not None:
                    raise AudioError(f"libsndfile could not decode {self.path.name}: "
                                     f"{_one_line(sox.input_error)}")

    def _read(self, sox: SoxProcess, what: str, required: bool) -> Iterator[np.ndarray]:
        """sox's output in blocks; an :class:`AudioError` at the end when sox failed, or wrote
        nothing though ``required`` (a file it decodes to nothing is a file it cannot read, as
        ``dataset.audio`` reports it)."""
        produced = False
        while data := sox.read(2 * self.block):
            produced = True
            yield np.frombuffer(data[:len(data) // 2 * 2], dtype="<i2")
        code = sox.finish()
        if code != 0 or (required and not produced):
            failure = sox.message() or (f"sox exited with status {code}" if code else "no output")
            raise AudioError(f"{what}: {failure}")


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


@dataclass(frozen=True)
class Measured:
    """What a first reading of a file found: the decoder that reads it, its length in samples,
    and the samples themselves when there are few enough to keep."""

    decoder: str
    samples: int
    kept: np.ndarray | None


def measure_audio(path: Path, keep: int, rate: int = SAMPLE_RATE) -> Measured:
    """Read ``path`` once with the first decoder that reads it, counting its samples and keeping
    them only if there are at most ``keep`` (memory: ``keep`` samples and a block). When none
    can, sox's error, as ``dataset.audio.decode`` reports it: a native read that fails goes on
    to sox, and libsndfile's failure after sox's leaves sox's message."""
    error: AudioError | None = None
    for decoder in _decoders(path, rate):
        try:
            return _count(AudioStream(path, decoder, rate), keep)
        except AudioError as failed:
            error = error or failed
        except Exception:
            if decoder == SOX:  # sox missing, the file unreadable: not a decoding failure
                raise
    assert error is not None
    raise error


def first_decoder(path: Path, rate: int = SAMPLE_RATE) -> str:
    """The decoder a stream of ``path`` reads with (it is read once: no second try)."""
    return _decoders(path, rate)[0]


def _decoders(path: Path, rate: int) -> list[str]:
    """The decoders to try: in-process when libsndfile sees PCM at the right rate in one
    channel, else sox and then libsndfile (``dataset.audio.decode``'s order)."""
    import soundfile

    try:
        info = soundfile.info(str(path))
    except Exception:  # not a format libsndfile knows
        return [SOX, LIBSNDFILE]
    if info.samplerate == rate and info.subtype in NATIVE_SUBTYPES and info.channels == 1:
        return [NATIVE, SOX, LIBSNDFILE]
    return [SOX, LIBSNDFILE]


def _count(stream: AudioStream, keep: int) -> Measured:
    """Read a stream to its end, keeping its samples while there are at most ``keep``."""
    kept: list[np.ndarray] | None = []
    total = 0
    with stream as blocks:
        for block in blocks:
            total += len(block)
            if kept is not None:
                kept.append(block)
                if total > keep:
                    kept = None
    samples = None if kept is None else np.concatenate([np.empty(0, np.int16), *kept])
    return Measured(stream.decoder, total, samples)
