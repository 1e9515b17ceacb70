"""Tokenizers: the ``register_tokenizers`` hook, ``asrkit tokenizer build``, and runs trained on
a tokenizer's labels (``-o tokenizer=FILE``), which keep a copy of its file.

The tokenizer here is the worked example of docs/hooks-data.md (marked letters), extracted from the
page and registered as a plugin: what a stranger reading the docs would write."""

from __future__ import annotations

import json
import re
import types
from pathlib import Path

import pytest

from tests.conftest import TINY, hook_section

DOCS = Path(__file__).resolve().parent.parent / "docs"
QUICK = ["--batch-size", "4", "-o", "max_steps=2", "-o", "eval_every_minutes=0",
         "--no-progress", *TINY]


def hooks_tokenizer_example() -> types.ModuleType:
    """The tokenizer example of docs/hooks-data.md, as a plugin module."""
    _, section = hook_section("register_tokenizers")
    source = re.findall(r"^```python\n(.*?)^```", section, re.S | re.M)[-1]
    module = types.ModuleType("letters_tokenizer")
    exec(compile(source, "docs/hooks-data.md", "exec"), module.__dict__)
    return module


@pytest.fixture
def letters(make_plugins):
    """The installed plugins plus the docs' letters tokenizer."""
    return make_plugins(hooks_tokenizer_example(), entry_points=True)


def test_hook_register_tokenizers(letters, asrkit_cli, tiny_dataset, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert "letters" in letters.registry.names("tokenizer")
    result = asrkit_cli(["tokenizer", "build", "--tokenizer", "letters", "--dataset",
                         tiny_dataset, "-o", "sample.letters", "--json"], letters)
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    # no space labels: fewer labels than characters, by the spaces
    assert report["labels_per_transcript"] < report["characters_per_transcript"]
    labels = letters.registry.get("tokenizer", "letters").load(Path("sample.letters"))
    assert labels.decode(labels.encode("she had your dark suit")) == "she had your dark suit"

    result = asrkit_cli(["train", "--dataset", tiny_dataset, "--run-dir", "run",
                         "-o", "tokenizer=sample.letters", *QUICK], letters)
    assert result.exit_code == 0, result.stderr
    assert f"labels: {labels.size} symbols of tokenizer letters (sample.letters)" in result.stdout
    record = json.loads(Path("run/tokenizer.json").read_text())
    assert record["tokenizer"] == "letters" and record["symbols"] == labels.size
    assert Path("run/tokenizer.letters").read_bytes() == Path("sample.letters").read_bytes()
    # the model outputs the tokenizer's classes, not the alphabet's
    from asrkit.evaluation.restore import load_run_model

    run, model, _ = load_run_model("run")
    assert run.labels.symbols == labels.symbols
    import numpy as np

    logits = model((np.zeros((1, 20, 26), np.float32), np.array([20], np.int32)))
    assert logits.shape[-1] == labels.num_classes != run.alphabet.num_classes

    # The run keeps its own copy: evaluation works with the original file gone.
    Path("sample.letters").unlink()
    result = asrkit_cli(["evaluate", "run", "--split", "dev", "--json", "-", "--no-progress"],
                        letters)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["utterances"] == 2


def test_chars_tokenizer_builds_the_alphabet_of_the_transcripts(asrkit_cli, tiny_dataset,
                                                                tmp_path):
    out = tmp_path / "alphabet.txt"
    result = asrkit_cli(["tokenizer", "build", "--tokenizer", "chars", "--dataset",
                         tiny_dataset, "-o", out])
    assert result.exit_code == 0, result.stderr
    assert "labels a transcript against" in result.stdout and "(1.00x)" in result.stdout
    from asrkit.core.text import Alphabet

    symbols = Alphabet.load(out).symbols
    assert symbols[0] == " " and "q" not in symbols  # only what the transcripts hold
    assert list(symbols[1:]) == sorted(symbols[1:])


def test_tokenizer_errors_are_one_line(letters, asrkit_cli, tiny_dataset, tmp_path,
                                       monkeypatch):
    monkeypatch.chdir(tmp_path)

    def error(*args: object) -> str:
        result = asrkit_cli([str(a) for a in args], letters)
        assert result.exit_code != 0
        assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1, result.stderr
        return result.stderr

    assert "no such file" in error("train", "--dataset", tiny_dataset,
                                   "-o", "tokenizer=missing.model", *QUICK)
    Path("vocab.bin").write_bytes(b"\x00\x01")
    assert "no installed tokenizer reads vocab.bin" in error(
        "train", "--dataset", tiny_dataset, "-o", "tokenizer=vocab.bin", *QUICK)
    assert "must end in .letters" in error("tokenizer", "build", "--tokenizer", "letters",
                                           "--dataset", tiny_dataset, "-o", "x.txt")
    assert "no split 'nope'" in error("tokenizer", "build", "--tokenizer", "letters",
                                      "--dataset", tiny_dataset, "--split", "nope")
    # letters that cannot spell the dataset's alphabet: refused before any training
    Path("few.letters").write_text("\u2581a\na\n", encoding="utf-8")
    assert "cannot spell" in error("train", "--dataset", tiny_dataset,
                                   "-o", "tokenizer=few.letters", *QUICK)
    assert not Path("runs").exists() or not any(Path("runs").iterdir())


def test_a_resumed_run_keeps_its_tokenizer(letters, asrkit_cli, tiny_dataset, tmp_path,
                                           monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert asrkit_cli(["tokenizer", "build", "--tokenizer", "letters", "--dataset",
                       tiny_dataset, "-o", "a.letters"], letters).exit_code == 0
    result = asrkit_cli(["train", "--dataset", tiny_dataset, "--run-dir", "run",
                         "-o", "tokenizer=a.letters", *QUICK], letters)
    assert result.exit_code == 0, result.stderr
    result = asrkit_cli(["train", "--resume", "run", "-o", "tokenizer=chars",
                         "-o", "max_steps=3", "--no-progress"], letters)
    assert result.exit_code != 0
    assert "a resumed run keeps its tokenizer (a.letters)" in result.stderr


def test_fine_tuning_onto_a_tokenizer_starts_the_output_layer_afresh(letters, asrkit_cli,
                                                                      tiny_dataset, tmp_path,
                                                                      monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert asrkit_cli(["tokenizer", "build", "--tokenizer", "letters", "--dataset",
                       tiny_dataset, "-o", "a.letters"], letters).exit_code == 0
    result = asrkit_cli(["train", "--dataset", tiny_dataset, "--run-dir", "chars", *QUICK],
                        letters)
    assert result.exit_code == 0, result.stderr
    result = asrkit_cli(["train", "--dataset", tiny_dataset, "--run-dir", "pieces",
                         "--init-from", "chars", "-o", "tokenizer=a.letters", *QUICK], letters)
    assert result.exit_code == 0, result.stderr
    assert "the tokenizer differs from chars's (28 symbols there" in result.stdout
    assert "the output layer logits starts afresh" in result.stdout
    config = json.loads(Path("pieces/config.json").read_text())
    assert config["train"]["init_reset"] == ["logits"]


def test_the_hooks_example_keeps_the_tokenizer_contract():
    from asrkit.testing import check_tokenizer

    check_tokenizer(hooks_tokenizer_example().MarkedLetters())
