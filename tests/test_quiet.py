"""TensorFlow's start-up chatter stays off the terminal unless asked for.

TensorFlow's native libraries log through absl while they load (``WARNING: All log messages
before absl::InitializeLog() ...``, ``I0000 00:00:... port.cc:153] oneDNN custom operations
...``), before ``TF_CPP_MIN_LOG_LEVEL`` takes effect, so every command that computed printed
them. Checked with real ``asrkit train`` processes and stderr as the user sees it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from asrkit.core.tflog import ABSL_LINE
from tests.conftest import ROOT, TINY

TRAIN = ["train", "--dataset", "sample", "--epochs", "1", "--batch-size", "4", *TINY,
         "-o", "evaluate_dev=false", "--no-progress"]


def user_environment(home, **extra: str) -> dict[str, str]:
    """A user's environment: no asrkit or TensorFlow settings of their own."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ASRKIT_", "TF_CPP_", "TF_ENABLE_"))}
    return {**env, "ASRKIT_HOME": str(home), **extra}


def absl_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ABSL_LINE.match(line.encode())]


def asrkit(*args, env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "asrkit", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_train_prints_no_tensorflow_log_unless_asked(datasets, tmp_path):
    run = tmp_path / "run"
    quiet = asrkit(*TRAIN, "-o", "max_steps=2", "--run-dir", run, env=user_environment(datasets))
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert "finished after 2 steps" in quiet.stdout
    assert absl_lines(quiet.stderr) == [] and "absl" not in quiet.stderr, quiet.stderr
    assert quiet.stderr.strip() == ""

    asked = asrkit("-v", "train", "--resume", run, "-o", "max_steps=3", "--no-progress",
                   env=user_environment(datasets))
    assert asked.returncode == 0, asked.stderr[-3000:]
    assert "InitializeLog" in asked.stderr and absl_lines(asked.stderr)


def test_only_absl_lines_below_the_level_are_hidden(tmp_path):
    """What native code writes to file descriptor 2 while TensorFlow loads: absl's lines below
    TF_CPP_MIN_LOG_LEVEL go, everything else (errors at that level, Python's warnings) stays."""
    fake = tmp_path / "tensorflow"
    fake.mkdir()
    (fake / "__init__.py").write_text(textwrap.dedent("""
        import os, warnings
        os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are "
                    b"written to STDERR\\n")
        os.write(2, b"I0000 00:00:1796074007.083080    4684 port.cc:153] oneDNN on\\n")
        os.write(2, b"W0000 00:00:1796074007.083390    4684 stub.cc:31] a warning\\n")
        os.write(2, b"E0000 00:00:1796074007.083390    4684 platform.cc:52] an error\\n")
        warnings.warn("a Python warning")
    """))
    code = ("import sys; from asrkit.core import tflog; tflog.install(int(sys.argv[1])); "
            "import tensorflow; print('imported', file=sys.stderr)")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}

    def stderr(level: int) -> str:
        result = subprocess.run([sys.executable, "-c", code, str(level)], env=env,
                                capture_output=True, text=True, check=True)
        return result.stderr

    at_two = stderr(2)
    assert "oneDNN" not in at_two and "a warning" not in at_two and "InitializeLog" not in at_two
    assert "an error" in at_two and "a Python warning" in at_two
    assert at_two.rstrip().endswith("imported")
    assert "an error" not in stderr(3)
    at_zero = stderr(0)
    assert all(text in at_zero for text in ("InitializeLog", "oneDNN", "a warning", "an error"))
