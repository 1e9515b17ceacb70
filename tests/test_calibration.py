"""Calibration of word confidences: which words are right (``asrkit.core.metrics``), the
expected calibration error and Brier score against hand-computed values, the temperature fit
recovering a known temperature (``asrkit.core.confidence``), the confidences it computes being
exactly transcription's, and ``asrkit evaluate --calibrate`` saving a temperature that
``asrkit transcribe`` and ``asrkit evaluate`` then use, on a tiny random run."""

from __future__ import annotations

import json
import random
import shutil

import numpy as np
import pytest

from asrkit.core.confidence import (
    WordEvidence,
    brier_score,
    expected_calibration_error,
    fit_temperature,
    reliability,
)
from asrkit.core.metrics import edit_operations, matched_words
from asrkit.core.text import Alphabet
from asrkit.core.viterbi import Token, greedy_tokens, log_softmax, word_tokens
from asrkit.serving.transcribe import words_from_tokens
from asrkit.testing.models import make_tiny_run
from tests.conftest import SPEECH, ok

CLIP = SPEECH / "ldc93s1" / "LDC93S1.wav"
LABELS = Alphabet()

# -- which words are right ----------------------------------------------------------------------


def test_a_word_is_right_when_the_alignment_pairs_it_with_the_same_word():
    def right(reference: str, hypothesis: str) -> list[bool]:
        return matched_words(reference.split(), hypothesis.split())

    assert right("a b c", "a x c") == [True, False, True]
    assert right("a b c", "a c") == [True, True]
    assert right("a c", "a b c") == [True, False, True]
    assert right("", "a b") == [False, False]
    assert right("a b", "") == []
    assert right("she had your dark suit", "she hat your dark suit in") == [
        True, False, True, True, True, False]


def test_the_right_words_are_what_the_error_counts_leave():
    rng = random.Random(4)
    for _ in range(300):
        ref = [rng.choice("abc") for _ in range(rng.randint(0, 7))]
        hyp = [rng.choice("abc") for _ in range(rng.randint(0, 7))]
        distance, deletions, insertions = edit_operations(ref, hyp)
        substitutions = distance - deletions - insertions
        assert sum(matched_words(ref, hyp)) == len(hyp) - substitutions - insertions


# -- calibration error --------------------------------------------------------------------------


def test_ece_and_brier_against_a_hand_computed_example():
    confidences = [0.95, 0.9, 0.85, 0.3, 0.25, 0.62]
    correct = [True, False, True, False, True, True]
    # Bins of 0.1: [0.9, 1) holds 0.95 and 0.9 (mean 0.925, half right: a gap of 0.425, twice),
    # then 0.85 (0.15), 0.62 (0.38), 0.3 (0.3) and 0.25 (0.75), one word each.
    assert expected_calibration_error(confidences, correct) == pytest.approx(
        (2 * 0.425 + 0.15 + 0.38 + 0.3 + 0.75) / 6)
    assert brier_score(confidences, correct) == pytest.approx(
        (0.05**2 + 0.9**2 + 0.15**2 + 0.3**2 + 0.75**2 + 0.38**2) / 6)
    bins = reliability(confidences, correct)
    assert [(b.lo, b.words) for b in bins] == [(0.2, 1), (0.3, 1), (0.6, 1), (0.8, 1),
                                              (0.9, 2)]
    assert bins[-1].confidence == pytest.approx(0.925) and bins[-1].accuracy == 0.5
    # 1 falls in the last bin; perfectly calibrated bins have no error; no words, none.
    assert reliability([1.0], [True])[0].lo == 0.9
    assert expected_calibration_error([0.25] * 4, [True, False, False, False]) == 0
    assert expected_calibration_error([], []) == 0 and brier_score([], []) == 0


# -- the temperature ----------------------------------------------------------------------------


