"""The model contract (``asrkit.types.AcousticModel``) on every bundled model, through the checks
plugin authors use (``asrkit.testing.models``), and those checks catching what they are for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from asrkit.testing import check_model, check_output_lengths, check_padding
from asrkit.types import ModelSpec

#: Small sizes of each bundled model, in ``-o`` form: seconds to build and train.
SMALL = {
    "brnn": ["model.n_hidden=16", "model.n_cell=16", "model.context=2"],
    "ds2": ["model.conv_channels=4", "model.rnn_units=16", "model.rnn_layers=1",
            "features.num_mel_bins=20"],
    "conformer": ["preset=tiny"],
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_bundled_model_keeps_the_contract(name, tiny_dataset, tmp_path):
    report = check_model(name, tmp_path / "run", tiny_dataset, SMALL[name], steps=3)
    assert report.padding_max_abs_diff < 1e-4
    assert set(report.export_max_abs_diff) == {"savedmodel", "tflite"}


@pytest.mark.parametrize("stride", [1, 2, 3, 4])
def test_ds2_logits_do_not_depend_on_the_padding_after_them(stride):
    """ds2's "same"-padded strided convolutions aligned differently for odd and even padded
    lengths, and its batch norm turned padded zeros into values the next convolution read:
    about 0.4 of the logits' 0.5 scale on random weights."""
    from asrkit.models.ds2 import DS2, DS2Config

    config = DS2Config(conv_channels=4, rnn_units=8, rnn_layers=1, time_stride=stride)
    assert check_output_lengths(DS2(), config, 40) == stride
    assert check_padding(DS2(), config, 40) < 1e-4


def test_ds2_weights_keep_their_names_and_shapes():
    """The padding fix changes no variable: checkpoints of the earlier ds2 load."""
    from asrkit.models.ds2 import DS2, DS2Config
    from asrkit.testing.models import build_model

    model = build_model(DS2(), DS2Config(conv_channels=4, rnn_units=8), 80)
    shapes = {w.path: tuple(w.shape) for w in model.weights}
    assert shapes["ds2/conv1/kernel"] == (11, 41, 1, 4)
    assert shapes["ds2/conv2/kernel"] == (11, 21, 4, 4)
    assert shapes["ds2/bigru0/kernel"] == (2, 4 * 20, 24)  # 80 bins -> 40 -> 20, 4 channels


# -- the checks catch what they are for ---------------------------------------------------------


@dataclass(frozen=True)
class ConvConfig:
    padding: str = "same"
    stride: int = 2
    declared_stride: int = 2


class StridedConv(ModelSpec):
    """One strided convolution with Keras' "same" padding, reading the padding as it comes:
    the mistake ds2 made."""

    name = "strided-conv"
    description = "a model that lets padding in"
    Config = ConvConfig

    def time_stride(self, config: ConvConfig) -> int:
        return config.declared_stride

    def build(self, config: ConvConfig, num_features: int, num_classes: int) -> Any:
        import keras

        conv = keras.layers.Conv1D(num_classes, 5, config.stride, padding=config.padding)

        class Model(keras.Model):
            def __init__(self) -> None:
                super().__init__()
                self.conv = conv

            def call(self, inputs: Any, training: bool = False) -> Any:
                return self.conv(inputs[0])

        return Model()


def test_padding_check_fails_a_model_that_reads_its_padding():
    with pytest.raises(AssertionError, match="other logits in a batch padded"):
        check_padding(StridedConv(), ConvConfig(), 3)


def test_length_check_fails_a_model_that_subsamples_more_than_it_declares():
    with pytest.raises(AssertionError, match=r"give logits of shape \(1, 1, 29\)"):
        check_output_lengths(StridedConv(), ConvConfig(declared_stride=1), 3)


def test_length_check_fails_a_model_that_cannot_read_a_short_utterance():
    with pytest.raises(AssertionError, match="an utterance of 1 frames fails"):
        check_output_lengths(StridedConv(), ConvConfig(padding="valid"), 3)


def test_an_export_states_the_declared_stride_in_seconds():
    """Seconds per logit frame come from ``time_stride``: ds2 with stride 3 is 30 ms (it was
    derived from output_length at 1000 frames, 1000/334 frames: 29.94 ms)."""
    from asrkit.core.frames import frame_seconds
    from asrkit.features import LogMelConfig
    from asrkit.models.ds2 import DS2, DS2Config

    assert frame_seconds(LogMelConfig(), DS2(), DS2Config(time_stride=3)) == pytest.approx(
        0.03, rel=1e-9)
