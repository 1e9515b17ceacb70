"""The configuration layer: ``-o`` parsed once into typed settings, one run configuration built
from defaults, options, preset and ``-o``, and one way to choose a decoder."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from asrkit.api import CTCObjective, NoSettings, hookimpl, setting
from asrkit.config.decoding import choose_decoder
from asrkit.config.overrides import (
    DecoderChoice,
    Setting,
    parse_decoder_choice,
    parse_overrides,
    typed_overrides,
)
from asrkit.config.run import build_run_config, resume_config
from asrkit.core.errors import AsrkitError
from asrkit.core.settings import apply


def test_the_command_line_is_split_by_section_once():
    parsed = parse_overrides(["epochs=3", "model.n_hidden=100", "decoder=beam",
                              "decoder.beam_width=8", "features.normalize=feature"])
    assert parsed.section("train") == [("epochs", "3"), ("decoder", "beam")]
    assert parsed.section("model") == [("n_hidden", "100")]
    assert parsed.section("decoder") == [("beam_width", "8")]
    assert parsed.settings[1] == Setting("model", "n_hidden", "100")
    with pytest.raises(AsrkitError, match=r"-o optimiser.lr=1: unknown section 'optimiser'"):
        parse_overrides(["optimiser.lr=1"])
    with pytest.raises(AsrkitError, match="expected KEY=VALUE"):
        parse_overrides(["epochs"])


def test_a_preset_is_read_as_the_command_line_is_with_typed_values_too():
    preset = typed_overrides({"model.n_hidden": 256, "train.batch_size": "8"})
    assert preset.settings == (Setting("model", "n_hidden", 256),
                               Setting("train", "batch_size", "8"))
    from asrkit.config.train import TrainConfig

    assert apply(TrainConfig(), preset.section("train")).batch_size == 8
    with pytest.raises(AsrkitError, match="batch_size=0 is not allowed"):
        apply(TrainConfig(), [("batch_size", 0)])  # a typed value is checked as a parsed one


def test_one_decoder_choice_for_every_decoding_command():
    choice = parse_decoder_choice(None, ["decoder=beam", "decoder.beam_width=8", "alpha=1"])
    assert choice == DecoderChoice("beam", (("beam_width", "8"), ("alpha", "1")))
    assert parse_decoder_choice("beam", ["decoder=beam"]).name == "beam"
    with pytest.raises(AsrkitError, match="--decoder beam and -o decoder=greedy disagree"):
        parse_decoder_choice("beam", ["decoder=greedy"])
    with pytest.raises(AsrkitError, match="only the decoder's settings"):
        parse_decoder_choice(None, ["model.n_hidden=3"])


def test_the_runs_decoder_settings_apply_only_to_the_runs_decoder():
    own = choose_decoder(DecoderChoice(), "beam", {"beam_width": 7})
    assert (own.name, own.config.beam_width) == ("beam", 7)
    on_top = choose_decoder(DecoderChoice(settings=(("beam_width", "9"),)), "beam",
                            {"beam_width": 7})
    assert on_top.config.beam_width == 9
    other = choose_decoder(DecoderChoice("greedy"), "beam", {"beam_width": 7})
    assert other.name == "greedy"
    fresh = choose_decoder(DecoderChoice("beam"), "greedy")
    assert fresh.config == type(fresh.config)()


def test_options_win_over_the_preset_and_o_wins_over_options(datasets, monkeypatch):
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    config, note = build_run_config({"batch_size": 4}, parse_overrides(["preset=cpu"]))
    assert note.startswith("preset: cpu")
    assert config.train.batch_size == 4  # --batch-size over brnn's cpu preset (8)
    assert config.train.learning_rate == 0.002  # the rest of the preset applies
    assert config.model.n_hidden == 256 and config.pipeline.batch_size == 4
    config, _ = build_run_config({"batch_size": 4},
                                 parse_overrides(["preset=cpu", "batch_size=2"]))
    assert config.train.batch_size == 2 and config.pipeline.batch_size == 2
    with pytest.raises(AsrkitError, match="set the batch_size with --batch-size"):
        build_run_config({}, parse_overrides(["pipeline.batch_size=3"]))


def test_a_resumed_run_changes_only_what_the_weights_do_not_depend_on(datasets, monkeypatch):
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    config, _ = build_run_config({}, parse_overrides(["preset=cpu"]))
    resumed = resume_config(config, parse_overrides(
        ["epochs=20", "pipeline.batch_seconds=5", "model.n_hidden=256", "decoder=beam",
         "decoder.beam_width=4"]))
    assert resumed.train.epochs == 20 and resumed.pipeline.batch_seconds == 5
    assert resumed.decoder.beam_width == 4
    with pytest.raises(AsrkitError, match="a resumed run keeps its model settings"):
        resume_config(config, parse_overrides(["model.n_hidden=100"]))


# -- the training objective: train.objective and the objective section -----------------------


@dataclass(frozen=True)
class WeightedConfig:
    #: What the CTC loss is multiplied by.
    weight: float = setting(0.5, min=0)


class Weighted(CTCObjective):
    name = "weighted"
    description = "CTC times a weight."
    Config = WeightedConfig

    def losses(self, config, head, encoder_out, out_lengths, label_ids, label_lengths,
               training=False):
        losses, feasible = super().losses(config, head, encoder_out, out_lengths, label_ids,
                                          label_lengths, training)
        return losses * config.weight, feasible


class Transducerish(CTCObjective):
    """Outputs that are not CTC logits: decoded by a decoder of its own kind."""

    name = "transducerish"
    description = "Not CTC logits."
    outputs = "transducerish"
    default_decoder = "transducerish-greedy"


class ObjectivePlugin:
    @hookimpl
    def register_objectives(self, register):
        register(Weighted())
        register(Transducerish())


def test_the_objective_and_its_settings_are_part_of_the_run(datasets, monkeypatch,
                                                             make_plugins):
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    make_plugins(ObjectivePlugin(), entry_points=True)
    config, _ = build_run_config({}, parse_overrides([]))
    assert config.train.objective == "ctc" and config.objective == NoSettings()
    assert config.to_json()["objective"] == {} and config.to_json()["train"]["objective"] == "ctc"
    config, _ = build_run_config({}, parse_overrides(["objective=weighted",
                                                      "objective.weight=2"]))
    assert config.train.objective == "weighted" and config.objective == WeightedConfig(2.0)
    assert config.to_json()["objective"] == {"weight": 2.0}
    for pairs, message in (
            (["objective=weighted", "objective.weight=-1"],
             "setting weight=-1.0 is not allowed: must be a number >= 0"),
            (["objective=weighted", "objective.gain=1"],
             r"-o objective.gain=1: the weighted objective has no setting 'gain' \(its "
             r"settings: weight; asrkit plugins --settings weighted\)"),
            (["objective.weight=1"], r"the ctc objective has no setting 'weight' \(its "
                                     "settings: none"),
            (["objective=nosuch"], "no objective named 'nosuch' is installed")):
        with pytest.raises(AsrkitError, match=message):
            build_run_config({}, parse_overrides(pairs))

    same = resume_config(config, parse_overrides(["objective=weighted", "objective.weight=2",
                                                  "epochs=3"]))
    assert same.objective == WeightedConfig(2.0) and same.train.epochs == 3
    with pytest.raises(AsrkitError, match=r"-o objective=ctc: a resumed run keeps its "
                                          r"objective \(weighted\)"):
        resume_config(config, parse_overrides(["objective=ctc"]))
    with pytest.raises(AsrkitError, match="a resumed run keeps its objective settings"):
        resume_config(config, parse_overrides(["objective.weight=3"]))


def test_decoders_that_cannot_read_the_objectives_outputs_are_refused_before_any_work(
        datasets, monkeypatch, make_plugins, tmp_path):
    from asrkit.config.pipeline import PipelineConfig
    from asrkit.config.run import RunConfig
    from asrkit.config.train import TrainConfig
    from asrkit.core.text import Alphabet
    from asrkit.evaluation.restore import restore_model
    from asrkit.features import MFCCConfig
    from asrkit.models.brnn import BRNNConfig
    from asrkit.runs.run import Run

    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    make_plugins(ObjectivePlugin(), entry_points=True)
    # Its runs' default decoder is its own first one (here, not installed).
    with pytest.raises(AsrkitError, match="no decoder named 'transducerish-greedy' is installed"):
        build_run_config({}, parse_overrides(["objective=transducerish"]))
    with pytest.raises(AsrkitError, match=r"the greedy decoder reads ctc-logits, not the "
                                          r"transducerish objective's outputs \(transducerish\): "
                                          r"no installed decoder reads them"):
        build_run_config({}, parse_overrides(["objective=transducerish", "decoder=greedy"]))
    with pytest.raises(AsrkitError, match=r"the transducer-greedy decoder reads transducer, not "
                                          r"the ctc objective's outputs \(ctc-logits\): choose one "
                                          r"of beam, greedy"):
        build_run_config({}, parse_overrides(["decoder=transducer-greedy"]))
    config, _ = build_run_config({}, parse_overrides(["objective=transducer"]))
    assert config.train.decoder == "transducer-beam"
    run = Run(tmp_path, RunConfig(TrainConfig(objective="transducerish"), BRNNConfig(),
                                  MFCCConfig(), PipelineConfig()), Alphabet())
    with pytest.raises(AsrkitError, match="the beam decoder reads ctc-logits, not the "
                                          "transducerish objective's outputs"):
        run.choose_decoder(DecoderChoice("beam"))
    with pytest.raises(AsrkitError, match=r"^asrkit export reads a model's outputs as CTC "
                                          r"logits, which the transducerish objective's are not"):
        restore_model(run)
