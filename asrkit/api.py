"""asrkit's public API: everything a plugin (or a script) may import from asrkit, in one place.

A plugin imports from here (``from asrkit.api import Importer, AsrkitError``), from
:mod:`asrkit.types` (the contracts, also re-exported here) and, in its tests, from
:mod:`asrkit.testing`. Every other module of asrkit is private: it may change or move in any
release without notice. ``tests/test_public_api.py`` checks that the bundled plugins and the
examples in the docs keep to this, and that every name here is documented in ``docs/api.md``.

Importing this module is cheap (no TensorFlow, no numpy), since plugin modules import it when
asrkit loads them, before any command runs: the beam search's numpy half and the dataset readers
are loaded when first asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# -- Plugin hooks and errors -------------------------------------------------------------------
from asrkit import __version__
from asrkit.core.errors import AsrkitError
from asrkit.hookspecs import hookimpl

# isort: split
# -- Contracts (asrkit.types) ------------------------------------------------------------------
from asrkit.types import (
    CTC_LOGITS,
    DATASET_NAME,
    NAME_PATTERN,
    AcousticModel,
    Decoded,
    Decoder,
    FeatureConfig,
    FeatureExtractor,
    Importer,
    ModelSpec,
    NoSettings,
    Objective,
    Resource,
    StreamingModel,
    StreamShape,
    Tokenizer,
    Utterance,
    safe_name,
)

# isort: split
# -- Settings: the fields of a component's ``Config`` dataclass ----------------------------------
from asrkit.core.settings import SettingInfo, describe, format_value, parse_value, setting, validate

# isort: split
# -- Features: frame geometry ------------------------------------------------------------------
from asrkit.core.frames import SAMPLE_RATE, Framing

# isort: split
# -- Text --------------------------------------------------------------------------------------
from asrkit.core.labels import PIECE_MARKER, LabelError, Labels, Pieces
from asrkit.core.text import Alphabet, decode_text, normalize, quote

# isort: split
# -- Datasets: where they are and what they hold -----------------------------------------------
from asrkit.core.storage import Location, StoragePath, location
from asrkit.dataset.folders import DATASET_JSON, asrkit_home, load_dataset_json, resolve_dataset

# isort: split
# -- Training objectives: asrkit's CTC, to build a variant on ------------------------------------
from asrkit.core.ctc import ctc_losses
from asrkit.core.ctc import frames_needed as ctc_frames_needed
from asrkit.objectives.ctc import CTCObjective

# isort: split
# -- Training objectives: the transducer, its loss and what its decoders read -------------------
from asrkit.core.rnnt import rnnt_loss
from asrkit.decoders.transducer import (
    TRANSDUCER_OUTPUTS,
    TransducerBeamConfig,
    TransducerBeamDecoder,
    TransducerNetworks,
    TransducerOutputs,
)
from asrkit.objectives.transducer import TransducerObjective

# isort: split
# -- Training objectives: the attention encoder-decoder and what its decoders read -------------
from asrkit.decoders.attention import (
    ATTENTION_OUTPUTS,
    AttentionBeamConfig,
    AttentionBeamDecoder,
    AttentionNetworks,
    AttentionOutputs,
)
from asrkit.objectives.attention import AttentionObjective

# isort: split
# -- Decoding: the one CTC prefix beam search and its scorer interface -------------------------
from asrkit.decoders.beam import BeamConfig, BeamDecoder, BeamSearchDecoder
from asrkit.decoders.scoring import Hypothesis, WordScorer

# isort: split
# -- Hot words: what a beam search boosts, and their context graph -----------------------------
from asrkit.config.hotwords import Hotword, Hotwords, parse_hotwords
from asrkit.decoders.context import ContextGraph

if TYPE_CHECKING:
    from asrkit.dataset.manifest import Row, read_csv
    from asrkit.dataset.shards import ShardRecord, read_records, shard_paths
    from asrkit.decoders.prefix import PrefixBeamSearch, log_softmax

__all__ = [
    "ATTENTION_OUTPUTS",
    "CTC_LOGITS",
    "DATASET_JSON",
    "DATASET_NAME",
    "NAME_PATTERN",
    "PIECE_MARKER",
    "SAMPLE_RATE",
    "TRANSDUCER_OUTPUTS",
    "AcousticModel",
    "Alphabet",
    "AsrkitError",
    "AttentionBeamConfig",
    "AttentionBeamDecoder",
    "AttentionNetworks",
    "AttentionObjective",
    "AttentionOutputs",
    "BeamConfig",
    "BeamDecoder",
    "BeamSearchDecoder",
    "CTCObjective",
    "ContextGraph",
    "Decoded",
    "Decoder",
    "FeatureConfig",
    "FeatureExtractor",
    "Framing",
    "Hotword",
    "Hotwords",
    "Hypothesis",
    "Importer",
    "LabelError",
    "Labels",
    "Location",
    "ModelSpec",
    "NoSettings",
    "Objective",
    "Pieces",
    "PrefixBeamSearch",
    "Resource",
    "Row",
    "SettingInfo",
    "ShardRecord",
    "StoragePath",
    "StreamShape",
    "StreamingModel",
    "Tokenizer",
    "TransducerBeamConfig",
    "TransducerBeamDecoder",
    "TransducerNetworks",
    "TransducerObjective",
    "TransducerOutputs",
    "Utterance",
    "WordScorer",
    "__version__",
    "asrkit_home",
    "ctc_frames_needed",
    "ctc_losses",
    "decode_text",
    "describe",
    "format_value",
    "hookimpl",
    "load_dataset_json",
    "location",
    "log_softmax",
    "normalize",
    "parse_hotwords",
    "parse_value",
    "quote",
    "read_csv",
    "read_records",
    "resolve_dataset",
    "rnnt_loss",
    "safe_name",
    "setting",
    "shard_paths",
    "validate",
]

#: Names loaded on first use (they bring numpy or TensorFlow), and the module defining each.
_LAZY = {
    "PrefixBeamSearch": "asrkit.decoders.prefix",
    "log_softmax": "asrkit.decoders.prefix",
    "Row": "asrkit.dataset.manifest",
    "read_csv": "asrkit.dataset.manifest",
    "ShardRecord": "asrkit.dataset.shards",
    "read_records": "asrkit.dataset.shards",
    "shard_paths": "asrkit.dataset.shards",
}


def __getattr__(name: str) -> Any:
    import importlib

    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
