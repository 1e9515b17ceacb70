"""``asrkit export --format sherpa-onnx``: ``logmel`` with ``kaldi=true`` is kaldi-native-fbank's
fbank as sherpa-onnx configures it; ds2 and conformer runs trained on it, and a conformer
transducer with the stateless prediction network, exported, are loaded by sherpa-onnx's own
Python API and transcribe the fixture clips as ``asrkit transcribe`` does with the run; runs on
other features, and what sherpa-onnx has no layout for, are refused in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import SPEECH, run_doc_snippet

knf = pytest.importorskip("kaldi_native_fbank")
sherpa_onnx = pytest.importorskip("sherpa_onnx")
pytest.importorskip("tf2onnx")

#: Every 16 kHz WAV clip of real speech among the fixtures.
CLIPS = sorted([*SPEECH.glob("librispeech/*.wav"), *SPEECH.glob("misc/*.wav"),
                *SPEECH.glob("speechbrain/*.wav"), SPEECH / "ldc93s1" / "LDC93S1.wav"])
#: -o settings that train for sherpa-onnx (what the refusal names).
KALDI = ["-o", "features=logmel", "-o", "features.kaldi=true", "-o", "features.low_hz=20",
         "-o", "features.high_hz=7600"]


def kaldi_fbank(audio: np.ndarray, bins: int) -> np.ndarray:
    """kaldi-native-fbank's features of float32 ``audio`` with sherpa-onnx's options (its
    ``FeatureExtractorConfig`` defaults, as ``from_zipformer_ctc`` leaves them)."""
    opts = knf.FbankOptions()
    opts.frame_opts.dither = 0
    opts.frame_opts.snip_edges = False
    opts.frame_opts.samp_freq = 16000
    opts.mel_opts.num_bins = bins
    opts.mel_opts.low_freq = 20
    opts.mel_opts.high_freq = -400
    fbank = knf.OnlineFbank(opts)
    fbank.accept_waveform(16000, audio.tolist())
    fbank.input_finished()
    return np.array([fbank.get_frame(i) for i in range(fbank.num_frames_ready)], np.float32)


def floats(path: Path) -> np.ndarray:
    from asrkit.serving.transcribe import load_audio

    return load_audio(path).astype(np.float32) / 32768


# -- the features -------------------------------------------------------------------------------


def test_kaldi_logmel_is_kaldi_native_fbank():
    from asrkit.core.frames import Framing
    from asrkit.features import LogMel, LogMelConfig

    config = LogMelConfig(kaldi=True, low_hz=20, high_hz=7600)
    worst, errors = 0.0, []
    for clip in CLIPS:
        audio = floats(clip)
        for piece in (audio, audio[:16000], audio[:4321], audio[:400], audio[:100]):
            want = kaldi_fbank(piece, 80)
            got = np.asarray(LogMel().extract(piece, config))
            assert got.shape == want.shape == (Framing.of(config).frames(len(piece)), 80)
            worst = max(worst, float(np.abs(got - want).max()))
            errors.append(np.abs(got - want).ravel())
    # float32 FFTs (TensorFlow's and kaldi-native-fbank's own) round differently, most in the
    # weakest bins (energies near the 1.2e-7 floor): under 1e-4 for 99.9 % of the values, half
    # a millionth typically (measured: 6.6e-4 at worst, 8.3e-5 and 4.8e-7).
    errors = np.concatenate(errors)
    assert worst < 1e-3
    assert np.percentile(errors, 99.9) < 1e-4 and np.median(errors) < 2e-6


def test_kaldi_logmel_keeps_the_extractor_contract():
    from asrkit.features import LogMel, LogMelConfig
    from asrkit.testing.features import check_batch, check_extract

    config = LogMelConfig(kaldi=True, num_mel_bins=40, normalize="feature")
    check_extract(LogMel(), config)
    check_batch(LogMel(), config)


def test_kaldi_settings_refused_in_one_line():
    from asrkit.core.errors import AsrkitError
    from asrkit.features import LogMelConfig
    from asrkit.serving.stream_features import FeatureStream

    with pytest.raises(AsrkitError, match="window=rectangular does not apply with kaldi=true"):
        LogMelConfig(kaldi=True, window="rectangular")
    from asrkit.features import LogMel

    with pytest.raises(AsrkitError, match="do not stream") as error:
        FeatureStream(LogMel(), LogMelConfig(kaldi=True))
    assert "\n" not in str(error.value)


# -- trained runs, exported ---------------------------------------------------------------------


def train(datasets: Path, folder: Path, model: str, *options: str) -> Path:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASRKIT_")}
    env["ASRKIT_HOME"] = str(datasets)
    result = subprocess.run(
        [sys.executable, "-m", "asrkit", "train", "--model", model, *options, "-o",
         "precision=float32", "--epochs", "1", "--batch-size", "4", "--run-dir", str(folder),
         "--no-progress"], env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return folder


def speak_more(folder: Path) -> None:
    """Lower the blank's output bias until it wins about half of a clip's frames: a model one
    epoch old emits next to nothing, and comparing empty transcripts would prove little."""
    import tensorflow as tf

    from asrkit.evaluation.restore import restore_model
    from asrkit.runs.run import load_run
    from asrkit.serving.graph import make_logits_fn
    from asrkit.train.checkpoints import Checkpoints

    run = load_run(folder)
    model, state = restore_model(run)
    logits = make_logits_fn(run, model)(tf.constant(floats(CLIPS[0]))).numpy()
    blank = run.labels.blank
    gap = logits[:, blank] - np.delete(logits, blank, axis=1).max(axis=1)
    bias = [v for v in model.variables if tuple(v.shape) == (run.labels.num_classes,)][-1]
    bias.assign(bias.numpy() - np.eye(run.labels.num_classes)[blank] * np.quantile(gap, 0.5))
    Checkpoints(folder / "checkpoints", model=model).save(
        "best", int(state.get("global_step", 0)), state)


@pytest.fixture(scope="module")
def runs(datasets, tmp_path_factory) -> dict[str, Path]:
    """ds2 and a tiny conformer trained one epoch on Kaldi fbank (normalised per utterance)."""
    base = tmp_path_factory.mktemp("sherpa")
    trained = {
        "ds2": train(datasets, base / "ds2", "ds2", *KALDI, "-o", "model.conv_channels=4",
                     "-o", "model.rnn_layers=1", "-o", "model.rnn_units=16"),
        "conformer": train(datasets, base / "conformer", "conformer", "-o", "preset=tiny",
                           *KALDI, "-o", "features.normalize=feature"),
    }
    for folder in trained.values():
        shutil.rmtree(folder / "export", ignore_errors=True)
        speak_more(folder)
    return trained


@pytest.fixture(scope="module")
def exports(runs, tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("sherpa-exports")
    for name, run in runs.items():
        result = subprocess.run(
            [sys.executable, "-m", "asrkit", "export", str(run), "--format", "sherpa-onnx",
             "--output", str(folder / name)], capture_output=True, text=True, check=False,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.startswith(f"exported {name} (step ")
        assert "as sherpa-onnx to" in result.stdout
    return {name: folder / name for name in runs}


def sherpa_transcripts(export: Path, feature_dim: int) -> list[str]:
    """sherpa-onnx's transcripts of the clips, decoded as one batch (padded by sherpa-onnx)."""
    return recognized(sherpa_onnx.OfflineRecognizer.from_zipformer_ctc(
        model=str(export / "model.onnx"), tokens=str(export / "tokens.txt"),
        feature_dim=feature_dim, num_threads=2))


