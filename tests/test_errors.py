"""One error format everywhere: every failure of the command line is one ``asrkit: error:``
line (usage errors exit 2, the rest 1), Ctrl-C is ``asrkit: interrupted`` (130), and the
traceback appears only when asked for (``-v``/``--verbose``, ``ASRKIT_DEBUG=1``). The
operating system's errors are real ones wherever the system can produce them."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import click
import pytest

from asrkit import hookimpl
from asrkit.core.errors import AsrkitError, describe_os_error
from asrkit.plugins import PluginSet
from asrkit.registry import Provider
from tests.toy_importer import registered_twice


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def command_plugin(callback):
    """A plugin adding ``asrkit fail``, which runs ``callback``."""

    class Failing:
        @hookimpl
        def register_commands(self, cli):
            cli.add_command(click.Command("fail", callback=callback))

    return Failing()


def run_failing(make_plugins, asrkit_cli, callback, *args: str):
    plugins = make_plugins(command_plugin(callback))
    return asrkit_cli([*args, "fail"], plugins)


# -- usage errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "message", "where"), [
    (["trian"], "no command 'trian'; did you mean 'train'?", "asrkit"),
    (["import", "nosuch"], "no importer 'nosuch'; installed: ", "asrkit import"),
    (["import", "sampel"], "no importer 'sampel'; did you mean 'sample'?", "asrkit import"),
    (["train", "--batch-size", "x"], "Invalid value for '--batch-size'", "asrkit train"),
    (["import", "sample", "--jobs", "0"], "Invalid value for '--jobs'", "asrkit import sample"),
    (["evaluate"], "Missing argument 'RUN'", "asrkit evaluate"),
    (["--bogus"], "No such option '--bogus'", "asrkit"),
    # A duration that is not a number passed click's ranges (nan compares false with any bound).
    (["import", "sample", "--max-duration", "nan"],
     "Invalid value for '--max-duration': 'nan' is not a finite number", "asrkit import sample"),
    (["transcribe", "README.md", "--model", "asrkit", "--chunk-seconds", "inf"],
     "Invalid value for '--chunk-seconds': 'inf' is not a finite number", "asrkit transcribe"),
    (["transcribe", "README.md", "--model", "asrkit", "--overlap-seconds", "nan"],
     "Invalid value for '--overlap-seconds': 'nan' is not a finite number", "asrkit transcribe"),
])
def test_usage_error_is_one_line_exit_2(make_plugins, asrkit_cli, args, message, where):
    plugins = make_plugins(entry_points=True)
    result = asrkit_cli(args, plugins)
    assert result.exit_code == 2
    assert result.stdout == ""
    (line,) = lines(result.stderr)
    assert line.startswith(f"asrkit: error: {message}")
    assert line.endswith(f"(see {where} --help)")


def test_no_command_prints_the_help(make_plugins, asrkit_cli):
    result = asrkit_cli([], make_plugins(entry_points=True))
    assert result.exit_code == 0
    assert result.stdout.startswith("Usage: asrkit") and "--verbose" in result.stdout


def test_withheld_importer_says_why(make_plugins, asrkit_cli):
    plugins = registered_twice()
    result = asrkit_cli(["import", "toy"], plugins)
    assert result.exit_code == 2
    assert lines(result.stderr)[-1].startswith(
        "asrkit: error: importer 'toy' is registered by both dist-one (plugin 'one') and "
        "dist-two (plugin 'two')")


# -- other errors: one line, exit 1, the traceback only when asked -----------------------------


def test_asrkit_error_is_one_line(make_plugins, asrkit_cli):
    def fail():
        raise AsrkitError("the dataset is missing;\nimport it first")

    result = run_failing(make_plugins, asrkit_cli, fail)
    assert result.exit_code == 1
    assert lines(result.stderr) == ["asrkit: error: the dataset is missing; import it first"]


def test_bug_in_asrkit_is_one_line(asrkit_cli):
    """An unexpected error in asrkit's own code (here a command of asrkit's distribution)."""

    def fail():
        raise RuntimeError("invariant broken")

    plugins = PluginSet()
    plugins.add_module(command_plugin(fail), Provider("own", "asrkit", "0"))
    result = asrkit_cli(["fail"], plugins)
    assert result.exit_code == 1
    assert lines(result.stderr) == [
        "asrkit: error: unexpected RuntimeError: invariant broken "
        "(rerun with --verbose for the traceback)"
    ]


@pytest.mark.parametrize("flag", ["-v", "--verbose", None])
def test_verbose_prints_the_traceback(make_plugins, asrkit_cli, monkeypatch, flag):
    def fail():
        raise RuntimeError("invariant broken")

    if flag is None:
        monkeypatch.setenv("ASRKIT_DEBUG", "1")
    result = run_failing(make_plugins, asrkit_cli, fail, *([flag] if flag else []))
    assert result.exit_code == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert 'raise RuntimeError("invariant broken")' in result.stderr
    assert lines(result.stderr)[-1].startswith("asrkit: error: plugin 'Failing' (distribution "
                                               "test 0) failed: RuntimeError: invariant broken")


def test_verbose_flag_belongs_before_the_command(make_plugins, asrkit_cli):
    result = asrkit_cli(["fail", "-v"], make_plugins(command_plugin(lambda: None)))
    assert result.exit_code == 2 and "Traceback" not in result.stderr


# -- the operating system's errors, each one line ----------------------------------------------


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_disk_full(make_plugins, asrkit_cli):
    """/dev/full answers every write with a real ENOSPC."""

    def fail():
        Path("/dev/full").write_text("x" * 100_000)

    result = run_failing(make_plugins, asrkit_cli, fail)
    assert result.exit_code == 1
    (line,) = lines(result.stderr)
    assert re.fullmatch(r"asrkit: error: disk full writing /dev/full \(\d+ MiB free on that "
                        r"filesystem\); free space and rerun to continue", line), line


def unwritable(tmp_path: Path) -> Path:
    """A path whose creation the system refuses with EACCES: in a read-only folder for a
    normal user; root passes permission checks, but not sysfs's."""
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o555)
    for candidate in (folder / "out.txt", Path("/sys/asrkit-test")):
        try:
            candidate.write_text("x")
        except PermissionError:
            return candidate
        except OSError:
            continue
        candidate.unlink()
    pytest.skip("no path here refuses writing with EACCES")


