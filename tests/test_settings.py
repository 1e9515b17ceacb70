"""Every setting is checked before any work: declared ranges, finite numbers, choices, names of
installed plugins, typed ``-o`` values; each refusal is one line naming the setting and value."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import pytest

from asrkit.data.pipeline import PipelineConfig, PipelineError
from asrkit.decoders.beam import BeamConfig
from asrkit.errors import AsrkitError
from asrkit.features import FeatureError, LogMelConfig, MFCCConfig
from asrkit.models.brnn import BRNNConfig
from asrkit.models.ds2 import DS2Config
from asrkit.train.config import (
    RANGE,
    TrainConfig,
    check_names,
    from_dict,
    override,
    setting,
    to_dict,
    validate,
)
from tests.conftest import TINY

CONFIGS = [TrainConfig, PipelineConfig, BRNNConfig, DS2Config, MFCCConfig, LogMelConfig,
           BeamConfig]


@pytest.fixture
def home(datasets, monkeypatch):
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    return datasets


@pytest.mark.parametrize(("args", "message"), [
    (["-o", "model.n_hidden=0"], "setting n_hidden=0 is not allowed: must be an integer >= 1"),
    (["-o", "model.dropout=1.5"], "setting dropout=1.5 is not allowed: must be a number in [0, 1)"),
    (["-o", "model.context=-1"], "setting context=-1 is not allowed: must be an integer >= 0"),
    (["-o", "log_every=0"], "setting log_every=0 is not allowed: must be an integer >= 1"),
    (["-o", "learning_rate=nan"], "setting learning_rate=nan is not allowed: must be a number > "
                                  "0, not nan"),
    (["-o", "learning_rate=-1"], "setting learning_rate=-1.0 is not allowed: must be a number "
                                 "> 0"),
    (["--learning-rate", "inf"], "setting learning_rate=inf is not allowed: must be finite: a "
                                 "number > 0"),
    (["-o", "devices=abc"], "setting devices='abc' is not allowed: must be '' (every GPU, else "
                            "the CPU), 'cpu', GPU indices such as '0,1', or device names such as "
                            "'/cpu:0,/cpu:1'"),
    (["--devices", "0;1"], "setting devices='0;1' is not allowed"),
    (["-o", "early_stop_metric=acc"], "setting early_stop_metric='acc' is not allowed: must be "
                                      "one of loss, wer, cer"),
    (["-o", "epochs=2.5"], "-o epochs=2.5: not an integer"),
    (["-o", "evaluate_dev=maybe"], "-o evaluate_dev=maybe: not true or false"),
    (["-o", "pipeline.speed_factors=0.9,-1"], "setting speed_factors=0.9,-1.0 is not allowed: "
                                              "must be a number > 0"),
    (["-o", "pipeline.cache=memory", "-o", "pipeline.shuffle_buffer=0"],
     "setting shuffle_buffer=0 is not allowed: must be an integer >= 1"),
    (["-o", "features.high_hz=abc"], "-o high_hz=abc: not a number or none"),
    (["-o", "features.normalize=global"], "setting normalize='global' is not allowed: must be "
                                          "one of none, feature, utterance"),
    (["-o", "decoder=nosuch"], "no decoder named 'nosuch' is installed (installed: beam, "),
    (["-m", "nosuch"], "no model named 'nosuch' is installed (installed: "),
])
def test_a_bad_setting_stops_train_before_any_work(home, asrkit_cli, tmp_path, args, message):
    run = tmp_path / "run"
    result = asrkit_cli(["train", "--epochs", "1", *TINY, *args, "--no-progress",
                         "--run-dir", run])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"asrkit: error: {message}"), lines
    assert not run.exists()  # refused before the run folder, let alone an epoch


@pytest.mark.parametrize("kind", CONFIGS)
def test_every_numeric_setting_declares_its_range(kind):
    kind()  # the defaults pass their own checks
    for field in fields(kind):
        if field.type not in ("bool", "str"):
            assert RANGE in field.metadata, f"{kind.__name__}.{field.name} declares no range"


@pytest.mark.parametrize(("build", "error", "message"), [
    (lambda: TrainConfig(learning_rate=math.nan), AsrkitError, "learning_rate=nan"),
    (lambda: TrainConfig(batch_size=0), AsrkitError, "batch_size=0"),
    (lambda: TrainConfig(epochs=True), AsrkitError, "epochs=true is not allowed: must be an "
                                                    "integer"),
    (lambda: TrainConfig(worker_timeout=-math.inf), AsrkitError, "worker_timeout=-inf"),
    (lambda: PipelineConfig(parallel_calls=0), PipelineError, "parallel_calls=0"),
    (lambda: PipelineConfig(bucket_boundaries=(1.0, "2")), PipelineError,
     "bucket_boundaries=1.0,'2' is not allowed: must be a number"),
    (lambda: MFCCConfig(preemphasis=1.5), FeatureError, "preemphasis=1.5"),
    (lambda: LogMelConfig(log_guard=0.0), FeatureError, "log_guard=0.0"),
    (lambda: BeamConfig(beam_prune_logp=math.nan), AsrkitError, "beam_prune_logp=nan"),
])
def test_configs_built_in_python_are_checked_too(build, error, message):
    with pytest.raises(error, match="setting " + message.replace(".", r"\.").replace("(", r"\(")):
        build()


def test_model_settings_are_checked_when_set_or_read_back():
    with pytest.raises(AsrkitError, match=r"^setting rnn_units=0 is not allowed"):
        override(DS2Config(), "rnn_units", "0")
    saved = {**to_dict(BRNNConfig()), "init_stddev": -0.1}  # a hand-edited config.json
    with pytest.raises(AsrkitError, match=r"^setting init_stddev=-0\.1 is not allowed: must be "
                                          r"a number > 0$"):
        from_dict(BRNNConfig, saved)
    assert BeamConfig(token_min_logp=-math.inf).token_min_logp == -math.inf  # finite=False


@dataclass(frozen=True)
class Every:
    """A field of every type the command line sets."""

    flag: bool = False
    count: int = setting(1, min=0)
    rate: float = setting(0.5, above=0, finite=False)
    name: str = "x"
    maybe_name: str | None = None
    maybe_count: int | None = setting(None, min=0)
    maybe_rate: float | None = None
    counts: tuple[int, ...] = setting((), min=1)
    names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        validate(self)


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("flag", "yes", True), ("flag", "OFF", False), ("count", "3", 3), ("rate", "inf", math.inf),
    ("name", "a b", "a b"), ("maybe_name", "abc", "abc"), ("maybe_name", "none", None),
    ("maybe_name", "null", None), ("maybe_count", "7", 7), ("maybe_count", "None", None),
    ("maybe_rate", "1e-3", 0.001), ("counts", "1, 2,3", (1, 2, 3)), ("counts", "", ()),
    ("names", "a,b", ("a", "b")),
])
def test_override_types_every_kind_of_field(key, value, expected):
    assert getattr(override(Every(), key, value), key) == expected


@pytest.mark.parametrize(("key", "value", "message"), [
    ("flag", "2", "-o flag=2: not true or false"),
    ("maybe_count", "x", "-o maybe_count=x: not an integer or none"),
    ("maybe_count", "-1", "setting maybe_count=-1 is not allowed: must be an integer >= 0"),
    ("maybe_rate", "{", "-o maybe_rate={: not a number or none"),
    ("counts", "1,x", "-o counts=1,x: not a comma-separated list of integers"),
    ("counts", "1,0", "setting counts=1,0 is not allowed: must be an integer >= 1"),
    ("rate", "nan", "setting rate=nan is not allowed: must be a number > 0, not nan"),
])
def test_override_refuses_in_one_line(key, value, message):
    with pytest.raises(AsrkitError) as error:
        override(Every(), key, value)
    assert str(error.value) == message


def test_check_names_lists_what_is_installed():
    check_names(TrainConfig())
    with pytest.raises(AsrkitError, match=r"^no decoder named 'nosuch' is installed \(installed: "
                                          r"beam, greedy"):
        check_names(TrainConfig(decoder="nosuch"))
