"""Locks against real processes: a pid the kernel reuses or a reboot is not taken for the
lock's owner, a lock of another host is respected, and `asrkit unlock` removes only a lock
whose owner is gone."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from asrkit.core.errors import AsrkitError
from asrkit.core.locks import describe, folder_lock, lock_held, lock_path
from tests.conftest import ROOT

#: Takes the lock of argv[1] and sleeps, as a training does.
HOLDER = """\
import sys, time
from asrkit.core.locks import folder_lock
with folder_lock(sys.argv[1], "training"):
    print("held", flush=True)
    time.sleep(600)
"""


def start_ticks(pid: int) -> int:
    """Field 22 of /proc/PID/stat, read here as proc(5) says, not through asrkit."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def python(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get(
        "PYTHONPATH", "")]).rstrip(os.pathsep)}
    return subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, text=True, env=env)


@pytest.fixture
def processes():
    """Start processes that are killed at the end of the test, whatever happens."""
    started: list[subprocess.Popen] = []

    def start(*args: str) -> subprocess.Popen:
        started.append(python(*args))
        return started[-1]

    yield start
    for process in started:
        process.kill()
        process.wait()


def hold(processes, folder: Path) -> subprocess.Popen:
    holder = processes("-c", HOLDER, str(folder))
    assert holder.stdout.readline().strip() == "held"
    return holder


def kill(process: subprocess.Popen) -> None:
    """SIGKILL: the process lets go of its flock but leaves its lock file behind."""
    process.send_signal(signal.SIGKILL)
    process.wait()


def sleeper(processes) -> subprocess.Popen:
    process = processes("-c", "print('up', flush=True); import time; time.sleep(600)")
    assert process.stdout.readline().strip() == "up"
    return process


def record(folder: Path) -> dict:
    return json.loads(lock_path(folder).read_text())


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def test_the_lock_file_names_the_owner_process_by_pid_start_time_and_boot(processes, tmp_path):
    folder = tmp_path / "run"
    holder = hold(processes, folder)
    owner = record(folder)
    assert owner["pid"] == holder.pid and owner["host"] == socket.gethostname()
    assert owner["start_ticks"] == start_ticks(holder.pid)
    assert owner["boot_id"] == boot_id()
    assert lock_held(folder)


def test_a_pid_reused_by_another_process_does_not_hold_the_lock(processes, tmp_path):
    """The owner was killed with SIGKILL and its pid given to another process: the pid is
    alive, but its start time is not the owner's."""
    folder = tmp_path / "run"
    holder = hold(processes, folder)
    kill(holder)
    assert not lock_held(folder)
    other = sleeper(processes)
    owner = record(folder)
    assert start_ticks(other.pid) != owner.get("start_ticks")
    lock_path(folder).write_text(json.dumps({**owner, "pid": other.pid}))  # the pid, reused
    assert not lock_held(folder)


def test_a_lock_of_another_boot_is_stale_whoever_has_its_pid_now(tmp_path):
    folder = tmp_path / "run"
    lock_path(folder).write_text(json.dumps(
        {"pid": os.getpid(), "host": socket.gethostname(), "started": 0,
         "start_ticks": start_ticks(os.getpid()), "boot_id": "another-boot",
         "command": "asrkit train"}))
    assert not lock_held(folder)


def test_an_old_lock_file_without_a_start_time_is_judged_by_its_pid(processes, tmp_path):
    folder = tmp_path / "run"
    alive = sleeper(processes)
    old = {"pid": alive.pid, "host": socket.gethostname(), "started": 0, "command": "asrkit"}
    lock_path(folder).write_text(json.dumps(old))
    assert lock_held(folder)
    kill(alive)
    assert not lock_held(folder)


def test_a_lock_of_another_host_is_respected_and_names_its_owner_and_unlock(tmp_path):
    folder = tmp_path / "run"
    lock_path(folder).write_text(json.dumps(
        {"pid": 4242, "host": "node-7", "started": 0, "command": "asrkit train"}))
    assert lock_held(folder)
    with pytest.raises(AsrkitError) as refused, folder_lock(folder, "training"):
        pass
    assert str(refused.value) == (
        f"{folder} is locked by pid 4242 on node-7, since 1970-01-01 00:00:00 UTC: asrkit "
        f"train, and from {socket.gethostname()} one cannot tell whether that still runs; once "
        f"sure it has ended, run `asrkit unlock {folder} --force`")
    assert lock_path(folder).exists()


def test_unlock_refuses_while_the_owner_runs_and_removes_its_lock_once_killed(
        asrkit_cli, processes, tmp_path):
    folder = tmp_path / "run"
    holder = hold(processes, folder)
    for args in ([], ["--force"]):
        refused = asrkit_cli(["unlock", folder, *args])
        assert refused.exit_code == 1
        assert refused.stderr == (
            f"asrkit: error: {folder} is locked by {describe(record(folder))}, which still "
            "runs; wait for it to end (or stop it), then rerun\n")
        assert f"pid {holder.pid} on {socket.gethostname()}" in refused.stderr
        assert record(folder)["pid"] == holder.pid and holder.poll() is None

    kill(holder)
    removed = asrkit_cli(["unlock", folder])
    assert removed.exit_code == 0, removed.stderr
    assert removed.stdout.startswith(f"removed the lock of {folder} left by pid {holder.pid} ")
    assert not lock_path(folder).exists()
    again = asrkit_cli(["unlock", folder])
    assert (again.exit_code, again.stdout) == (0, f"{folder} is not locked\n")


def test_unlock_refuses_a_live_owner_even_when_nothing_holds_the_flock(
        asrkit_cli, processes, tmp_path):
    """The pid and start time are the owner's own: it runs, whatever the filesystem's flock
    says."""
    folder = tmp_path / "run"
    alive = sleeper(processes)
    lock_path(folder).write_text(json.dumps(
        {"pid": alive.pid, "host": socket.gethostname(), "started": 0,
         "start_ticks": start_ticks(alive.pid), "boot_id": boot_id(), "command": "asrkit x"}))
    refused = asrkit_cli(["unlock", folder, "--force"])
    assert refused.exit_code == 1
    assert last_line(refused.stderr).endswith("which still runs; wait for it to end (or stop "
                                              "it), then rerun")
    assert lock_path(folder).exists()


def test_unlock_takes_force_for_a_lock_of_another_host(asrkit_cli, tmp_path, capsys):
    folder = tmp_path / "datasets" / "sample"
    lock_path(folder).parent.mkdir(parents=True)
    lock_path(folder).write_text(json.dumps(
        {"pid": 4242, "host": "node-7", "started": 0, "command": "asrkit import sample"}))
    refused = asrkit_cli(["unlock", folder])
    assert refused.exit_code == 1
    assert refused.stderr.startswith(f"asrkit: error: {folder} is locked by pid 4242 on node-7")
    assert refused.stderr.strip().endswith(f"run `asrkit unlock {folder} --force`")
    assert len(refused.stderr.splitlines()) == 1 and lock_path(folder).exists()

    removed = asrkit_cli(["unlock", lock_path(folder), "--force"])  # the lock file named
    assert removed.exit_code == 0, removed.stderr
    assert removed.stdout == (f"removed the lock of {folder} left by pid 4242 on node-7, since "
                              "1970-01-01 00:00:00 UTC: asrkit import sample\n")
    assert not lock_path(folder).exists()
    with folder_lock(folder, "import"):  # taken as a fresh one: no stale lock to warn of
        pass
    assert "warning" not in capsys.readouterr().err
