"""An attention encoder-decoder run through the command line: train, evaluate with each decoder
(attention alone, CTC alone, joint, and with a word model), the length limit named by
utterance, transcribe a long recording in windows, start from a CTC run, and what is refused in
one line. The objective and its decoders are tested in depth in tests/test_attention_objective.py,
tests/test_attention_training.py and tests/test_attention_decoding.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from asrkit import plugins
from asrkit.config.overrides import parse_overrides
from asrkit.config.run import build_run_config
from asrkit.core.errors import AsrkitError
from tests.conftest import SPEECH, ok

CLIP = SPEECH / "ldc93s1" / "LDC93S1.wav"


@pytest.fixture
def cli(datasets_cli):
    return datasets_cli


@pytest.fixture
def run(cli, tmp_path):
    """A tiny conformer with the attention objective (its tiny Transformer decoder, joint CTC at
    the default weight), trained for a few steps."""
    folder = tmp_path / "run"
    ok(cli(["train", "--model", "conformer", "-o", "preset=tiny", "-o", "objective=attention",
            "--epochs", "2", "--batch-size", "4", "--run-dir", folder, "--no-progress"]))
    return folder


def evaluate(cli, run, *args):
    return json.loads(ok(cli(["evaluate", run, "--split", "dev", *args, "--json", "-",
                              "--no-progress"])).stdout)


def test_an_attention_run_trains_evaluates_and_transcribes(cli, run, tmp_path):
    config = json.loads((run / "config.json").read_text())
    assert config["train"]["objective"] == "attention"
    assert config["train"]["decoder"] == "attention-beam"
    assert config["objective"]["d_model"] == 16 and config["objective"]["layers"] == 1
    assert "attention-beam decoder" in (run / "report.txt").read_text()

    default = evaluate(cli, run)
    assert default["decoder"] == "attention-beam" and default["utterances"] == 2
    assert np.isfinite(default["loss"])
    assert {"word_substitutions", "word_deletions", "word_insertions"} <= set(default)
    for args in (["--decoder", "attention-greedy"],
                 ["-o", "decoder.ctc_weight=0"], ["-o", "decoder.ctc_weight=1"],
                 ["-o", "decoder.beam_width=2", "-o", "decoder.end_margin=none"]):
        report = evaluate(cli, run, *args)
        assert report["utterances"] == 2 and np.isfinite(report["cer"])

    # The CTC weight of the joint search is searched like any decoder setting.
    searched = ok(cli(["evaluate", run, "--split", "dev", "--grid", "decoder.ctc_weight=0,0.5,1",
                       "--no-progress"]))
    assert "best by WER" in searched.stdout

    # A word model through the kenlm plugin's attention decoder.
    lm = tmp_path / "lm.arpa"
    ok(cli(["lm", "build", "--dataset", "sample", "-o", lm]))
    fused = evaluate(cli, run, "--decoder", "attention-kenlm", "-o", f"decoder.lm={lm}")
    assert fused["decoder"] == "attention-kenlm"

    # A limit of one label for every 50 frames cuts every dev transcript the tiny model writes
    # (it has not learnt to end): each is named, with the setting to raise.
    cut = ok(cli(["evaluate", run, "--split", "dev", "--decoder", "attention-greedy", "-o",
                  "decoder.max_length_ratio=0.02", "--no-progress"]))
    report = evaluate(cli, run, "--decoder", "attention-greedy", "-o",
                      "decoder.max_length_ratio=0.02")
    assert report["hit_length_limit"], report
    assert all(name in cut.stdout for name in report["hit_length_limit"])
    assert "raise -o decoder.max_length_ratio (now 0.02)" in cut.stdout

    # transcribe warns of a window so cut, and its JSON says which.
    limited = ok(cli(["transcribe", CLIP, "--model", run, "--json", "--decoder",
                      "attention-greedy", "-o", "decoder.max_length_ratio=0.02"]))
    assert json.loads(limited.stdout)["cut_at_length_limit"]
    assert "was cut at its length limit" in limited.stderr

    transcribed = json.loads(ok(cli(["transcribe", CLIP, "--model", run, "--json"])).stdout)
    assert transcribed["decoder"] == "attention-beam"
    assert transcribed["words"] == [] or transcribed["words"][0]["start"] >= 0.0


def test_a_long_recording_is_transcribed_in_windows_with_ordered_word_times(cli, run, tmp_path):
    """Three windows of the fixture recording (its words timed by the CTC output's alignment),
    stitched between words: times in order and inside the recording, none crashing."""
    import soundfile

    audio, rate = soundfile.read(CLIP, dtype="int16")
    long = tmp_path / "long.wav"
    soundfile.write(long, np.concatenate([audio] * 3), rate, subtype="PCM_16")
    result = json.loads(ok(cli(["transcribe", long, "--model", run, "--json", "--chunk-seconds",
                                "3", "--overlap-seconds", "1", "--no-progress"])).stdout)
    starts = [w["start"] for w in result["words"]]
    assert starts == sorted(starts)
    assert all(0 <= w["start"] <= w["end"] <= 3 * len(audio) / rate + 1e-6
               for w in result["words"])


def test_what_an_attention_run_cannot_do_is_refused_in_one_line(cli, run, tmp_path):
    for args, message in (
            (["evaluate", run, "--split", "dev", "--decoder", "greedy"],
             "the greedy decoder reads ctc-logits, not the attention objective's outputs "
             "(attention): choose one of attention-beam, attention-greedy, attention-kenlm"),
            (["evaluate", run, "--split", "dev", "--decoder", "transducer-greedy"],
             "the transducer-greedy decoder reads transducer, not the attention objective's"),
            (["evaluate", run, "--split", "dev", "--decoder", "attention-kenlm"],
             "the attention-kenlm decoder needs a language model: -o decoder.lm=PATH"),
            (["transcribe", CLIP, "--model", run, "--decoder", "beam"],
             "the beam decoder reads ctc-logits, not the attention objective's outputs")):
        refused = cli(args)
        assert refused.exit_code != 0
        assert message in refused.stderr and "Traceback" not in refused.stderr


def test_a_run_without_ctc_decodes_with_its_attention_decoder_alone(cli, tmp_path):
    """Trained with objective.ctc_weight=0 (no CTC output), the run evaluates during training
    and after with its default decoder, the joint search reduced to the decoder alone; CTC alone
    is refused in one line."""
    run = tmp_path / "no-ctc"
    ok(cli(["train", "--model", "conformer", "-o", "preset=tiny", "-o", "objective=attention",
            "-o", "objective.ctc_weight=0", "-o", "max_steps=2", "--batch-size", "4",
            "--run-dir", run, "--no-progress"]))
    assert evaluate(cli, run)["utterances"] == 2
    refused = cli(["evaluate", run, "--split", "dev", "-o", "decoder.ctc_weight=1"])
    assert refused.exit_code != 0 and "Traceback" not in refused.stderr
    assert "this run has no CTC output" in refused.stderr


def test_an_encoder_trained_with_ctc_starts_an_attention_run(cli, tmp_path):
    ctc, att = tmp_path / "ctc", tmp_path / "att"
    common = ["--epochs", "1", "--batch-size", "4", "--no-progress"]
    ok(cli(["train", "--model", "conformer", "-o", "preset=tiny", "--run-dir", ctc, *common]))
    started = ok(cli(["train", "--init-from", ctc, "-o", "objective=attention", "--run-dir", att,
                      *common]))
    assert "logits afresh" in started.stdout + started.stderr
    config = json.loads((att / "config.json").read_text())
    assert config["train"]["init_reset"] == ["logits"]
    assert config["train"]["objective"] == "attention"


def test_the_objective_presets_and_settings_are_listed(cli):
    listed = ok(cli(["plugins", "--settings", "attention"]))
    for key in ("objective.decoder", "objective.ctc_weight", "objective.label_smoothing"):
        assert key in listed.stdout
    decoders = ok(cli(["plugins", "--settings", "attention-beam"]))
    for key in ("decoder.beam_width", "decoder.ctc_weight", "decoder.max_length_ratio"):
        assert key in decoders.stdout
    assert set(plugins.get("objective", "attention").presets) >= {"full", "cpu", "tiny"}


def evaluations(run):
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [record for record in map(json.loads, lines) if record.get("event") == "evaluation"]


def test_the_dev_evaluations_decode_with_the_dev_decoder_and_the_report_with_the_runs(
        cli, tmp_path):
    """``-o dev_decoder=attention-greedy``: every dev evaluation while training is the greedy
    search's (each record names the decoder that scored it); the final report and ``evaluate``
    keep the run's joint beam search."""
    run = tmp_path / "run"
    ok(cli(["train", "--model", "conformer", "-o", "preset=tiny", "-o", "objective=attention",
            "-o", "dev_decoder=attention-greedy", "-o", "max_steps=3", "--batch-size", "4",
            "--run-dir", run, "--no-progress"]))
    scored = evaluations(run)
    assert scored and {record["decoder"] for record in scored} == {"attention-greedy"}
    assert scored[-1]["step"] == 3
    assert json.loads((run / "report.json").read_text())["decoder"] == "attention-beam"
    assert evaluate(cli, run)["decoder"] == "attention-beam"


def test_an_attention_runs_cpu_preset_scores_dev_greedily_unless_told(cli):
    """The ``cpu`` preset's dev evaluations use the decoder's greedy search (the joint beam
    search took minutes of a half-hour run); ``-o dev_decoder=`` gives back the run's own; a
    decoder that cannot read the objective's outputs is refused before any work."""
    def train_config(*settings):
        overrides = parse_overrides(["objective=attention", "preset=cpu", *settings])
        return build_run_config({"model": "conformer"}, overrides)[0].train

    assert train_config().dev_decoder == "attention-greedy"
    assert train_config().decoder == "attention-beam"
    assert train_config("dev_decoder=").dev_decoder == ""
    with pytest.raises(AsrkitError, match="the greedy decoder reads ctc-logits, not the "
                                          "attention objective's outputs"):
        train_config("dev_decoder=greedy")
    ctc = build_run_config({"model": "conformer"}, parse_overrides(["preset=cpu"]))[0].train
    assert ctc.dev_decoder == ""
