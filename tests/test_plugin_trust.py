"""What a third-party plugin can and cannot do to the command line: take one of asrkit's own
names only when the user disables the built-in, and then never silently; and never hang a help
page, or a command for longer than the import watchdog allows. The faults are real
distributions installed with pip, run as the user runs asrkit."""

from __future__ import annotations

import json
import time

import click
import pytest

from asrkit import hookimpl
from asrkit.core.errors import PluginError
from asrkit.plugins import (
    TIMEOUT_ENV,
    PluginSet,
    import_timeout,
    stalled_message,
    watchdog,
)
from asrkit.registry import Provider
from asrkit.types import Importer
from tests.conftest import run_asrkit

# A distribution that registers asrkit's own importer name `sample` and command name `train`.
TAKER = """
import click
from asrkit import hookimpl
from asrkit.types import Importer

class Sample(Importer):
    name = "sample"
    description = "The taker's sample."
    def resources(self, options):
        return []
    def prepare(self, metadata, members, options):
        return iter(())

@click.command("train")
def train():
    '''The taker's train.'''

@hookimpl
def register_importers(register):
    register(Sample())

@hookimpl
def register_commands(cli):
    cli.add_command(train)
"""

# A plugin whose import never finishes.
SLEEPS_ON_IMPORT = """
import time
time.sleep(3600)
"""

TAKEN = ("importer 'sample' now comes from asrkit-taker (plugin 'taker'), because asrkit's own "
         "(plugin 'sample') is disabled by ASRKIT_DISABLE_PLUGINS; take 'sample' out of it to "
         "use asrkit's again")
STALLED = ("asrkit: error: plugin 'sleepy' from asrkit-sleepy is still importing after 1 s; "
           "disable it with ASRKIT_DISABLE_PLUGINS=sleepy, or allow it longer with "
           "ASRKIT_PLUGIN_IMPORT_TIMEOUT=SECONDS")
#: A help page must come back well before this (it never waits for a plugin); a hung plugin
#: would keep it for an hour.
PATIENCE = 60


@pytest.fixture(scope="module")
def taker(installed):
    return installed("asrkit-taker", "asrkit_taker", TAKER, {"taker": "asrkit_taker"})


@pytest.fixture(scope="module")
def sleepy(installed):
    return installed("asrkit-sleepy", "asrkit_sleepy", SLEEPS_ON_IMPORT,
                     {"sleepy": "asrkit_sleepy"})


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# -- 1. a disabled built-in's name is taken over only out loud ---------------------------------


def test_disabling_a_builtin_names_the_plugin_that_takes_its_name(taker):
    env = {"ASRKIT_DISABLE_PLUGINS": "sample"}
    helped = run_asrkit("import", "sample", "--help", pythonpath=taker, env=env)
    assert helped.returncode == 0, helped.stderr
    assert "The taker's sample." in helped.stdout
    assert f"asrkit: warning: {TAKEN}" in lines(helped.stderr)

    listing = json.loads(run_asrkit("plugins", "--json", pythonpath=taker, env=env).stdout)
    assert TAKEN in listing["conflicts"]
    both = {"ASRKIT_DISABLE_PLUGINS": "sample,commands", "ASRKIT_STRICT_PLUGINS": "1"}
    strict = run_asrkit("plugins", pythonpath=taker, env=both)
    assert strict.returncode == 1
    assert lines(strict.stderr) == [f"asrkit: error: {TAKEN} (ASRKIT_STRICT_PLUGINS is set)"]


def test_without_disabling_the_builtin_keeps_its_name(taker):
    helped = run_asrkit("plugins", "--json", pythonpath=taker)
    listing = json.loads(helped.stdout)
    assert not any("now comes from" in line for line in listing["conflicts"])
    assert any("asrkit's own is used" in line for line in listing["conflicts"])


class SampleAgain(Importer):
    name = "sample"
    description = "Another sample."

    def resources(self, options):
        return []

    def prepare(self, metadata, members, options):
        return iter(())


class ImporterTaker:
    @hookimpl
    def register_importers(self, register):
        register(SampleAgain())


class CommandTaker:
    @hookimpl
    def register_commands(self, cli):
        cli.add_command(click.Command("train", callback=lambda: None))