def synthetic_words(temperature: float, count: int, seed: int) -> WordEvidence:
    """Words of one single-frame token each, right with the probability the logits give their
    label at ``temperature``: the words of a model whose calibrating temperature is known."""
    rng = np.random.default_rng(seed)
    evidence = WordEvidence()
    for _ in range(count):
        logits = (rng.normal(size=(1, 8)) * 3).astype(np.float32)
        label = int(np.argmax(logits[0]))
        p = float(np.exp(log_softmax(logits[0] / temperature))[label])
        evidence.add(logits, [[Token(label, 0, 0)]], [bool(rng.random() < p)])
    return evidence


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.5])
def test_the_fit_recovers_a_known_temperature(temperature):
    evidence = synthetic_words(temperature, 6000, seed=int(temperature * 10))
    fitted = fit_temperature(evidence)
    assert fitted == pytest.approx(temperature, rel=0.15)
    before = expected_calibration_error(evidence.confidences(1.0), evidence.correct)
    after = expected_calibration_error(evidence.confidences(fitted), evidence.correct)
    assert after < 0.03
    if temperature != 1.0:
        assert after < before
    assert fit_temperature(WordEvidence()) == 1.0


@pytest.mark.parametrize("temperature", [1.0, 0.7, 3.0])
def test_the_confidences_are_transcriptions_at_any_temperature(temperature):
    """Words of several tokens of several frames: the vectorised confidences are those that
    transcription computes word by word."""
    rng = np.random.default_rng(7)
    logits = rng.normal(size=(80, LABELS.num_classes)).astype(np.float32) * 3
    logits[::3, 0] += 6  # spaces, so that there are words
    tokens = greedy_tokens(logits, LABELS.blank)
    groups = word_tokens(tokens, LABELS)
    assert len(groups) > 5 and any(len(g) > 1 for g in groups)
    evidence = WordEvidence()
    evidence.add(logits, groups, [True] * len(groups))
    shorter = word_tokens(greedy_tokens(logits[:40], LABELS.blank), LABELS)
    evidence.add(logits[:40], shorter, [False] * len(shorter))
    expected = [w.confidence for w in words_from_tokens(
        tokens, log_softmax(logits / temperature), LABELS, 0.0, 0.02)]
    assert evidence.confidences(temperature)[:len(groups)] == pytest.approx(expected, rel=1e-5)
    assert len(evidence) == len(evidence.correct) > len(groups)
    # Kept at one temperature (a frame's probability, not its logits), the same confidences.
    fixed = WordEvidence(temperature)
    fixed.add(logits, groups, [True] * len(groups))
    assert fixed.confidences(temperature) == pytest.approx(expected, rel=1e-5)
    with pytest.raises(ValueError, match="at temperature"):
        fixed.confidences(temperature + 1)


# -- the command line ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    return make_tiny_run(tmp_path_factory.mktemp("calibration") / "run")


@pytest.fixture
def cli(datasets_cli):
    return datasets_cli


def confidences(transcript: dict) -> list[float]:
    return [w["confidence"] for w in transcript["words"]]


