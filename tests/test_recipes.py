"""Every recipe of ``recipes/`` runs end to end as written: each corpus's two scripts (Conformer
and Deep Speech 2), in order, with ``bash``, against the corpora's archives in their real layouts
(a few real utterances each, :mod:`tests.corpora`) served over HTTP on 127.0.0.1
(``ASRKIT_MIRROR``; Common Voice, which no one may download for you, from a file, as
``CV_ARCHIVE``), in an empty working folder and ``ASRKIT_HOME``.

What a test changes is what the recipes take from outside: the environment
(``ASRKIT_MAX_STEPS`` keeps each training to a few steps, ``AVERAGE`` averages that many) and
arguments added to the ``asrkit train`` line, which shrink each model to a few thousand
weights so that it trains in seconds. Every other setting, the import, averaging and the language
model's steps run as a user runs them: an `-o` key the CLI does not know, a renamed option or a
wrong dataset name fails here. The two recipes of a corpus share its imported dataset and its
language model, as they do for a user.

The pages' command lines are checked against the CLI by ``tests/test_docs_commands.py``; here
also that each page shows the commands its scripts run.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from asrkit.testing import CorpusServer, serve_corpora
from tests import corpora
from tests.conftest import ROOT
from tests.test_docs_commands import command_lines

RECIPES = ROOT / "recipes"
CORPORA = sorted(p.name for p in RECIPES.iterdir() if p.is_dir())
MODELS = ("conformer", "ds2")
#: Steps per training; a conformer recipe keeps each epoch's checkpoint and averages them, and
#: an epoch is one step here (the fixtures hold fewer utterances than a batch).
STEPS = 2
#: Arguments that shrink each model (the recipes' sizes are for GPUs).
SMALL = {
    "conformer": ["-o", "model.d_model=16", "-o", "model.num_heads=2", "-o", "model.num_blocks=1",
                  "-o", "model.ff_multiplier=2", "-o", "model.conv_kernel=3",
                  "-o", "model.subsampling_channels=4"],
    "ds2": ["-o", "model.rnn_layers=1", "-o", "model.rnn_units=16", "-o", "model.conv_channels=4"],
}
#: Each corpus's splits (utterances) as its fixture archive imports.
SPLITS = {
    "librispeech-100h": {"train": 5, "dev": 2, "test": 2},
    "librispeech-960h": {"train": 7, "dev": 3, "test": 2},
    "tedlium3": {"train": 2, "dev": 2, "test": 2},
    "commonvoice-en": {"train": 3, "dev": 1, "test": 1},
    "an4": {"train": 5, "test": 2},
}


def test_every_corpus_has_a_page_and_both_recipes():
    assert sorted(SPLITS) == CORPORA
    for corpus in CORPORA:
        assert sorted(p.name for p in (RECIPES / corpus).iterdir()) == [
            "README.md", "conformer.sh", "ds2.sh"], corpus
    index = (RECIPES / "README.md").read_text()
    assert all(f"({corpus}/README.md)" in index for corpus in CORPORA)


def commands(path: Path) -> set[str]:
    """The asrkit command lines of a page or script, as shell words (the ``"$@"`` that a recipe
    passes on left out)."""
    found = set()
    for _, _, command in command_lines([path]):
        words = shlex.split(command)
        found.add(shlex.join(words[:-1] if words[-1] == "$@" else words))
    return found


@pytest.mark.parametrize("corpus", CORPORA)
def test_each_page_shows_the_commands_its_scripts_run(corpus):
    """A page that drifts from its scripts tells the reader of steps they do not take."""
    page = commands(RECIPES / corpus / "README.md")
    run = set().union(*(commands(RECIPES / corpus / f"{model}.sh") for model in MODELS))
    assert len(run) >= 3, corpus
    assert run <= page, f"recipes/{corpus}/README.md lacks: {sorted(run - page)}"


def test_the_index_shows_the_shared_steps():
    shared = commands(RECIPES / "common.sh")
    assert len(shared) == 3, shared  # lm build, evaluate --grid, evaluate
    missing = shared - commands(RECIPES / "README.md")
    assert not missing, f"recipes/README.md lacks: {sorted(missing)}"


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[CorpusServer, Path]]:
    """Every corpus's fixture archive where its host serves it, and Common Voice's as a file."""
    with serve_corpora() as server:
        corpora.serve_librispeech(server, corpora.LIBRISPEECH_SMALL)
        server.add_file(corpora.TED_PATHS[3], corpora.ted(3).data)
        server.add_file(corpora.AN4_PATH, corpora.an4().data)
        commonvoice = corpora.commonvoice("17.0")
        archive = tmp_path_factory.mktemp("downloads") / commonvoice.filename
        archive.write_bytes(commonvoice.data)
        yield server, archive


def run_recipe(script: Path, env: dict[str, str], cwd: Path,
               args: list[str]) -> subprocess.CompletedProcess:
    """``bash SCRIPT ARGS`` as a user runs it, with the asrkit of this Python first on PATH."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ASRKIT_")}
    environment.update(env)
    environment["PATH"] = os.pathsep.join([str(Path(sys.executable).parent),
                                           environment.get("PATH", "")])
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True,
                          env=environment, cwd=cwd, timeout=600, check=False)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("corpus", CORPORA)
