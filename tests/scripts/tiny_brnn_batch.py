"""The small brnn and the padded batch of four utterances that the towers and accumulation
scripts train, with the initial weights both start from; and the objectives they can train it
with (:data:`OBJECTIVES`, :func:`networks`). Import it only after the logical devices are
configured: building the model starts TensorFlow."""

import keras
import numpy as np

from asrkit.core.text import Alphabet
from asrkit.models.brnn import BRNN, BRNNConfig
from asrkit.objectives.attention import AttentionConfig, AttentionObjective
from asrkit.objectives.ctc import CTCObjective
from asrkit.objectives.transducer import TransducerConfig, TransducerObjective

spec, config = BRNN(), BRNNConfig(n_hidden=48, n_cell=32, context=2, dropout=0.0)
labels = Alphabet()
rng = np.random.default_rng(0)
lengths = np.array([60, 45, 52, 38], np.int32)
batch = {
    "features": rng.normal(size=(4, 60, 26)).astype(np.float32)
    * (np.arange(60)[None, :, None] < lengths[:, None, None]),
    "feature_lengths": lengths,
    "labels": rng.integers(0, 28, size=(4, 12)).astype(np.int32),
    "label_lengths": np.array([12, 9, 10, 7], np.int32),
}
keras.utils.set_random_seed(7)
initial = [w.copy() for w in spec.build(config, 26, 29).get_weights()]

#: The objectives a script may be asked for, with their settings: CTC (no head), a small
#: transducer (a head of its own, its auxiliary CTC loss on) and small attention decoders (a
#: Transformer's, LAS's: joint CTC, label smoothing) without dropout, which would draw
#: differently in the two computations a script compares.
OBJECTIVES = {
    "ctc": (CTCObjective(), CTCObjective.Config()),
    "transducer": (TransducerObjective(),
                   TransducerConfig(pred_dim=16, joint_dim=16, dropout=0.0, frames_per_chunk=8)),
    "attention": (AttentionObjective(),
                  AttentionConfig(d_model=16, heads=2, layers=1, ff_dim=32, dropout=0.0)),
    "attention-las": (AttentionObjective(),
                      AttentionConfig(decoder="las", d_model=16, las_units=16, attention_dim=16,
                                      location_filters=4, location_kernel=3, dropout=0.0)),
}


def networks(name: str) -> tuple[keras.Model, keras.Model | None]:
    """The brnn built for objective ``name`` and that objective's head (``None`` for CTC), with
    the same initial weights at every call (built in the current strategy's scope)."""
    objective, settings = OBJECTIVES[name]
    width = objective.encoder_width(settings, labels)
    keras.utils.set_random_seed(7)
    return spec.build(config, 26, width), objective.build(settings, width, labels)


def weights(model: keras.Model, head: keras.Model | None) -> list[np.ndarray]:
    """The weights of the model, then of the head."""
    return model.get_weights() + (head.get_weights() if head is not None else [])
