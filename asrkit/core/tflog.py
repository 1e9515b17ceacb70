"""TensorFlow's start-up chatter, kept off the terminal unless asked for.

Loading TensorFlow's native libraries logs through absl before anything can configure it:
``WARNING: All log messages before absl::InitializeLog() is called are written to STDERR``,
then ``I0000 00:00:... port.cc:153] oneDNN custom operations are on...``, ``Could not find cuda
drivers...`` and so on. ``TF_CPP_MIN_LOG_LEVEL`` (which asrkit sets to 3 unless the user did)
silences TensorFlow's later logging, but not these lines: they are written by the libraries'
static initialisers, at ``import tensorflow``, before TensorFlow reads the variable.

So the command line imports TensorFlow through :func:`install`: a finder that, the first time
anything imports ``tensorflow``, sends file descriptor 2 to a temporary file while that import
runs, then passes on everything written there except absl's lines below the log level
(``TF_CPP_MIN_LOG_LEVEL``'s, 3 unless the user set another): Python warnings and tracebacks,
and the errors the level lets through, still reach the terminal. Worker processes forked later
inherit the finder with the rest of the interpreter.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

#: absl's notice that it logs to stderr (a WARNING), and its lines: ``I0000 00:00:1796074007.08
#: 4684 port.cc:153] ...``, the letter the severity: INFO, WARNING, ERROR, FATAL.
ABSL_LINE = re.compile(
    rb"^(?:(?P<notice>WARNING): All log messages before absl::InitializeLog\(\) is called "
    rb"are written to STDERR|(?P<severity>[IWEF])\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^\]\s]+\] )"
)
#: ``TF_CPP_MIN_LOG_LEVEL``'s numbers: 0 shows everything, 1 hides INFO, 2 also WARNING, 3 also
#: ERROR.
SEVERITY = {b"I": 0, b"W": 1, b"E": 2, b"F": 3}


def is_hidden(line: bytes, min_level: int) -> bool:
    """Whether ``line`` is absl's, of a severity below ``min_level``."""
    match = ABSL_LINE.match(line)
    if match is None:
        return False
    severity = 1 if match["notice"] else SEVERITY[match["severity"]]
    return severity < min(min_level, 3)  # FATAL always shows


@contextlib.contextmanager
def filtered_stderr(min_level: int) -> Iterator[None]:
    """Hold what is written to file descriptor 2 (by Python or by native code) until the block
    ends, then write it out without absl's lines below ``min_level``."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [line for line in held.read().splitlines(keepends=True)
                    if not is_hidden(line, min_level)]
            if kept:
                os.write(2, b"".join(kept))


class _QuietLoader(importlib.abc.Loader):
    """The ``tensorflow`` package's own loader, run under :func:`filtered_stderr`."""

    def __init__(self, loader: Any, min_level: int) -> None:
        self.loader = loader
        self.min_level = min_level

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        try:
            with filtered_stderr(self.min_level):
                self.loader.exec_module(module)
        finally:  # the module keeps its real loader
            module.__loader__ = self.loader
            if module.__spec__ is not None:
                module.__spec__.loader = self.loader


class _QuietFinder(importlib.abc.MetaPathFinder):
    """Finds ``tensorflow`` once, the normal way, and hands it to :class:`_QuietLoader`."""

    def __init__(self, min_level: int) -> None:
        self.min_level = min_level

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name != "tensorflow":
            return None
        uninstall()
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _QuietLoader(spec.loader, self.min_level)
        return spec


def install(min_level: int) -> None:
    """Hide absl's lines below ``min_level`` (``TF_CPP_MIN_LOG_LEVEL``'s scale) written during
    the first ``import tensorflow`` of this process (and of worker processes forked from it);
    nothing to do when TensorFlow is loaded already."""
    if "tensorflow" in sys.modules:
        return
    uninstall()
    sys.meta_path.insert(0, _QuietFinder(min_level))


def uninstall() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _QuietFinder)]
