"""A run on subword labels, end to end through the command line with the bundled plugins (as set
up by ``scripts/setup.sh``): ``asrkit tokenizer build`` (SentencePiece) -> ``train -o
tokenizer=FILE`` -> ``evaluate`` (greedy, beam, kenlm with a word n-gram built by ``asrkit lm
build``) -> ``transcribe`` (word times) -> ``export`` -> ``transcribe`` with the export.

The model is a tiny brnn trained for a few steps: this is about every command reading the run's
labels, not about accuracy (``benchmarks/bench_learning.py --subwords 256`` measures that)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import SPEECH, TINY

pytest.importorskip("asrkit_tokenizer_sentencepiece")

CLIP = SPEECH / "ldc93s1" / "LDC93S1.wav"


@pytest.fixture(scope="module")
def subword_run(tmp_path_factory, tiny_dataset):
    """A brnn run trained on a 60-piece SentencePiece vocabulary of the sample corpus."""
    import contextlib
    import io

    from asrkit.cli import run

    root = tmp_path_factory.mktemp("subwords")

    def cli(*args: object) -> str:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run([str(a) for a in args])
        assert code == 0, err.getvalue()
        return out.getvalue()

    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        built = json.loads(cli("tokenizer", "build", "--dataset", tiny_dataset,
                               "--vocab-size", "60", "-o", "tok.model", "--json"))
        assert built["symbols"] == 60
        assert built["labels_per_transcript"] < 0.8 * built["characters_per_transcript"]
        trained = cli("train", "--dataset", tiny_dataset, "--run-dir", "run",
                      "-o", "tokenizer=tok.model", "-o", "max_steps=3", "--batch-size", "4",
                      "-o", "eval_every_minutes=0", "--no-progress", *TINY)
        assert "labels: 60 symbols of tokenizer sentencepiece (tok.model)" in trained
        cli("lm", "build", "--dataset", tiny_dataset, "--order", "2", "-o", "lm.arpa")
    return root, cli


def test_the_run_keeps_the_tokenizer_and_outputs_its_classes(subword_run):
    root, _ = subword_run
    run = root / "run"
    assert (run / "tokenizer.model").read_bytes() == (root / "tok.model").read_bytes()
    record = json.loads((run / "tokenizer.json").read_text())
    assert record["tokenizer"] == "sentencepiece" and record["symbols"] == 60
    from asrkit.runs.run import load_run

    labels = load_run(run).labels
    assert labels.size == 60 and labels.word_marker == "\u2581"


@pytest.mark.parametrize("decoder", [[], ["-o", "decoder=beam", "-o", "decoder.beam_width=4"],
                                     ["-o", "decoder=kenlm", "-o", "decoder.lm=LM",
                                      "-o", "decoder.beam_width=4"]],
                         ids=["greedy", "beam", "kenlm"])
def test_evaluate_decodes_subwords_with_every_decoder(subword_run, decoder):
    root, cli = subword_run
    decoder = [f"decoder.lm={root / 'lm.arpa'}" if a == "decoder.lm=LM" else a
               for a in decoder]
    report = json.loads(cli("evaluate", root / "run", "--split", "dev", "--json", "-",
                            "--no-progress", *decoder))
    assert report["utterances"] == 2
    for utterance in report["results"]:
        hypothesis = utterance["hypothesis"]
        assert "\u2581" not in hypothesis and hypothesis == " ".join(hypothesis.split())


def test_transcribe_and_export_read_words_from_pieces(subword_run):
    root, cli = subword_run
    from_run = [json.loads(line) for line in
                cli("transcribe", CLIP, "--model", root / "run", "--json").splitlines()]
    cli("export", root / "run", "-o", root / "export")
    meta = json.loads((root / "export" / "asrkit.json").read_text())
    assert meta["labels"]["word_marker"] == "\u2581" and len(meta["labels"]["symbols"]) == 60
    assert not (root / "export" / "alphabet.txt").exists()
    from_export = [json.loads(line) for line in
                   cli("transcribe", CLIP, "--model", root / "export", "--json").splitlines()]
    assert [f["text"] for f in from_export] == [f["text"] for f in from_run]
    for file in from_run:
        assert "\u2581" not in file["text"]
        assert " ".join(w["word"] for w in file["words"]) == file["text"]

    import numpy as np
    import tensorflow as tf

    from asrkit.dataset.audio import read_wav
    from asrkit.runs.run import load_run

    labels = load_run(root / "run").labels
    loaded = tf.saved_model.load(str(root / "export"))
    audio = read_wav(CLIP).astype(np.float32) / 32768
    out = loaded.signatures["transcribe"](pcm=tf.constant(audio))
    pieces = out["labels"].numpy()
    assert out["text"].numpy().decode() == labels.decode(pieces)
    assert np.all(pieces < labels.blank)
