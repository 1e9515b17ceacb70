"""``asrkit transcribe --nbest N``: each window's N best hypotheses of a beam decoder, with their
scores and their share of the list's probability (``asrkit.serving.transcribe``); refused in
one line for a decoder of one transcript. Checked on random logits against the decoder's own
N-best, and through the command line on tiny random runs of each objective (CTC with ``beam``
and the kenlm plugin's decoder, transducer with ``transducer-beam``, attention with
``attention-beam``): the tests compare outputs with each other, never with the spoken words.
Those runs' words have no confidence, and ``asrkit evaluate --calibrate`` refuses them."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from asrkit.core.confidence import nbest_probabilities
from asrkit.core.text import Alphabet
from asrkit.decoders.beam import BeamDecoder
from asrkit.decoders.greedy import GreedyDecoder
from asrkit.decoders.scoring import Hypothesis
from asrkit.serving.transcribe import candidates, window_words
from asrkit.testing.models import make_tiny_run
from tests.conftest import SPEECH, ok

CLIP = SPEECH / "ldc93s1" / "LDC93S1.wav"
LABELS = Alphabet()


def random_logits(seed: int, frames: int = 30) -> np.ndarray:
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(frames, LABELS.num_classes)) * 2.0
    logits[:, LABELS.blank] += 1.5  # blanks between letters, as a trained model has
    return logits.astype(np.float32)


def check_list(hypotheses: list[dict], most: int) -> None:
    """An N-best list as JSON: ranked from 1, best first, probabilities in [0, 1] summing to 1
    and ordered as the scores are, each the softmax of the scores."""
    assert 1 <= len(hypotheses) <= most
    assert [h["rank"] for h in hypotheses] == list(range(1, len(hypotheses) + 1))
    scores = [h["score"] for h in hypotheses]
    assert scores == sorted(scores, reverse=True)
    assert sum(h["probability"] for h in hypotheses) == pytest.approx(1, abs=1e-3)
    expected = nbest_probabilities(scores)
    assert [h["probability"] for h in hypotheses] == pytest.approx(expected, abs=1e-4)
    for h in hypotheses:
        assert set(h) == {"rank", "text", "score", "acoustic", "lm", "probability"}
        assert h["score"] == pytest.approx(h["acoustic"] + h["lm"], abs=1e-3)


# -- the lists ----------------------------------------------------------------------------------


def test_probabilities_are_a_softmax_of_the_scores():
    assert nbest_probabilities([]) == []
    assert nbest_probabilities([-3.0]) == [1.0]
    shares = nbest_probabilities([-1.0, -1.0 - math.log(3)])
    assert shares == pytest.approx([0.75, 0.25])
    # Far below the best, a hypothesis gets nothing, without an overflow.
    assert nbest_probabilities([-1000.0, -3000.0]) == pytest.approx([1.0, 0.0])
    assert nbest_probabilities([-math.inf, -math.inf]) == [0.5, 0.5]


def test_a_transcript_several_label_sequences_spell_is_listed_once():
    found = candidates([Hypothesis("a b", -1.0, -1.0), Hypothesis("a b ", -1.5, -1.5),
                        Hypothesis("a  c", -2.0, -1.0, -1.0), Hypothesis("d", -3.0, -3.0)], 2)
    assert [(c.text, c.score, c.acoustic, c.lm) for c in found] == [
        ("a b", -1.0, -1.0, 0.0), ("a c", -2.0, -1.0, -1.0)]
    assert [c.probability for c in found] == pytest.approx(nbest_probabilities([-1.0, -2.0]))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_windows_list_is_the_decoders_nbest_and_its_best_is_the_text(seed):
    logits = random_logits(seed)
    decoder = BeamDecoder().with_config(beam_width=16)
    words = window_words(logits, decoder, LABELS, 0.0, 0.02, nbest=5)
    beam = decoder.decode_nbest(logits[np.newaxis], np.array([len(logits)]), LABELS)[0]
    expected = {}  # the first of each transcript, spaces collapsed
    for h in beam:
        expected.setdefault(" ".join(h.text.split()), h)
    expected = list(expected.items())[:5]
    assert [c.text for c in words.hypotheses] == [text for text, _ in expected]
    assert [c.score for c in words.hypotheses] == [h.score for _, h in expected]
    assert [c.acoustic for c in words.hypotheses] == [h.acoustic for _, h in expected]
    assert len(words.hypotheses) == 5
    assert sum(c.probability for c in words.hypotheses) == pytest.approx(1)
    probabilities = [c.probability for c in words.hypotheses]
    assert probabilities == sorted(probabilities, reverse=True)
    # The words are the best hypothesis', with the same times and confidences as without a list.
    plain = window_words(logits, decoder, LABELS, 0.0, 0.02)
    assert " ".join(w.word for w in words) == words.hypotheses[0].text
    assert list(words) == list(plain) and plain.hypotheses is None


def test_fewer_hypotheses_than_asked_is_a_shorter_list():
    # Two frames, one class the model is sure of: the beam holds only a few distinct texts.
    logits = np.full((2, LABELS.num_classes), -20.0, np.float32)
    logits[:, 0] = 5.0
    logits[:, LABELS.blank] = 4.0
    found = window_words(logits, BeamDecoder().with_config(beam_width=50), LABELS, 0.0, 0.02,
                         nbest=100).hypotheses
    assert 1 <= len(found) < 100
    assert len({c.text for c in found}) == len(found)
    assert sum(c.probability for c in found) == pytest.approx(1)


def test_a_greedy_window_has_no_list():
    words = window_words(random_logits(3), GreedyDecoder(), LABELS, 0.0, 0.02, nbest=1)
    assert words.hypotheses is None  # the transcript says it with one unscored hypothesis


# -- the command line: CTC ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    return make_tiny_run(tmp_path_factory.mktemp("nbest") / "run")


@pytest.fixture
def cli(datasets_cli):
    return datasets_cli


def test_json_lists_each_windows_hypotheses(cli, tiny_run):
    result = ok(cli(["transcribe", CLIP, "--model", tiny_run, "--decoder", "beam", "-o",
                     "decoder.beam_width=8", "--nbest", "4", "--json"]))
    transcript = json.loads(result.stdout)
    assert transcript["decoder"] == "beam" and transcript["windows"] == 1
    [window] = transcript["nbest"]
    assert window["start"] == 0 and window["end"] == transcript["duration"]
    check_list(window["hypotheses"], 4)
    assert len(window["hypotheses"]) == 4
    assert transcript["text"] == window["hypotheses"][0]["text"]
    assert len({h["text"] for h in window["hypotheses"]}) == 4
    assert all(h["lm"] == 0 for h in window["hypotheses"])  # no language model

    # Without --nbest, the transcript has no list and the same words.
    plain = json.loads(ok(cli(["transcribe", CLIP, "--model", tiny_run, "--decoder", "beam",
                               "-o", "decoder.beam_width=8", "--json"])).stdout)
    assert "nbest" not in plain and plain["words"] == transcript["words"]

    text = ok(cli(["transcribe", CLIP, "--model", tiny_run, "--decoder", "beam", "-o",
                   "decoder.beam_width=8", "--nbest", "4"])).stdout.splitlines()
    assert len(text) == 4
    for rank, (line, hypothesis) in enumerate(zip(text, window["hypotheses"], strict=True), 1):
        assert line.startswith(f"{rank}. {hypothesis['text']}  (p ")


def test_a_long_recording_has_a_list_per_window(cli, tiny_run):
    result = ok(cli(["transcribe", CLIP, "--model", tiny_run, "--decoder", "beam", "-o",
                     "decoder.beam_width=4", "--nbest", "2", "--json", "--chunk-seconds", "1",
                     "--overlap-seconds", "0.5"]))
    transcript = json.loads(result.stdout)
    windows = transcript["nbest"]
    assert len(windows) == transcript["windows"] >= 3
    assert windows[0]["start"] == 0 and windows[-1]["end"] == transcript["duration"]
    for before, after in itertools.pairwise(windows):
        assert before["start"] < after["start"] < before["end"] < after["end"]  # overlapping
    for window in windows:
        check_list(window["hypotheses"], 2)
    text = ok(cli(["transcribe", CLIP, "--model", tiny_run, "--decoder", "beam", "-o",
                   "decoder.beam_width=4", "--nbest", "2", "--chunk-seconds", "1",
                   "--overlap-seconds", "0.5"])).stdout.splitlines()
    assert text[0] == f"[0.00-{windows[0]['end']:.2f} s]" and text[1].startswith("1. ")


def test_the_kenlm_decoder_lists_language_model_scores(cli, tiny_run, tmp_path):
    lm = tmp_path / "lm.arpa"
    ok(cli(["lm", "build", "--dataset", "sample", "-o", lm]))
    result = ok(cli(["transcribe", CLIP, "--model", tiny_run, "--decoder", "kenlm", "-o",
                     f"decoder.lm={lm}", "-o", "decoder.beam_width=8", "--nbest", "3",
                     "--json"]))
    [window] = json.loads(result.stdout)["nbest"]
    check_list(window["hypotheses"], 3)
    assert any(h["lm"] != 0 for h in window["hypotheses"])


def test_a_decoder_of_one_transcript_is_refused_for_two_or_more(cli, tiny_run):
    refused = cli(["transcribe", CLIP, "--model", tiny_run, "--nbest", "2"])
    assert refused.exit_code == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines()[-1] == (
        "asrkit: error: --nbest 2 needs a beam decoder; the greedy decoder finds one "
        "transcript: --decoder beam or kenlm")
    one = json.loads(ok(cli(["transcribe", CLIP, "--model", tiny_run, "--nbest", "1",
                             "--json"])).stdout)
    assert one["nbest"][0]["hypotheses"] == [
        {"rank": 1, "text": one["text"], "score": None, "acoustic": None, "lm": None,
         "probability": 1.0}]
    streaming = cli(["transcribe", CLIP, "--model", tiny_run, "--stream", "--nbest", "2"])
    assert streaming.exit_code == 1
    assert "--nbest lists a recording's hypotheses: not with --stream" in streaming.stderr
    zero = cli(["transcribe", CLIP, "--model", tiny_run, "--nbest", "0"])
    assert zero.exit_code == 2 and "--nbest" in zero.stderr


# -- the command line: transducer and attention runs ---------------------------------------------


def make_random_run(folder: Path, objective: str, settings: dict, decoder: str) -> Path:
    """A brnn run of ``objective`` with random weights (encoder and head), as a training would
    leave it: enough for the decoders' searches to return several hypotheses."""
    import keras

    from asrkit import plugins
    from asrkit.config.pipeline import PipelineConfig
    from asrkit.config.run import RunConfig
    from asrkit.config.train import TrainConfig
    from asrkit.evaluation.restore import networks
    from asrkit.features import MFCCConfig
    from asrkit.models.brnn import BRNNConfig
    from asrkit.runs.run import Run
    from asrkit.testing.models import TINY_BRNN
    from asrkit.train.checkpoints import Checkpoints

    config = RunConfig(TrainConfig(model="brnn", objective=objective, decoder=decoder),
                       BRNNConfig(**TINY_BRNN), MFCCConfig(), PipelineConfig(),
                       objective=plugins.get("objective", objective).Config(**settings))
    run = Run(folder, config, Alphabet())
    run.save()
    keras.utils.set_random_seed(5)
    width = run.encoder_width()
    model = run.spec.build(run.model_config, run.num_features(), width)
    head = run.objective.build(run.objective_config, width, run.labels)
    Checkpoints(folder / "checkpoints", **networks(model, head)).save("best", 3,
                                                                      {"global_step": 3})
    return folder


