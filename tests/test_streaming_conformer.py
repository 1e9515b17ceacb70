"""The streaming Conformer: chunked attention and causal convolutions, stepped chunk by chunk
with caches, equal to its whole-utterance call at every chunk size it decodes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import tensorflow as tf

from asrkit import plugins
from asrkit.models.conformer_layers import chunk_mask, rel_shift, relative_positions
from asrkit.testing import check_streaming_model
from asrkit.testing.models import build_model

TINY = dict(d_model=16, num_blocks=2, num_heads=2, ff_multiplier=2, conv_kernel=5,
            subsampling_channels=4)


def conformer(**settings: object) -> tuple[object, object]:
    spec = plugins.get("model", "conformer")
    return spec, spec.Config(**{**TINY, **settings})


@pytest.mark.parametrize("chunks", [(1, 3, 16), (0,)])
def test_a_stream_equals_the_whole_utterance_at_every_chunk_size(chunks: tuple[int, ...]) -> None:
    spec, config = conformer(streaming=True, chunk_frames=3, left_frames=5)
    if chunks == (0,):  # full context does not stream: the step refuses to exist
        assert spec.streaming(replace(config, chunk_frames=0)) is None
        return
    assert check_streaming_model(spec, config, num_features=10, chunks=chunks) < 1e-4


def test_a_left_context_longer_than_the_stream_and_a_kernel_of_one() -> None:
    spec, config = conformer(streaming=True, chunk_frames=2, left_frames=200, conv_kernel=1)
    check_streaming_model(spec, config, num_features=6, chunks=(2, 5))


def test_the_chunk_mask_lets_a_frame_see_its_chunk_and_the_frames_before_it() -> None:
    valid = tf.constant([[True] * 7 + [False]])
    mask = chunk_mask(valid, tf.constant(3), tf.constant(2))[0].numpy()
    # Frame 4 is in the chunk 3..5: it sees 3..5, and 1..2 before it; 6 is another chunk.
    assert mask[4].tolist() == [False, True, True, True, True, True, False, False]
    # Frame 6's chunk (6..8) holds padding (7), which nobody sees.
    assert mask[6].tolist() == [False, False, False, False, True, True, True, False]


def test_relative_shift_of_a_chunk_after_its_cache() -> None:
    """Queries that are the last Q of K keys: [i, j] scores position K - Q + i - j."""
    queries, keys = 3, 5
    positions = np.arange(keys - 1, -queries, -1)  # the columns' relative positions
    scores = np.tile(positions[None, None, None, :], [1, 1, queries, 1]).astype(np.float32)
    shifted = rel_shift(tf.constant(scores), keys).numpy()[0, 0]
    expected = [[keys - queries + i - j for j in range(keys)] for i in range(queries)]
    assert shifted.tolist() == expected
    assert relative_positions(queries, 4, keys).shape == (keys + queries - 1, 4)


def test_a_model_that_does_not_stream_is_the_conformer_of_before() -> None:
    """Non-streaming settings keep the centred convolution and full attention: the chunk
    settings change nothing."""
    spec, config = conformer()
    assert spec.streaming(config) is None and config.trained_chunks() is None
    model = build_model(spec, config, 10)
    other = build_model(spec, replace(config, chunk_frames=1, left_frames=1), 10)
    features = tf.random.normal([2, 30, 10])
    lengths = tf.constant([30, 21])
    np.testing.assert_allclose(model((features, lengths)).numpy(),
                               other((features, lengths)).numpy(), atol=1e-6)


def test_dynamic_chunk_training_draws_chunks_and_full_context() -> None:
    """In training, batches attend within drawn chunks or to everything: outputs differ
    between calls (dropout off), and never at inference."""
    spec, config = conformer(streaming=True, chunk_frames=2, left_frames=3, dropout=0.0,
                             attention_dropout=0.0, max_train_chunk=4)
    model = build_model(spec, config, 10)
    features, lengths = tf.random.normal([1, 60, 10]), tf.constant([60])
    tf.random.set_seed(1)
    trained = {model((features, lengths), training=True).numpy().round(4).tobytes()
               for _ in range(12)}
    assert len(trained) > 2
    inferred = {model((features, lengths)).numpy().round(4).tobytes() for _ in range(3)}
    assert len(inferred) == 1
    assert spec.trained_chunks(config) == (1, 4)
    assert spec.trained_chunks(replace(config, max_train_chunk=0)) == (2, 2)


def test_a_streaming_model_normalises_features_as_a_stream_can(tiny_dataset) -> None:
    """The cpu preset normalises each utterance over all its frames; a streaming run takes the
    running mean instead and says so; the user asking for the whole-utterance one is refused."""
    from asrkit.config.overrides import parse_overrides
    from asrkit.config.run import build_run_config
    from asrkit.core.errors import AsrkitError

    named = {"model": "conformer", "dataset": str(tiny_dataset)}
    plain, _ = build_run_config(named, parse_overrides(["preset=cpu"]))
    assert plain.features.normalize == "feature"
    config, note = build_run_config(named, parse_overrides(["preset=cpu",
                                                            "model.streaming=true"]))
    assert config.features.normalize == "running" and "normalize=running" in note
    with pytest.raises(AsrkitError, match="whole utterances"):
        build_run_config(named, parse_overrides(["model.streaming=true",
                                                 "features.normalize=utterance"]))
    kept, _ = build_run_config(named, parse_overrides(["model.streaming=true",
                                                       "features.normalize=none"]))
    assert kept.features.normalize == "none"
