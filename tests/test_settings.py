"""Every setting is checked before any work: declared ranges, finite numbers, choices, names of
installed plugins, typed ``-o`` values; each refusal is one line naming the setting and value."""

from __future__ import annotations

import dataclasses
import enum
import importlib.util
import json
import math
import subprocess
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal

import pytest

from asrkit.config.pipeline import PipelineConfig, PipelineError
from asrkit.config.run import check_names
from asrkit.config.train import TrainConfig
from asrkit.core.errors import AsrkitError
from asrkit.core.settings import (
    RANGE,
    SettingInfo,
    describe,
    format_value,
    from_dict,
    override,
    setting,
    to_dict,
    validate,
)
from asrkit.decoders.beam import BeamConfig
from asrkit.features import FeatureError, LogMelConfig, MFCCConfig
from asrkit.models.brnn import BRNNConfig
from asrkit.models.ds2 import DS2Config
from tests.conftest import ROOT, TINY

CONFIGS = [TrainConfig, PipelineConfig, BRNNConfig, DS2Config, MFCCConfig, LogMelConfig,
           BeamConfig]


@pytest.fixture
def home(datasets, monkeypatch):
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    return datasets


@pytest.mark.parametrize(("args", "message"), [
    (["-o", "model.n_hidden=0"], "setting n_hidden=0 is not allowed: must be an integer in "
                                 "[1, 8192]"),
    (["-o", "model.dropout=1.5"], "setting dropout=1.5 is not allowed: must be a number in [0, 1)"),
    (["-o", "model.context=-1"], "setting context=-1 is not allowed: must be an integer in "
                                 "[0, 100]"),
    (["-o", "log_every=0"], "setting log_every=0 is not allowed: must be an integer in [1, "
                             "1_000_000_000]"),
    (["-o", "learning_rate=nan"], "setting learning_rate=nan is not allowed: must be a number in "
                                  "(0, 100], not nan"),
    (["-o", "learning_rate=-1"], "setting learning_rate=-1.0 is not allowed: must be a number "
                                 "in (0, 100]"),
    (["--learning-rate", "inf"], "setting learning_rate=inf is not allowed: must be finite: a "
                                 "number in (0, 100]"),
    (["-o", "devices=abc"], "setting devices='abc' is not allowed: must be '' (every GPU, else "
                            "the CPU), 'cpu', GPU indices such as '0,1', or device names such as "
                            "'/cpu:0,/cpu:1'"),
    (["--devices", "0;1"], "setting devices='0;1' is not allowed"),
    (["-o", "best_by=acc"], "setting best_by='acc' is not allowed: must be one of wer, "
                            "cer, loss"),
    (["-o", "epochs=2.5"], "-o epochs=2.5: not an integer"),
    (["-o", "evaluate_dev=maybe"], "-o evaluate_dev=maybe: not true or false"),
    (["-o", "pipeline.speed_factors=0.9,-1"], "setting speed_factors=0.9,-1.0 is not allowed: "
                                              "must be a number in [0.25, 4]"),
    (["-o", "pipeline.cache=memory", "-o", "pipeline.shuffle_buffer=0"],
     "setting shuffle_buffer=0 is not allowed: must be an integer in [1, 1_000_000]"),
    (["-o", "features.high_hz=abc"], "-o features.high_hz=abc: not a number or none"),
    (["-o", "features.normalize=global"], "setting normalize='global' is not allowed: must be "
                                          "one of none, feature, utterance, running"),
    (["-o", "decoder=nosuch"],
     "no decoder named 'nosuch' is installed (installed: attention-beam, "),
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
                                          r"a number in \(0, 10\]$"):
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
                                          r"attention-beam, attention-greedy"):
        check_names(TrainConfig(decoder="nosuch"))


# -- one typed settings parser for every kind of config (asrkit.core.settings) ---------------------


class Colour(enum.Enum):
    RED = "red"
    GREEN = "green"


