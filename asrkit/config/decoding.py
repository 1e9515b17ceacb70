"""The one way every command picks a decoder and sets its settings, using only the
:class:`~asrkit.types.Decoder` contract (``Config``, ``config``, ``with_config``).

``asrkit train`` records its decoder (``train.decoder``) and that decoder's settings (the
``decoder`` section of ``config.json``); the dev evaluations and the final report use them.
``evaluate``, ``evaluate --watch``, ``evaluate --grid`` and ``transcribe`` start from that same
decoder, or the one ``--decoder``/``-o decoder=NAME`` names, apply ``-o decoder.KEY=VALUE``
over its settings, and give it the hot words of ``--hotword``/``--hotwords`` (a beam search's;
:func:`with_hotwords`): :func:`choose_decoder`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from asrkit import plugins
from asrkit.config.hotwords import Hotwords
from asrkit.config.overrides import DECODER_PREFIX, DecoderChoice
from asrkit.core.errors import AsrkitError
from asrkit.core.labels import Labels
from asrkit.core.settings import apply, from_dict
from asrkit.types import CTC_LOGITS, Decoder


def decoder_settings(name: str, pairs: Iterable[tuple[str, Any]] = (),
                     base: Any = None) -> Any:
    """The ``Config`` of the installed decoder ``name``: ``base`` (one of its configs, or a run's
    saved JSON section) or its defaults, with ``pairs`` applied; unknown keys are errors."""
    decoder = plugins.get("decoder", name)
    if isinstance(base, Mapping):
        base = from_dict(type(decoder.config), dict(base))
    return apply(decoder.config if base is None else base, pairs, DECODER_PREFIX)


def with_settings(decoder: Decoder, pairs: Iterable[tuple[str, Any]]) -> Decoder:
    """``decoder`` with ``pairs`` applied over its settings (a new decoder, via
    ``with_config``; the same one when nothing changes)."""
    changed = apply(decoder.config, pairs, DECODER_PREFIX)
    return decoder if changed == decoder.config else decoder.with_config(changed)


def choose_decoder(choice: DecoderChoice, default: str, default_config: Any = None) -> Decoder:
    """The decoder ``choice`` names, else ``default`` (a run's or an export's decoder), with
    ``choice.settings`` applied over ``default_config`` (a config of ``default``, or its JSON)
    when it is ``default``, else over the chosen decoder's own defaults."""
    name = choice.name or default
    decoder = plugins.get("decoder", name)
    if name == default and default_config is not None:
        config = decoder_settings(name, base=default_config)
        decoder = decoder if config == decoder.config else decoder.with_config(config)
    decoder = with_settings(decoder, choice.settings)
    return decoder if choice.hotwords is None else with_hotwords(decoder, choice.hotwords)


def with_hotwords(decoder: Decoder, hotwords: Hotwords) -> Decoder:
    """``decoder`` boosting ``hotwords``; a decoder that cannot is a one-line error naming the
    installed ones that can and read what it reads (a CTC run's, a transducer's, ...)."""
    if not decoder.takes_hotwords:
        able = [name for name in plugins.get_plugins().registry.names("decoder")
                if (other := plugins.get("decoder", name)).takes_hotwords
                and other.reads == decoder.reads]
        instead = f": use a beam search, --decoder {' or '.join(able)}" if able else ""
        raise AsrkitError(f"the {decoder.name} decoder does not boost hot words (--hotword, "
                          f"--hotwords){instead}")
    return decoder.with_hotwords(hotwords)


def check_hotwords(decoder: Decoder, labels: Labels) -> None:
    """One line when ``labels`` cannot spell a hot word of ``decoder`` (before any audio)."""
    if decoder.hotwords is not None:
        decoder.hotwords.spell(labels)


def try_decoder(decoder: Decoder, labels: Labels) -> None:
    """Decode one blank frame with ``decoder``, so that what it needs and lacks (a language
    model file, a word-start symbol among the labels, a hot word the labels cannot spell) stops
    a command at its start, not after an epoch. A decoder of another objective's outputs (a
    transducer's) needs the run's networks to decode anything: its word scorer
    (``make_scorer``, a language model) is made instead, which loads what it reads."""
    import numpy as np

    check_hotwords(decoder, labels)
    if decoder.reads != CTC_LOGITS:
        make_scorer = getattr(decoder, "make_scorer", None)
        if make_scorer is not None:
            make_scorer(labels)
        return
    logits = np.zeros((1, 1, labels.num_classes), dtype=np.float32)
    logits[0, 0, labels.blank] = 10.0
    texts = decoder.decode(logits, np.array([1]), labels)
    if len(texts) != 1:
        raise AsrkitError(f"the {decoder.name} decoder returned {len(texts)} texts for 1 "
                          "utterance")