def recognized(recognizer) -> list[str]:
    """``recognizer``'s transcripts of the clips, decoded as one batch."""
    streams = []
    for clip in CLIPS:
        stream = recognizer.create_stream()
        stream.accept_waveform(16000, floats(clip))
        streams.append(stream)
    recognizer.decode_streams(streams)
    return [" ".join(stream.result.text.split()) for stream in streams]


def asrkit_transcripts(cli, run: Path) -> list[str]:
    result = cli(["transcribe", "-m", run, "--decoder", "greedy", "--json", *CLIPS])
    assert result.exit_code == 0, result.stderr
    found = {Path(line["file"]).resolve(): line["text"]
             for line in map(json.loads, result.stdout.splitlines())}
    return [" ".join(found[clip.resolve()].split()) for clip in CLIPS]


@pytest.mark.parametrize("name", ["ds2", "conformer"])
def test_sherpa_onnx_transcribes_as_asrkit_does(name, runs, exports, cli):
    from asrkit.core.metrics import corpus_score

    meta = json.loads((exports[name] / "asrkit.json").read_text())
    assert meta["format"] == "sherpa-onnx" and meta["model"] == name
    assert meta["inputs"] == ["x", "x_lens"] and meta["outputs"] == ["log_probs",
                                                                     "log_probs_len"]
    assert meta["verified_max_abs_diff"] < 1e-3
    sherpa = sherpa_transcripts(exports[name], meta["feature_dim"])
    asrkit = asrkit_transcripts(cli, runs[name])
    assert sum(len(text) for text in asrkit) > 200  # the model speaks: a comparison to make
    assert corpus_score(asrkit, sherpa).cer <= 0.005, list(zip(asrkit, sherpa, strict=True))


