"""asrkit's public API for plugins: what a plugin may import besides ``asrkit``, ``asrkit.types``,
``asrkit.errors`` and ``asrkit.testing``. Everything else in asrkit may change without notice.

- settings: declaring (:func:`setting`), checking (:func:`validate`), parsing
  (:func:`parse_value`, :func:`format_value`) and listing (:func:`describe`) a config dataclass;
- decoders: the :class:`Decoder` contract, and the one CTC prefix beam search
  (:class:`BeamSearchDecoder`, :class:`PrefixBeamSearch`) with its scorer interface
  (:class:`WordScorer`): a language-model decoder is a scorer plugged into it;
- text and datasets: the :class:`Alphabet`, transcript :func:`normalize`-ation, where imported
  datasets live (:func:`asrkit_home`) and reading a split's manifest (:func:`read_csv`).

Importing this module is cheap (no numpy, no TensorFlow): the beam search's numpy half and the
dataset helpers are loaded when first asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from asrkit.decoders.beam import BeamConfig, BeamDecoder, BeamSearchDecoder
from asrkit.decoders.scoring import Hypothesis, WordScorer
from asrkit.settings import SettingInfo, describe, format_value, parse_value, setting, validate
from asrkit.text import Alphabet, normalize
from asrkit.types import Decoder, NoSettings

if TYPE_CHECKING:
    from asrkit.data.importing import asrkit_home
    from asrkit.data.manifest import read_csv
    from asrkit.decoders.prefix import PrefixBeamSearch, log_softmax

__all__ = [
    "Alphabet",
    "BeamConfig",
    "BeamDecoder",
    "BeamSearchDecoder",
    "Decoder",
    "Hypothesis",
    "NoSettings",
    "PrefixBeamSearch",
    "SettingInfo",
    "WordScorer",
    "asrkit_home",
    "describe",
    "format_value",
    "log_softmax",
    "normalize",
    "parse_value",
    "read_csv",
    "setting",
    "validate",
]

#: Names loaded on first use, and the module that defines each.
_LAZY = {
    "PrefixBeamSearch": "asrkit.decoders.prefix",
    "log_softmax": "asrkit.decoders.prefix",
    "asrkit_home": "asrkit.data.importing",
    "read_csv": "asrkit.data.manifest",
}


def __getattr__(name: str) -> Any:
    import importlib

    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
