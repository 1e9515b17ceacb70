"""A disk that fills up during training is named as such, not as running out of memory."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import TINY

FULL = Path("/dev/full")  # a real device whose every write fails with ENOSPC


@pytest.mark.skipif(not FULL.exists(), reason="needs /dev/full")
def test_a_full_disk_during_training_is_one_line_naming_the_folder(
        datasets, asrkit_cli, monkeypatch, tmp_path):
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").symlink_to(FULL)  # the first metrics line of training hits it
    result = asrkit_cli(["train", "--epochs", "1", "--batch-size", "2", *TINY, "--no-progress",
                         "-o", "log_every=1", "-o", "evaluate_dev=false", "--run-dir", run])
    assert result.exit_code == 1
    folder = re.escape(str(run))
    assert re.fullmatch(
        rf"asrkit: error: disk full: no space left on device writing into {folder} "
        rf"\(\d+ MiB free there\); free some space, then continue with --resume {folder}",
        result.stderr.strip().splitlines()[-1]), result.stderr[-2000:]
    assert "out of memory" not in result.stderr