@pytest.mark.parametrize("name", ["ds2", "conformer"])
def test_export_of_kaldi_native_fbank_gives_the_checkpoints_log_probs(name, runs, exports):
    """The export fed kaldi-native-fbank's features (what sherpa-onnx feeds it), batched and
    padded as sherpa-onnx pads, against the checkpoint's whole-utterance graph on the audio."""
    import tensorflow as tf

    from asrkit.evaluation.restore import restore_model
    from asrkit.runs.run import load_run
    from asrkit.serving.export_sherpa import ONNX_FILE, run_batch
    from asrkit.serving.graph import make_logits_fn

    run = load_run(runs[name])
    logits_fn = make_logits_fn(run, restore_model(run)[0])
    bins = run.extractor.num_features(run.feature_config)
    audios = [floats(clip) for clip in CLIPS[:6]]
    exported = run_batch(exports[name] / ONNX_FILE, [kaldi_fbank(audio, bins) for audio in audios])
    for audio, got in zip(audios, exported, strict=True):
        want = tf.nn.log_softmax(logits_fn(tf.constant(audio))).numpy()
        assert got.shape == want.shape
        # Features ~1e-4 apart; the lowered blank makes many frames near-ties, so a few of
        # their best classes swap (the greedy transcripts above still agree).
        assert np.max(np.abs(got - want)) < 0.05
        assert np.mean(got.argmax(-1) == want.argmax(-1)) > 0.95


