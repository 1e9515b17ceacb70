"""asrkit's bundled CTC decoders (each module is a plugin registering one Decoder), and the one way
every command picks a decoder and sets its settings, using only the
:class:`~asrkit.types.Decoder` contract (``Config``, ``config``, ``with_config``):

- ``-o decoder=NAME`` chooses the decoder (``asrkit train`` records it as ``train.decoder``);
- ``-o decoder.KEY=VALUE`` sets a field of its ``Config``, typed by :mod:`asrkit.settings`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from asrkit.errors import AsrkitError
from asrkit.settings import apply, from_dict, split_pair

#: How a decoder setting is written on the command line.
PREFIX = "decoder."


def split_settings(settings: Iterable[str]) -> tuple[str | None, list[tuple[str, str]]]:
    """``["decoder=beam", "decoder.beam_width=8"]`` -> ``("beam", [("beam_width", "8")])``:
    the decoder chosen (``None`` if none is) and its settings. ``KEY=VALUE`` without the
    ``decoder.`` prefix is a decoder setting too."""
    name = None
    pairs = []
    for pair in settings:
        key, value = split_pair(pair, "decoder=NAME or decoder.KEY=VALUE")
        if key == "decoder":
            name = value
        else:
            pairs.append((key.removeprefix(PREFIX), value))
    return name, pairs


def configure(decoder: Any, pairs: Iterable[tuple[str, str]], base: Any = None) -> Any:
    """``decoder`` with its config (or ``base``, a config of the same decoder) changed by the
    ``(key, value)`` strings of ``pairs``: a new decoder, through ``with_config``."""
    config = decoder.config if base is None else base
    changed = apply(config, pairs, PREFIX)
    return decoder if changed == decoder.config else decoder.with_config(changed)


def decoder_config(name: str, pairs: Iterable[tuple[str, str]] = (),
                   saved: Mapping[str, Any] | None = None) -> Any:
    """The ``Config`` of the installed decoder ``name``: ``saved`` (a run's JSON section, when
    given) or the defaults, with ``pairs`` applied; unknown keys are errors."""
    from asrkit import plugins

    decoder = plugins.get("decoder", name)
    base = decoder.config if saved is None else from_dict(type(decoder.config), dict(saved))
    return apply(base, pairs, PREFIX)


def load_decoder(name: str, settings: Sequence[str] = (), config: Any = None) -> Any:
    """The installed decoder ``name`` using ``config`` (one of its ``Config``s; default: its
    defaults) with ``settings`` (``decoder.KEY=VALUE``; ``decoder=NAME`` picks another
    decoder, whose defaults are then the base) applied; unknown keys are errors."""
    from asrkit import plugins

    chosen, pairs = split_settings(settings)
    if chosen is not None and chosen != name:
        name, config = chosen, None
    decoder = plugins.get("decoder", name)
    return configure(decoder, pairs, config)


def try_decoder(decoder: Any, labels: Any) -> None:
    """Decode one blank frame with ``decoder``, so that what it needs and lacks (a language
    model file, a word-start symbol among the labels) stops a command at its start, not after an
    epoch."""
    import numpy as np

    logits = np.zeros((1, 1, labels.num_classes), dtype=np.float32)
    logits[0, 0, labels.blank] = 10.0
    texts = decoder.decode(logits, np.array([1]), labels)
    if len(texts) != 1:
        raise AsrkitError(f"the {decoder.name} decoder returned {len(texts)} texts for 1 "
                          "utterance")
