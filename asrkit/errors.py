"""Errors that reach the user as one line, without a traceback.

Anything raised as an :class:`AsrkitError` is printed by the CLI as ``asrkit: error: <message>``
and ends the command with exit status 1. The message says what went wrong and what to do.
"""


class AsrkitError(Exception):
    """A failure the user can act on; its message is the whole report."""


class PluginError(AsrkitError):
    """A plugin failed to load or registered something invalid."""