@dataclass(frozen=True)
class Typed:
    """Field types a plugin's Config may declare beyond the training config's."""

    #: Where the lexicon is.
    lexicon: Path = Path("words.txt")
    maybe_path: Path | None = None
    mode: Literal["fast", "exact"] = "fast"
    colour: Colour = Colour.RED
    sizes: list[int] = dataclasses.field(default_factory=list)
    optional_names: tuple[str, ...] | None = None
    floor: float = setting(-1.0, max=0, finite=False, doc="the lowest score kept")


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("lexicon", "/tmp/x.txt", Path("/tmp/x.txt")), ("maybe_path", "none", None),
    ("maybe_path", "a/b", Path("a/b")), ("mode", "exact", "exact"), ("colour", "green",
                                                                     Colour.GREEN),
    ("colour", "GREEN", Colour.GREEN), ("sizes", "1,2", [1, 2]), ("optional_names", "none", None),
    ("optional_names", "a,b", ("a", "b")), ("floor", "-inf", -math.inf),
])
def test_every_declarable_type_parses(key, value, expected):
    assert getattr(override(Typed(), key, value), key) == expected


@pytest.mark.parametrize(("key", "value", "message"), [
    ("mode", "slow", "-o mode=slow: not one of 'fast', 'exact'"),
    ("colour", "blue", "-o colour=blue: not one of red, green"),
    ("sizes", "1,x", "-o sizes=1,x: not a comma-separated list of integers"),
    ("floor", "inf", "setting floor=inf is not allowed: must be a number <= 0"),
])
def test_declarable_types_refuse_in_one_line(key, value, message):
    with pytest.raises(AsrkitError) as error:
        override(Typed(), key, value)
    assert str(error.value) == message


@pytest.mark.parametrize("kind", [Every, Typed, BeamConfig, TrainConfig, PipelineConfig,
                                  MFCCConfig, BRNNConfig])
def test_every_setting_round_trips_through_its_string_and_json_forms(kind):
    config = kind()
    for field in fields(config):
        written = format_value(getattr(config, field.name))
        assert override(config, field.name, written) == config, (field.name, written)
    saved = json.loads(json.dumps(to_dict(config)))  # as config.json holds it
    assert from_dict(kind, saved) == config


def test_a_str_or_none_setting_takes_any_text(make_plugins):
    """``str | None`` (a decoder's optional file) is text, or none: never parsed as JSON."""
    @dataclass(frozen=True)
    class Files:
        unigrams: str | None = None

    for value in ("words.txt", "{not json", "[1,", "'quoted'"):
        assert override(Files(), "unigrams", value).unigrams == value
    assert override(Files(), "unigrams", "none").unigrams is None


def test_describe_lists_name_type_default_and_doc():
    listed = {s.name: s for s in describe(Typed)}
    assert list(listed) == [f.name for f in fields(Typed)]
    assert listed["lexicon"] == SettingInfo("lexicon", "Path", "words.txt", "a path",
                                            "Where the lexicon is.")
    assert listed["floor"].doc == "the lowest score kept"
    assert listed["floor"].allowed == "a number <= 0, -inf"
    assert listed["mode"].type == "Literal['fast', 'exact']"
    assert listed["optional_names"].type == "tuple[str, ...] | None"
    beam = {s.name: s for s in describe(BeamConfig)}
    assert beam["token_min_logp"].default == "-10.0"
    assert beam["token_min_logp"].allowed == "a number <= 0, -inf, or none"
    assert beam["beam_width"].doc.startswith("Prefixes kept after each frame")


