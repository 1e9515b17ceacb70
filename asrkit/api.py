"""asrkit's public API: everything a plugin (or a script) may import from asrkit, in one place.

A plugin imports from here (``from asrkit.api import Importer, AsrkitError``), from
:mod:`asrkit.types` (the contracts, also re-exported here) and, in its tests, from
:mod:`asrkit.testing`. Every other module of asrkit is private: it may change or move in any
release without notice. ``tests/test_public_api.py`` checks that the bundled plugins keep to
this, and that every name here is documented in ``docs/api.md``.

Importing this module is cheap (no TensorFlow, no numpy), since plugin modules import it when
asrkit loads them, before any command runs.
"""

from __future__ import annotations

# -- Plugin hooks and errors -------------------------------------------------------------------
from asrkit import __version__
from asrkit.errors import AsrkitError
from asrkit.hookspecs import hookimpl

# isort: split
# -- Contracts (asrkit.types) ------------------------------------------------------------------
from asrkit.types import (
    DATASET_NAME,
    NAME_PATTERN,
    SAMPLE_RATE,
    Decoder,
    FeatureExtractor,
    Importer,
    ModelSpec,
    Resource,
    Utterance,
    safe_name,
)

# isort: split
# -- Settings: the fields of a component's ``Config`` dataclass ----------------------------------
from asrkit.train.config import setting, validate

# isort: split
# -- Text --------------------------------------------------------------------------------------
from asrkit.text import Alphabet, decode_text, normalize, quote

# isort: split
# -- Datasets: where they are and what they hold -----------------------------------------------
from asrkit.data.manifest import Row, read_csv
from asrkit.data.shards import ShardRecord, read_records, shard_paths
from asrkit.datasets import DATASET_JSON, asrkit_home, load_dataset_json, resolve_dataset

# isort: split
# -- Decoding ----------------------------------------------------------------------------------
# The building blocks of beam-search decoders (search, scorers) are added here.

__all__ = [
    "DATASET_JSON",
    "DATASET_NAME",
    "NAME_PATTERN",
    "SAMPLE_RATE",
    "Alphabet",
    "AsrkitError",
    "Decoder",
    "FeatureExtractor",
    "Importer",
    "ModelSpec",
    "Resource",
    "Row",
    "ShardRecord",
    "Utterance",
    "__version__",
    "asrkit_home",
    "decode_text",
    "hookimpl",
    "load_dataset_json",
    "normalize",
    "quote",
    "read_csv",
    "read_records",
    "resolve_dataset",
    "safe_name",
    "setting",
    "shard_paths",
    "validate",
]
