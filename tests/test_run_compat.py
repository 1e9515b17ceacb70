"""A run made with one version of a model plugin, used after another version changed the
architecture: one line naming the plugin, both versions and what to install, never a
TensorFlow checkpoint traceback or a "damaged run" that is not damaged.

Real runs (a config, ``plugins.json`` and a TensorFlow checkpoint, as ``asrkit train`` leaves
them, built as in tests/test_transcribe.py's ``make_tiny_run``) and a real model plugin whose
distribution is released in three versions.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from asrkit.api import AsrkitError, ModelSpec, hookimpl, setting, validate
from asrkit.registry import Provider

DISTRIBUTION = "asrkit-model-grow"


@dataclass(frozen=True)
class GrowConfig:
    width: int = setting(8, min=1)

    def __post_init__(self) -> None:
        validate(self)


class Grow(ModelSpec):
    """``grow``: dense layers over MFCC frames. Version 1.0 has one hidden layer; 1.1 keeps
    the architecture; 2.0 adds a second hidden layer (a partial match of the old checkpoint);
    3.0 doubles the hidden width (every shape differs)."""

    name = "grow"
    description = "A model whose plugin changes its architecture between versions (tests)."
    Config = GrowConfig

    def __init__(self, version: str) -> None:
        self.version = version

    def build(self, config, num_features, num_classes):
        import keras

        width = config.width * (2 if self.version == "3.0" else 1)
        features = keras.Input(shape=(None, num_features))
        hidden = keras.layers.Dense(width, activation="relu", name="hidden")(features)
        if self.version == "2.0":
            hidden = keras.layers.Dense(width, activation="relu", name="hidden2")(hidden)
        logits = keras.layers.Dense(num_classes, name="logits")(hidden)
        return keras.Model(features, logits)


class GrowPlugin:
    def __init__(self, version: str) -> None:
        self.version = version

    @hookimpl
    def register_models(self, register):
        register(Grow(self.version))


@pytest.fixture
def installed(make_plugins):
    """``installed(version)``: the plugin set with ``asrkit-model-grow`` at ``version``."""

    def install(version: str):
        plugins = make_plugins(entry_points=True)
        plugins.add_module(GrowPlugin(version), Provider("grow", DISTRIBUTION, version))
        return plugins

    return install


def make_run(folder: Path) -> Path:
    """A run of ``grow`` made with the installed version: config, plugins.json, alphabet and a
    ``best`` checkpoint."""
    from asrkit.config.pipeline import PipelineConfig
    from asrkit.config.run import RunConfig
    from asrkit.config.train import TrainConfig
    from asrkit.core.text import Alphabet
    from asrkit.features import MFCCConfig
    from asrkit.runs.run import Run
    from asrkit.train.checkpoints import Checkpoints

    run = Run(folder, RunConfig(TrainConfig(model="grow"), GrowConfig(), MFCCConfig(),
                                PipelineConfig()), Alphabet())
    run.save()
    model = run.spec.build(run.model_config, run.extractor.num_features(run.feature_config),
                           run.alphabet.num_classes)
    Checkpoints(folder / "checkpoints", model=model).save("best", 3, {"global_step": 3})
    return folder


@pytest.fixture
def old_run(installed, tmp_path):
    installed("1.0")
    return make_run(tmp_path / "run")


def test_the_same_architecture_loads(old_run, installed):
    from asrkit.evaluation.restore import load_run_model

    installed("1.1")  # a new version that kept the architecture
    _run, model, state = load_run_model(old_run)
    assert state["global_step"] == 3 and model.get_layer("hidden").kernel.shape == (26, 8)


@pytest.mark.parametrize("version", ["2.0", "3.0"])
def test_a_changed_architecture_names_the_versions(old_run, installed, asrkit_cli, version):
    plugins = installed(version)
    result = asrkit_cli(["evaluate", old_run, "--split", "test", "--no-progress"], plugins)
    assert result.exit_code == 1
    assert result.stderr == (
        f"asrkit: error: {old_run} was made with model 'grow' of {DISTRIBUTION} 1.0, and "
        f"{version} is installed, whose 'grow' does not match its checkpoint; install the "
        f"version the run was made with (pip install '{DISTRIBUTION}==1.0') to use this run\n")


def test_a_checkpoint_that_does_not_match_with_the_same_version_is_not_blamed_on_it(
        old_run, installed, monkeypatch):
    """Same version, yet another architecture (a plugin changed without a new version): the
    checkpoint is reported as unusable, as before, without inventing a version to install."""
    from asrkit.evaluation.restore import load_run_model
    from asrkit.plugins import get

    installed("1.0")
    monkeypatch.setattr(get("model", "grow"), "version", "2.0")
    with pytest.raises(AsrkitError, match="no usable checkpoint") as error:
        load_run_model(old_run)
    assert "pip install" not in str(error.value)


def test_changed_settings_name_the_versions(old_run, installed, monkeypatch):
    """A new version that dropped a setting the run's config.json holds."""
    from asrkit.runs.run import load_run

    @dataclass(frozen=True)
    class Renamed:
        size: int = 8

    monkeypatch.setattr(Grow, "Config", Renamed)
    installed("2.0")
    with pytest.raises(AsrkitError, match=r"made with model 'grow' of asrkit-model-grow 1\.0, "
                                          r"and 2\.0 is installed, .* config\.json"):
        load_run(old_run)


def test_a_plugin_no_longer_installed_is_named(old_run, make_plugins, asrkit_cli):
    plugins = make_plugins(entry_points=True)
    result = asrkit_cli(["evaluate", old_run, "--no-progress"], plugins)
    assert result.exit_code == 1
    assert result.stderr == (
        f"asrkit: error: {old_run} was made with model 'grow' of {DISTRIBUTION} 1.0, which is "
        f"not installed; install it (pip install '{DISTRIBUTION}==1.0') to use this run\n")