def test_the_recipes_run_end_to_end(corpus, mirror, tmp_path):
    server, commonvoice = mirror
    home, cwd = tmp_path / "home", tmp_path / "work"
    cwd.mkdir()
    env = {"ASRKIT_HOME": str(home), "ASRKIT_MIRROR": server.url,
           "ASRKIT_MAX_STEPS": str(STEPS), "AVERAGE": str(STEPS), "CV_ARCHIVE": str(commonvoice)}
    timings = []
    for model in MODELS:
        script = RECIPES / corpus / f"{model}.sh"
        started = time.monotonic()
        result = run_recipe(script, env, cwd, SMALL[model])
        timings.append(f"{time.monotonic() - started:6.1f} s  {corpus}/{model}.sh")
        assert result.returncode == 0, (
            f"recipes/{corpus}/{model}.sh failed (exit {result.returncode})\n"
            f"--- stdout\n{result.stdout[-6000:]}\n--- stderr\n{result.stderr[-6000:]}")
        assert f"ASRKIT_MAX_STEPS={STEPS}" in result.stderr
        assert f"finished after {STEPS} steps" in result.stdout
    print("\n".join(timings))  # what each recipe costs here, with -s

    [dataset] = (home / "datasets").iterdir()
    splits = json.loads((dataset / "dataset.json").read_text())["splits"]
    assert {split: splits[split]["utterances"] for split in splits} == SPLITS[corpus]
    work = cwd / corpus  # WORK's default
    assert "\\data\\" in (work / "lm.arpa").read_text()
    for model in MODELS:
        run = work / "runs" / model
        config = json.loads((run / "config.json").read_text())
        assert config["train"]["model"] == model
        assert config["train"]["preset"] == "none"  # every setting is the recipe's own
        grid = json.loads((run / "lm-grid.json").read_text())
        scored = json.loads((run / "test-lm.json").read_text())
        assert scored["decoder"] == "kenlm" and scored["split"] == "test"
        for key, value in grid["best"]["settings"].items():  # the weights chosen on dev
            assert scored["decoder_settings"][key] == pytest.approx(float(value)), key
    conformer = work / "runs" / "conformer"
    assert (conformer / "checkpoints" / "averaged.json").is_file()
    assert json.loads((conformer / "test-lm.json").read_text())["checkpoint"]["kind"] == \
        "averaged"


def test_the_test_shrinks_only_what_the_scripts_set():
    """The test's arguments override the scripts' own model settings, nothing they leave out."""
    for model, args in SMALL.items():
        keys = {word.split("=")[0] for word in args if "=" in word}
        for corpus in CORPORA:
            text = (RECIPES / corpus / f"{model}.sh").read_text()
            line = " ".join(shlex.split(text, comments=True))
            assert all(f"{key}=" in line for key in keys), (corpus, model, keys)