@pytest.mark.parametrize("objective, settings, beam", [
    ("transducer", {"pred_dim": 12, "joint_dim": 10, "dropout": 0.0, "ctc_weight": 0.0},
     "transducer-beam"),
    ("attention", {"d_model": 16, "heads": 2, "layers": 1, "ff_dim": 16, "dropout": 0.0,
                   "label_smoothing": 0.0}, "attention-beam"),
], ids=["transducer", "attention"])
def test_other_objectives_beams_list_their_hypotheses(cli, tmp_path, objective, settings, beam):
    greedy = beam.replace("beam", "greedy")
    run = make_random_run(tmp_path / objective, objective, settings, greedy)
    result = ok(cli(["transcribe", CLIP, "--model", run, "--decoder", beam, "-o",
                     "decoder.beam_width=4", "--nbest", "3", "--json"]))
    transcript = json.loads(result.stdout)
    [window] = transcript["nbest"]
    check_list(window["hypotheses"], 3)
    assert transcript["text"] == window["hypotheses"][0]["text"]
    refused = cli(["transcribe", CLIP, "--model", run, "--nbest", "2"])
    assert refused.exit_code == 1
    assert refused.stderr.strip().splitlines()[-1].startswith(
        f"asrkit: error: --nbest 2 needs a beam decoder; the {greedy} decoder finds one "
        f"transcript: --decoder {beam}")
    # Their words have no confidence to calibrate.
    uncalibrated = cli(["evaluate", run, "--split", "dev", "--calibrate"])
    assert uncalibrated.exit_code == 1
    assert uncalibrated.stderr.strip().splitlines()[-1] == (
        f"asrkit: error: word confidences come from CTC logits, and the {greedy} decoder "
        f"reads {objective}: only a CTC run's words are calibrated")
