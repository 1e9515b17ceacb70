"""Exporting an attention encoder-decoder run (``asrkit.serving.export_attention``): tiny conformer
runs with a Transformer and a LAS decoder exported as SavedModels, whose in-graph greedy search
emits what a plain step-at-a-time loop over the checkpoint head's ``decode_step`` emits, whose
encoder and step signatures give the checkpoint's results, which asrkit's attention decoders
decode as they decode the run, which runs without asrkit, and what is refused in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import ROOT, SPEECH, add_commands, run_doc_snippet

CLIP = SPEECH / "ldc93s1" / "LDC93S1.wav"
#: The encoder frames of an export and of its checkpoint, and the decoder steps' outputs.
TOLERANCE = 1e-4
KINDS = ("transformer", "las")


# -- the plugins: the attention objective and decoders, installed or not -------------------------


class _StandInGreedy:
    """The attention runs' default decoder where this checkout has none (before the attention
    decoders land): a plain greedy search through ``AttentionNetworks``."""

    name = "attention-beam"
    description = "stand-in greedy search of attention runs (tests)"

    def decode(self, outputs: Any, lengths: Any, labels: Any) -> list[str]:
        return [labels.decode(found) for found in numpy_greedy(outputs.networks,
                                                              outputs.frames, lengths)]


def decoders_landed() -> bool:
    """Whether asrkit's attention decoders (``attention-greedy``, ``attention-beam``) are in this
    checkout."""
    from asrkit.decoders import attention

    return hasattr(attention, "AttentionBeamDecoder")


def attention_plugins() -> Any:
    """The installed plugins and asrkit's commands, with the attention objective and decoders
    added where the installed distribution predates them (its entry points are this checkout's
    pyproject's), and a stand-in ``attention-beam`` where there are no decoders yet."""
    from asrkit import hookimpl
    from asrkit.decoders import attention as decoders
    from asrkit.decoders.attention import ATTENTION_OUTPUTS
    from asrkit.objectives import attention as objective
    from asrkit.plugins import PluginSet, set_plugins
    from asrkit.registry import Provider
    from asrkit.types import Decoder

    plugins = PluginSet()
    plugins.load_entry_points()
    registry = plugins.registry
    if "attention" not in registry.names("objective"):
        plugins.add_module(objective, Provider("attention", "test", "0"))
    if "attention-beam" not in registry.names("decoder"):
        if decoders_landed():
            plugins.add_module(decoders, Provider("attention-decoders", "test", "0"))
        else:
            class StandIn(_StandInGreedy, Decoder):
                reads = ATTENTION_OUTPUTS

            class Register:
                @hookimpl
                def register_decoders(self, register: Any) -> None:
                    register(StandIn())

            plugins.add_module(Register(), Provider("stand-in", "test", "0"))
    add_commands(plugins)
    set_plugins(plugins)
    return plugins


@pytest.fixture
def cli(asrkit_cli):
    plugins = attention_plugins()
    return lambda args: asrkit_cli(args, plugins)


# -- the reference: a plain greedy loop --------------------------------------------------------


def numpy_greedy(networks: Any, frames: np.ndarray, lengths: Any = None) -> list[list[int]]:
    """The attention decoder's most likely label a step over each utterance of ``frames``
    ``[n, T, d]``, from the end symbol until it emits it or has ``max(1, T_i)`` labels: numpy
    and one ``decode_step`` call a step, nothing of the export's."""
    frames = np.asarray(frames, np.float32)
    lengths = (np.full(len(frames), frames.shape[1]) if lengths is None
               else np.asarray(lengths).reshape(-1))
    found = []
    for row, length in enumerate(lengths.astype(int)):
        utterance = frames[row:row + 1, :length]
        count = np.array([length], np.int32)
        tokens = np.array([[networks.eos]], np.int32)
        state = networks.initial_state(utterance, count)
        labels: list[int] = []
        while len(labels) < max(1, length):
            log_probs, state = networks.decode_step(utterance, count, tokens, state)
            best = int(np.argmax(np.asarray(log_probs)[0]))
            if best == networks.eos:
                break
            labels.append(best)
            tokens = np.concatenate([tokens, [[best]]], axis=1).astype(np.int32)
        found.append(labels)
    return found


# -- trained runs -------------------------------------------------------------------------------


def train(folder: Path, datasets: Path, kind: str) -> None:
    """A tiny conformer with the attention objective and a ``kind`` decoder, trained for one
    epoch by ``asrkit train`` in a process of its own (with :func:`attention_plugins`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASRKIT_")}
    env["ASRKIT_HOME"] = str(datasets)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    args = ["train", "--model", "conformer", "-o", "preset=tiny", "-o", "objective=attention",
            "-o", f"objective.decoder={kind}", "--epochs", "1", "--batch-size", "4",
            "--run-dir", str(folder), "--no-progress"]
    program = ("import sys\nfrom asrkit import cli\n"
               "from tests.test_attention_export import attention_plugins\n"
               f"sys.exit(cli.run({args!r}, attention_plugins()))\n")
    result = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True,
                            text=True, check=False, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.fixture(scope="module")
def trained(datasets, tmp_path_factory) -> dict[str, Path]:
    """The two runs, one a decoder kind, trained side by side."""
    folder = tmp_path_factory.mktemp("attention")
    for kind in KINDS:
        train(folder / kind, datasets, kind)
    return {kind: folder / kind for kind in KINDS}


@pytest.fixture(scope="module", params=KINDS)
def kind(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def clip() -> np.ndarray:
    from asrkit.serving.transcribe import load_audio

    return load_audio(CLIP)


class Checkpoint:
    """A run's checkpoint as ``asrkit transcribe RUN`` reads it: its encoder (the graph
    :func:`~asrkit.serving.graph.make_logits_fn`) and head."""

    def __init__(self, folder: Path) -> None:
        import tensorflow as tf

        from asrkit.evaluation.restore import restore_networks
        from asrkit.runs.run import load_run
        from asrkit.serving.graph import make_logits_fn

        self.run = load_run(folder)
        self.model, head, self.state = restore_networks(self.run)
        assert head is not None
        self.head: Any = head
        self._encode = tf.function(make_logits_fn(self.run, self.model),
                                   input_signature=[tf.TensorSpec([None], tf.float32)])

    def frames(self, audio: np.ndarray) -> np.ndarray:
        return self._encode(np.asarray(audio, np.float32)).numpy()

    def greedy(self, audio: np.ndarray) -> list[int]:
        return numpy_greedy(self.head, self.frames(audio)[None])[0]


@pytest.fixture(scope="module")
def run(trained, kind, clip, tmp_path_factory) -> Path:
    """The trained ``kind`` run with the end symbol's output bias moved until the greedy search
    ends on the clip after about a third of its label limit: a decoder one epoch old repeats a
    label to the limit, and an export that never ends would not check the end."""
    from asrkit.train.checkpoints import Checkpoints, networks

    folder = tmp_path_factory.mktemp("attention") / kind
    shutil.copytree(trained[kind], folder, ignore=shutil.ignore_patterns("checkpoints", "export"))
    source = Checkpoint(trained[kind])
    head = source.head
    frames = source.frames(clip.astype(np.float32) / 32768)
    bias = head.output_layer.bias
    original = bias.numpy()
    target = len(frames) // 3

    def labels_with(shift: float) -> int:
        bias.assign(original + np.eye(head.num_classes, dtype=np.float32)[head.eos] * shift)
        return len(numpy_greedy(head, frames[None])[0])

    # Bisect the shift (ends later ... sooner); a decoder that barely moves from step to step
    # (LAS a few updates old) jumps from the limit to one label: then one label it is.
    low, high, best = -30.0, 30.0, (len(frames), 0.0)
    for _ in range(16):
        shift = (low + high) / 2
        count = labels_with(shift)
        if 0 < count < len(frames):
            best = min(best, (abs(count - target), shift))
        if count == target:
            break
        low, high = (shift, high) if count > target else (low, shift)
    assert 0 < labels_with(best[1]) < len(frames), "no bias of the end symbol ends the clip"
    Checkpoints(folder / "checkpoints", **networks(source.model, head)).save(
        "best", int(source.state.get("global_step", 0)), source.state)
    return folder


@pytest.fixture(scope="module")
def export(run, tmp_path_factory) -> Path:
    from asrkit.serving.export import export_run

    return Path(export_run(run, "savedmodel", tmp_path_factory.mktemp("exports") / "sm")["path"])


@pytest.fixture(scope="module")
def checkpoint(run) -> Checkpoint:
    return Checkpoint(run)


def test_the_exports_search_is_the_plain_greedy_loop(kind, export, checkpoint, clip):
    """On the verification audio and on speech, the export's encoder gives the checkpoint's
    frames and its ``transcribe`` (float, int16, default) the labels the plain loop over the
    checkpoint head emits; on the clip the search ends before its limit."""
    import tensorflow as tf

    from asrkit.serving.export import ExportedModel, verification_audio

    exported = ExportedModel(export)
    assert exported.is_attention and not exported.is_transducer
    loaded = tf.saved_model.load(str(export))
    symbols = [s.decode() for s in loaded.alphabet.numpy()]
    floats = clip.astype(np.float32) / 32768
    for audio, pcm in ((verification_audio(), None), (floats, clip)):
        frames = checkpoint.frames(audio)
        got = exported.encode(audio)
        assert got.shape == frames.shape
        assert np.max(np.abs(got - frames)) < TOLERANCE
        expected = numpy_greedy(checkpoint.head, frames[None])[0]
        assert exported.transcribe_labels(audio).tolist() == expected
        assert exported.transcribe(audio) == exported.labels.decode(expected)
        for name, inputs in (("transcribe", audio), ("serving_default", audio),
                             ("transcribe_int16", pcm)):
            if inputs is None:
                continue
            out = loaded.signatures[name](pcm=tf.constant(inputs))
            assert out["labels"].numpy().tolist() == expected, name
            assert [c.decode() for c in out["characters"].numpy()] == [symbols[i]
                                                                      for i in expected]
            assert out["text"].numpy().decode() == "".join(symbols[i] for i in expected)
    assert 0 < len(expected) < len(frames)  # on the clip: labels, then the end symbol
    encoded = loaded.signatures["encode_int16"](pcm=tf.constant(clip))["frames"].numpy()
    assert np.max(np.abs(encoded - frames)) < TOLERANCE


def test_the_step_signatures_are_the_heads_steps(kind, export, checkpoint, clip):
    """``initial_state``, ``decode_step`` and ``ctc_log_probs`` of a padded batch of two
    utterances (dynamic batch, frames, prefix and state sizes) give the head's results, and
    the export read as ``AttentionNetworks`` drives the plain loop to the same labels."""
    from asrkit.serving.export import ExportedModel

    head = checkpoint.head
    long = checkpoint.frames(clip.astype(np.float32) / 32768)
    frames = np.stack([long, np.concatenate([long[:20], np.zeros_like(long[20:])])])
    lengths = np.array([len(long), 20], np.int32)
    networks = ExportedModel(export).attention_networks()
    assert networks.eos == head.eos == len(checkpoint.run.labels.symbols)
    assert networks.has_ctc and head.has_ctc
    state, expected_state = (networks.initial_state(frames, lengths),
                             head.initial_state(frames, lengths))
    np.testing.assert_allclose(state.numpy(), expected_state.numpy(), atol=TOLERANCE)
    rng = np.random.default_rng(0)
    tokens = np.concatenate([np.full((2, 1), head.eos), rng.integers(0, head.eos, (2, 3))],
                            axis=1).astype(np.int32)
    for step in range(1, tokens.shape[1] + 1):  # the prefix grows; LAS's state moves on
        log_probs, state = networks.decode_step(frames, lengths, tokens[:, :step], state)
        expected, expected_state = head.decode_step(frames, lengths, tokens[:, :step],
                                                    expected_state)
        np.testing.assert_allclose(log_probs.numpy(), expected.numpy(), atol=TOLERANCE)
        np.testing.assert_allclose(state.numpy(), expected_state.numpy(), atol=TOLERANCE)
    width = {"transformer": 0, "las": 2 * 16 + 16 + len(long)}[kind]
    assert state.shape == (2, width)
    np.testing.assert_allclose(networks.ctc_log_probs(frames).numpy(),
                               head.ctc_log_probs(frames).numpy(), atol=TOLERANCE)
    assert numpy_greedy(networks, frames, lengths) == numpy_greedy(head, frames, lengths)


def test_export_metadata_describes_an_attention_run(kind, export, tmp_path, clip):
    from asrkit.serving.export import ExportedModel, ExportError

    meta = json.loads((export / "asrkit.json").read_text())
    assert meta["format"] == "savedmodel" and meta["model"] == "conformer"
    assert meta["objective"] == "attention" and meta["attention_decoder"] == kind
    assert meta["decoder"] == "attention-beam"  # the run's
    assert meta["has_ctc"] is True and meta["eos"] == meta["blank"]
    assert meta["max_length_ratio"] == 1.0 and meta["frame_width"] == 16
    assert meta["signatures"] == ["encode", "transcribe", "encode_int16", "transcribe_int16",
                                  "serving_default", "initial_state", "decode_step",
                                  "ctc_log_probs"]
    assert meta["outputs"]["transcribe"] == ["labels", "characters", "text"]
    assert 0 <= meta["verified_max_abs_diff"] < TOLERANCE
    with pytest.raises(ExportError, match="is an attention export: it has no logits"):
        ExportedModel(export).logits(np.zeros(16000, np.float32))
    # Without its asrkit.json a SavedModel still says what it is.
    bare = tmp_path / "bare"
    shutil.copytree(export, bare)
    (bare / "asrkit.json").unlink()
    read = ExportedModel(bare)
    assert read.is_attention and read.metadata["has_ctc"] is True
    assert read.metadata["attention_decoder"] == kind
    audio = clip.astype(np.float32) / 32768
    assert (read.transcribe_labels(audio).tolist()
            == ExportedModel(export).transcribe_labels(audio).tolist())
    assert read.attention_networks().eos == meta["eos"]


def test_transcribing_the_export_with_attention_beam_is_transcribing_the_run(
        kind, cli, run, export):
    """``asrkit transcribe`` of the export decodes with the run's decoder by default and with
    ``--decoder attention-beam`` (the stand-in greedy search until the attention decoders are
    in this checkout) gives the run's transcript: the decoders call the export's steps as
    they call the head."""
    outputs = []
    for model, decoder in ((run, ["--decoder", "attention-beam"]),
                           (export, ["--decoder", "attention-beam"]), (export, [])):
        result = cli(["transcribe", CLIP, "--model", model, "--json", *decoder])
        assert result.exit_code == 0, result.stderr[-2000:]
        outputs.append(json.loads(result.stdout))
    assert outputs[0]["text"] and outputs[0]["decoder"] == "attention-beam"
    for other in outputs[1:]:
        assert {k: v for k, v in other.items() if k != "model"} == {
            k: v for k, v in outputs[0].items() if k != "model"}


def test_the_attention_greedy_decoder_of_the_export_is_its_graphs_search(
        kind, cli, export, checkpoint, clip):
    """Once the attention decoders are in: ``attention-greedy`` (the attention decoder's argmax
    a step, no CTC) emits on the export's steps what its in-graph search emits."""
    if not decoders_landed():
        pytest.skip("the attention decoders (asrkit.decoders.attention) are not in this checkout")
    from asrkit import plugins
    from asrkit.decoders.attention import AttentionOutputs
    from asrkit.serving.export import ExportedModel

    exported = ExportedModel(export)
    audio = clip.astype(np.float32) / 32768
    frames = exported.encode(audio)
    decoder = plugins.get("decoder", "attention-greedy")
    text = decoder.decode(AttentionOutputs(frames[None], exported.attention_networks()),
                          np.array([len(frames)]), exported.labels)
    assert list(text) == [exported.transcribe(audio)]
    result = cli(["transcribe", CLIP, "--model", export, "--decoder", "attention-greedy",
                  "--json"])
    assert result.exit_code == 0, result.stderr[-2000:]
    assert json.loads(result.stdout)["text"] == " ".join(exported.transcribe(audio).split())


