"""Plugins that misbehave cannot take the command line over: they cannot replace asrkit's own
commands or components, cannot exit the process while loading, and their run-time errors are
one line naming them. Each fault is produced by a real distribution installed with pip."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import click
import pytest

from asrkit import hookimpl
from asrkit.types import Importer
from tests.conftest import ROOT, as_from_a_terminal, make_distribution, pip_install, run_asrkit
from tests.toy_importer import registered_twice

# A distribution whose name sorts before "asrkit", registering asrkit's own names.
HIJACK = """
import click
from asrkit import hookimpl
from asrkit.types import Importer

@click.command("train")
def train():
    '''HIJACKED train.'''
    click.echo("hijacked")

class Sample(Importer):
    name = "sample"
    description = "HIJACKED sample."
    def resources(self, options):
        return []
    def prepare(self, metadata, members, options):
        return iter(())

@hookimpl
def register_commands(cli):
    cli.add_command(train)

@hookimpl
def register_importers(register):
    register(Sample())
"""

EXITS_ON_IMPORT = """
import sys
sys.exit(3)
"""

# A plugin whose code fails at run time, in an importer and in a command. Its entry point is a
# submodule; the importer's corpus listing comes from the package beside it.
BOOM_PACKAGE = """
def listing():
    '''The corpus's files, read from its index (which is broken).'''
    yield from ()
    raise ValueError("corpus index is malformed")
"""

BOOM_PLUGIN = """
import time

import click
from asrkit import hookimpl
from asrkit.types import Importer

from asrkit_boom import listing


class Boom(Importer):
    name = "boom"
    description = "An importer whose corpus index cannot be read."
    def resources(self, options):
        return listing()
    def prepare(self, metadata, members, options):
        return iter(())


@click.command("boom")
def boom():
    '''Fail in the plugin's own code.'''
    {}["missing"]


@click.command("boom-wait")
def boom_wait():
    '''Wait to be interrupted (longer than the test waits, so a lost Ctrl-C cannot pass).'''
    click.echo("waiting", err=True)
    time.sleep(600)


@hookimpl
def register_importers(register):
    register(Boom())


@hookimpl
def register_commands(cli):
    cli.add_command(boom)
    cli.add_command(boom_wait)