def test_a_saved_calibration_is_used_by_transcribe_and_evaluate(cli, tiny_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    before = json.loads(ok(cli(["transcribe", CLIP, "--model", run, "--json"])).stdout)
    assert before["temperature"] == 1 and before["calibration"] is None
    scored = json.loads(ok(cli(["evaluate", run, "--split", "dev", "--json", "-",
                                "--no-progress"])).stdout)
    report = scored["word_confidence"]
    assert report["temperature"] == 1 and report["calibration"] is None
    assert report["words"] > 0 and 0 <= report["ece"] <= 1
    assert sum(b["words"] for b in report["reliability"]) == report["words"]

    fitted = ok(cli(["evaluate", run, "--split", "dev", "--calibrate", "--json", "-",
                     "--no-progress"]))
    result = json.loads(fitted.stdout)
    saved = json.loads((run / "calibration.json").read_text())
    assert result["calibration"]["temperature"] == saved["temperature"] != 1
    assert saved["split"] == "dev" and saved["step"] == 7 and saved["decoder"] == "greedy"
    assert saved["words"] == report["words"]
    assert saved["ece_before"] == pytest.approx(report["ece"], abs=1e-4)
    assert saved["ece_after"] <= saved["ece_before"]
    assert result["word_confidence"]["temperature"] == saved["temperature"]
    assert not (run / "calibration.json.partial").exists()

    text = ok(cli(["evaluate", run, "--split", "dev", "--no-progress"])).stdout
    assert (f"(temperature {saved['temperature']:.3g}, fitted on dev at step 7)" in text
            and "word confidence: ECE" in text)
    scored = json.loads(ok(cli(["evaluate", run, "--split", "dev", "--json", "-",
                                "--no-progress"])).stdout)
    assert scored["word_confidence"]["calibration"] == saved
    raw = json.loads(ok(cli(["evaluate", run, "--split", "dev", "--json", "-",
                             "--no-calibration", "--no-progress"])).stdout)
    assert raw["word_confidence"] == report

    after = json.loads(ok(cli(["transcribe", CLIP, "--model", run, "--json"])).stdout)
    assert after["temperature"] == saved["temperature"] and after["calibration"] == saved
    assert [w["word"] for w in after["words"]] == [w["word"] for w in before["words"]]
    assert confidences(after) != confidences(before)
    # A random model's words are all wrong: the fitted temperature lowers their confidence.
    assert sum(confidences(after)) < sum(confidences(before))
    own = json.loads(ok(cli(["transcribe", CLIP, "--model", run, "--json",
                             "--no-calibration"])).stdout)
    assert own == before

    # Fitted at another checkpoint step: still used, and said.
    (run / "calibration.json").write_text(json.dumps({**saved, "step": 5}))
    stale = ok(cli(["transcribe", CLIP, "--model", run, "--json"]))
    assert json.loads(stale.stdout)["temperature"] == saved["temperature"]
    assert (f"asrkit: warning: the confidences' temperature ({saved['temperature']:.3g}) was "
            f"fitted at step 5 and this is step 7: asrkit evaluate {run} --split dev "
            "--calibrate fits it again") in stale.stderr


def test_bad_input_is_one_line(cli, tiny_run, tmp_path, datasets, monkeypatch):
    def refused(args, message):
        result = cli(args)
        assert result.exit_code == 1 and "Traceback" not in result.stderr
        assert result.stderr.strip().splitlines()[-1] == f"asrkit: error: {message}"

    refused(["evaluate", tiny_run, "--calibrate"],
            "--calibrate fits the temperature on one held-out split: give it, --split dev "
            "(never the split you report results on)")
    refused(["evaluate", tiny_run, "--split", "dev", "--calibrate", "--no-calibration"],
            "--calibrate scores one run's checkpoint on one split: not with --watch, --grid, "
            "--compare, --chunk-ms or --no-calibration")
    refused(["evaluate", tiny_run, "--split", "devv", "--calibrate", "--no-progress"],
            f"no shards of split 'devv' in {datasets / 'datasets' / 'sample'}: its splits are "
            "dev, test, train")
    assert not (tiny_run / "calibration.json").exists()

    # A run whose dataset has no dev split.
    home = tmp_path / "home"
    shutil.copytree(datasets / "datasets" / "sample", home / "datasets" / "sample")
    for shard in (home / "datasets" / "sample" / "shards").glob("dev-*"):
        shard.unlink()
    monkeypatch.setenv("ASRKIT_HOME", str(home))
    refused(["evaluate", tiny_run, "--split", "dev", "--calibrate", "--no-progress"],
            f"no shards of split 'dev' in {home / 'datasets' / 'sample'}: its splits are "
            "test, train")

    damaged = tmp_path / "damaged"
    shutil.copytree(tiny_run, damaged)
    (damaged / "calibration.json").write_text("{\"temperature\": ")
    result = cli(["transcribe", CLIP, "--model", damaged])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1].startswith(
        f"asrkit: error: {damaged / 'calibration.json'} cannot be read (")
    assert result.stderr.strip().endswith(
        f"fit it again with asrkit evaluate {damaged} --split dev --calibrate, or delete it")
