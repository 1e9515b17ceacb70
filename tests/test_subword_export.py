"""Exports of a model with subword labels: the SavedModel's ``text`` is words (pieces joined, the
marker made a space, spaces collapsed and stripped), TFLite's pieces are joined the same way when
read back, and ``asrkit.json`` / the SavedModel's variables give the labels back.

The model is the tiny character run's, read as if its 28 symbols were hand-written pieces (a
tokenizer's labels, without a tokenizer)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from asrkit.core.labels import Pieces
from asrkit.core.text import Alphabet, labels_from_json
from asrkit.testing.models import make_tiny_run

# 28 pieces for the 28 symbols of the tiny run; label 0 (the tiny model's "space") is a bare
# marker, so the greedy path holds runs of markers to collapse.
PIECES = Pieces(["▁", "▁the", "▁a", "at", "▁c", "s", "e", "t", "h", "▁s", "▁t", "o", "▁o", "n",
                 "▁n", "r", "▁r", "i", "▁i", "d", "▁d", "l", "▁l", "u", "'", "m", "▁m", "p"])


@pytest.fixture(scope="module")
def subword_run(tmp_path_factory):
    from asrkit.evaluation.restore import load_run_model
    from asrkit.tokenizers import TokenizerFile

    folder = make_tiny_run(tmp_path_factory.mktemp("tiny") / "run")
    run, model, _ = load_run_model(folder)
    pieces_file = TokenizerFile("test-pieces", folder / "tokenizer.test", PIECES)
    return dataclasses.replace(run, tokenizer_file=pieces_file), model


@pytest.fixture(scope="module")
def audio():
    from asrkit.serving.export import verification_audio
    from asrkit.serving.transcribe import load_audio
    from asrkit.testing.models import sample_clip

    speech = load_audio(sample_clip()).astype(np.float32) / 32768
    return np.concatenate([speech, verification_audio()])


def test_the_text_of_pieces_in_the_graph_is_labels_decode():
    import tensorflow as tf

    from asrkit.serving.export import text_of

    for symbols in (["▁the", "▁", "▁cat", "s", "▁"], ["at", "▁", "▁", "▁the"], [], ["▁"],
                    ["a b", "▁c"]):
        pieces = Pieces(dict.fromkeys([*symbols, "x"]))
        labels = [pieces.symbols.index(s) for s in symbols]
        got = text_of(tf.constant(symbols, tf.string), pieces).numpy().decode()
        assert got == pieces.decode(labels), symbols
    english = Alphabet()
    for text in (" the  cat ", "", "a"):
        got = text_of(tf.constant(list(text), tf.string), english).numpy().decode()
        assert got == text  # characters: exactly the symbols joined


def test_savedmodel_transcribes_pieces_as_words_and_keeps_its_labels(subword_run, audio, tmp_path):
    import tensorflow as tf

    from asrkit.serving.export import ExportedModel, _metadata, _save, serving_module

    run, model = subword_run
    module = serving_module(run, model)
    out = module.transcribe(audio)
    labels = out["labels"].numpy()
    text = out["text"].numpy().decode()
    assert text == PIECES.decode(labels)
    assert len(text.split()) > 2 and "▁" not in text and "  " not in text
    pieces = [c.decode() for c in out["characters"].numpy()]
    assert pieces == [PIECES.symbols[i] for i in labels]

    folder = tmp_path / "savedmodel"
    _save(module, folder)
    loaded = tf.saved_model.load(str(folder))
    assert loaded.word_marker.numpy().decode() == "▁"
    assert [s.decode() for s in loaded.alphabet.numpy()] == list(PIECES.symbols)
    # Without asrkit.json the SavedModel's own variables say what its labels are.
    bare = ExportedModel(folder)
    assert bare.labels == PIECES
    assert bare.transcribe(audio) == text
    # With it: the "labels" entry round-trips; "alphabet" stays for older readers.
    meta = _metadata(run, "savedmodel", "best", {"global_step": 7})
    assert labels_from_json(meta["labels"]) == PIECES
    assert meta["alphabet"] == list(PIECES.symbols) and meta["blank"] == PIECES.blank
    (folder / "asrkit.json").write_text(json.dumps(meta))
    assert ExportedModel(folder).labels == PIECES


def test_old_and_character_metadata_read_back_as_an_alphabet():
    english = Alphabet()
    assert labels_from_json({"alphabet": list(english.symbols)}) == english
    assert labels_from_json(english.to_json()) == english


def export_and_expect(subword_run, audio, folder: Path, form: str, write) -> tuple:
    """``write(run, model, folder)`` an export of ``form`` with its ``asrkit.json``, read it
    back, and the SavedModel module's in-graph text of ``audio`` it must reproduce."""
    from asrkit.serving.export import ExportedModel, _metadata, serving_module

    run, model = subword_run
    module = serving_module(run, model)  # kept: its functions hold it weakly
    expected = module.transcribe(audio)["text"].numpy().decode()
    folder.mkdir()
    write(run, model, folder)
    (folder / "asrkit.json").write_text(json.dumps(_metadata(run, form, "best", {})))
    return ExportedModel(folder), expected


def test_tflite_pieces_are_joined_when_read_back(subword_run, audio, tmp_path):
    from asrkit.serving.export import _write_tflite

    exported, expected = export_and_expect(subword_run, audio, tmp_path / "tflite", "tflite",
                                           _write_tflite)
    assert exported.labels == PIECES
    assert exported.transcribe(audio) == expected


def test_onnx_pieces_are_joined_when_read_back(subword_run, audio, tmp_path):
    pytest.importorskip("tf2onnx")
    pytest.importorskip("onnxruntime")
    from asrkit.serving.export_onnx import write_onnx

    exported, expected = export_and_expect(subword_run, audio, tmp_path / "onnx", "onnx",
                                           write_onnx)
    assert exported.labels == PIECES
    assert exported.transcribe(audio) == expected
    out = exported._run("transcribe", audio)
    assert list(out["characters"]) == [PIECES.symbols[i] for i in out["labels"]]