"""


@pytest.fixture(scope="module")
def hijack(installed):
    return installed("aardvark-hijack", "aardvark_hijack", HIJACK, {"hijack": "aardvark_hijack"})


@pytest.fixture(scope="module")
def boom(tmp_path_factory):
    base = tmp_path_factory.mktemp("asrkit-boom")
    folder = make_distribution(base / "src", "asrkit-boom", "asrkit_boom", BOOM_PACKAGE,
                               {"boom": "asrkit_boom.plugin"})
    (folder / "asrkit_boom" / "plugin.py").write_text(textwrap.dedent(BOOM_PLUGIN))
    pip_install(folder, base / "site")
    return base / "site"


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# -- 1. asrkit's own commands cannot be replaced, whatever the plugin's name sorts as --------------


def test_plugin_sorting_first_cannot_replace_a_builtin_command(hijack):
    result = run_asrkit("train", "--help", pythonpath=hijack)
    assert result.returncode == 0, result.stderr
    assert "HIJACKED" not in result.stdout and "--model" in result.stdout
    assert result.stderr == ""  # the help page of asrkit's own command loads no other plugin
    # a command that is not asrkit's own loads every plugin, and warns of each that failed
    loaded = run_asrkit("import", "nosuch", pythonpath=hijack)
    assert "plugin 'hijack' from aardvark-hijack failed: register_commands: command 'train'" \
        in loaded.stderr
    assert "plugin 'commands'" not in loaded.stderr

    listing = json.loads(run_asrkit("plugins", "--json", pythonpath=hijack).stdout)
    (failure,) = listing["failures"]
    assert failure["name"] == "hijack" and "'train' already exists" in failure["error"]
    commands = {p["name"]: p["registered"].get("command") for p in listing["plugins"]}
    assert commands["commands"] == ["align", "average", "data-service", "describe", "evaluate",
                                    "export", "segment", "tokenizer", "train", "transcribe",
                                    "unlock"]
    assert commands["hijack"] is None


def test_plugin_cannot_remove_a_command(make_plugins, asrkit_cli):
    class Remover:
        @hookimpl
        def register_commands(self, cli):
            cli.commands.pop("import", None)

    plugins = make_plugins(Remover(), entry_points=True)
    result = asrkit_cli(["import", "--help"], plugins)
    assert result.exit_code == 0 and "sample" in result.stdout
    assert "plugin 'Remover' from test failed" not in result.stderr  # it added nothing


# -- 2. exiting while loading is a load failure ------------------------------------------------


def test_plugin_exiting_on_import_is_a_load_failure(installed):
    site = installed("asrkit-exits", "asrkit_exits", EXITS_ON_IMPORT, {"exits": "asrkit_exits"})
    helped = run_asrkit("--help", pythonpath=site)
    assert helped.returncode == 0, helped.stderr
    assert "Usage:" in helped.stdout
    assert helped.stderr == ""  # a help page does not import it
    loaded = run_asrkit("import", "nosuch", pythonpath=site)  # loads every plugin
    assert lines(loaded.stderr)[0] == \
        "asrkit: warning: plugin 'exits' from asrkit-exits failed: SystemExit: 3"
    listing = run_asrkit("plugins", "--json", pythonpath=site)
    assert listing.returncode == 0
    (failure,) = json.loads(listing.stdout)["failures"]
    assert failure["error"] == "SystemExit: 3"


class Fatal(BaseException):
    """Not an Exception: what a plugin may raise that a plain ``except Exception`` misses."""


@pytest.mark.parametrize("hook", ["register_importers", "register_commands"])
@pytest.mark.parametrize("error", [SystemExit(4), Fatal("no licence")])
def test_hook_raising_base_exception_is_a_load_failure(make_plugins, asrkit_cli, hook, error):
    def raising(self, **kwargs):
        raise error

    plugin = type("Exiting", (), {hook: hookimpl(raising)})()
    plugins = make_plugins(plugin)
    result = asrkit_cli(["import", "--help"], plugins)
    assert result.exit_code == 0 and "sample" not in result.stdout
    (failure,) = plugins.failures
    assert failure.error == f"{hook}: {type(error).__name__}: {error}"


def test_keyboard_interrupt_while_loading_is_not_swallowed(make_plugins):
    class Interrupted:
        @hookimpl
        def register_importers(self, register):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        make_plugins(Interrupted())


# -- 3. a plugin never withholds asrkit's own components ---------------------------------------


def test_duplicate_of_a_builtin_keeps_the_builtin(hijack):
    helped = run_asrkit("import", "sample", "--help", pythonpath=hijack)
    assert helped.returncode == 0, helped.stderr
    assert "HIJACKED" not in helped.stdout and "tiny built-in corpus" in helped.stdout
    listing = json.loads(run_asrkit("plugins", "--json", pythonpath=hijack).stdout)
    (conflict,) = listing["conflicts"]
    assert "importer 'sample' is registered by both asrkit (plugin 'sample') and " \
           "aardvark-hijack (plugin 'hijack')" in conflict
    assert "asrkit's own is used" in conflict
    table = run_asrkit("plugins", pythonpath=hijack).stdout
    assert "aardvark-hijack (plugin 'hijack'); asrkit's own is used" in table
    (row,) = [line for line in table.splitlines() if line.startswith("hijack ")]
    assert row.endswith("importer sample (ignored)")


def test_duplicate_of_a_builtin_in_process(make_plugins):
    class Sample(Importer):
        name = "sample"
        description = "Another sample."

        def resources(self, options):
            return []

        def prepare(self, metadata, members, options):
            return iter(())

    class Dupe:
        @hookimpl
        def register_importers(self, register):
            register(Sample())

    plugins = make_plugins(Dupe(), entry_points=True)
    chosen = plugins.registry.get("importer", "sample")
    assert not isinstance(chosen, Sample)
    assert plugins.registry.entries["importer"]["sample"].provider.distribution == "asrkit"
    assert any("asrkit's own is used" in p for p in plugins.problems())


def test_two_third_party_duplicates_are_withheld(make_plugins):
    plugins = registered_twice()
    assert "toy" not in plugins.registry.names("importer")
    (problem,) = plugins.problems()
    assert "dist-one (plugin 'one') and dist-two (plugin 'two')" in problem
    from asrkit.commands.plugins import _plugin_table

    assert "importer toy (withheld)" in _plugin_table(plugins)


# -- 4. a plugin's run-time error is one line naming the plugin ---------------------------------


PLUGIN_LINE = "asrkit: error: plugin 'boom' (distribution asrkit-boom 1.2.3) failed: "


def test_importer_error_names_the_plugin(boom, tmp_path):
    """Raised in a module of the plugin's distribution that asrkit never loaded by name."""
    result = run_asrkit("import", "boom", "--no-progress", pythonpath=boom,
                        env={"ASRKIT_HOME": str(tmp_path)})
    assert result.returncode == 1
    assert lines(result.stderr) == [PLUGIN_LINE + "ValueError: corpus index is malformed"]


