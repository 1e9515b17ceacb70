"""``asrkit train -o features=NAME``: a model on another extractor, recorded in the run; one-line
errors for an extractor that is not installed or cannot be used."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

import pytest

from asrkit import hookimpl
from asrkit.types import FeatureConfig, FeatureExtractor


@dataclass(frozen=True)
class Unframed:
    """Settings that declare no framing (the docs' old example)."""

    floor: float = 1e-10


class Undeclared(FeatureExtractor):
    name = "undeclared"
    description = "an extractor whose settings declare no framing"
    Config = Unframed

    def num_features(self, config):
        return 1

    def extract(self, audio, config):
        raise AssertionError("never reached: the framing is checked before")


class Ones(FeatureExtractor):
    name = "ones"
    description = "one constant feature a frame, framed as declared"
    Config = FeatureConfig

    def num_features(self, config):
        return 1

    def extract(self, audio, config):
        import tensorflow as tf

        return tf.ones([self.num_frames(tf.size(audio), config), 1])


@hookimpl
def register_features(register):
    register(Undeclared())
    register(Ones())


@pytest.fixture
def cli(datasets, monkeypatch, make_plugins, asrkit_cli):
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    plugins = make_plugins(sys.modules[__name__], entry_points=True)
    return lambda *args: asrkit_cli([str(a) for a in args], plugins)


def last_line(result) -> str:
    return result.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("settings, error", [
    (["features=nosuch"], "asrkit: error: no feature named 'nosuch' is installed (installed: "
                          "logmel, mfcc, ones, undeclared); see `asrkit plugins`"),
    (["features=undeclared"], "asrkit: error: feature settings Unframed declare no sample_rate, "
                              "window_ms, step_ms: a feature extractor's Config must declare "
                              "sample_rate, window_ms and step_ms (subclass "
                              "asrkit.types.FeatureConfig; see docs/hooks-data.md)"),
    (["features=ones", "features.sample_rate=8000"],
     "asrkit: error: features 'ones': features at 8000 Hz; asrkit decodes all audio to 16000 "
     "Hz (set -o features.sample_rate=16000)"),
    (["features=ones", "features.num_mel_bins=40"],
     "asrkit: error: unknown setting 'num_mel_bins' for FeatureConfig; known: sample_rate, "
     "step_ms, window_ms"),
], ids=["not-installed", "no-framing", "other-rate", "other-settings"])
def test_an_unusable_extractor_is_one_line_before_any_work(cli, tmp_path, settings, error):
    run = tmp_path / "run"
    result = cli("train", *[arg for s in settings for arg in ("-o", s)], "--run-dir", run)
    assert result.exit_code == 1
    assert result.stderr.strip() == error
    assert not (run / "config.json").exists()


def test_the_presets_feature_settings_stay_with_the_models_own_extractor(datasets, monkeypatch,
                                                                         tmp_path):
    from asrkit.config.overrides import parse_overrides
    from asrkit.config.run import build_run_config
    from asrkit.features import LogMelConfig, MFCCConfig
    from asrkit.runs.run import new_run

    def run(settings, folder):
        config, note = build_run_config({}, parse_overrides(settings))
        return new_run(config, folder, note)

    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    own = run(["preset=cpu"], tmp_path / "own")
    assert own.train.features == "mfcc" and own.feature_config == MFCCConfig(normalize="utterance")
    other = run(["preset=cpu", "features=logmel", "features.num_mel_bins=40"],
                tmp_path / "other")
    assert other.train.features == "logmel" and other.extractor.name == "logmel"
    assert other.feature_config == LogMelConfig(num_mel_bins=40)  # no whitening from brnn's
    assert "its mfcc settings are not applied to logmel" in other.preset_note
    assert other.feature_width == 40
    assert other.model_config.n_hidden == 256  # the rest of the preset applies


def test_a_run_whose_extractor_changed_width_is_one_line(cli, tmp_path):
    from asrkit.config.pipeline import PipelineConfig
    from asrkit.config.run import RunConfig
    from asrkit.config.train import TrainConfig
    from asrkit.core.text import Alphabet
    from asrkit.features import MFCCConfig
    from asrkit.models.brnn import BRNNConfig
    from asrkit.runs.run import Run, load_run

    folder = tmp_path / "run"
    Run(folder, RunConfig(TrainConfig(features="mfcc"), BRNNConfig(), MFCCConfig(),
                          PipelineConfig()), Alphabet()).save()
    config = json.loads((folder / "config.json").read_text())
    assert config["num_features"] == 26
    (folder / "config.json").write_text(json.dumps({**config, "num_features": 13}))
    result = cli("evaluate", folder)
    assert result.exit_code == 1
    assert last_line(result) == (
        f"asrkit: error: {folder} was trained on 13 features a frame from extractor 'mfcc', "
        "which now gives 26: install the version of its plugin the run was trained with")

    # A run saved before the extractor was recorded reads its model's own.
    del config["train"]["features"], config["num_features"]
    (folder / "config.json").write_text(json.dumps(config))
    old = load_run(folder)
    assert old.train.features == "mfcc" and old.feature_width is None
    assert old.num_features() == 26
