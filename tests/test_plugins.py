"""The plugin system: discovery through entry points, robust loading, the registry, listing."""

from __future__ import annotations

import json
import sys

import click
import pytest

from asrkit import hookimpl
from asrkit.core.errors import PluginError
from asrkit.registry import Provider, Registry
from asrkit.types import Decoder, FeatureExtractor, Importer, ModelSpec, Objective, Resource
from tests.conftest import run_asrkit

BUNDLED = {"sample", "ldc93s1", "librispeech", "ted", "commonvoice", "folder", "csv", "features"}

BROKEN_IMPORT = """
import asrkit_this_module_does_not_exist  # fails on import, as a broken plugin does
"""

INVALID_REGISTRATION = """
from asrkit import hookimpl

@hookimpl
def register_importers(register):
    register("not an importer")
"""

DUPLICATE_SAMPLE = """
from asrkit import hookimpl
from asrkit.types import Importer, Resource

class Sample(Importer):
    name = "sample"
    description = "A second importer that claims the name 'sample'."
    def resources(self, options):
        return []
    def prepare(self, metadata, members, options):
        return iter(())

@hookimpl
def register_importers(register):
    register(Sample())
"""


class ToyImporter(Importer):
    name = "toy"
    description = "A toy corpus for plugin tests."

    def resources(self, options):
        return [Resource("toy.tar.gz", "http://example.invalid/toy.tar.gz")]

    def prepare(self, metadata, members, options):
        return iter(())


class ToyModel(ModelSpec):
    name = "toy-model"
    description = "A model spec for plugin tests."
    Config = dict

    def build(self, config, num_features, num_classes):
        return None


class ToyDecoder(Decoder):
    name = "toy-decoder"
    description = "Decodes everything as 'a'."

    def decode(self, logits, lengths, alphabet):
        return ["a" for _ in lengths]


class ToyFeatures(FeatureExtractor):
    name = "toy-features"
    description = "Constant features."
    Config = dict

    def num_features(self, config):
        return 3

    def extract(self, audio, config):
        return [[0.0] * 3]


class ToyObjective(Objective):
    name = "toy-objective"
    description = "An objective for plugin tests."

    def encoder_width(self, config, labels):
        return 7

    def losses(self, config, head, encoder_out, out_lengths, label_ids, label_lengths,
               training=False):
        return None, None

    def frames_needed(self, config, label_ids):
        return len(label_ids)


class ToyPlugin:
    """One object implementing every hook, as a plugin module would."""

    @hookimpl
    def register_importers(self, register):
        register(ToyImporter())

    @hookimpl
    def register_models(self, register):
        register(ToyModel())

    @hookimpl
    def register_decoders(self, register):
        register(ToyDecoder())

    @hookimpl
    def register_features(self, register):
        register(ToyFeatures())

    @hookimpl
    def register_objectives(self, register):
        register(ToyObjective())

    @hookimpl
    def register_commands(self, cli):
        @click.command("hello")
        def hello():
            """Say hello from a plugin."""
            click.echo("hello from a plugin")

        cli.add_command(hello)


# -- every hook, tested through the command line or the registry -------------------------------


def test_hook_register_importers(make_plugins, asrkit_cli):
    plugins = make_plugins(ToyPlugin(), entry_points=True)
    result = asrkit_cli(["import", "--help"], plugins)
    assert result.exit_code == 0
    assert "toy" in result.stdout and "sample" in result.stdout
    result = asrkit_cli(["import", "toy", "--help"], plugins)
    assert result.exit_code == 0 and "--mirror" in result.stdout


def test_hook_register_models(make_plugins):
    plugins = make_plugins(ToyPlugin())
    assert isinstance(plugins.registry.get("model", "toy-model"), ToyModel)
    assert plugins.plugins["ToyPlugin"].registered["model"] == ["toy-model"]


def test_hook_register_decoders(make_plugins):
    plugins = make_plugins(ToyPlugin())
    decoder = plugins.registry.get("decoder", "toy-decoder")
    assert decoder.decode(None, [1, 2], None) == ["a", "a"]