def test_command_error_names_the_plugin(boom):
    result = run_asrkit("boom", pythonpath=boom)
    assert result.returncode == 1
    assert lines(result.stderr) == [PLUGIN_LINE + "KeyError: 'missing'"]


@pytest.mark.parametrize("how", [["-v"], ["--verbose"], "ASRKIT_DEBUG"])
def test_verbose_shows_the_traceback(boom, how):
    env = {"ASRKIT_DEBUG": "1"} if how == "ASRKIT_DEBUG" else {}
    args = [] if how == "ASRKIT_DEBUG" else how
    result = run_asrkit(*args, "boom", pythonpath=boom, env=env)
    assert result.returncode == 1
    assert "Traceback" in result.stderr and 'asrkit_boom/plugin.py", line' in result.stderr
    assert lines(result.stderr)[-1] == PLUGIN_LINE + "KeyError: 'missing'"


def test_ctrl_c_is_one_line(boom):
    """A real SIGINT while a plugin's command runs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASRKIT_")}
    env["PYTHONPATH"] = str(boom)
    env["PYTHONFAULTHANDLER"] = "1"  # SIGABRT prints every thread's stack, should it hang
    process = subprocess.Popen([sys.executable, "-m", "asrkit", "boom-wait"], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=as_from_a_terminal)
    assert process.stderr is not None
    before = []  # whatever a loaded machine's libraries say first
    while (line := process.stderr.readline().strip()) != "waiting":
        assert line or process.poll() is None, before
        before.append(line)
    time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    try:  # a busy machine may take a while to run the handler; a lost Ctrl-C waits 600 s
        _, err = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        masks = [line for line in Path(f"/proc/{process.pid}/status").read_text().splitlines()
                 if line.startswith(("SigBlk", "SigIgn", "SigCgt"))]
        process.send_signal(signal.SIGABRT)
        _, err = process.communicate(timeout=60)
        pytest.fail(f"still running 120 s after Ctrl-C ({masks}); where it was:\n" + err[-6000:])
    assert process.returncode == 130, before + lines(err)
    assert lines(err) == ["asrkit: interrupted"]


def test_importer_failing_to_build_its_options_is_a_load_failure(make_plugins, asrkit_cli):
    class Optionless(Importer):
        name = "optionless"
        description = "Cannot say its options."

        def options(self):
            raise RuntimeError("options unavailable")

        def resources(self, options):
            return []

        def prepare(self, metadata, members, options):
            return iter(())

    class Plugin:
        @hookimpl
        def register_importers(self, register):
            register(Optionless())

    plugins = make_plugins(Plugin())
    result = asrkit_cli(["import", "--help"], plugins)
    assert result.exit_code == 0
    assert "optionless" not in result.stdout
    assert "importer 'optionless': RuntimeError: options unavailable" in result.stderr


def test_commands_are_staged_apart_from_the_real_group(make_plugins):
    """A plugin's commands staged on a throwaway group never touch the real one."""
    seen = []

    class Looker:
        @hookimpl
        def register_commands(self, cli):
            seen.append(sorted(cli.commands))
            cli.add_command(click.Command("look", callback=lambda: None))

    plugins = make_plugins(Looker())
    from asrkit.cli import build_cli

    cli = build_cli(plugins)
    assert seen == [[]] and "look" in cli.commands
