"""The streaming feature front end against the whole-utterance extractor, on real speech.

A streaming model is trained on ``extract`` (then ``context_windows``) of whole utterances, so a
stream must give the same frames whatever sizes its pieces arrive in. The tolerance: both compute
the spectrum with the same float32 code on the same frames (bit for bit on most frames; FFTs of
different batch sizes may round differently), and ``running`` normalisation sums in float32 in
the graph (``tf.cumsum``) but in float64 in the stream, about 1e-5 of log energies near -15.
"""

from __future__ import annotations

import numpy as np
import pytest
import soundfile
import tensorflow as tf

from asrkit import plugins
from asrkit.core.frames import count_frames, frame_geometry
from asrkit.features import context_windows, normalize
from asrkit.serving.stream_features import FeatureStream, StreamError, _spectral_fn
from asrkit.types import FeatureExtractor
from tests.conftest import SPEECH

ATOL, RTOL = 1e-4, 1e-5
CASES = [(name, mode, context) for name in ("logmel", "mfcc") for mode in ("none", "running")
         for context in (0, 2, *((9,) if name == "mfcc" else ()))]
#: Piece sizes: nothing, one sample, under a step (160), a step, under a window (400), over one.
SIZES = [0, 1, 7, 159, 160, 161, 399, 401, 1000, 4003]


@pytest.fixture(scope="module")
def audio() -> np.ndarray:
    samples, rate = soundfile.read(SPEECH / "ldc93s1" / "LDC93S1.wav", dtype="float32")
    assert rate == 16000 and samples.ndim == 1
    return samples


def whole(name: str, mode: str, context: int, audio: np.ndarray) -> np.ndarray:
    extractor = plugins.get("feature", name)
    features = extractor.extract(audio, extractor.Config(normalize=mode))
    return context_windows(features, context).numpy()


def streamed(name: str, mode: str, context: int, pieces: list[np.ndarray]) -> np.ndarray:
    """The concatenated outputs of a stream fed ``pieces``, checking its bounds on the way."""
    extractor = plugins.get("feature", name)
    config = extractor.Config(normalize=mode)
    stream = FeatureStream(extractor, config, context)
    window, _ = frame_geometry(config)
    outputs = []
    for piece in pieces:
        outputs.append(stream.push(piece))
        assert outputs[-1].shape[1] == stream.width and outputs[-1].dtype == np.float32
        assert stream._signal.size < window and len(stream._held) <= 2 * context  # bounded
    outputs.append(stream.finish())
    result = np.concatenate(outputs)
    assert stream.frames_out == len(result)
    return result


def random_pieces(audio: np.ndarray, seed: int) -> list[np.ndarray]:
    rng, pieces, start = np.random.default_rng(seed), [], 0
    while start < len(audio):
        size = int(rng.choice(SIZES))
        pieces.append(audio[start : start + size])
        start += size
    return pieces


@pytest.mark.parametrize(("name", "mode", "context"), CASES)
def test_a_stream_equals_the_whole_utterance(audio, name, mode, context) -> None:
    expected = whole(name, mode, context, audio)
    window, step = frame_geometry(plugins.get("feature", name).Config())
    assert len(expected) == count_frames(len(audio), window, step)
    for pieces in (random_pieces(audio, seed=len(CASES) * context + len(name)), [audio]):
        got = streamed(name, mode, context, pieces)
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("samples", [0, 1, 100, 399, 400, 401, 560, 561])
@pytest.mark.parametrize("name", ["logmel", "mfcc"])
def test_a_stream_shorter_than_a_window_or_two(audio, name, samples) -> None:
    clip = audio[8000 : 8000 + samples]
    expected = whole(name, "running", 2, clip)
    got = streamed(name, "running", 2, [clip[:37], clip[37:]])
    assert len(got) == len(expected) == count_frames(samples, 400, 160)
    np.testing.assert_allclose(got, expected, atol=ATOL, rtol=RTOL)


def test_a_long_stream_of_varied_pieces_traces_once(audio) -> None:
    extractor = plugins.get("feature", "logmel")
    config = extractor.Config(normalize="running")
    stream = FeatureStream(extractor, config, 2)
    stream.push(audio[:1000])
    function = _spectral_fn(extractor, config, 400)
    traced = function.experimental_get_tracing_count()
    loud = np.tile(audio, 8)
    stream.push(np.zeros(0, np.float32))
    for piece in random_pieces(loud, seed=3):
        stream.push(piece)
    assert function.experimental_get_tracing_count() == traced
    complete = (1000 + len(loud) - 400) // 160 + 1  # frames whose samples have all arrived
    assert stream.frames_out == complete - 2  # less the two held for their future context
    stream.finish()
    with pytest.raises(StreamError, match="finished"):
        stream.push(audio[:10])


def running_reference(features: np.ndarray) -> np.ndarray:
    """Each frame minus the mean of the frames up to it, in float64."""
    seen = np.arange(1, len(features) + 1)[:, np.newaxis]
    return features - np.cumsum(features.astype(np.float64), axis=0) / seen


def test_running_normalisation_of_a_padded_batch(audio) -> None:
    extractor = plugins.get("feature", "mfcc")
    raw = extractor.extract(audio, extractor.Config()).numpy()
    lengths = [len(raw), 40, 1]
    # Padding of 99: it must not count.
    batch = np.full([3, len(raw) + 5, raw.shape[1]], 99.0, np.float32)
    for row, length in enumerate(lengths):
        batch[row, :length] = raw[row * 17 : row * 17 + length]
    got = normalize(tf.constant(batch), "running", tf.constant(lengths)).numpy()
    for row, length in enumerate(lengths):
        utterance = batch[row, :length]
        np.testing.assert_allclose(got[row, :length], running_reference(utterance), atol=ATOL)
        alone = normalize(tf.constant(utterance), "running").numpy()
        np.testing.assert_allclose(got[row, :length], alone, atol=ATOL)
        assert not got[row, length:].any()
    assert not got[2].any()  # one frame: itself minus its own mean
    # extract_batch normalises as extract does, one utterance at a time.
    config = extractor.Config(normalize="running")
    pcm = np.zeros([2, len(audio)], np.float32)
    pcm[0], pcm[1, :20000] = audio, audio[:20000]
    features, frame_lengths = extractor.extract_batch(pcm, [len(audio), 20000], config)
    short = extractor.extract(audio[:20000], config).numpy()
    np.testing.assert_allclose(features[1, : frame_lengths[1]], short, atol=ATOL, rtol=RTOL)
    assert not features[1, frame_lengths[1] :].numpy().any()


@pytest.mark.parametrize("mode", ["feature", "utterance"])
def test_whole_utterance_normalisations_are_refused(mode) -> None:
    extractor = plugins.get("feature", "logmel")
    with pytest.raises(StreamError) as error:
        FeatureStream(extractor, extractor.Config(normalize=mode))
    message = str(error.value)
    assert "\n" not in message and "-o features.normalize=running" in message
    assert f"normalize={mode}" in message


def test_a_non_spectral_extractor_is_refused() -> None:
    class Plugin(FeatureExtractor):
        name, description, Config = "plugin", "", plugins.get("feature", "logmel").Config

        def num_features(self, config):
            return 1

        def extract(self, audio, config):
            return tf.zeros([count_frames(len(audio), 400, 160), 1])

    with pytest.raises(StreamError, match="streaming needs a spectral extractor") as error:
        FeatureStream(Plugin(), Plugin.Config())
    assert "\n" not in str(error.value)
