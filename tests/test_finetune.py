"""Fine-tuning (``asrkit train --init-from RUN``): a run trained on one corpus of real speech
gives another corpus a head start; ``freeze`` keeps layers as they start; another alphabet
starts the output layer afresh; a model of other sizes is refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import SPEECH, TINY

#: The new corpus: real clips the source never trained on (LibriSpeech FLACs; the TIMIT sample
#: and an ARCTIC sentence as dev, which the ``sample`` corpus holds only for scoring).
TARGET = {
    "librispeech-flac/61-70968-0000.flac": ("HE BEGAN A CONFUSED COMPLAINT AGAINST THE WIZARD "
                                            "WHO HAD VANISHED BEHIND THE CURTAIN ON THE LEFT",
                                            "train"),
    "librispeech-flac/61-70968-0001.flac": ("GIVE NOT SO EARNEST A MIND TO THESE MUMMERIES "
                                            "CHILD", "train"),
    "librispeech-flac/1089-134691-0000.flac": ("HE COULD WAIT NO LONGER", "train"),
    "ldc93s1/LDC93S1.wav": ("she had your dark suit in greasy wash water all year", "dev"),
    "misc/arctic_a0024.wav": ("it was my reports from the north which chiefly induced people "
                              "to buy", "dev"),
}
#: Fast learning for a few steps, on every run of this file.
QUICK = ["--batch-size", "3", "-o", "learning_rate=0.003", "-o", "warmup_steps=0",
         "-o", "eval_every_minutes=0", "--no-progress"]


def cli(*args) -> tuple[int, str, str]:
    """``asrkit ARGS`` in this process (module fixtures cannot use ``asrkit_cli``)."""
    import contextlib
    import io

    from asrkit.cli import run

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def corpora(datasets, tmp_path_factory):
    """The ``sample`` corpus (imported by ``datasets``), a source run trained on it, and the new
    corpus imported twice: with the same alphabet, and with digits added to it."""
    root = tmp_path_factory.mktemp("finetune")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ASRKIT_HOME", str(datasets))
        patch.chdir(root)
        corpus = root / "corpus"
        corpus.mkdir()
        lines = ["file\ttranscript\tsplit"]
        for path, (text, split) in TARGET.items():
            name = path.rsplit("/", 1)[1]
            (corpus / name).write_bytes((SPEECH / path).read_bytes())
            lines.append(f"{name}\t{text}\t{split}")
        (corpus / "listing.tsv").write_text("\n".join(lines) + "\n")
        alphabet = root / "alphabet-digits.txt"
        alphabet.write_text("\n".join([" ", *"abcdefghijklmnopqrstuvwxyz", "'", *"0123456789"])
                            + "\n")
        for name, extra in (("books", []), ("digits", ["--alphabet", alphabet])):
            code, _, err = cli("import", "folder", corpus, "--name", name, *extra,
                               "--no-progress")
            assert code == 0, err[-2000:]
        code, _, err = cli("train", "--dataset", "sample", *TINY, "--epochs", "5", *QUICK,
                           "-o", "evaluate_dev=false", "--run-dir", root / "source")
        assert code == 0, err[-2000:]
        yield root
        from asrkit.testing import set_plugins

        set_plugins(None)


def last_dev_loss(run) -> float:
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [e for e in events if e["event"] == "evaluation"][-1]["dev_loss"]


def weights(run, checkpoint: str = "latest") -> dict[str, list[np.ndarray]]:
    from asrkit.evaluation.restore import load_run_model
    from asrkit.train.finetune import layer_weights

    _, model, _ = load_run_model(run, checkpoint)
    return {name: layer.get_weights() for name, layer in layer_weights(model).items()}


def test_finetuning_reaches_a_lower_dev_loss_than_scratch(corpora, asrkit_cli, monkeypatch):
    monkeypatch.chdir(corpora)
    steps = ["--epochs", "5", *QUICK]  # one step an epoch: 3 utterances, batches of 3
    tuned = asrkit_cli(["train", "--dataset", "books", "--init-from", "source", *steps,
                        "--run-dir", "tuned"])
    assert tuned.exit_code == 0, tuned.stderr[-3000:]
    # No best checkpoint (the source never scored dev), so its latest; its model settings.
    assert "starting from the weights of source (latest checkpoint, step " in tuned.stdout
    config = json.loads((corpora / "tuned/config.json").read_text())
    assert config["train"]["init_from"] == "source:latest"
    assert config["train"]["init_reset"] == []
    assert config["model"]["n_hidden"] == 32  # the source's, not the cpu preset's 256
    scratch = asrkit_cli(["train", "--dataset", "books", *TINY, *steps, "--run-dir", "scratch"])
    assert scratch.exit_code == 0, scratch.stderr[-3000:]
    tuned_loss, scratch_loss = last_dev_loss(corpora / "tuned"), last_dev_loss(
        corpora / "scratch")
    print(f"dev loss after 5 steps: fine-tuned {tuned_loss:.1f}, from scratch {scratch_loss:.1f}")
    assert tuned_loss < 0.8 * scratch_loss, (tuned_loss, scratch_loss)

    # The new run is a run like any other.
    evaluated = asrkit_cli(["evaluate", "tuned", "--split", "dev", "--json", "-",
                            "--no-progress"])
    assert evaluated.exit_code == 0, evaluated.stderr[-3000:]
    assert json.loads(evaluated.stdout)["utterances"] == 2


def test_another_alphabet_and_frozen_layers(corpora, asrkit_cli, monkeypatch):
    """Frozen layers keep the source's weights through training, the others train; with
    another alphabet, the output layer starts afresh, and the run says so and records it."""
    monkeypatch.chdir(corpora)
    frozen = ("h1", "h2", "h3", "bilstm")
    result = asrkit_cli(["train", "--dataset", "digits", "--init-from", "source",
                         "-o", f"freeze={','.join(frozen)}", "--epochs", "2", *QUICK,
                         "--run-dir", "digits"])
    assert result.exit_code == 0, result.stderr[-3000:]
    assert ("the alphabet differs from source's (28 symbols there, 38 here): the output layer "
            "logits starts afresh") in result.stdout
    config = json.loads((corpora / "digits/config.json").read_text())
    assert config["train"]["init_reset"] == ["logits"]
    assert config["train"]["freeze"] == list(frozen)
    before, after = weights(corpora / "source"), weights(corpora / "digits")
    for name in ("h1", "h2", "h3", "bilstm", "h5"):
        same = all(np.array_equal(a, b) for a, b in zip(before[name], after[name], strict=True))
        assert same == (name in frozen), name
    assert before["logits"][0].shape[-1] == 29 and after["logits"][0].shape[-1] == 39


@pytest.mark.parametrize("args, message", [
    (["-o", "freeze=h1,nosuch"],
     "freeze: the model has no layer 'nosuch'; its layers: h1, h2, h3, bilstm, h5, logits"),
    (["-o", "model.n_cell=16"],
     "--init-from source: its brnn has other sizes (model.n_cell 32 there, 16 here); the "
     "model and its sizes must be the run's it starts from"),
    (["--model", "ds2"], "--init-from source is a brnn run, not ds2: the model must be the same"),
    (["--init-from", "source:best"],
     "--init-from source:best: source has no best checkpoint; use source:latest"),
    (["--init-from", "nowhere"], "--init-from nowhere: nowhere is not a run folder"),
])
def test_what_cannot_be_fine_tuned_is_one_line(corpora, asrkit_cli, monkeypatch, args, message):
    monkeypatch.chdir(corpora)
    init = [] if "--init-from" in args else ["--init-from", "source"]
    result = asrkit_cli(["train", "--dataset", "books", *init, *args, "--epochs", "1", *QUICK])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [f"asrkit: error: {message}"] or (
        message in result.stderr and len(result.stderr.strip().splitlines()) == 1), result.stderr
    assert not (corpora / "runs").exists() or not any((corpora / "runs").iterdir())
