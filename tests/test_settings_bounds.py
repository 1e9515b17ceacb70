"""Every numeric setting has an upper bound, so that a mistyped ``-o`` value (a layer of a billion
units, a timeout that overflows TensorFlow's milliseconds) is a one-line error naming the
setting, the value and the maximum, before anything is built. A setting that needs no maximum
says why in :data:`UNBOUNDED`, so that the next setting added cannot forget."""

from __future__ import annotations

import ast
import types
import typing
from dataclasses import fields
from pathlib import Path

import pytest

from asrkit.config.pipeline import PipelineConfig, PipelineError
from asrkit.config.train import TrainConfig
from asrkit.core.errors import AsrkitError
from asrkit.core.settings import RANGE, Range, field_types, override
from asrkit.decoders.beam import BeamConfig
from asrkit.features import MFCCConfig
from asrkit.models.brnn import BRNNConfig
from asrkit.models.conformer_config import ConformerConfig
from asrkit.models.ds2 import DS2Config
from asrkit.plugins import PluginSet
from asrkit.types import FeatureConfig

PACKAGE = Path(__file__).resolve().parent.parent / "asrkit"

#: Numeric settings without a maximum, each with the reason none is needed.
UNBOUNDED = {
    "TrainConfig.min_delta": "only compared with a change of the dev loss or error rate in "
                             "Python; a huge one means no evaluation counts as an improvement",
    "TrainConfig.newbob_threshold": "only compared with a relative improvement in Python; any "
                                    "finite value is meaningful (below 0, above 1)",
}

#: (config, key, a value too large, the largest allowed, the error: setting, value, range).
TOO_LARGE = [
    (BRNNConfig, "n_hidden", "1000000000", "8192",
     "n_hidden=1000000000 is not allowed: must be an integer in [1, 8192]"),
    (TrainConfig, "worker_timeout", "1e300", "86400",
     "worker_timeout=1e+300 is not allowed: must be a number in (0, 86400]"),
    (TrainConfig, "max_steps", str(10**30), "1_000_000_000",
     f"max_steps={10**30} is not allowed: must be an integer in [0, 1_000_000_000]"),
    (TrainConfig, "batch_size", "100000", "4096",
     "batch_size=100000 is not allowed: must be an integer in [1, 4096]"),
    (TrainConfig, "max_minutes", "1e9", "527040",
     "max_minutes=1000000000.0 is not allowed: must be a number in [0, 527_040]"),
    (PipelineConfig, "shuffle_buffer", str(10**12), "1000000",
     "shuffle_buffer=1000000000000 is not allowed: must be an integer in [1, 1_000_000]"),
    (PipelineConfig, "speed_factors", "0.9,1e6", "0.9,4",
     "speed_factors=0.9,1000000.0 is not allowed: must be a number in [0.25, 4]"),
    (ConformerConfig, "subsampling_channels", "65536", "4096",
     "subsampling_channels=65536 is not allowed: must be an integer in [1, 4096]"),
    (DS2Config, "rnn_layers", "1000", "32",
     "rnn_layers=1000 is not allowed: must be an integer in [1, 32]"),
    (BeamConfig, "beam_width", "1000000", "10000",
     "beam_width=1000000 is not allowed: must be an integer in [1, 10000]"),
    (MFCCConfig, "fft_length", "1048576", "65536",
     "fft_length=1048576 is not allowed: must be an integer in [1, 65536]"),
]


@pytest.mark.parametrize(("config", "key", "value", "maximum", "message"), TOO_LARGE)
def test_a_value_above_the_maximum_is_one_line_naming_it(config, key, value, maximum, message):
    with pytest.raises(AsrkitError) as refused:
        override(config(), key, value)
    assert str(refused.value) == f"setting {message}"
    override(config(), key, maximum)  # the maximum itself is allowed