def test_what_an_attention_export_refuses_in_one_line(kind, cli, run, export, tmp_path):
    for args, message in (
            (["export", run, "--format", "tflite", "--output", tmp_path / "tflite"],
             "asrkit export --format tflite: attention runs export as savedmodel"),
            (["export", run, "--format", "onnx", "--output", tmp_path / "onnx"],
             "asrkit export --format onnx: attention runs export as savedmodel"),
            (["transcribe", CLIP, "--model", export, "--decoder", "greedy"],
             f"{export} is an attention export, decoded by the attention decoders, not by the "
             "greedy decoder")):
        refused = cli(args)
        assert refused.exit_code != 0, args
        errors = [line for line in refused.stderr.strip().splitlines()
                  if not line.startswith("asrkit: warning: ")]  # e.g. a plugin's problem
        assert len(errors) == 1 and errors[0].startswith("asrkit: error: "), refused.stderr
        assert message in errors[0], refused.stderr
    assert not list(tmp_path.iterdir())  # refused before anything was written


def test_the_documented_snippet_runs_without_asrkit(kind, export, checkpoint, clip, tmp_path):
    """docs/attention.md's plain TensorFlow snippet, as written, in a process where
    importing asrkit fails."""
    import soundfile

    wav = tmp_path / "talk16k.wav"
    soundfile.write(wav, clip, 16000, subtype="PCM_16")
    result = run_doc_snippet("attention.md", "snippet: attention",
                             {"runs/las/export/savedmodel": str(export),
                              "talk16k.wav": str(wav)}, ("asrkit",), tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    expected = checkpoint.greedy(clip.astype(np.float32) / 32768)
    lines = result.stdout.splitlines()
    assert lines[0] == checkpoint.run.labels.decode(expected)
    assert lines[1] == str(len(expected))