def test_settings_are_a_core_module_without_a_cycle():
    """asrkit.core.settings needs nothing of asrkit but its errors, and the decoders need nothing
    of the training package."""
    code = ("import sys, asrkit.decoders.beam, asrkit.core.settings; "
            "print(sorted(m for m in sys.modules if m.startswith('asrkit.train')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"
    imported = [line for line in (ROOT / "asrkit" / "core" / "settings.py").read_text().splitlines()
                if line.startswith(("import asrkit", "from asrkit"))]
    assert imported == ["from asrkit.core.errors import AsrkitError"]


# -- discovery: asrkit plugins --settings NAME ---------------------------------------------------


def test_plugins_settings_lists_a_decoders_model_and_extractor_settings(asrkit_cli,
                                                                         make_plugins):
    plugins = make_plugins(entry_points=True)
    beam = asrkit_cli(["plugins", "--settings", "beam"], plugins)
    assert beam.exit_code == 0, beam.stderr
    lines = beam.stdout.splitlines()
    assert lines[0] == "decoder beam (-o decoder.KEY=VALUE):"
    assert lines[1].split() == ["SETTING", "TYPE", "DEFAULT", "ALLOWED"]
    assert lines[2].split()[:3] == ["decoder.beam_width", "int", "100"]
    assert "Prefixes kept after each frame" in lines[3]
    brnn = asrkit_cli(["plugins", "--settings", "brnn", "--json"], plugins)
    [listed] = json.loads(brnn.stdout)
    assert listed["kind"] == "model" and listed["prefix"] == "model."
    n_hidden = next(s for s in listed["settings"] if s["name"] == "n_hidden")
    assert n_hidden == {"name": "n_hidden", "type": "int", "default": "494",
                        "allowed": "an integer in [1, 8192]", "doc": n_hidden["doc"]}
    mfcc = asrkit_cli(["plugins", "--settings", "mfcc"], plugins)
    assert "features.num_cepstra" in mfcc.stdout
    greedy = asrkit_cli(["plugins", "--settings", "greedy"], plugins)
    assert "(no settings)" in greedy.stdout
    missing = asrkit_cli(["plugins", "--settings", "nosuch"], plugins)
    assert missing.exit_code == 1
    assert missing.stderr.startswith("asrkit: error: no model, feature extractor, decoder, "
                                     "tokenizer or objective named 'nosuch' (models: ")
    assert "; objectives: attention, ctc, transducer)" in missing.stderr
    chars = asrkit_cli(["plugins", "--settings", "chars"], plugins)
    assert "tokenizer chars (asrkit tokenizer build -s KEY=VALUE)" in chars.stdout
    ctc = asrkit_cli(["plugins", "--settings", "ctc"], plugins)
    assert ctc.stdout.splitlines() == ["objective ctc (-o objective.KEY=VALUE):",
                                       "  (no settings)"]


# -- decoder settings on asrkit train --------------------------------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (["-o", "decoder.beam_width=0"], "setting beam_width=0 is not allowed: must be an integer "
                                     "in [1, 10000]"),
    (["-o", "decoder=beam", "-o", "decoder.width=3"], "unknown setting 'width' for BeamConfig"),
    (["-o", "decoder=beam", "-o", "decoder.beam_width=x"], "-o decoder.beam_width=x: not an "
                                                           "integer"),
    (["-o", "decoder.x.y=1"], "-o decoder.x.y=1: unknown section 'decoder.x'"),
])
def test_a_bad_decoder_setting_stops_train_before_any_work(home, asrkit_cli, tmp_path, args,
                                                           message):
    run = tmp_path / "run"
    result = asrkit_cli(["train", "--epochs", "1", *TINY, "-o", "decoder=beam", *args,
                         "--no-progress", "--run-dir", run])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"asrkit: error: {message}"), lines
    assert not run.exists()


