"""A run folder saved by the version before the run configuration and the package's layout
changed (``tests/fixtures/runs/brnn-before-run-config``: a tiny ``brnn`` trained 4 steps on the
``sample`` corpus with the beam decoder, ``beam_width=4``) loads, scores exactly what that version
scored, and resumes.

The expected numbers and every hypothesis (``brnn-before-run-config.expected.json``) were written
by that version's ``asrkit evaluate RUN --split SPLIT [--decoder greedy] --json``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from asrkit import plugins
from asrkit.config.overrides import DecoderChoice
from asrkit.config.pipeline import PipelineConfig
from asrkit.config.train import TrainConfig
from asrkit.core.settings import to_dict
from asrkit.evaluation.evaluate import evaluate_run
from asrkit.runs.run import load_run

FIXTURE = Path(__file__).parent / "fixtures" / "runs" / "brnn-before-run-config"
EXPECTED = json.loads(FIXTURE.with_name(FIXTURE.name + ".expected.json").read_text())


@pytest.fixture
def old_run(datasets, monkeypatch, tmp_path):
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    folder = tmp_path / "run"
    shutil.copytree(FIXTURE, folder)
    return folder


def test_its_configuration_reads_as_it_was_saved(old_run):
    """Every setting it saved reads back as saved (under today's name); every setting added
    since reads as its default."""
    run = load_run(old_run)
    assert (run.train.model, run.train.preset, run.train.decoder) == ("brnn", "none", "beam")
    assert run.model_config.n_hidden == 24 and run.decoder.config.beam_width == 4
    saved = json.loads((old_run / "config.json").read_text())
    # Saved before best_by: its best checkpoint was chosen by early_stop_metric, and still is.
    saved["train"]["best_by"] = saved["train"].pop("early_stop_metric")
    assert run.train.best_by == "loss"
    # Saved before training objectives: a CTC run, whose objective has no settings.
    assert run.train.objective == "ctc" and "objective" not in saved
    defaults = {"train": TrainConfig(), "pipeline": PipelineConfig(),
                "model": plugins.get("model", "brnn").Config(),
                "features": plugins.get("feature", run.train.features).Config(),
                "decoder": plugins.get("decoder", "beam").Config(),
                "objective": plugins.get("objective", "ctc").Config()}
    for section, values in run.to_json().items():
        there = saved.get(section, {})
        assert {k: v for k, v in values.items() if k in there} == there, section
        added = {k: v for k, v in values.items() if k not in there}
        default = json.loads(json.dumps(to_dict(defaults[section])))
        assert added == {k: default[k] for k in added}, section


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_it_scores_what_it_scored(old_run, name):
    expected = EXPECTED[name]
    split, _, decoder = name.partition("-")
    evaluation = evaluate_run(old_run, split, DecoderChoice(decoder or None), progress=False)
    assert evaluation.decoder == expected["decoder"]
    assert evaluation.decoder_settings == expected["decoder_settings"]
    assert {u.id: u.hypothesis for u in evaluation.utterances} == expected["hypotheses"]
    assert (evaluation.wer, evaluation.cer) == (expected["wer"], expected["cer"])
    assert evaluation.loss == pytest.approx(expected["loss"], rel=1e-6)
    assert evaluation.checkpoint == expected["checkpoint"]


def test_it_resumes(old_run, asrkit_cli):
    result = asrkit_cli(["train", "--resume", old_run, "-o", "epochs=3", "--no-progress"])
    assert result.exit_code == 0, result.stderr
    latest = json.loads((old_run / "checkpoints" / "latest.json").read_text())
    assert latest["state"]["global_step"] == 6  # two more steps: the third epoch