def test_documented_snippet_runs_with_sherpa_onnx_alone(exports, cli, runs, tmp_path):
    """docs/sherpa-onnx.md's Python snippet, as written, where importing asrkit and TensorFlow
    fails: it prints what ``asrkit transcribe`` prints for the recording."""
    import soundfile

    clip = SPEECH / "misc" / "arctic_a0024.wav"
    soundfile.write(tmp_path / "talk16k.wav", soundfile.read(clip)[0], 16000, subtype="PCM_16")
    meta = json.loads((exports["ds2"] / "asrkit.json").read_text())
    result = run_doc_snippet("sherpa-onnx.md", "sherpa-snippet",
                             {"runs/ds2-1/export/sherpa-onnx": str(exports["ds2"]),
                              "feature_dim=40": f"feature_dim={meta['feature_dim']}"},
                             ("asrkit", "tensorflow", "keras", "tf2onnx"), tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    want = cli(["transcribe", "-m", runs["ds2"], "--decoder", "greedy", clip]).stdout
    assert " ".join(result.stdout.split()) == " ".join(want.split()) != ""


def test_tokens_and_metadata_are_what_sherpa_onnx_reads(runs, exports):
    import onnx

    lines = (exports["ds2"] / "tokens.txt").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "\u2581 0" and lines[-1] == "<blk> 28" and len(lines) == 29
    props = {p.key: p.value for p in onnx.load(str(exports["conformer"] / "model.onnx"))
             .metadata_props}
    assert props["model_type"] == "zipformer2_ctc" and props["vocab_size"] == "29"
    assert props["subsampling_factor"] == "4"


# -- refusals -----------------------------------------------------------------------------------


def test_runs_on_other_features_are_refused_naming_the_settings(cli, tmp_path):
    from tests.test_export_onnx import make_tiny_ds2
    from tests.test_transcribe import make_tiny_run

    logmel = cli(["export", make_tiny_ds2(tmp_path / "ds2"), "--format", "sherpa-onnx"])
    assert logmel.exit_code != 0 and len(logmel.stderr.strip().splitlines()) == 1
    assert ("train for it with -o features.kaldi=true -o features.low_hz=20 "
            "-o features.high_hz=7600") in logmel.stderr
    mfcc = cli(["export", make_tiny_run(tmp_path / "brnn"), "--format", "sherpa-onnx"])
    assert mfcc.exit_code != 0 and len(mfcc.stderr.strip().splitlines()) == 1
    assert "-o features=logmel -o features.kaldi=true" in mfcc.stderr
    assert not (tmp_path / "ds2" / "export").exists()


@pytest.mark.parametrize("objective, message", [
    ("transducer", "'s transducer has an lstm prediction network; sherpa-onnx's transducer "
                   "layout reads a stateless one (the last labels alone): train with -o "
                   "objective.predictor=stateless"),
    ("attention", "was trained with the attention objective; --format sherpa-onnx exports CTC "
                  "and transducer runs only")])
def test_what_sherpa_onnx_cannot_load_is_refused_before_the_weights_load(
        cli, tmp_path, objective, message):
    from asrkit.config.pipeline import PipelineConfig
    from asrkit.config.run import RunConfig
    from asrkit.config.train import TrainConfig
    from asrkit.core.text import Alphabet
    from asrkit.features import LogMelConfig
    from asrkit.models.conformer import ConformerConfig
    from asrkit.runs.run import Run

    folder = tmp_path / objective  # no checkpoint: refused before one would be read
    Run(folder, RunConfig(TrainConfig(model="conformer", objective=objective),
                          ConformerConfig(), LogMelConfig(kaldi=True, low_hz=20, high_hz=7600),
                          PipelineConfig()), Alphabet()).save()
    result = cli(["export", folder, "--format", "sherpa-onnx"])
    assert result.exit_code != 0 and len(result.stderr.strip().splitlines()) == 1
    assert message in result.stderr


# -- a transducer -------------------------------------------------------------------------------


def speak_more_transducer(folder: Path) -> None:
    """:func:`speak_more` for a transducer: the joint network's blank bias lowered until the
    blank wins about half of a clip's frames after the start, and the space's raised until it
    is the best label on a fifth of them (sherpa-onnx must turn its ``▁`` into spaces)."""
    import tensorflow as tf

    from asrkit.evaluation.restore import restore_networks
    from asrkit.runs.run import load_run
    from asrkit.serving.graph import make_logits_fn
    from asrkit.train.checkpoints import Checkpoints, networks

    run = load_run(folder)
    model, head, state = restore_networks(run)
    frames = make_logits_fn(run, model)(tf.constant(floats(CLIPS[0])))
    predicted, _ = head.predict_step(tf.fill([1], head.blank), head.initial_state(1))
    log_probs = head.joint_step(frames, tf.repeat(predicted, tf.shape(frames)[0], 0)).numpy()
    blank, space = head.blank, run.labels.symbols.index(" ")
    gap = log_probs[:, blank] - np.delete(log_probs, blank, axis=1).max(axis=1)
    others = np.delete(log_probs, [blank, space], axis=1).max(axis=1)
    lift = np.quantile(others - log_probs[:, space], 0.2)
    shift = np.zeros(run.labels.num_classes)
    shift[blank], shift[space] = -np.quantile(gap, 0.5), lift
    bias = head.output_layer.bias
    bias.assign(bias.numpy() + shift)
    Checkpoints(folder / "checkpoints", **networks(model, head)).save(
        "best", int(state.get("global_step", 0)), state)


@pytest.fixture(scope="module")
def transducer(datasets, tmp_path_factory) -> tuple[Path, Path]:
    """A tiny conformer transducer with the stateless prediction network, trained one epoch on
    Kaldi fbank, and its sherpa-onnx export."""
    base = tmp_path_factory.mktemp("sherpa-transducer")
    run = train(datasets, base / "run", "conformer", "-o", "preset=tiny", *KALDI, "-o",
                "features.normalize=feature", "-o", "objective=transducer", "-o",
                "objective.predictor=stateless")
    speak_more_transducer(run)
    export = base / "export"
    result = subprocess.run(
        [sys.executable, "-m", "asrkit", "export", str(run), "--format", "sherpa-onnx",
         "--output", str(export)], capture_output=True, text=True, check=False,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "as sherpa-onnx to" in result.stdout
    return run, export


def test_sherpa_onnx_transcribes_a_transducer_as_asrkit_does(transducer, cli):
    """sherpa-onnx's own greedy search (one label a frame) over the exported encoder, decoder
    and joiner, against ``asrkit transcribe`` with ``transducer-greedy`` at one label a
    frame."""
    from asrkit.core.metrics import corpus_score

    run, export = transducer
    meta = json.loads((export / "asrkit.json").read_text())
    assert meta["format"] == "sherpa-onnx" and meta["objective"] == "transducer"
    assert meta["files"] == ["encoder.onnx", "decoder.onnx", "joiner.onnx"]
    assert meta["max_symbols"] == 1 and meta["verified_max_abs_diff"] < 1e-3
    recognizer = sherpa_onnx.OfflineRecognizer.from_transducer(
        encoder=str(export / "encoder.onnx"), decoder=str(export / "decoder.onnx"),
        joiner=str(export / "joiner.onnx"), tokens=str(export / "tokens.txt"),
        feature_dim=meta["feature_dim"], num_threads=2)
    sherpa = recognized(recognizer)
    result = cli(["transcribe", "-m", run, "--decoder", "transducer-greedy", "-o",
                  "decoder.max_symbols=1", "--json", *CLIPS])
    assert result.exit_code == 0, result.stderr
    found = {Path(line["file"]).resolve(): line["text"]
             for line in map(json.loads, result.stdout.splitlines())}
    asrkit = [" ".join(found[clip.resolve()].split()) for clip in CLIPS]
    assert sum(len(text) for text in asrkit) > 200  # the model speaks: a comparison to make
    assert sum(text.count(" ") for text in asrkit) > 20  # and writes spaces, ▁ in tokens.txt
    assert corpus_score(asrkit, sherpa).cer <= 0.005, list(zip(asrkit, sherpa, strict=True))


def test_a_transducers_tokens_and_metadata_are_what_sherpa_onnx_reads(transducer):
    import onnx

    _, export = transducer
    lines = (export / "tokens.txt").read_text(encoding="utf-8").splitlines()
    assert lines[:2] == ["<blk> 0", "\u2581 1"] and len(lines) == 29
    props = {name: {p.key: p.value for p in onnx.load(str(export / name)).metadata_props}
             for name in ("encoder.onnx", "decoder.onnx")}
    assert props["decoder.onnx"] == {"vocab_size": "29", "context_size": "2"}
    assert props["encoder.onnx"]["model_type"] == "zipformer2"


def test_bad_input_in_one_line(cli, runs, exports, tmp_path):
    chunk = cli(["export", runs["ds2"], "--format", "sherpa-onnx", "--chunk-ms", "160",
                 "--output", tmp_path / "x"])
    assert chunk.exit_code != 0 and "--chunk-ms" in chunk.stderr
    read = cli(["transcribe", "-m", exports["ds2"], CLIPS[0]])
    assert read.exit_code != 0 and "is a sherpa-onnx export" in read.stderr
    for result in (chunk, read):
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
