"""The open-vocabulary benchmark corpus keeps its promises: unseen words, voices and synthesiser."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import open_vocab

needs_tools = pytest.mark.skipif(
    not (shutil.which("espeak-ng") and shutil.which("flite") and open_vocab.FORTUNES.exists()),
    reason="needs espeak-ng, flite and fortunes (scripts/setup.sh installs them)")
#: flite's test speakers: festival and MBROLA have voices by these names too, never for training.
FLITE_SPEAKERS = ("kal", "slt", "awb", "rms")


def test_normalised_sentences():
    text = "Don't panic!  It's 42. A well-known FACT, they say? Short one."
    assert list(open_vocab.normalise_sentences(text)) == ["a well known fact they say"]


@needs_tools
def test_plan_holds_out_sentences_words_and_voices():
    sentences = open_vocab.fortune_sentences()
    assert len(sentences) > 5000
    plan = open_vocab.plan_corpus(sentences, train=1500, dev=80, test=120, seed=3)
    by_split: dict[str, list[open_vocab.Utterance]] = {}
    for utterance in plan.utterances:
        by_split.setdefault(utterance.split, []).append(utterance)
    assert {k: len(v) for k, v in by_split.items()} == {
        "train": 1500, "dev": 80, "test": 120, "test-unseen": 120, "test-flite": 120}
    train_text = {u.text for u in by_split["train"]}
    train_words = {w for text in train_text for w in text.split()}
    assert not train_words & set(plan.held_out_words)
    tests = [u.text for u in by_split["test"]]
    assert tests == [u.text for u in by_split["test-unseen"]] == [
        u.text for u in by_split["test-flite"]]
    assert not train_text & set(tests) and not train_text & {u.text for u in by_split["dev"]}
    for text in tests:  # measured against the training text itself
        words = text.split()
        assert sum(w not in train_words for w in words) / len(words) >= 0.15
    variant = {u.voice.split("+")[1] for u in by_split["train"]}
    assert variant <= set(open_vocab.TRAIN_VARIANTS)
    assert not {u.voice.split("+")[1] for u in by_split["test-unseen"]} & variant
    assert all(u.voice.startswith("flite:") for u in by_split["test-flite"])


@needs_tools
def test_more_voices_a_sentence_add_training_speech_and_change_nothing_else():
    sentences = open_vocab.fortune_sentences()
    one = open_vocab.plan_corpus(sentences, train=300, dev=20, test=30, seed=3)
    three = open_vocab.plan_corpus(sentences, train=300, dev=20, test=30, seed=3, train_voices=3)
    assert three.utterances[:len(one.utterances)] == one.utterances
    extra = three.utterances[len(one.utterances):]
    assert len(extra) == 600 and {u.split for u in extra} == {"train"}
    trains = [u for u in one.utterances if u.split == "train"]
    assert [u.text for u in extra] == [u.text for u in trains] * 2
    spoken = [(u.voice, u.speed, u.pitch) for u in trains + extra]
    assert len(set(spoken)) > 0.9 * len(spoken)  # each time a voice, speed and pitch of its own
    assert len({u.file for u in three.utterances}) == len(three.utterances)


@needs_tools
def test_a_second_engine_adds_festival_speech_and_changes_nothing_else():
    sentences = open_vocab.fortune_sentences()
    one = open_vocab.plan_corpus(sentences, train=300, dev=20, test=30, seed=3, train_voices=2)
    both = open_vocab.plan_corpus(sentences, train=300, dev=20, test=30, seed=3, train_voices=2,
                                  second_engine=True)
    assert both.utterances[:len(one.utterances)] == one.utterances
    extra = both.utterances[len(one.utterances):]
    trains = [u for u in one.utterances if u.split == "train"][:300]  # not the second voices
    assert [u.text for u in extra] == [u.text for u in trains]
    assert {(u.split, u.voice) for u in extra} == {("train", "festival:ked_diphone")}
    assert len({(u.speed, u.pitch) for u in extra}) > 0.9 * len(extra)
    scales = sorted(u.scale for u in extra)
    assert open_vocab.FESTIVAL_SCALE[0] <= scales[0] < 1 < 1.2 < scales[-1]
    assert {u.scale for u in one.utterances} == {1.0}
    low, high = open_vocab.FESTIVAL_F0
    assert min(u.pitch for u in extra) < low + 20 and max(u.pitch for u in extra) > high - 20
    # flite's test speakers are festival voices too (kal, slt): never among the training ones
    assert not any(f in open_vocab.FESTIVAL_VOICE for f in FLITE_SPEAKERS)


@needs_tools
def test_a_third_engine_adds_mbrola_speech_after_the_festival_speech():
    sentences = open_vocab.fortune_sentences()
    two = open_vocab.plan_corpus(sentences, train=300, dev=20, test=30, seed=3, second_engine=True)
    three = open_vocab.plan_corpus(sentences, train=300, dev=20, test=30, seed=3,
                                   second_engine=True, third_engine=True)
    assert three.utterances[:len(two.utterances)] == two.utterances
    extra = three.utterances[len(two.utterances):]
    trains = [u for u in two.utterances if u.split == "train"][:300]
    assert [u.text for u in extra] == [u.text for u in trains]
    assert {u.split for u in extra} == {"train"}
    assert {u.voice for u in extra} == set(open_vocab.MBROLA_VOICES)
    scales = sorted(u.scale for u in extra)
    low, high = open_vocab.MBROLA_SCALE
    assert low <= scales[0] < 0.95 and 1.15 < scales[-1] <= high
    assert len({(u.voice, u.speed, u.pitch) for u in extra}) > 0.9 * len(extra)
    assert not any(f in v for v in open_vocab.MBROLA_VOICES for f in FLITE_SPEAKERS)


@needs_tools
def test_a_rebuild_with_other_options_forgets_the_files_another_utterance_had(tmp_path):
    sentences = open_vocab.fortune_sentences()
    small = open_vocab.plan_corpus(sentences, train=200, dev=20, test=30, seed=3,
                                   second_engine=True)
    larger = open_vocab.plan_corpus(sentences, train=300, dev=20, test=30, seed=3,
                                    second_engine=True)
    for utterance in small.utterances:
        (tmp_path / utterance.file).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / utterance.file).write_text(utterance.text)
    open_vocab.write_plan(tmp_path, small)
    open_vocab.forget_changed_files(tmp_path, larger)
    kept = {u.file for u in larger.utterances if (tmp_path / u.file).exists()}
    # the first 200 training utterances are the same in both plans; the festival ones moved, so
    # the files the smaller plan gave to festival speech of other sentences are gone
    assert kept == {f"train/{n:05d}.wav" for n in range(200)}
    assert next(u.file for u in larger.utterances if u.voice.startswith("festival:")) \
        == "train/00410.wav"
    assert (tmp_path / "train/00409.wav").exists()  # the smaller plan's, not in the larger one
    (tmp_path / "plan.json").unlink()
    open_vocab.forget_changed_files(tmp_path, small)  # no recorded plan: nothing is trusted
    assert not any((tmp_path / u.file).exists() for u in small.utterances)


@pytest.mark.skipif(not shutil.which("festival"), reason="needs festival and festvox-kdlpc16k")
def test_festival_speaks_at_the_drawn_pitch(tmp_path):
    pitches, lengths, centroids = {}, {}, {}
    for f0, scale in ((90, 1.0), (200, 1.0), (200, 1.25)):
        utterance = open_vocab.Utterance("train", "a man is here and a woman",
                                         "festival:ked_diphone", 100, f0, f"{f0}-{scale}.wav",
                                         scale)
        open_vocab.synthesise(utterance, tmp_path)
        samples = open_vocab.trimmed_16k(tmp_path / utterance.file, tmp_path)
        pitches[f0, scale] = median_pitch(samples.astype(np.float64))
        lengths[f0, scale] = len(samples)
        centroids[f0, scale] = spectral_centroid(samples)
    assert abs(pitches[90, 1.0] - 90) < 15 and abs(pitches[200, 1.0] - 200) < 25
    # a shorter vocal tract raises the spectrum and keeps the drawn pitch and rate
    assert 1.1 < centroids[200, 1.25] / centroids[200, 1.0] < 1.4
    assert abs(pitches[200, 1.25] - 200) < 25
    assert abs(lengths[200, 1.25] / lengths[200, 1.0] - 1) < 0.1
    missing = open_vocab.Utterance("train", "hello", "festival:nobody_diphone", 100, 120, "x.wav")
    with pytest.raises(RuntimeError, match=r"x\.wav \(festival:nobody_diphone\).*nobody_diphone"):
        open_vocab.synthesise(missing, tmp_path)
    assert not (tmp_path / "x.wav").exists()


@pytest.mark.skipif(not Path("/usr/share/mbrola/us1").exists(),
                    reason="needs mbrola and mbrola-us1 (Debian non-free)")
def test_mbrola_speaks_through_espeak_ng_and_its_scale_shortens_the_vocal_tract(tmp_path):
    lengths, centroids = {}, {}
    for scale in (1.0, 1.2):
        utterance = open_vocab.Utterance("train", "a man is here and a woman", "mb-us1", 160, 50,
                                         f"{scale}.wav", scale)
        open_vocab.synthesise(utterance, tmp_path)
        samples = open_vocab.trimmed_16k(tmp_path / utterance.file, tmp_path)
        assert np.abs(samples.astype(np.float64)).mean() > 300  # speech, not espeak-ng's silence
        lengths[scale] = len(samples)
        centroids[scale] = spectral_centroid(samples)
    assert 1.1 < centroids[1.2] / centroids[1.0] < 1.35
    assert abs(lengths[1.2] / lengths[1.0] - 1 / 1.2) < 0.05


def spectral_centroid(samples: np.ndarray, rate: int = 16000) -> float:
    """The power-weighted mean frequency of ``samples``: it rises as a vocal tract shortens."""
    power = np.abs(np.fft.rfft(samples.astype(np.float64))) ** 2
    return float((np.fft.rfftfreq(len(samples), 1 / rate) * power).sum() / power.sum())


def median_pitch(samples: np.ndarray, rate: int = 16000) -> float:
    """The median autocorrelation pitch (60-400 Hz) of 40 ms frames that sound."""
    found = []
    for start in range(0, len(samples) - 640, 320):
        frame = samples[start:start + 640]
        if np.abs(frame).mean() < 500:
            continue
        correlation = np.correlate(frame, frame, "full")[639:]
        low, high = rate // 400, rate // 60
        found.append(rate / (low + np.argmax(correlation[low:high])))
    return float(np.median(found))


@needs_tools
def test_a_small_corpus_imports(tmp_path, asrkit_home, asrkit_cli):
    plan = open_vocab.build(tmp_path / "corpus", train=6, dev=2, test=2, seed=1)
    assert all((tmp_path / "corpus" / u.file).stat().st_size > 1000 for u in plan.utterances)
    result = asrkit_cli(["import", "folder", tmp_path / "corpus", "--name", "ov",
                         "--no-progress"])
    assert result.exit_code == 0, result.stderr
    for split, count in (("train", 6), ("dev", 2), ("test", 2), ("test-unseen", 2),
                         ("test-flite", 2)):
        assert f"{split} {count} utt" in result.stdout


@needs_tools
def test_the_lm_text_holds_no_scored_sentence(tmp_path):
    plan = open_vocab.build(tmp_path / "corpus", train=6, dev=2, test=2, seed=1)
    text = open_vocab.lm_sentences(tmp_path / "corpus" / "plan.json")
    scored = {u.text for u in plan.utterances if u.split != "train"}
    assert len(scored) == 4 and not scored & set(text)
    assert len(text) == len(open_vocab.fortune_sentences()) - 4
    held_out = set(plan.held_out_words)
    assert any(held_out & set(sentence.split()) for sentence in text)