def test_the_issues_values_stop_a_run_configuration():
    """``-o model.n_hidden=1000000000`` and ``-o train.worker_timeout=1e300``, as ``asrkit
    train`` reads them."""
    from asrkit.config.overrides import parse_overrides
    from asrkit.config.run import build_run_config

    for pair, message in [
        ("model.n_hidden=1000000000", "setting n_hidden=1000000000 is not allowed: must be an "
                                      "integer in [1, 8192]"),
        ("train.worker_timeout=1e300", "setting worker_timeout=1e+300 is not allowed: must be a "
                                       "number in (0, 86400]"),
    ]:
        with pytest.raises(AsrkitError) as refused:
            build_run_config({}, parse_overrides([pair]))
        assert str(refused.value) == message


def test_pipeline_errors_keep_their_class():
    with pytest.raises(PipelineError, match=r"^setting prefetch=100000 is not allowed"):
        PipelineConfig(prefetch=100_000)


# -- every numeric setting has a maximum, or a reason ---------------------------------------------


def config_classes() -> list[type]:
    """The config classes of asrkit: the run's sections, and the ``Config`` of each of asrkit's
    own models, feature extractors, decoders, tokenizers and objectives."""
    plugins = PluginSet()
    plugins.load_entry_points(disabled=set(), third_party=False)
    found: dict[str, type] = {}
    for kind in ("model", "feature", "decoder", "tokenizer", "objective"):
        for registration in plugins.registry.registrations(kind):
            obj = registration.obj
            config = getattr(obj, "Config", None) or type(getattr(obj, "config", None))
            if config is not type(None):
                found[config.__qualname__] = config
    for config in (TrainConfig, PipelineConfig, FeatureConfig):
        found[config.__qualname__] = config
    return list(found.values())


def is_numeric(kind: typing.Any) -> bool:
    """``int``, ``float``, optional or in a tuple or list (never ``bool``)."""
    args = [a for a in typing.get_args(kind) if a is not type(None) and a is not Ellipsis]
    if typing.get_origin(kind) in (typing.Union, types.UnionType, tuple, list):
        return any(is_numeric(a) for a in args)
    return kind in (int, float)


def unbounded_numeric_settings() -> list[str]:
    missing = []
    for config in config_classes():
        kinds = field_types(config)
        for field in fields(config):
            allowed: Range = field.metadata.get(RANGE, Range())
            bounded = allowed.max is not None or allowed.below is not None or allowed.choices
            if is_numeric(kinds[field.name]) and not bounded:
                missing.append(f"{config.__qualname__}.{field.name}")
    return sorted(set(missing))


def test_every_numeric_setting_has_a_maximum_or_a_reason():
    unbounded = unbounded_numeric_settings()
    forgotten = [name for name in unbounded if name not in UNBOUNDED]
    assert not forgotten, ("give these settings a maximum (setting(..., max=...)) or list them "
                           f"in UNBOUNDED with the reason none is needed: {forgotten}")
    stale = [name for name in UNBOUNDED if name not in unbounded]
    assert not stale, f"these have a maximum now; take them out of UNBOUNDED: {stale}"


def test_the_check_finds_the_settings_it_should():
    names = unbounded_numeric_settings()
    assert names == sorted(UNBOUNDED)
    checked = {config.__qualname__ for config in config_classes()}
    assert {"BRNNConfig", "DS2Config", "ConformerConfig", "BeamConfig", "MFCCConfig",
            "LogMelConfig", "TrainConfig", "PipelineConfig", "FeatureConfig"} <= checked
    assert is_numeric(int | None) and is_numeric(tuple[float, ...]) and not is_numeric(bool)
    assert not is_numeric(str) and not is_numeric(tuple[str, ...])


def declaring_classes() -> set[str]:
    """Every class in the asrkit package with a field declared by ``setting(...)``."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(item, ast.AnnAssign) and isinstance(item.value, ast.Call)
                and getattr(item.value.func, "id", None) == "setting"
                for item in node.body
            ):
                found.add(node.name)
    return found


def test_every_class_declaring_settings_is_checked():
    """A new config class (a new model's, a new section) is checked without a change here."""
    checked = {config.__qualname__ for config in config_classes()}
    assert declaring_classes() - checked == set()
