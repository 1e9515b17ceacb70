"""asrkit's commands, one module each: ``train``, ``evaluate``, ``average``, ``transcribe``,
``align``, ``segment``, ``export``, ``describe``, ``tokenizer``, ``unlock``, ``data-service``
(registered here through the ``register_commands`` hook from asrkit's own entry point, like any
plugin's commands), and ``plugins`` and ``import`` (the core of the command line, which
:mod:`asrkit.cli` adds itself so that no plugin can replace them).

Each module imports only click and cheap parts of asrkit: TensorFlow is loaded when a command
runs, so ``asrkit --help`` stays fast.
"""

from __future__ import annotations

import click

from asrkit import hookimpl
from asrkit.commands.align import align_command
from asrkit.commands.average import average_command
from asrkit.commands.data_service import data_service_group
from asrkit.commands.describe import describe_command
from asrkit.commands.evaluate import evaluate_command
from asrkit.commands.export import export_command
from asrkit.commands.segment import segment_command
from asrkit.commands.tokenizer import tokenizer_group
from asrkit.commands.train import train_command
from asrkit.commands.transcribe import transcribe_command
from asrkit.commands.unlock import unlock_command


@hookimpl
def register_commands(cli: click.Group) -> None:
    for command in (train_command, evaluate_command, average_command, transcribe_command,
                    align_command, segment_command, export_command, describe_command,
                    tokenizer_group, unlock_command, data_service_group):
        cli.add_command(command)
