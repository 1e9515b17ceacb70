"""``asrkit describe``, the model analysis (parameters, FLOPs) and the PNG plots."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TINY, run_asrkit

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
RUN_PLOTS = {"training_loss.png", "learning_rate.png", "dev_loss.png", "dev_error_rates.png",
             "wer_by_duration.png"}


def check_png(path: Path) -> None:
    """A whole PNG of the plots' size (1000 x 600), big enough to hold a drawn figure."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, path
    assert data[12:16] == b"IHDR" and data.endswith(b"IEND\xaeB`\x82"), path
    assert struct.unpack(">II", data[16:24]) == (1000, 600), path
    assert 8_000 < len(data) < 500_000, (path, len(data))


def brnn_by_hand(features: int, context: int, hidden: int, cell: int,
                 classes: int) -> tuple[int, int]:
    """brnn's parameters and multiply-adds per frame, counted from its docstring's equations."""
    inputs = features * (2 * context + 1)
    dense = [(inputs, hidden), (hidden, hidden), (hidden, 2 * cell), (2 * cell, hidden),
             (hidden, classes)]
    gates = 4 * cell
    lstm_kernels = 2 * (2 * cell * gates) + 2 * (cell * gates)  # input and recurrent, 2 ways
    parameters = sum(i * o + o for i, o in dense) + lstm_kernels + 2 * gates
    macs = sum(i * o for i, o in dense) + lstm_kernels
    return parameters, macs


@pytest.fixture
def home(datasets, monkeypatch):
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    return datasets


