"""Fault injection for asrkit's own tests, kept out of the shipped code.

Python imports ``sitecustomize`` at start-up from the first folder on its path that has one; a
test that puts this folder (``tests.conftest.FAULTS``) on the ``PYTHONPATH`` of a process it
starts turns these variables into faults in that process and in the worker processes it starts:

- ``ASRKIT_TEST_KILL_AT_SAVE=STAGE[:N]``: end the process at once (exit status 9, as abruptly as
  ``kill -9``: nothing is flushed or cleaned up) at that stage of its N-th checkpoint save
  (default: the first); the stages are ``asrkit.train.checkpoints.SAVE_STAGES``.
- ``ASRKIT_TEST_ENOSPC_AFTER=N``: in each converting process, the write after N recordings fails
  with ENOSPC, as a full disk fails it.
- ``ASRKIT_TEST_STALL_AFTER_WAVS=N``: a converting process stops for good instead of writing
  its (N+1)-th recording (its other threads go on), for the test to kill it at that point.
- ``ASRKIT_TEST_KILL_AFTER_COPIES=N``: end the process at once (exit status 9) in the middle of
  its (N+1)-th file copy to a URL (an upload), after its ``.partial`` object is written and
  before it is renamed into place.

Not a fault, a measurement: ``ASRKIT_TEST_PEAK_FILE=PATH`` writes, at exit, the process's peak
resident memory with its waited-for children's, in KiB. Its own is ``VmHWM``, not
``ru_maxrss``: Linux carries ``ru_maxrss`` across ``exec``, so a process started by a large
pytest worker would report the worker's peak.
"""

from __future__ import annotations

import atexit
import errno
import os
import resource

_peak_file = os.environ.get("ASRKIT_TEST_PEAK_FILE")
if _peak_file:

    def _write_peak(path: str = _peak_file) -> None:
        with open("/proc/self/status") as status:
            own = int(status.read().split("VmHWM:")[1].split()[0])
        children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        with open(path, "w") as out:
            out.write(str(max(own, children)))

    atexit.register(_write_peak)

_kill_at = os.environ.get("ASRKIT_TEST_KILL_AT_SAVE")
if _kill_at:
    from asrkit.train import checkpoints

    _stage, _, _number = _kill_at.partition(":")

    def _kill(stage: str, save_number: int) -> None:
        if stage == _stage and save_number == int(_number or 1):
            os._exit(9)

    checkpoints._reached = _kill

_enospc_after = os.environ.get("ASRKIT_TEST_ENOSPC_AFTER")
if _enospc_after:
    from asrkit.importing import convert

    _written = 0

    def _full(path: object) -> None:
        global _written
        if _written >= int(_enospc_after or 0):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        _written += 1

    convert._before_write = _full

_stall_after = os.environ.get("ASRKIT_TEST_STALL_AFTER_WAVS")
if _stall_after:
    import threading

    from asrkit.importing import convert

    _converted = 0

    def _stall(path: object) -> None:
        global _converted
        if _converted >= int(_stall_after or 0):
            threading.Event().wait()
        _converted += 1

    convert._before_write = _stall

_kill_after_copies = os.environ.get("ASRKIT_TEST_KILL_AFTER_COPIES")
if _kill_after_copies:
    from asrkit.core import files

    _copies = 0

    def _killed_midway(partial: object, target: object) -> None:
        global _copies
        if _copies >= int(_kill_after_copies or 0):
            os._exit(9)
        _copies += 1

    files._before_rename = _killed_midway
