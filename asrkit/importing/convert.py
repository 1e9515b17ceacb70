"""The conversion worker: one source member in, its utterances' WAV files out.

Runs in worker processes, so it imports only numpy and the audio module. Each WAV is written to
a temporary name and renamed into place: a killed import never leaves half a file under a final
name, and a rerun simply writes the member again.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from asrkit.core.frames import SAMPLE_RATE, fits
from asrkit.dataset.audio import cut, decode, wav_bytes
from asrkit.types import FeatureConfig

#: Linux's prctl option that sends a signal to a process when its parent dies.
PR_SET_PDEATHSIG = 1
#: How often a worker checks that the import that started it is still alive, in seconds.
PARENT_POLL_SECONDS = 0.5


@dataclass(frozen=True)
class SegmentJob:
    key: str  # "<split>/<id>"
    path: str  # output path relative to the dataset folder
    start: float | None
    end: float | None
    #: Transcript length in labels, for the CTC length check. No model is chosen at import, so
    #: the check is the loosest: 10 ms frames (asrkit's framing), none subsampled. A run checks
    #: its own model and features again (:mod:`asrkit.core.frames`).
    labels: int


@dataclass(frozen=True)
class SegmentResult:
    key: str
    samples: int
    size: int
    reason: str | None  # why it was skipped, or None
    detail: str = ""  # the decoder's own words, for unreadable audio


def convert_member(
    dataset: str, name: str, data: bytes, jobs: list[SegmentJob], max_seconds: float
) -> tuple[str, list[SegmentResult]]:
    """Decode ``data`` once, cut and write every segment of ``jobs``; return per-segment results.
    A member that cannot be decoded skips all its segments with the decoder's reason. Only the
    samples the jobs can use are decoded (:func:`samples_needed`), so a clip of hours that is
    refused as too long is never held whole."""
    try:
        samples = decode(data, name, samples_needed(jobs, max_seconds))
    except Exception as error:  # any decoder failure is reported, never fatal
        detail = " ".join(str(error).split())
        return name, [SegmentResult(job.key, 0, 0, "unreadable audio", detail) for job in jobs]
    results = []
    for job in jobs:
        piece = cut(samples, job.start, job.end)
        reason = None
        if len(piece) == 0:
            reason = "no audio"
        elif len(piece) > max_seconds * SAMPLE_RATE:
            reason = "too long"
        elif not fits(len(piece), job.labels, FeatureConfig()):
            reason = "too short for its transcript"
        if reason:
            results.append(SegmentResult(job.key, len(piece), 0, reason))
            continue
        encoded = wav_bytes(piece)
        target = Path(dataset) / job.path
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + f".{os.getpid()}.partial")
        try:
            _before_write(partial)
            partial.write_bytes(encoded)
        except OSError:
            partial.unlink(missing_ok=True)  # a full disk keeps no half file
            raise
        os.replace(partial, target)
        results.append(SegmentResult(job.key, len(piece), len(encoded), None))
    return name, results


def samples_needed(jobs: list[SegmentJob], max_seconds: float) -> int:
    """How many samples of a recording its ``jobs`` can use: up to the last segment's end, and
    for a segment without an end (a whole clip) one more than the longest kept, which is enough
    to tell that it is too long."""
    longest = math.floor(max_seconds * SAMPLE_RATE) + 1
    needed = 0
    for job in jobs:
        first = 0 if job.start is None else max(0, round(job.start * SAMPLE_RATE))
        end = first + longest if job.end is None else round(job.end * SAMPLE_RATE)
        needed = max(needed, end)
    return needed


def convert_batch(
    dataset: str, batch: list[tuple[str, bytes, list[SegmentJob]]], max_seconds: float
) -> list[tuple[str, list[SegmentResult]]]:
    """:func:`convert_member` over several members: one round trip to a worker process for many
    short files, so that inter-process overhead does not eat the parallel speed-up."""
    return [convert_member(dataset, name, data, jobs, max_seconds) for name, data, jobs in batch]


def _before_write(path: Path) -> None:
    """A converted recording is about to be written to ``path``. Does nothing: the tests of a
    full disk make it fail as a full disk does, in their own processes
    (``tests/faults/sitecustomize.py``)."""


def die_with_parent(parent: int) -> None:
    """Worker initializer: end this worker when the import ``parent`` ends, even by ``kill -9``
    (which runs no clean-up): otherwise workers blocked on the task queue wait for ever.
    Linux delivers SIGKILL on the parent's death (``PR_SET_PDEATHSIG``); elsewhere, and should
    the parent have died already, a thread watches the parent id change."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent,), name="watch-parent",
                     daemon=True).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_SECONDS)
    os._exit(1)