def test_a_decoder_that_lacks_what_it_needs_stops_train_at_the_start(home, asrkit_cli,
                                                                      make_plugins, tmp_path):
    """kenlm without a language model: said before training, not when writing the report."""
    pytest.importorskip("kenlm")
    plugins = make_plugins(entry_points=True)
    if "kenlm" not in plugins.registry.names("decoder"):
        pytest.skip("the kenlm plugin is not installed")
    run = tmp_path / "run"
    result = asrkit_cli(["train", "--epochs", "1", *TINY, "-o", "decoder=kenlm",
                         "--no-progress", "--run-dir", run], plugins)
    assert result.exit_code == 1
    assert "the kenlm decoder needs a language model: -o decoder.lm=PATH" in result.stderr
    assert not run.exists()


def test_train_records_and_uses_the_decoder_settings(home, asrkit_cli, tmp_path):
    run = tmp_path / "run"
    result = asrkit_cli(["train", "--epochs", "1", "--batch-size", "8", *TINY, "-o",
                         "decoder=beam", "-o", "decoder.beam_width=3", "-o",
                         "decoder.token_min_logp=-inf", "--no-progress", "--run-dir", run])
    assert result.exit_code == 0, result.stderr[-3000:]
    config = json.loads((run / "config.json").read_text())
    assert config["train"]["decoder"] == "beam"
    assert config["decoder"] == {"beam_width": 3, "token_min_logp": -math.inf,
                                 "beam_prune_logp": None}
    report = json.loads((run / "report.json").read_text())
    assert report["decoder"] == "beam" and report["decoder_settings"] == config["decoder"]
    text = (run / "report.txt").read_text()
    assert "(beam decoder, beam_width=3, token_min_logp=-inf)" in text.splitlines()[1]

    # evaluate starts from the run's decoder settings; -o changes them for this evaluation
    evaluated = asrkit_cli(["evaluate", run, "--split", "dev", "-o", "decoder.beam_width=2",
                            "--json", "-", "--no-progress"])
    assert evaluated.exit_code == 0, evaluated.stderr[-3000:]
    assert json.loads(evaluated.stdout)["decoder_settings"] == {
        "beam_width": 2, "token_min_logp": -math.inf, "beam_prune_logp": None}
    greedy = asrkit_cli(["evaluate", run, "--split", "dev", "-o", "decoder=greedy",
                         "--json", "-", "--no-progress"])
    assert json.loads(greedy.stdout)["decoder"] == "greedy"
    clash = asrkit_cli(["evaluate", run, "--decoder", "beam", "-o", "decoder=greedy"])
    assert clash.exit_code == 1 and "disagree" in clash.stderr

    # a resumed run may change its decoder settings: they do not touch the weights
    resumed = asrkit_cli(["train", "--resume", run, "-o", "decoder.beam_width=5",
                          "--no-progress"])
    assert resumed.exit_code == 0, resumed.stderr[-3000:]
    assert json.loads((run / "config.json").read_text())["decoder"]["beam_width"] == 5
    if importlib.util.find_spec("kenlm") and importlib.util.find_spec("asrkit_decoder_kenlm"):
        lacking = asrkit_cli(["train", "--resume", run, "-o", "decoder=kenlm", "--no-progress"])
        assert lacking.exit_code == 1 and "-o decoder.lm=PATH" in lacking.stderr
        assert json.loads((run / "config.json").read_text())["train"]["decoder"] == "beam"


def test_runs_without_a_decoder_section_load_with_the_defaults(tmp_path, make_plugins):
    from asrkit.core.text import Alphabet
    from asrkit.decoders.beam import BeamConfig
    from asrkit.runs.run import load_run

    make_plugins(entry_points=True)
    folder = tmp_path / "old"
    folder.mkdir()
    config = {"train": to_dict(TrainConfig(decoder="beam")), "model": to_dict(BRNNConfig()),
              "features": to_dict(MFCCConfig()), "pipeline": to_dict(PipelineConfig())}
    (folder / "config.json").write_text(json.dumps(config))
    Alphabet().save(folder / "alphabet.txt")
    run = load_run(folder)
    assert run.decoder.config == BeamConfig()
    assert run.to_json()["decoder"] == to_dict(BeamConfig())
