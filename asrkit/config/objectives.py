"""The run's training objective (``train.objective``, ``ctc`` by default) and its settings (the
``objective`` section of ``config.json``, ``-o objective.KEY=VALUE``), using only the
:class:`~asrkit.types.Objective` contract; and the one-line refusals of what an objective's
outputs cannot do, said before any work.

A run's objective is fixed once it has started (its weights, and its head's, depend on it):
:func:`asrkit.config.run.resume_config` refuses another one, or other settings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from asrkit import plugins
from asrkit.core.errors import AsrkitError
from asrkit.core.settings import apply, from_dict
from asrkit.types import Objective

#: How an objective setting is written on the command line.
OBJECTIVE_PREFIX = "objective."


def objective_settings(name: str, pairs: Iterable[tuple[str, Any]] = (),
                       base: Any = None) -> Any:
    """The ``Config`` of the installed objective ``name``: ``base`` (one of its configs, or a
    run's saved JSON section) or its defaults, with ``pairs`` applied; unknown keys are
    errors."""
    objective = plugins.get("objective", name)
    pairs = list(pairs)
    known = [field.name for field in dataclasses.fields(objective.Config)]
    for key, value in pairs:
        if key not in known:
            raise AsrkitError(f"-o {OBJECTIVE_PREFIX}{key}={value}: the {name} objective has no "
                              f"setting {key!r} (its settings: {', '.join(known) or 'none'}; "
                              f"asrkit plugins --settings {name})")
    if isinstance(base, Mapping):
        base = from_dict(objective.Config, dict(base))
    return apply(objective.Config() if base is None else base, pairs, OBJECTIVE_PREFIX)


def readers(objective: Objective) -> list[str]:
    """The installed decoders that read ``objective``'s outputs, by name."""
    registry = plugins.get_plugins().registry
    return [name for name in registry.names("decoder")
            if objective.decodes_with(registry.get("decoder", name))]


def check_decodes(objective: Objective, decoder: str) -> None:
    """One line when the decoder named ``decoder`` cannot decode ``objective``'s outputs: it
    reads others (CTC logits for a transducer run, a transducer's outputs for a CTC run)."""
    found = plugins.get("decoder", decoder)
    if not objective.decodes_with(found):
        names = readers(objective)
        choice = (f"choose one of {', '.join(names)}" if names else
                  "no installed decoder reads them (install the objective's decoders)")
        raise AsrkitError(f"the {decoder} decoder reads {found.reads}, not the "
                          f"{objective.name} objective's outputs ({objective.outputs}): {choice}")


def default_decoder(objective: Objective, decoder: str) -> str:
    """``decoder``, or the objective's default decoder when it cannot decode its outputs: a
    transducer run's default decoder is the transducer's greedy search, not CTC's."""
    return (decoder if objective.decodes_with(plugins.get("decoder", decoder))
            else objective.default_decoder)


def require_ctc_outputs(objective: Objective, what: str) -> None:
    """One line when ``objective``'s model does not output CTC logits, which ``what`` (a
    command, or part of one) reads."""
    if not objective.ctc_outputs:
        raise AsrkitError(f"{what} reads a model's outputs as CTC logits, which the "
                          f"{objective.name} objective's are not (they are decoded by "
                          f"{', '.join(readers(objective)) or 'no installed decoder'}, with "
                          "its head); asrkit cannot do that for such runs yet")
