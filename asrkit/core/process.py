"""An outside program whose output is read as it comes, and which never outlives its reader.

Why: asrkit pipes untrusted data through outside programs (sox for audio, gzip for archives),
and a damaged file can hang either. A read of a hung program's pipe blocks forever, so every
wait for its output here is bounded: by a *stall* time (no byte for that long: it is hung,
however long the whole run may last, as when a recording of hours is streamed) and by a
*deadline* on the whole run (a one-shot decode). Either one kills the program and raises a
one-line error its caller words. Only time spent waiting counts: a reader busy with what it
read (a model on a window of audio) leaves the program blocked on a full pipe, which is no hang.

Its messages are read to their end by a thread that keeps the first :data:`MESSAGE_BYTES`, so a
program that writes many can neither fill a pipe and stop nor fill the memory or a disk. Its
input is a file it reads itself, or bytes written by a thread. However the reading ends (the end
of the output, enough of it, an error, an interrupt), leaving the context kills the program if it
still runs and reaps it: none outlives its reader or lingers as a zombie.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import subprocess
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, NoReturn, Self, TypeAlias, cast

from asrkit.core.errors import AsrkitError

#: How long a program may take to exit once its output ended, or to die once killed, and a
#: helper thread to end after it: an exit takes milliseconds.
EXIT_SECONDS = 10.0
#: A program's messages kept for its error report; one that writes more is not kept waiting.
MESSAGE_BYTES = 1 << 16
#: Messages, and output wanted whole, are read in pieces of this many bytes.
READ_BYTES = 1 << 16
#: Why the watchdog stopped a program: no output for the stall time, the whole run past the
#: deadline, no exit :data:`EXIT_SECONDS` after the output ended.
STALLED, OVERDUE, LINGERED = "stalled", "overdue", "lingered"
#: What a program reads: a file (its path, or open), bytes, or blocks of bytes (each kind of
#: bytes written to its input by a thread).
Source: TypeAlias = "Path | IO[bytes] | bytes | Iterable[bytes]"


class ProcessTimeout(AsrkitError):
    """An outside program was stopped by its watchdog (a subclass words it for its caller)."""


def describe(kind: str, seconds: float) -> str:
    """What the program did, for an error: ``produced nothing for 60 s``."""
    return {STALLED: f"produced nothing for {seconds:.0f} s",
            OVERDUE: f"took more than {seconds:.0f} s",
            LINGERED: f"did not exit {seconds:.0f} s after its output ended"}[kind]


class WatchedProcess:
    """``command`` reading ``source``, its output read with :meth:`read`, within ``stall``
    seconds a byte and ``deadline`` seconds in all (either ``None``: no bound), and at most
    ``limit`` bytes of it (past them it is stopped and :attr:`cut` set). Use it as a context
    manager: leaving it stops the program, however the reading ended."""

    def __init__(self, command: Sequence[str], source: Source, *, stall: float | None = None,
                 deadline: float | None = None, limit: int | None = None) -> None:
        self.stall, self.deadline, self.limit = stall, deadline, limit
        self.program = Path(command[0]).name
        self._ends = None if deadline is None else time.monotonic() + deadline
        #: Whether the output went past ``limit``, and the program was stopped.
        self.cut = False
        #: What went wrong producing the input blocks (final after :meth:`finish`).
        self.input_error: Exception | None = None
        self._count = 0
        self._ended = False
        self._messages = bytearray()
        self.process = _start(command, source)
        assert self.process.stdout is not None
        self._fd = self.process.stdout.fileno()
        self._poll = select.poll()  # not select(): a process with many files has fds past 1024
        self._poll.register(self._fd, select.POLLIN)
        self._keeper = threading.Thread(target=self._keep, daemon=True)
        blocks = _blocks(source)
        self._feeder = None if blocks is None else threading.Thread(
            target=self._feed, args=(blocks,), daemon=True)
        for thread in (self._keeper, self._feeder):
            if thread is not None:
                thread.start()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def read(self, size: int = -1) -> bytes:
        """The next ``size`` bytes of the output (all of it, when negative), fewer only at its
        end (a file's reads, which a reader of frames or of a tar stream expects, where a pipe
        gives what it has): ``b""`` once it ended or went past ``limit``."""
        chunks: list[bytes] = []
        got = 0
        while (size < 0 or got < size) and not self._ended:
            chunk = self._next(size - got if size >= 0 else READ_BYTES)
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def finish(self) -> int:
        """After the output ended: the exit status, once the helper threads are done (so that
        :meth:`message` and :attr:`input_error` are whole). A program that does not exit within
        :data:`EXIT_SECONDS` (nor by the deadline) is stopped, and :meth:`timed_out` raised."""
        wait, kind = self._allowance(EXIT_SECONDS, LINGERED)
        try:
            code = self.process.wait(wait)
        except subprocess.TimeoutExpired:
            self._fail(kind)
        self._join()
        return code

    def message(self) -> str:
        """The first :data:`MESSAGE_BYTES` of the program's messages, on one line (all it wrote
        once :meth:`finish` or :meth:`stop` returned)."""
        return " ".join(self._messages.decode(errors="replace").split())

    def stop(self) -> None:
        """Kill the program if it still runs and reap it, let the helper threads end, and close
        our ends of its pipes: the same whether it finished, failed or was abandoned."""
        self._ended = True
        if self.process.poll() is None:
            self.process.kill()
        # One stuck in the kernel is left rather than hang the caller.
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(EXIT_SECONDS)
        self._join()
        # A stream a thread still uses is left open: closing it under the thread could have
        # the thread use another file that reuses the descriptor.
        for stream, user in ((self.process.stdout, None), (self.process.stdin, self._feeder),
                             (self.process.stderr, self._keeper)):
            if stream is not None and (user is None or not user.is_alive()):
                with contextlib.suppress(OSError):  # a broken pipe's buffered bytes
                    stream.close()

    def timed_out(self, kind: str, seconds: float) -> Exception:
        """The error raised when the watchdog stopped the program (``kind``: :data:`STALLED`,
        :data:`OVERDUE` or :data:`LINGERED`): a subclass names what it was working on."""
        return ProcessTimeout(f"{self.program} {describe(kind, seconds)}, so it was stopped")

    def _next(self, most: int) -> bytes:
        """One read of the pipe, at most ``most`` bytes, after waiting for them."""
        self._await_output()
        chunk = os.read(self._fd, most)
        if not chunk:
            self._ended = True
        elif self.limit is not None and self._count + len(chunk) > self.limit:
            chunk = chunk[:self.limit - self._count]
            self.cut = True
            self.stop()  # what was wanted is in: the rest is never produced
        self._count += len(chunk)
        return chunk

    def _await_output(self) -> None:
        """Return once the output has a byte or has ended; past the stall time or the deadline,
        stop the program and raise :meth:`timed_out`'s error."""
        wait, kind = self._allowance(self.stall, STALLED)
        if wait is not None and (wait <= 0 or not self._poll.poll(math.ceil(wait * 1000))):
            self._fail(kind)

    def _allowance(self, wait: float | None, kind: str) -> tuple[float | None, str]:
        """``wait`` seconds for ``kind``, or what is left before the deadline when that is
        sooner (then :data:`OVERDUE`)."""
        if self._ends is None:
            return wait, kind
        left = max(0.0, self._ends - time.monotonic())
        return (left, OVERDUE) if wait is None or left <= wait else (wait, kind)

    def _fail(self, kind: str) -> NoReturn:
        self.stop()
        seconds = {STALLED: self.stall, OVERDUE: self.deadline, LINGERED: EXIT_SECONDS}[kind]
        raise self.timed_out(kind, seconds or 0.0)

    def _join(self) -> None:
        for thread in (self._feeder, self._keeper):
            if thread is not None:
                thread.join(EXIT_SECONDS)

    def _keep(self) -> None:
        """Read the program's messages to their end, keeping the first :data:`MESSAGE_BYTES`."""
        assert self.process.stderr is not None
        fd = self.process.stderr.fileno()
        while chunk := os.read(fd, READ_BYTES):
            self._messages += chunk[:max(0, MESSAGE_BYTES - len(self._messages))]

    def _feed(self, blocks: Iterable[bytes]) -> None:
        """Write the blocks to the program's input, then close it. A program that stopped
        reading (killed, or done with what it needed) is no error; the blocks' own failure (a
        decoder's) is kept in :attr:`input_error` for the reader."""
        stdin = self.process.stdin
        assert stdin is not None
        try:
            for block in blocks:
                if not _write(stdin, block):
                    break
        except Exception as error:  # libsndfile's errors are RuntimeErrors or format-specific
            self.input_error = error
        finally:
            with contextlib.suppress(OSError, ValueError):
                stdin.close()


def _start(command: Sequence[str], source: Source) -> subprocess.Popen[bytes]:
    """Start ``command`` with its input from a file it reads itself, or from a pipe."""
    if isinstance(source, Path):
        with source.open("rb") as file:  # the program has its own copy of the descriptor
            return _popen(command, file)
    if _blocks(source) is not None:
        return _popen(command, subprocess.PIPE)
    return _popen(command, cast("IO[bytes]", source))  # an open file


def _popen(command: Sequence[str], stdin: IO[bytes] | int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(list(command), stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def _blocks(source: Source) -> Iterable[bytes] | None:
    """What a thread writes to the program's input: ``None`` for a file it reads itself."""
    if isinstance(source, bytes):
        return [source]
    if isinstance(source, Path) or hasattr(source, "fileno"):
        return None
    return source


def _write(stream: IO[bytes], data: bytes) -> bool:
    """Write ``data``; ``False`` when the program no longer reads (its end of the pipe is gone,
    or ours was closed by :meth:`WatchedProcess.stop`)."""
    try:
        stream.write(data)
    except (OSError, ValueError):
        return False
    return True