@pytest.mark.parametrize("disabled, taker, kind, name, builtin", [
    ({"sample"}, ImporterTaker, "importer", "sample", "sample"),
    ({"asrkit"}, ImporterTaker, "importer", "sample", "sample"),  # the whole distribution
    ({"commands"}, CommandTaker, "command", "train", "commands"),
])
def test_takeover_is_a_problem_in_process(monkeypatch, disabled, taker, kind, name, builtin):
    monkeypatch.delenv("ASRKIT_STRICT_PLUGINS", raising=False)
    plugins = PluginSet()
    plugins.load_entry_points(disabled=disabled)
    plugins.add_module(taker(), Provider("taker", "taker-dist", "1"))
    plugins.add_commands(click.Group("asrkit"))
    expected = (f"{kind} {name!r} now comes from taker-dist (plugin 'taker'), because asrkit's "
                f"own (plugin {builtin!r}) is disabled by ASRKIT_DISABLE_PLUGINS; take "
                f"{builtin!r} out of it to use asrkit's again")
    assert plugins.problems() == [expected]
    monkeypatch.setenv("ASRKIT_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match="now comes from taker-dist"):
        plugins.check_strict()


def test_a_disabled_builtin_with_no_taker_is_no_problem():
    plugins = PluginSet()
    plugins.load_entry_points(disabled={"sample", "commands"})
    assert "sample" not in plugins.registry.names("importer")
    assert plugins.problems() == []


# -- 2. a plugin that hangs on import ----------------------------------------------------------


@pytest.mark.parametrize("args", [["--help"], ["train", "--help"], ["import", "--help"],
                                  ["import", "sample", "--help"], ["--version"], []])
def test_help_never_imports_third_party_plugins(sleepy, args):
    started = time.monotonic()
    result = run_asrkit(*args, pythonpath=sleepy, timeout=PATIENCE)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < PATIENCE
    assert lines(result.stderr) == []
    if args in (["--help"], ["import", "--help"], []):
        assert "Installed plugins, not loaded for this help (`asrkit plugins` lists the" \
            in result.stdout
        assert "sleepy (asrkit-sleepy 1.2.3)" in [line.strip() for line in lines(result.stdout)]


def test_a_plugin_hanging_on_import_ends_the_command_in_one_line(sleepy):
    started = time.monotonic()
    result = run_asrkit("plugins", pythonpath=sleepy, env={TIMEOUT_ENV: "1"},
                        timeout=PATIENCE)
    assert result.returncode == 1
    assert lines(result.stderr) == [STALLED]
    assert time.monotonic() - started < PATIENCE / 2

    disabled = run_asrkit("plugins", pythonpath=sleepy, timeout=PATIENCE,
                          env={TIMEOUT_ENV: "1", "ASRKIT_DISABLE_PLUGINS": "sleepy"})
    assert disabled.returncode == 0, disabled.stderr
    assert "sleepy" not in disabled.stdout


def test_the_watchdog_covers_third_party_code_only(monkeypatch):
    """asrkit's own plugins load unwatched; a third party's import and hooks under the watch."""
    reports: list[str] = []
    monkeypatch.setattr("asrkit.plugins.give_up", reports.append)
    plugins = PluginSet(timeout=0.05)
    with plugins._watch(Provider("own", "asrkit", "1"), "registering"):
        time.sleep(0.3)
    assert reports == []
    slow = Provider("slow", "slow-dist", "1")
    with plugins._watch(slow, "registering commands"):
        time.sleep(0.3)
    assert reports == [stalled_message(slow, "registering commands", 0.05)]


def test_watchdog_fires_only_when_the_block_overruns():
    fired: list[str] = []
    provider = Provider("p", "d", "1")
    with watchdog(provider, "importing", 0.5, fired.append):
        pass
    time.sleep(0.7)
    assert fired == []
    with watchdog(provider, "importing", 0.05, fired.append):
        time.sleep(0.4)
    assert fired == [stalled_message(provider, "importing", 0.05)]
    with watchdog(provider, "importing", 0, fired.append):  # 0: no limit
        time.sleep(0.1)
    assert len(fired) == 1


@pytest.mark.parametrize("value, seconds", [("", 60.0), ("2.5", 2.5), ("0", 0.0)])
def test_import_timeout_setting(monkeypatch, value, seconds):
    monkeypatch.setenv(TIMEOUT_ENV, value)
    assert import_timeout() == seconds


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "1e300", "inf"])
def test_import_timeout_refuses_what_is_not_seconds(monkeypatch, value):
    monkeypatch.setenv(TIMEOUT_ENV, value)
    with pytest.raises(PluginError) as error:
        import_timeout()
    message = str(error.value)
    assert "\n" not in message and f"{TIMEOUT_ENV}={value} is not a number of seconds" in message
