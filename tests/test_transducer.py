"""The transducer objective (``asrkit.objectives.transducer``) and its decoders
(``asrkit.decoders.transducer``): the contract, the loss against the RNN-T loss of the whole
joint, greedy decoding against a plain reference decoder, the beam search at width 1 against
greedy, shallow fusion of a word scorer, and a run through the command line (train, evaluate
with both decoders, transcribe, export, and what is refused in one line). Exports are checked
in depth in tests/test_transducer_export.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from asrkit import plugins
from asrkit.config.overrides import parse_overrides
from asrkit.config.run import build_run_config
from asrkit.core.rnnt import rnnt_loss
from asrkit.core.text import Alphabet
from asrkit.decoders.scoring import WordScorer
from asrkit.decoders.transducer import (
    TransducerBeamDecoder,
    TransducerGreedyDecoder,
    TransducerOutputs,
    greedy_search,
)
from asrkit.objectives.transducer import TransducerConfig, TransducerObjective
from asrkit.testing import check_objective
from tests.conftest import SPEECH

LABELS = Alphabet()
SMALL = {"pred_dim": 12, "joint_dim": 10, "dropout": 0.0, "ctc_weight": 0.0}
PREDICTORS = [TransducerConfig(**SMALL, frames_per_chunk=3),
              TransducerConfig(**SMALL, predictor="stateless", context_size=2,
                               frames_per_chunk=0),
              TransducerConfig(**SMALL, pred_layers=2, frames_per_chunk=1)]


def head_and_frames(config: TransducerConfig, seed: int, batch: int = 3, frames: int = 9,
                    scale: float = 3.0):
    """A head with random weights and random encoder frames: the output layer's weights are
    scaled up so that labels, not only the blank, win some steps."""
    keras = pytest.importorskip("keras")
    keras.utils.set_random_seed(seed)
    head = TransducerObjective().build(config, config.joint_dim, LABELS)
    kernel = head.output_layer.kernel
    kernel.assign(kernel * scale)
    rng = np.random.default_rng(seed)
    return head, rng.normal(size=(batch, frames, config.joint_dim)).astype(np.float32)


@pytest.mark.parametrize("config", [*PREDICTORS, TransducerConfig(pred_dim=8, joint_dim=8)],
                         ids=["lstm", "stateless", "lstm2", "defaults-with-ctc"])
def test_the_objective_keeps_the_contract(config):
    check_objective("transducer", config)


@pytest.mark.parametrize("config", PREDICTORS, ids=["lstm", "stateless", "lstm2"])
def test_the_loss_is_the_rnnt_loss_of_the_whole_joint(config):
    head, frames = head_and_frames(config, seed=1)
    labels = np.array([[3, 4, 5, 3], [7, 0, 0, 0], [0, 0, 0, 0]], np.int32)
    label_lengths = np.array([4, 1, 0], np.int32)
    frame_lengths = np.array([9, 5, 2], np.int32)
    losses, feasible = TransducerObjective().losses(config, head, frames, frame_lengths, labels,
                                                    label_lengths)
    blank = LABELS.blank
    padded = np.where(np.arange(4)[None] < label_lengths[:, None], labels, blank)
    logits = head((frames, padded))
    expected, _ = rnnt_loss(logits, padded, frame_lengths, label_lengths, blank=-1)
    assert feasible.numpy().all()
    np.testing.assert_allclose(losses.numpy(), expected.numpy(), rtol=1e-5)


def test_the_auxiliary_ctc_loss_is_added_where_ctc_can_align():
    from asrkit.core.ctc import ctc_losses

    config = TransducerConfig(**{**SMALL, "ctc_weight": 0.5})
    head, frames = head_and_frames(config, seed=3)
    labels = np.array([[3, 4, 4, 5], [7, 0, 0, 0], [2, 2, 2, 2]], np.int32)
    label_lengths, frame_lengths = np.array([4, 1, 4], np.int32), np.array([9, 5, 3], np.int32)
    losses, feasible = TransducerObjective().losses(config, head, frames, frame_lengths, labels,
                                                    label_lengths)
    plain, _ = TransducerObjective().losses(TransducerConfig(**SMALL), head, frames,
                                            frame_lengths, labels, label_lengths)
    ctc, aligned = ctc_losses(labels, label_lengths, head.ctc_output(frames), frame_lengths)
    assert aligned.numpy().tolist() == [True, True, False]  # 4 equal labels need 7 frames
    assert feasible.numpy().all()  # the transducer aligns them all
    np.testing.assert_allclose(losses.numpy(), plain.numpy() + 0.5 * np.where(
        aligned.numpy(), ctc.numpy(), 0.0), rtol=1e-5)


def reference_greedy(head, frames: np.ndarray, length: int, max_symbols: int) -> list[int]:
    """Greedy decoding one utterance at a time from the whole prediction network
    (``predict_labels`` over the labels so far) and the whole joint: none of the step
    functions the decoders use."""
    emitted: list[int] = []
    for t in range(length):
        for _ in range(max_symbols):
            predicted = head.predict_labels(np.array([emitted], np.int32).reshape(1, -1))
            logits = head.joint(frames[None, t:t + 1], predicted[:, -1:])
            best = int(np.argmax(logits.numpy()[0, 0, 0]))
            if best == head.blank:
                break
            emitted.append(best)
    return emitted


@pytest.mark.parametrize("config", PREDICTORS, ids=["lstm", "stateless", "lstm2"])
@pytest.mark.parametrize("max_symbols", [1, 3])
def test_greedy_decoding_equals_a_plain_reference_decoder(config, max_symbols):
    head, frames = head_and_frames(config, seed=2)
    lengths = np.array([9, 4, 0])
    found = greedy_search(head, frames, lengths, max_symbols)
    for row, length in enumerate(lengths):
        expected = reference_greedy(head, frames[row], int(length), max_symbols)
        assert [label for label, _ in found[row]] == expected
        assert all(0 <= frame < length for _, frame in found[row])
    assert any(found), "the random head emitted nothing: the test would prove little"
    texts = TransducerGreedyDecoder().with_config(max_symbols=max_symbols).decode(
        TransducerOutputs(frames, head), lengths, LABELS)
    assert texts == [LABELS.decode(label for label, _ in row) for row in found]


@pytest.mark.parametrize("config", PREDICTORS, ids=["lstm", "stateless", "lstm2"])
@pytest.mark.parametrize("max_symbols", [1, 2, 4])
def test_the_beam_search_at_width_one_is_the_greedy_search(config, max_symbols):
    for seed in range(3):
        head, frames = head_and_frames(config, seed=10 + seed, batch=2, frames=12)
        outputs, lengths = TransducerOutputs(frames, head), np.array([12, 7])
        greedy = TransducerGreedyDecoder().with_config(max_symbols=max_symbols)
        beam = TransducerBeamDecoder().with_config(beam_width=1, max_symbols=max_symbols)
        assert beam.decode_tokens(outputs, lengths, LABELS) == greedy.decode_tokens(
            outputs, lengths, LABELS)


def path_logprob(head, frames: np.ndarray, length: int, tokens: list[tuple[int, int]]) -> float:
    """The log-probability of one alignment: each label at its frame, a blank closing every
    frame."""
    total, emitted = 0.0, []
    by_frame: dict[int, list[int]] = {}
    for label, frame in tokens:
        by_frame.setdefault(frame, []).append(label)
    for t in range(length):
        for label in [*by_frame.get(t, []), head.blank]:
            predicted = head.predict_labels(np.array([emitted], np.int32).reshape(1, -1))
            logprobs = tf.nn.log_softmax(head.joint(frames[None, t:t + 1],
                                                    predicted[:, -1:])).numpy()[0, 0, 0]
            total += float(logprobs[label])
            if label != head.blank:
                emitted.append(label)
    return total


def test_the_beam_finds_transcripts_at_least_as_likely_as_greedy_and_ranks_its_nbest():
    config = PREDICTORS[0]
    head, frames = head_and_frames(config, seed=5, batch=4, frames=10, scale=2.0)
    outputs, lengths = TransducerOutputs(frames, head), np.array([10, 10, 8, 6])
    greedy = TransducerGreedyDecoder().with_config(max_symbols=2).decode_tokens(
        outputs, lengths, LABELS)
    beam = TransducerBeamDecoder().with_config(beam_width=6, max_symbols=2)
    nbest = beam.decode_nbest(outputs, lengths, LABELS)
    best_tokens = beam.decode_tokens(outputs, lengths, LABELS)
    for row in range(4):
        scores = [h.score for h in nbest[row]]
        assert scores == sorted(scores, reverse=True) and len(nbest[row]) <= 6
        assert len({h.text for h in nbest[row]}) == len(nbest[row])
        # The beam's best sums the alignments it merged: at least its own best path, and
        # that path at least as likely as greedy's (which the beam holds at some point).
        greedy_path = path_logprob(head, frames[row], int(lengths[row]), greedy[row])
        beam_path = path_logprob(head, frames[row], int(lengths[row]), best_tokens[row])
        assert nbest[row][0].acoustic >= beam_path - 1e-3
        assert nbest[row][0].acoustic >= greedy_path - 1e-3


class Words(WordScorer):
    """Rewards the word "a" and penalises every other; records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def start(self):
        return ()

    def score_word(self, state, word):
        self.asked.append(word)
        return (2.0 if word == "a" else -1.0), (*state, word)

    def score_end(self, state):
        return -0.5


