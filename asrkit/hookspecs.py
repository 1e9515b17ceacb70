"""The hooks a plugin implements. This module holds the specifications only.

A plugin is a module named by an entry point in the ``asrkit`` group::

    [project.entry-points.asrkit]
    foo = "asrkit_importer_foo"

and implements any of these hooks with ``@asrkit.hookimpl``. Each ``register_*`` hook receives a
``register`` callable; the plugin calls ``register(obj)`` once per object it provides. The core
records which plugin and distribution provided each name, so that ``asrkit plugins`` can show it
and a name registered twice is reported naming both providers.

Hooks are called while the command line is built, so a plugin module must import cheaply: import
TensorFlow inside the functions that compute, never at module level.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import click

PROJECT = "asrkit"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

#: The signature of the ``register`` callable handed to every ``register_*`` hook.
Register = Callable[[Any], None]


@hookspec
def register_importers(register: Register) -> None:
    """Register corpus importers: call ``register(importer)`` with :class:`asrkit.types.Importer`
    instances. Each becomes ``asrkit import <importer.name>``."""


@hookspec
def register_models(register: Register) -> None:
    """Register network architectures: call ``register(spec)`` with
    :class:`asrkit.types.ModelSpec` instances, selectable by ``asrkit train --model <name>``."""


@hookspec
def register_decoders(register: Register) -> None:
    """Register CTC decoders: call ``register(decoder)`` with :class:`asrkit.types.Decoder`
    instances, selectable by ``--decoder <name>``."""


@hookspec
def register_features(register: Register) -> None:
    """Register feature extractors: call ``register(extractor)`` with
    :class:`asrkit.types.FeatureExtractor` instances, named by a model's ``features`` setting."""


@hookspec
def register_tokenizers(register: Register) -> None:
    """Register tokenizers: call ``register(tokenizer)`` with :class:`asrkit.types.Tokenizer`
    instances. ``asrkit tokenizer build --tokenizer <name>`` builds one from a dataset, and
    ``asrkit train -o tokenizer=FILE`` trains on the labels of a file it built."""


@hookspec
def register_objectives(register: Register) -> None:
    """Register training objectives: call ``register(objective)`` with
    :class:`asrkit.types.Objective` instances, selectable by ``asrkit train -o objective=<name>``
    (the loss, any network on top of the model's output frames, and what decodes them)."""


@hookspec
def register_commands(cli: click.Group) -> None:
    """Add top-level commands to the ``asrkit`` command line: ``cli.add_command(command)``.
    ``cli`` collects this plugin's commands; a name that is already taken is not replaced."""
