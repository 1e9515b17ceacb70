"""``asrkit export --force`` replaces only an export asrkit made: never the current folder, the
run, or a folder holding the user's own files (each refused in one line, nothing deleted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_faults_data import one_line_error, snapshot
from tests.test_transcribe import make_tiny_run


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A user's project folder with a run inside it."""
    folder = tmp_path_factory.mktemp("project")
    (folder / "README.md").write_text("my project\n")
    make_tiny_run(folder / "run")
    return folder


def test_force_refuses_the_current_folder(cli, project, monkeypatch):
    before = snapshot(project)
    monkeypatch.chdir(project)
    for args in (["--force"], []):
        line = one_line_error(cli(["export", "run", "--output", ".", *args]))
        assert "current folder" in line
        assert snapshot(project) == before


def test_force_refuses_the_run_and_the_users_folders(cli, project, tmp_path):
    before = snapshot(project)
    line = one_line_error(cli(["export", project / "run", "-o", project / "run", "--force"]))
    assert "holds the run" in line
    line = one_line_error(cli(["export", project / "run", "-o", project, "--force"]))
    assert "holds the run" in line
    assert snapshot(project) == before

    models = tmp_path / "models"
    models.mkdir()
    (models / "other-model.tflite").write_bytes(b"someone else's model")
    line = one_line_error(cli(["export", project / "run", "-o", models, "--force"]))
    assert "not made by asrkit" in line
    assert (models / "other-model.tflite").read_bytes() == b"someone else's model"


def test_force_replaces_an_export_asrkit_made(cli, project, tmp_path):
    target = tmp_path / "exported"
    assert cli(["export", project / "run", "-o", target, "--format", "tflite"]).exit_code == 0
    assert (target / ".asrkit-output").is_file()
    replaced = cli(["export", project / "run", "-o", target, "--force"])
    assert replaced.exit_code == 0, replaced.stderr
    assert (target / "saved_model.pb").exists() and not (target / "model.tflite").exists()
    (target / "notes.txt").write_text("what I measured\n")
    line = one_line_error(cli(["export", project / "run", "-o", target, "--force"]))
    assert "notes.txt" in line and "asrkit did not write" in line
    assert (target / "notes.txt").exists() and (target / "saved_model.pb").exists()
    assert not [p for p in Path(tmp_path).iterdir() if p.name.startswith(".exported.")]