def test_not_writable(make_plugins, asrkit_cli, tmp_path):
    path = unwritable(tmp_path)
    result = run_failing(make_plugins, asrkit_cli, lambda: path.write_text("x"))
    assert result.exit_code == 1
    assert lines(result.stderr) == [
        f"asrkit: error: {path} is not writable (permission denied); fix its permissions or "
        "write somewhere else"
    ]


def test_file_where_a_folder_should_be(make_plugins, asrkit_cli, tmp_path):
    (tmp_path / "runs").write_text("not a folder")
    run = tmp_path / "runs" / "brnn-1"
    result = run_failing(make_plugins, asrkit_cli, lambda: run.mkdir(parents=True))
    assert result.exit_code == 1
    assert lines(result.stderr) == [
        f"asrkit: error: {tmp_path / 'runs'} is a file, but {run} needs it to be a folder; "
        "move it away or choose another path"
    ]
    exists = run_failing(make_plugins, asrkit_cli, lambda: os.makedirs(tmp_path / "runs"))
    assert lines(exists.stderr) == [
        f"asrkit: error: {tmp_path / 'runs'} is a file where a folder is needed; move it away "
        "or choose another path"
    ]


def test_read_only_filesystem(make_plugins, asrkit_cli, tmp_path):
    """No read-only filesystem can be mounted here: the error is raised as the system would."""
    target = tmp_path / "out.txt"

    def fail():
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(target))

    result = run_failing(make_plugins, asrkit_cli, fail)
    assert result.exit_code == 1
    assert lines(result.stderr) == [
        f"asrkit: error: {target} is on a read-only filesystem; write somewhere else"
    ]


def test_out_of_memory(make_plugins, asrkit_cli):
    result = run_failing(make_plugins, asrkit_cli, lambda: bytearray(1 << 62))
    assert result.exit_code == 1
    assert lines(result.stderr) == [
        "asrkit: error: out of memory; free memory or make the work smaller (e.g. a smaller "
        "--batch-size or fewer --jobs) and rerun"
    ]


def test_other_os_errors_are_left_to_the_other_reports(tmp_path):
    assert describe_os_error(OSError(errno.EIO, "Input/output error", str(tmp_path))) is None
    missing = FileNotFoundError(errno.ENOENT, "No such file", str(tmp_path / "x"))
    assert describe_os_error(missing) == f"no such file or folder: {tmp_path / 'x'}"


# -- interruptions -----------------------------------------------------------------------------


def test_interrupt_is_one_line_exit_130(make_plugins, asrkit_cli):
    def fail():
        click.echo("stopped after epoch 3; asrkit train --resume runs/x continues", err=True)
        raise KeyboardInterrupt

    result = run_failing(make_plugins, asrkit_cli, fail)
    assert result.exit_code == 130
    assert lines(result.stderr) == [
        "stopped after epoch 3; asrkit train --resume runs/x continues",
        "asrkit: interrupted",
    ]


def test_interrupt_while_building_the_command_line(make_plugins, asrkit_cli):
    class Interrupted:
        @hookimpl
        def register_commands(self, cli):
            raise KeyboardInterrupt

    result = asrkit_cli(["--help"], make_plugins(Interrupted()))
    assert result.exit_code == 130
    assert lines(result.stderr) == ["asrkit: interrupted"]
