"""Contract checks for feature extractors, for an extractor's author to call in their own tests.

::

    from asrkit.testing import check_extractor

    def test_energy_keeps_the_contract():
        check_extractor(Energy())                                # its default settings
        check_extractor(Energy(), Energy.Config(step_ms=20.0))   # and any others it supports

:func:`check_extractor` runs every check below and fails with an ``AssertionError`` that says
which promise of :class:`asrkit.types.FeatureExtractor` is broken, for which audio length. Each
check can also be called alone. Audio is synthetic (a tone in noise, and silence), seeded, so
that a failure repeats. TensorFlow is imported inside the checks: importing this module (which
the ``asrkit.testing`` pytest plugin does) stays cheap.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from asrkit.core.frames import Framing
from asrkit.types import FeatureConfig, FeatureExtractor

if TYPE_CHECKING:
    import numpy as np

#: ``extract_batch`` against ``extract``: batched kernels may add in another order.
BATCH_ATOL = 1e-3
BATCH_RTOL = 1e-4
#: Extra zero samples after the longest utterance, to show the padding changes nothing.
EXTRA_PADDING = 1234


def contract_lengths(framing: Framing) -> list[int]:
    """Audio lengths (samples) whose frame counts the checks compare: the edges of the framing
    (one sample, a window less one, a window, a window plus one, the step either side of a
    second frame) and two longer ones (a second, and a length that is no multiple of anything)."""
    window, step, rate = framing.window, framing.step, framing.sample_rate
    edges = [1, window - 1, window, window + 1, window + step - 1, window + step,
             window + step + 1, rate, rate + window + 7 * step + 3]
    return sorted({n for n in edges if n >= 1})


def _audio(num_samples: int, seed: int, silent: bool = False) -> np.ndarray:
    """float32 audio in [-1, 1]: a 440 Hz tone in noise (or silence)."""
    import numpy as np

    if silent:
        return np.zeros(num_samples, np.float32)
    rng = np.random.default_rng(seed + num_samples)
    t = np.arange(num_samples) / 16000.0
    signal = 0.5 * np.sin(2 * np.pi * 440 * t) + 0.1 * rng.standard_normal(num_samples)
    return np.clip(signal, -1, 1).astype(np.float32)


def _config(extractor: FeatureExtractor, config: Any) -> Any:
    return extractor.Config() if config is None else config


def check_config(extractor: FeatureExtractor, config: Any = None) -> Framing:
    """``Config`` is a frozen dataclass subclassing :class:`~asrkit.types.FeatureConfig`, with
    a default for every setting, and its framing is usable; returns the framing."""
    kind = extractor.Config
    assert isinstance(kind, type) and issubclass(kind, FeatureConfig), (
        f"{extractor.name}: Config must subclass asrkit.types.FeatureConfig (sample_rate, "
        "window_ms, step_ms)")
    defaults = kind()  # every setting has a default, or this raises
    try:  # a frozen dataclass refuses assignment: a run's settings cannot drift
        setattr(defaults, "sample_rate", defaults.sample_rate)  # noqa: B010
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError(f"{extractor.name}: Config must be a frozen dataclass")
    width = extractor.num_features(_config(extractor, config))
    assert isinstance(width, int) and width >= 1, (
        f"{extractor.name}: num_features must be a positive int, not {width!r}")
    return Framing.of(_config(extractor, config))


def check_extract(extractor: FeatureExtractor, config: Any = None,
                  lengths: Sequence[int] | None = None, seed: int = 0) -> None:
    """For each length: ``extract`` gives float32 ``[frames, num_features]`` with ``frames``
    as the framing counts them (and ``num_frames`` says the same), all finite, for a tone in
    noise and for silence."""
    import numpy as np

    config = _config(extractor, config)
    framing = Framing.of(config)
    width = extractor.num_features(config)
    for n in lengths or contract_lengths(framing):
        expected = framing.frames(n)
        assert int(extractor.num_frames(n, config)) == expected, (
            f"{extractor.name}: num_frames({n}) is {extractor.num_frames(n, config)}, but the "
            f"framing ({framing.window}-sample window, {framing.step}-sample step) "
            f"counts {expected}")
        for silent in (False, True):
            what = f"{extractor.name}: extract of {n} samples{' of silence' if silent else ''}"
            values = np.asarray(extractor.extract(_audio(n, seed, silent), config))
            assert values.dtype == np.float32, f"{what} is {values.dtype}, not float32"
            assert values.shape == (expected, width), (
                f"{what} has shape {values.shape}; the framing counts {expected} frames of "
                f"num_features={width}")
            assert np.isfinite(values).all(), f"{what} has non-finite values"


def check_batch(extractor: FeatureExtractor, config: Any = None,
                lengths: Sequence[int] | None = None, seed: int = 0) -> None:
    """``extract_batch`` of a zero-padded batch gives each utterance what ``extract`` gives it
    alone, its frame count as ``frame_lengths``, zeros past its end, as many frames as the
    longest; and the same again with more padding (the padding changes nothing)."""
    import numpy as np

    config = _config(extractor, config)
    framing = Framing.of(config)
    lengths = list(lengths or contract_lengths(framing))
    audios = [_audio(n, seed, silent=(i == 1)) for i, n in enumerate(lengths)]
    alone = [np.asarray(extractor.extract(audio, config)) for audio in audios]
    for extra in (0, EXTRA_PADDING):
        batch = np.zeros([len(audios), max(lengths) + extra], np.float32)
        for row, audio in enumerate(audios):
            batch[row, : len(audio)] = audio
        features, frame_lengths = extractor.extract_batch(batch, np.array(lengths, np.int32),
                                                          config)
        features, frame_lengths = np.asarray(features), np.asarray(frame_lengths)
        expected = [framing.frames(n) for n in lengths]
        assert frame_lengths.tolist() == expected, (
            f"{extractor.name}: extract_batch's frame_lengths {frame_lengths.tolist()} for "
            f"lengths {lengths}; the framing counts {expected}")
        assert features.shape == (len(lengths), max(expected), extractor.num_features(config)), (
            f"{extractor.name}: extract_batch's features have shape {features.shape}, not "
            f"(batch, longest frame count {max(expected)}, num_features)")
        for row, one in enumerate(alone):
            where = f"{extractor.name}: extract_batch, utterance of {lengths[row]} samples"
            np.testing.assert_allclose(
                features[row, : len(one)], one, atol=BATCH_ATOL, rtol=BATCH_RTOL,
                err_msg=f"{where} (padded by {extra} more) differs from extract alone")
            assert not features[row, len(one):].any(), f"{where}: frames past its end not zero"


def check_in_graph(extractor: FeatureExtractor, config: Any = None, seed: int = 0) -> None:
    """``extract`` traces inside ``tf.function`` for audio of unknown length (as ``tf.data``
    runs it), with a static last dimension of ``num_features``, and gives what it gives
    eagerly."""
    import numpy as np
    import tensorflow as tf

    config = _config(extractor, config)
    width = extractor.num_features(config)
    graph = tf.function(lambda audio: extractor.extract(audio, config),
                        input_signature=[tf.TensorSpec([None], tf.float32)])
    shape = graph.get_concrete_function().structured_outputs.shape
    assert shape.rank == 2 and shape[-1] == width, (
        f"{extractor.name}: extract in a graph has shape {shape}; the last dimension must be "
        f"known, num_features={width}")
    audio = _audio(Framing.of(config).sample_rate, seed)
    eager = np.asarray(extractor.extract(audio, config))
    np.testing.assert_allclose(np.asarray(graph(audio)), eager, atol=BATCH_ATOL,
                               rtol=BATCH_RTOL, err_msg=f"{extractor.name}: extract differs in "
                               "a graph")


def check_extractor(extractor: FeatureExtractor, config: Any = None,
                    lengths: Sequence[int] | None = None, seed: int = 0) -> None:
    """Every check of this module on ``extractor`` with ``config`` (its defaults if None)."""
    check_config(extractor, config)
    check_extract(extractor, config, lengths, seed)
    check_batch(extractor, config, lengths, seed)
    check_in_graph(extractor, config, seed)