def fused_with_words(search: type) -> type:
    """A subclass of the beam search ``search`` with :class:`Words` fused in; the class keeps
    the last scorer it made (``scorer``), so a test can read what it was asked."""

    class Fused(search):
        scorer: Words

        def make_scorer(self, labels):
            type(self).scorer = Words()
            return type(self).scorer

    return Fused


FusedBeam = fused_with_words(TransducerBeamDecoder)


def test_a_word_scorer_is_fused_into_the_beam():
    head, frames = head_and_frames(PREDICTORS[1], seed=7, batch=2, frames=10)
    outputs, lengths = TransducerOutputs(frames, head), np.array([10, 10])
    fused = FusedBeam().with_config(beam_width=4)
    plain = TransducerBeamDecoder().with_config(beam_width=4).decode_nbest(outputs, lengths,
                                                                           LABELS)
    nbest = fused.decode_nbest(outputs, lengths, LABELS)
    assert FusedBeam.scorer.asked, "no word was scored"
    for row in range(2):
        for hyp in nbest[row]:
            words = hyp.text.split()
            expected = sum(2.0 if w == "a" else -1.0 for w in words) - 0.5
            assert hyp.lm == pytest.approx(expected)
            assert hyp.score == pytest.approx(hyp.acoustic + hyp.lm)
        assert [h.lm for h in plain[row]] == [0.0] * len(plain[row])