def test_hook_register_features(make_plugins):
    plugins = make_plugins(ToyPlugin())
    assert plugins.registry.get("feature", "toy-features").num_features(None) == 3


def test_hook_register_objectives(make_plugins, asrkit_cli):
    plugins = make_plugins(ToyPlugin(), entry_points=True)
    assert plugins.registry.get("objective", "toy-objective").encoder_width(None, None) == 7
    assert plugins.registry.names("objective") == ["attention", "ctc", "toy-objective",
                                                   "transducer"]
    listing = asrkit_cli(["plugins"], plugins)
    assert "objective toy-objective" in listing.stdout and "objective ctc" in listing.stdout


def test_hook_register_commands(make_plugins, asrkit_cli):
    plugins = make_plugins(ToyPlugin())
    result = asrkit_cli(["hello"], plugins)
    assert result.exit_code == 0 and result.stdout.strip() == "hello from a plugin"
    assert plugins.plugins["ToyPlugin"].registered["command"] == ["hello"]


def test_plugin_cannot_replace_a_command(make_plugins, asrkit_cli):
    class Hijack:
        @hookimpl
        def register_commands(self, cli):
            cli.add_command(click.Command("plugins", callback=lambda: click.echo("hijacked")))

    plugins = make_plugins(Hijack())
    result = asrkit_cli(["plugins"], plugins)
    assert "hijacked" not in result.stdout
    assert "command 'plugins' already exists; not replaced" in result.stdout


# -- the registry ------------------------------------------------------------------------------


def test_registry_rejects_wrong_type_and_bad_names():
    registry = Registry()
    with pytest.raises(PluginError, match=r"must be an instance of asrkit\.types\.Importer"):
        registry.validate("importer", object())
    bad = ToyImporter()
    bad.name = "Not OK"
    with pytest.raises(PluginError, match="invalid name"):
        registry.validate("importer", bad)


def test_duplicate_name_names_both_providers():
    registry = Registry()
    registry.add("importer", ToyImporter(), Provider("toy", "asrkit-toy", "1"))
    registry.add("importer", ToyImporter(), Provider("toy2", "other-dist", "2"))
    with pytest.raises(PluginError) as error:
        registry.get("importer", "toy")
    assert "asrkit-toy" in str(error.value) and "other-dist" in str(error.value)
    assert registry.names("importer") == []


def test_unknown_name_lists_what_is_installed(make_plugins):
    plugins = make_plugins(ToyPlugin())
    with pytest.raises(PluginError, match=r"no model named 'brnn'.*installed: toy-model"):
        plugins.registry.get("model", "brnn")


def test_hook_that_raises_is_a_failure_not_a_crash(make_plugins, asrkit_cli):
    class Raising:
        @hookimpl
        def register_importers(self, register):
            raise RuntimeError("corpus index unavailable")

    plugins = make_plugins(Raising(), ToyPlugin())
    assert "corpus index unavailable" in plugins.failures[0].error
    result = asrkit_cli(["plugins"], plugins)
    assert result.exit_code == 0
    assert "RuntimeError: corpus index unavailable" in result.stdout
    assert "toy" in result.stdout


# -- installed distributions, through the real command line ------------------------------------


def test_plugins_json_lists_bundled_plugins():
    result = run_asrkit("plugins", "--json")
    assert result.returncode == 0, result.stderr
    listing = json.loads(result.stdout)
    by_name = {p["name"]: p for p in listing["plugins"]}
    assert set(by_name) >= BUNDLED
    for name in BUNDLED:
        assert by_name[name]["distribution"] == "asrkit"
    assert by_name["sample"]["registered"] == {"importer": ["sample"]}
    assert by_name["sample"]["hooks"] == ["register_importers"]
    assert listing["failures"] == []


def test_plugins_table_is_readable():
    result = run_asrkit("plugins")
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["PLUGIN", "DISTRIBUTION", "VERSION", "PROVIDES"]
    assert any(row.split()[:2] == ["ted", "asrkit"] for row in rows)


def test_version():
    from asrkit import __version__

    result = run_asrkit("--version")
    assert result.returncode == 0 and __version__ in result.stdout


