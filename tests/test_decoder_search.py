"""``asrkit evaluate --grid``: decoder settings chosen on a dev split, the model run once."""

from __future__ import annotations

import dataclasses
import json
import types
from typing import Any

import pytest

from asrkit.api import Decoder, hookimpl, setting, validate
from asrkit.core.metrics import corpus_score
from tests.conftest import TINY


@dataclasses.dataclass(frozen=True)
class RepeatConfig:
    word: str = "we"
    count: int = setting(1, min=0)

    def __post_init__(self) -> None:
        validate(self)


class RepeatDecoder(Decoder):
    """Ignores the logits: ``word`` ``count`` times. The grid's choice then has a known answer
    whatever a tiny model learned."""

    name = "repeat"
    description = "test decoder: a word, repeated"
    Config = RepeatConfig

    def decode(self, logits: Any, lengths: Any, labels: Any) -> list[str]:
        return [" ".join([self.config.word] * self.config.count)] * len(lengths)


@hookimpl
def register_decoders(register: Any) -> None:
    register(RepeatDecoder())


PLUGIN = types.ModuleType("repeat_decoder")
PLUGIN.register_decoders = register_decoders


@pytest.fixture(scope="module")
def run(datasets, tmp_path_factory):
    from asrkit.cli import run as asrkit

    folder = tmp_path_factory.mktemp("search") / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ASRKIT_HOME", str(datasets))
        code = asrkit(["train", "--epochs", "1", "--batch-size", "4", *TINY,
                       "-o", "evaluate_dev=false", "--run-dir", str(folder), "--no-progress"])
    assert code == 0
    return folder


@pytest.fixture
def cli(run, datasets, monkeypatch, asrkit_cli, make_plugins):
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    plugins = make_plugins(PLUGIN, entry_points=True)
    return lambda *args: asrkit_cli(["evaluate", run, *args], plugins)


def test_every_combination_is_scored_and_the_best_is_chosen(cli, run):
    result = cli("--split", "dev", "--decoder", "repeat", "--grid", "decoder.word=we,must,zebra",
                 "--grid", "count=0,1,2", "--json", "-", "--no-progress")
    assert result.exit_code == 0, result.stderr[-3000:]
    search = json.loads(result.stdout)
    assert search["grid"] == {"word": ["we", "must", "zebra"], "count": ["0", "1", "2"]}
    assert search["split"] == "dev" and search["decoder"] == "repeat"
    assert search["checkpoint"]["kind"] == "latest"
    references = _dev_transcripts(run)
    assert search["utterances"] == len(references)
    assert [p["settings"] for p in search["points"]] == [
        {"word": w, "count": c} for w in ("we", "must", "zebra") for c in ("0", "1", "2")]
    for point in search["points"]:
        expected = corpus_score(references, [_repeat(point["settings"])] * len(references))
        assert (point["wer"], point["cer"]) == pytest.approx((expected.wer, expected.cer))
    best = min(search["points"], key=lambda p: (p["wer"], p["cer"]))
    assert best["wer"] < max(p["wer"] for p in search["points"])  # the choice matters
    assert search["best"]["settings"] == best["settings"]
    assert search["best"]["options"] == [f"-o decoder.{k}={v}"
                                         for k, v in best["settings"].items()]

    by_cer = cli("--split", "dev", "--decoder", "repeat", "--grid", "count=0,1,2",
                 "--best-by", "cer", "--no-progress")
    assert by_cer.exit_code == 0, by_cer.stderr[-3000:]
    assert "best by CER" in by_cer.stdout
    cers = {c: corpus_score(references, [_repeat({"word": "we", "count": c})] * len(references)
                            ).cer for c in ("0", "1", "2")}
    assert by_cer.stdout.strip().splitlines()[-1].endswith(
        f"with -o decoder.count={min(cers, key=cers.get)}")

    # The same settings as a plain evaluation give the same scores.
    plain = cli("--split", "dev", "--decoder", "repeat", "-o", "decoder.count=2", "--json", "-",
                "--no-progress")
    scored = json.loads(plain.stdout)
    point = next(p for p in search["points"] if p["settings"] == {"word": "we", "count": "2"})
    assert (scored["wer"], scored["cer"]) == pytest.approx((point["wer"], point["cer"]))


def test_grid_mistakes_are_one_line_errors_before_the_model_loads(cli):
    cases = {
        ("--grid", "decoder.count=1,-1"): "count",
        ("--grid", "decoder.size=1,2"): "unknown setting 'size'",
        ("--grid", "count=1", "--grid", "count=2"): "count is already in the grid",
        ("--grid", "count="): "no values",
        ("--grid", "decoder=beam"): "choose the decoder with --decoder",
        ("--grid", "count=1", "--best-by", "loss"): "the loss is the model's",
        ("--grid", "count=1", "--watch"): "give one of them",
    }
    for args, message in cases.items():
        result = cli("--split", "dev", "--decoder", "repeat", *args, "--no-progress")
        assert result.exit_code == 1, (args, result.stdout)
        assert message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr


def _repeat(settings: dict[str, str]) -> str:
    return " ".join([settings["word"]] * int(settings["count"]))


def _dev_transcripts(run) -> list[str]:
    from asrkit.api import read_csv, resolve_dataset

    dataset = json.loads((run / "config.json").read_text())["train"]["dataset"]
    return [row.transcript for row in read_csv(resolve_dataset(dataset) / "dev.csv")]