def test_transducer_decoders_refuse_ctc_logits():
    from asrkit.core.errors import AsrkitError

    logits = np.zeros((1, 4, LABELS.num_classes), np.float32)
    with pytest.raises(AsrkitError, match="reads a transducer's outputs, not CTC logits"):
        TransducerGreedyDecoder().decode(logits, np.array([4]), LABELS)


# -- the command line ---------------------------------------------------------------------------


@pytest.fixture
def cli(datasets_cli):
    return datasets_cli


def test_a_conformer_transducer_trains_evaluates_and_transcribes(cli, tmp_path):
    run = tmp_path / "run"
    trained = cli(["train", "--model", "conformer", "-o", "preset=tiny", "-o",
                   "objective=transducer", "-o", "objective.predictor=stateless", "--epochs",
                   "2", "--batch-size", "4", "--run-dir", run, "--no-progress"])
    assert trained.exit_code == 0, trained.stderr[-3000:]
    config = json.loads((run / "config.json").read_text())
    assert config["train"]["objective"] == "transducer"
    # The beam search decodes the run; its dev evaluations are greedy (the presets').
    assert config["train"]["decoder"] == "transducer-beam"
    assert config["train"]["dev_decoder"] == "transducer-greedy"
    evaluations = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()
                   if '"event": "evaluation"' in line]
    assert evaluations and {e["decoder"] for e in evaluations} == {"transducer-greedy"}
    # The tiny preset's networks (the objective's preset), and the user's setting over them.
    assert config["objective"]["joint_dim"] == 16 and config["objective"]["pred_dim"] == 16
    assert config["objective"]["predictor"] == "stateless"
    assert "transducer-beam decoder" in (run / "report.txt").read_text()

    for decoder in ("transducer-greedy", "transducer-beam"):
        evaluated = cli(["evaluate", run, "--split", "dev", "--decoder", decoder, "--json", "-",
                         "--no-progress"])
        assert evaluated.exit_code == 0, evaluated.stderr[-3000:]
        report = json.loads(evaluated.stdout)
        assert report["decoder"] == decoder and report["utterances"] == 2
        assert np.isfinite(report["loss"])

    # A plugin's transducer decoder (the kenlm plugin's, with a word model) is chosen as the
    # bundled ones are: by what it reads.
    lm = tmp_path / "lm.arpa"
    built = cli(["lm", "build", "--dataset", "sample", "-o", lm])
    assert built.exit_code == 0, built.stderr[-3000:]
    fused = cli(["evaluate", run, "--split", "dev", "--decoder", "transducer-kenlm", "-o",
                 f"decoder.lm={lm}", "--json", "-", "--no-progress"])
    assert fused.exit_code == 0, fused.stderr[-3000:]
    assert json.loads(fused.stdout)["decoder"] == "transducer-kenlm"

    clip = SPEECH / "ldc93s1" / "LDC93S1.wav"
    transcribed = cli(["transcribe", clip, "--model", run, "--json"])
    assert transcribed.exit_code == 0, transcribed.stderr[-3000:]
    assert json.loads(transcribed.stdout)["decoder"] == "transducer-beam"
    greedily = cli(["transcribe", clip, "--model", run, "--decoder", "transducer-greedy",
                    "--json"])
    assert greedily.exit_code == 0, greedily.stderr[-3000:]

    # The stateless prediction network's exports transcribe as the run's greedy search does
    # (the search they hold).
    for fmt in ("savedmodel", "tflite"):
        exported = cli(["export", run, "--format", fmt, "--output", tmp_path / fmt])
        assert exported.exit_code == 0, exported.stderr[-3000:]
        from_export = cli(["transcribe", clip, "--model", tmp_path / fmt, "--json"])
        assert from_export.exit_code == 0, from_export.stderr[-3000:]
        assert json.loads(from_export.stdout)["words"] == json.loads(greedily.stdout)["words"]

    for args, message in (
            (["evaluate", run, "--split", "dev", "--decoder", "greedy"],
             "the greedy decoder reads ctc-logits, not the transducer objective's outputs "
             "(transducer): choose one of transducer-beam, transducer-greedy"),
            (["evaluate", run, "--split", "dev", "--decoder", "kenlm"],
             "the kenlm decoder reads ctc-logits, not the transducer objective's outputs "
             "(transducer): choose one of transducer-beam, transducer-greedy, transducer-kenlm"),
            (["evaluate", run, "--split", "dev", "--decoder", "transducer-kenlm"],
             "the transducer-kenlm decoder needs a language model: -o decoder.lm=PATH"),
            (["transcribe", clip, "--model", run, "--decoder", "beam"],
             "the beam decoder reads ctc-logits, not the transducer objective's outputs"),
            (["export", run, "--format", "onnx", "--output", tmp_path / "export"],
             "asrkit export --format onnx: transducer runs export as savedmodel or tflite")):
        refused = cli(args)
        assert refused.exit_code != 0
        assert message in refused.stderr and "Traceback" not in refused.stderr
    assert not (tmp_path / "export").exists()


