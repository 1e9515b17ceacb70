"""asrkit's bundled CTC decoders (each module is a plugin registering one Decoder), and
:func:`load_decoder`, which every command uses to pick a decoder and set its options."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from asrkit.errors import AsrkitError


def load_decoder(name: str, settings: Sequence[str] = ()) -> Any:
    """The installed decoder ``name`` with ``settings`` (``KEY=VALUE`` or
    ``decoder.KEY=VALUE``) applied through its ``Config``; unknown keys are errors."""
    from asrkit import plugins
    from asrkit.train.config import override

    decoder = plugins.get("decoder", name)
    if not settings:
        return decoder
    if not hasattr(decoder, "with_config"):
        raise AsrkitError(f"the {name} decoder has no settings to change")
    config = decoder.config
    for pair in settings:
        key, sep, value = pair.partition("=")
        if not sep:
            raise AsrkitError(f"-o {pair}: expected decoder.KEY=VALUE")
        key = key.strip().removeprefix("decoder.")
        config = override(config, key, value.strip())
    return decoder.with_config(config)
