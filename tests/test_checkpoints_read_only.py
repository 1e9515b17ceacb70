"""Reading a run's checkpoints changes nothing in the run: a lookup that finds no checkpoint
leaves no empty folder behind (which a later ``--watch`` or a user would take for a record)."""

from __future__ import annotations

import shutil


def test_a_missing_best_by_checkpoint_leaves_no_folder(tiny_run, tmp_path, asrkit_cli):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    result = asrkit_cli(["transcribe", tiny_run.parent / "missing.wav", "--model", run,
                         "--checkpoint", "best-by-wer"])
    assert result.exit_code == 1
    assert "has no best-by-wer checkpoint" in result.stderr
    assert not (run / "watch").exists()
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before