def test_the_objective_presets_and_settings_are_listed(cli):
    listed = cli(["plugins", "--settings", "transducer"])
    assert listed.exit_code == 0, listed.stderr
    for key in ("objective.predictor", "objective.joint_dim", "objective.frames_per_chunk"):
        assert key in listed.stdout
    assert set(plugins.get("objective", "transducer").presets) >= {"full", "cpu", "tiny"}


def test_the_cpu_preset_trains_a_transducer_on_shifted_voices():
    """A transducer's ``cpu`` preset shifts formants (measured: unseen voices 3 points better at
    30 minutes, docs/benchmarks.md); CTC's and the tiny preset's runs stay as recorded, and the
    user's ``-o`` turns it off."""
    def formants(*settings):
        config = build_run_config({"model": "conformer"}, parse_overrides(list(settings)))[0]
        return config.pipeline.formant_ratio, config.pipeline.pitch_semitones

    assert formants("objective=transducer", "preset=cpu") == ((0.9, 1.1), ())
    assert formants("objective=transducer", "preset=cpu", "pipeline.formant_ratio=") == ((), ())
    assert formants("objective=transducer", "preset=tiny") == ((), ())
    assert formants("preset=cpu") == ((), ())


def test_an_encoder_trained_with_ctc_starts_a_transducer_run(cli, tmp_path):
    ctc, rnnt = tmp_path / "ctc", tmp_path / "rnnt"
    common = ["--epochs", "1", "--batch-size", "4", "--no-progress"]
    trained = cli(["train", "--model", "conformer", "-o", "preset=tiny", "--run-dir", ctc,
                   *common])
    assert trained.exit_code == 0, trained.stderr[-3000:]
    started = cli(["train", "--init-from", ctc, "-o", "objective=transducer", "--run-dir", rnnt,
                   *common])
    assert started.exit_code == 0, started.stderr[-3000:]
    # The encoder's output layer is the joint's projection now: it alone starts afresh.
    assert "logits afresh" in started.stdout + started.stderr
    config = json.loads((rnnt / "config.json").read_text())
    assert config["train"]["init_reset"] == ["logits"]
    assert config["train"]["objective"] == "transducer"
    assert config["model"]["d_model"] == 16  # the source's encoder