@pytest.fixture(scope="module")
def trained(datasets, tmp_path_factory):
    """A tiny real run: one epoch (4 steps) of a narrow brnn on `sample`, every step logged,
    with a dev evaluation and the final test report."""
    run = tmp_path_factory.mktemp("describe") / "run"
    result = run_asrkit("train", "--epochs", "1", "--batch-size", "4", *TINY,
                        "-o", "log_every=1", "--run-dir", str(run), "--no-progress",
                        env={"ASRKIT_HOME": str(datasets)}, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return run


def test_brnn_at_the_notebooks_sizes_has_7_3_m_parameters_and_its_flops_by_hand(tmp_path):
    from asrkit import plugins
    from asrkit.models.analysis import ANALYSIS_JSON, ANALYSIS_TXT, write_model_analysis
    from asrkit.models.brnn import BRNNConfig

    spec, extractor = plugins.get("model", "brnn"), plugins.get("feature", "mfcc")
    config, features = BRNNConfig(), extractor.Config()
    assert (config.n_hidden, config.n_cell, config.context) == (494, 494, 9)
    model = spec.build(config, extractor.num_features(features), 29)
    write_model_analysis(tmp_path, model, spec, config, features, extractor)
    analysis = json.loads((tmp_path / ANALYSIS_JSON).read_text())

    parameters, macs = brnn_by_hand(26, 9, 494, 494, 29)
    assert parameters == 7_341_857  # 7.3 M
    assert analysis["parameters"] == analysis["trainable_parameters"] == parameters
    assert analysis["bytes"] == 4 * parameters  # float32
    assert sum(v["parameters"] for v in analysis["variables"]) == parameters
    by_hand = 2 * macs * 100  # a multiply-add is 2 FLOPs; 100 frames a second
    assert by_hand == 1_467_081_200
    assert analysis["frames_per_second"] == 100
    assert abs(analysis["flops_per_second"] - by_hand) / by_hand < 0.01
    layers = {layer["name"]: layer for layer in analysis["layers"]}
    assert list(layers) == ["h1", "h2", "h3", "bilstm", "h5", "logits"]
    assert layers["h3"]["flops_per_second"] == 2 * 494 * 988 * 100
    assert layers["bilstm"]["kind"] == "HoistedBiLSTM"
    assert layers["bilstm"]["flops_per_second"] == 2 * (988 + 494) * 4 * 494 * 2 * 100
    assert layers["bilstm"]["parameters"] == 2 * (988 + 494 + 1) * 4 * 494
    assert not analysis["not_counted"]
    text = (tmp_path / ANALYSIS_TXT).read_text()
    assert "7,341,857 parameters (7.34 M" in text and "1.47 G" in text
    assert "brnn/bilstm/recurrent_kernel" in text and "2x494x1976" in text


def test_ds2_convolutions_and_recurrent_layers_are_counted(tmp_path):
    """Convolutions cost their kernel once per output position (frame x frequency bin), after
    the time stride; the recurrent layers run at the subsampled frame rate."""
    from asrkit import plugins
    from asrkit.models.analysis import analyze_model
    from asrkit.models.ds2 import DS2Config

    spec, extractor = plugins.get("model", "ds2"), plugins.get("feature", "logmel")
    config = DS2Config(conv_channels=2, rnn_layers=1, rnn_units=4)
    features = extractor.Config()
    bins = extractor.num_features(features)
    assert (bins, config.time_stride) == (80, 2)
    model = spec.build(config, bins, 29)
    analysis = analyze_model(model, spec, config, features, extractor)

    frames = 100 // config.time_stride  # after the first convolution
    conv1 = (11 * 41 * 1 * 2) * frames * (bins // 2)
    conv2 = (11 * 21 * 2 * 2) * frames * (bins // 4)
    rnn_in, units = 2 * (bins // 4), config.rnn_units
    gru = 2 * (rnn_in * 3 * units + units * 3 * units) * frames  # two directions
    logits = 2 * units * 29 * frames
    by_hand = 2 * (conv1 + conv2 + gru + logits)
    assert analysis.flops_per_second == pytest.approx(by_hand, rel=1e-9)
    assert analysis.parameters == sum(v["parameters"] for v in analysis.variables)
    assert analysis.trainable_parameters == analysis.parameters - 2 * 2 * 2  # BN statistics
    assert not analysis.not_counted


@pytest.mark.parametrize("args", [["--help"], ["describe", "--help"]])
def test_help_imports_no_tensorflow_numpy_or_matplotlib(args):
    code = ("import sys\nfrom asrkit.cli import run\n"
            f"run({args!r})\n"
            "print('HEAVY', sorted(m for m in sys.modules if m.split('.')[0] in "
            "{'tensorflow', 'keras', 'numpy', 'matplotlib'}))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=False)
    assert "HEAVY []" in result.stdout, result.stdout[-2000:] + result.stderr[-2000:]


def test_describe_dataset(home, asrkit_cli, tmp_path):
    from asrkit.dataset.manifest import read_csv

    plots = tmp_path / "plots"
    result = asrkit_cli(["describe", "sample", "--plots", plots])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("dataset sample (") and "19 utterances" in lines[0]
    assert [line.split()[0] for line in lines[3:6]] == ["train", "dev", "test"]
    assert "skipped at import: 0 of 19 utterances (0.0%)" in result.stdout
    assert "space " in result.stdout
    assert sorted(p.name for p in plots.iterdir()) == ["durations.png", "transcript_lengths.png"]
    for png in plots.iterdir():
        check_png(png)

    described = json.loads(asrkit_cli(["describe", home / "datasets" / "sample",
                                       "--json"]).stdout)
    train = described["splits"]["train"]
    assert [described["splits"][s]["utterances"] for s in ("train", "dev", "test")] == [16, 2, 1]
    rows = list(read_csv(home / "datasets" / "sample" / "train.csv"))
    seconds = sorted((r.wav_filesize - 44) / 32000 for r in rows)  # 16-bit mono 16 kHz PCM
    assert train["duration_seconds"]["min"] == pytest.approx(seconds[0], abs=1e-3)
    assert train["duration_seconds"]["max"] == pytest.approx(seconds[-1], abs=1e-3)
    assert train["seconds"] == pytest.approx(sum(seconds), abs=0.01)
    assert train["speakers"] == len({r.speaker for r in rows})
    assert train["words"] == sum(len(r.transcript.split()) for r in rows)
    characters = {c["character"]: c for c in described["characters"]}
    assert characters[" "]["count"] == sum(
        r.transcript.count(" ") for split in ("train", "dev", "test")
        for r in read_csv(home / "datasets" / "sample" / f"{split}.csv"))
    assert sum(c["share"] for c in characters.values()) == pytest.approx(1, abs=1e-3)
    assert described["skipped"] == {"utterances": 0, "share": 0.0, "reasons": {}, "errors": 0}


def test_describe_dataset_says_what_the_import_skipped(home, asrkit_cli, tmp_path):
    dataset = tmp_path / "skipping"
    shutil.copytree(home / "datasets" / "sample", dataset)
    info = json.loads((dataset / "dataset.json").read_text())
    info["skipped"] = {"too long": {"count": 3, "utterances": ["train/a", "train/b", "dev/c"]},
                       "empty transcript": {"count": 1, "utterances": ["test/d"]}}
    (dataset / "dataset.json").write_text(json.dumps(info))
    result = asrkit_cli(["describe", dataset])
    assert result.exit_code == 0, result.stderr
    assert "skipped at import: 4 of 23 utterances (17.4%)" in result.stdout
    assert "  too long: 3\n  empty transcript: 1" in result.stdout
    skipped = json.loads(asrkit_cli(["describe", dataset, "--json"]).stdout)["skipped"]
    assert skipped["share"] == pytest.approx(4 / 23, abs=1e-4)


def test_describe_unknown_dataset_is_a_one_line_error(home, asrkit_cli):
    result = asrkit_cli(["describe", "nosuch"])
    assert result.exit_code == 1
    assert result.stderr.strip().startswith("asrkit: error: no imported dataset 'nosuch'")


def test_describe_run(home, trained, asrkit_cli, tmp_path):
    from asrkit.models.analysis import ANALYSIS_JSON, ANALYSIS_TXT

    assert (trained / ANALYSIS_JSON).exists()  # every run writes its analysis; without one,
    for name in (ANALYSIS_JSON, ANALYSIS_TXT):  # describe computes and saves it
        (trained / name).unlink()
    plots = tmp_path / "plots"
    result = asrkit_cli(["describe", trained, "--plots", plots])
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert out.startswith(f"run {trained}: model brnn, features mfcc, dataset sample")
    assert "  model: n_hidden=32, n_cell=32, context=2," in out
    assert "progress: step 4, epoch 1 of 1, 4 steps an epoch (finished: all epochs done)" in out
    assert "best dev: loss " in out and "report (test, 1 utterances, greedy decoder)" in out
    assert "\n  trained from step 0 on " in out and ", 1 tower, " in out  # and the precision
    # Computed, printed and saved for the next time.
    parameters, macs = brnn_by_hand(26, 2, 32, 32, 29)
    assert f"model brnn: {parameters:,} parameters" in out
    assert (trained / ANALYSIS_TXT).exists()
    assert json.loads((trained / ANALYSIS_JSON).read_text())["flops_per_second"] == \
        2 * macs * 100

    assert {p.name for p in plots.iterdir()} == RUN_PLOTS
    for png in plots.iterdir():
        check_png(png)

    described = json.loads(asrkit_cli(["describe", trained, "--json"]).stdout)
    metrics = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    (dev,) = [m for m in metrics if "dev_wer" in m]  # one dev evaluation, after the epoch
    assert described["best"]["dev_wer"] == {"value": dev["dev_wer"], "step": 4,
                                            "epoch": dev["epoch"]}
    assert described["progress"]["step"] == 4 and described["progress"]["finished"]
    assert described["progress"]["last_loss"] == [m for m in metrics
                                                  if m["event"] == "step"][-1]["loss"]
    report = json.loads((trained / "report.json").read_text())
    assert described["report"]["wer"] == report["wer"] and described["report"]["split"] == "test"
    assert described["model_analysis"]["parameters"] == parameters
    assert described["config"]["model"]["n_hidden"] == 32
    assert described["dataset"]["splits"]["train"]["utterances"] == 16
    (machine,) = described["machines"]
    assert machine["step"] == 0 and machine["replicas"] == 1 and machine["cores"] >= 1


def test_describe_names_each_machine_a_run_trained_on_once():
    """A resumption on the same machine is not listed again; one on another machine is."""
    from asrkit.evaluation.describe import sessions_by_machine

    first = {"event": "machine", "step": 0, "cpu": "A", "precision": "float32"}
    records = [first, {"event": "step", "step": 5}, {**first, "step": 10},
               {**first, "step": 20, "cpu": "B"}, {**first, "step": 30, "cpu": "B"}]
    assert [(s["step"], s["cpu"]) for s in sessions_by_machine(records)] == [(0, "A"), (20, "B")]
    assert sessions_by_machine([{"event": "step", "step": 1}]) == []


def test_describe_a_run_that_has_just_started(home, trained, asrkit_cli, tmp_path):
    """No checkpoint, no dev evaluation, no report yet, and a metrics line cut short by a kill:
    the run is still described, and plots are drawn only for what there is."""
    run = tmp_path / "young"
    run.mkdir()
    for name in ("config.json", "alphabet.txt"):
        shutil.copy(trained / name, run / name)
    steps = [line for line in (trained / "metrics.jsonl").read_text().splitlines()
             if json.loads(line)["event"] == "step"][:2]
    (run / "metrics.jsonl").write_text("\n".join(steps) + '\n{"event": "st')
    plots = tmp_path / "plots"
    result = asrkit_cli(["describe", run, "--plots", plots])
    assert result.exit_code == 0, result.stderr
    assert "progress: step 2, epoch 0 of 1 (not finished)" in result.stdout
    assert "best dev: no dev evaluation yet" in result.stdout
    assert "report: none yet" in result.stdout
    assert sorted(p.name for p in plots.iterdir()) == ["learning_rate.png", "training_loss.png"]
