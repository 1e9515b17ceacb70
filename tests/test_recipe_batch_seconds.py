"""Batching by a duration budget (``pipeline.batch_seconds``): never more padded audio a batch
than the budget, every utterance once an epoch, the padding measured in the run's metrics."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pytest

from asrkit.config.pipeline import PipelineConfig, PipelineError
from asrkit.core.errors import AsrkitError
from asrkit.core.text import Alphabet
from asrkit.dataset.shards import SAMPLE_RATE
from asrkit.pipeline.batches import (
    batch_plan,
    estimated_batches,
    make_dataset,
)
from tests.conftest import TINY


@pytest.fixture
def home(datasets, monkeypatch):
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    return datasets


def durations(split_csv: Path) -> dict[str, int]:
    """Utterance id -> samples."""
    with split_csv.open(newline="", encoding="utf-8") as handle:
        return {Path(row["wav_filename"]).stem: round(float(row["duration"]) * SAMPLE_RATE)
                for row in csv.DictReader(handle)}


def test_no_batch_exceeds_the_budget_and_every_utterance_comes_once_an_epoch(home):
    dataset = home / "datasets" / "sample"
    samples = durations(dataset / "train.csv")
    budget = 7.0
    config = PipelineConfig(batch_seconds=budget, num_buckets=4, with_text=True, seed=3)
    batches = make_dataset(dataset, "train", Alphabet.load(dataset / "alphabet.txt"), "mfcc",
                           config=config)
    sizes = []
    for _ in range(2):  # two epochs: shuffled anew, each complete
        seen: Counter[str] = Counter()
        for batch in batches.as_numpy_iterator():
            ids = [i.decode() for i in batch["ids"]]
            seen.update(ids)
            padded = max(samples[i] for i in ids) * len(ids) / SAMPLE_RATE
            assert padded <= budget or len(ids) == 1, (ids, padded)
            sizes.append(len(ids))
        assert seen == Counter(samples.keys())  # each once
    assert max(sizes) > 1 and len(set(sizes)) > 1  # the batch size follows the lengths


def test_the_plan_gives_each_bucket_the_size_that_fits(tmp_path):
    rows = [("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 6.0), ("e", 9.5)]
    with (tmp_path / "train.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["wav_filename", "wav_filesize", "transcript", "duration"])
        writer.writerows([(f"{name}.wav", 0, "x", seconds) for name, seconds in rows])
    config = PipelineConfig(batch_seconds=10.0, bucket_boundaries=(2.5, 5.0))
    edges, sizes = batch_plan(tmp_path, "train", config)
    # buckets [0, 2.5 s), [2.5 s, 5 s), [5 s, the longest: 9.5 s]
    assert edges == [40000, 80000]
    assert sizes == [160000 // 39999, 160000 // 79999, 160000 // 152000] == [4, 2, 1]
    edges, sizes = batch_plan(tmp_path, "train", PipelineConfig(batch_size=8))
    assert sizes == [8] * (len(edges) + 1)  # batch_size: the same size in every bucket
    # a: bucket 0; b, c: bucket 1; d, e: bucket 2 (batches of 4, 2, 1)
    assert estimated_batches(tmp_path, "train", config) == 1 + 1 + 2
    with pytest.raises(PipelineError, match="batch_seconds needs bucketing"):
        PipelineConfig(batch_seconds=10.0, bucketing=False)


def test_a_run_reports_the_padding_of_each_epoch(home, asrkit_cli, tmp_path):
    run = tmp_path / "run"
    result = asrkit_cli(["train", "--epochs", "1", *TINY, "-o", "pipeline.batch_seconds=7",
                         "-o", "pipeline.num_buckets=4", "-o", "evaluate_dev=false",
                         "--run-dir", run, "--no-progress"])
    assert result.exit_code == 0, result.stderr[-3000:]
    lines = (run / "metrics.jsonl").read_text().splitlines()
    epochs = [e for e in map(json.loads, lines) if e["event"] == "epoch"]
    assert len(epochs) == 1 and 0 < epochs[0]["padding"] < 0.5
    assert json.loads((run / "config.json").read_text())["pipeline"]["batch_seconds"] == 7.0

    # like batch_size, the budget may change on resume (after running out of memory)
    from asrkit.config.overrides import parse_overrides
    from asrkit.runs.run import load_run, resume_run

    resumed = resume_run(load_run(run), parse_overrides(["pipeline.batch_seconds=5",
                                                         "epochs=2"]))
    assert resumed.pipeline.batch_seconds == 5.0 and resumed.train.epochs == 2
    with pytest.raises(AsrkitError, match="a resumed run keeps its pipeline settings"):
        resume_run(load_run(run), parse_overrides(["pipeline.num_buckets=8"]))