def test_broken_plugin_is_reported_and_cli_keeps_working(installed):
    site = installed("asrkit-broken", "asrkit_broken", BROKEN_IMPORT,
                     {"broken": "asrkit_broken"})
    listing = run_asrkit("plugins", "--json", pythonpath=site)
    assert listing.returncode == 0, listing.stderr
    failures = json.loads(listing.stdout)["failures"]
    assert failures == [{
        "name": "broken", "distribution": "asrkit-broken", "version": "1.2.3",
        "error": "ModuleNotFoundError: No module named 'asrkit_this_module_does_not_exist'",
    }]
    table = run_asrkit("plugins", pythonpath=site)
    assert "asrkit-broken failed: ModuleNotFoundError" in table.stdout
    helped = run_asrkit("import", "--help", pythonpath=site)
    assert helped.returncode == 0 and "sample" in helped.stdout
    assert helped.stderr == ""  # a help page of asrkit's own does not import it
    loaded = run_asrkit("import", "nosuch", pythonpath=site)  # loads every plugin
    assert "warning: plugin 'broken' from asrkit-broken failed" in loaded.stderr


def test_strict_mode_fails_in_one_line(installed):
    site = installed("asrkit-broken", "asrkit_broken", BROKEN_IMPORT,
                     {"broken": "asrkit_broken"})
    result = run_asrkit("plugins", pythonpath=site, env={"ASRKIT_STRICT_PLUGINS": "1"})
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("asrkit: error: plugin 'broken' from asrkit-broken failed")
    assert "Traceback" not in result.stderr


def test_disable_plugins_by_name(installed):
    site = installed("asrkit-broken", "asrkit_broken", BROKEN_IMPORT,
                     {"broken": "asrkit_broken"})
    env = {"ASRKIT_STRICT_PLUGINS": "1", "ASRKIT_DISABLE_PLUGINS": "broken,ted"}
    result = run_asrkit("plugins", "--json", pythonpath=site, env=env)
    assert result.returncode == 0, result.stderr
    names = {p["name"] for p in json.loads(result.stdout)["plugins"]}
    assert "ted" not in names and "sample" in names


def test_invalid_registration_is_reported(installed):
    site = installed("asrkit-invalid", "asrkit_invalid", INVALID_REGISTRATION,
                     {"invalid": "asrkit_invalid"})
    result = run_asrkit("plugins", "--json", pythonpath=site)
    (failure,) = json.loads(result.stdout)["failures"]
    assert failure["distribution"] == "asrkit-invalid"
    assert "must be an instance of asrkit.types.Importer" in failure["error"]


def test_duplicate_importer_across_distributions(installed):
    site = installed("asrkit-dupe", "asrkit_dupe", DUPLICATE_SAMPLE, {"dupe": "asrkit_dupe"})
    result = run_asrkit("plugins", "--json", pythonpath=site)
    (conflict,) = json.loads(result.stdout)["conflicts"]
    assert "'sample' is registered by both" in conflict
    assert "asrkit (plugin 'sample')" in conflict and "asrkit-dupe (plugin 'dupe')" in conflict
    strict = run_asrkit("plugins", pythonpath=site, env={"ASRKIT_STRICT_PLUGINS": "1"})
    assert strict.returncode == 1 and "asrkit-dupe" in strict.stderr


@pytest.mark.parametrize("args", [["--help"], ["plugins"], ["import", "--help"]])
def test_cheap_commands_do_not_import_tensorflow(args):
    code = (
        "import sys\n"
        "from asrkit.cli import run\n"
        f"code = run({args!r})\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'tensorflow', 'keras', 'numpy'})\n"
        "print('HEAVY', heavy)\n"
    )
    import subprocess

    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=False)
    assert "HEAVY []" in result.stdout, result.stdout[-2000:]


def test_importtime_shows_no_tensorflow():
    import subprocess

    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "asrkit", "--help"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0
    imported = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()]
    assert "asrkit.cli" in imported
    assert not [m for m in imported if m.startswith("tensorflow")]
