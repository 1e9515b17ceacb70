"""Shared test helpers. The asrkit.testing fixtures (asrkit_home, asrkit_cli, make_plugins,
corpus_server) come from asrkit's own pytest plugin."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures"
SPEECH = FIXTURES / "speech"


#: Put on a started process's PYTHONPATH, it turns ASRKIT_TEST_* variables into faults
#: (tests/faults/sitecustomize.py).
FAULTS = Path(__file__).resolve().parent / "faults"


def as_from_a_terminal() -> None:
    """``preexec_fn`` for a test that Ctrl-Cs its child: SIGINT handled by default and not
    blocked in the child, as in a shell's foreground job. A test runner's worker may have
    either changed, and a child inherits both (Python then installs no Ctrl-C handler, and the
    signal never reaches asrkit)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def run_asrkit(*args: str, pythonpath: Path | None = None, env: dict | None = None,
               timeout: float = 120, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``python -m asrkit ARGS`` in a fresh process (as a user runs it), in ``cwd``."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ASRKIT_")}
    environment.update(env or {})
    if pythonpath is not None:
        environment["PYTHONPATH"] = os.pathsep.join(
            [str(pythonpath), environment.get("PYTHONPATH", "")]
        ).rstrip(os.pathsep)
    return subprocess.run([sys.executable, "-m", "asrkit", *args], capture_output=True,
                          text=True, env=environment, timeout=timeout, check=False, cwd=cwd)


def pip_install(source: Path, target: Path) -> None:
    """Install the distribution in ``source`` into ``target`` with pip, as a user would."""
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--target", str(target), str(source)],
        check=True, capture_output=True, text=True,
    )


def make_distribution(root: Path, name: str, module: str, source: str,
                      entry_points: dict[str, str]) -> Path:
    """Write a minimal real distribution (pyproject + one module) and return its folder."""
    folder = root / name
    (folder / module).mkdir(parents=True)
    (folder / module / "__init__.py").write_text(textwrap.dedent(source))
    points = "\n".join(f'{k} = "{v}"' for k, v in entry_points.items())
    (folder / "pyproject.toml").write_text(textwrap.dedent(f"""\
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "{name}"
        version = "1.2.3"

        [project.entry-points.asrkit]
        """) + points + "\n")
    return folder


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory):
    """``installed(name, module, source, entry_points)`` pip-installs a throwaway distribution
    into its own folder (cached for the session) and returns that folder for PYTHONPATH."""
    cache: dict[str, Path] = {}

    def install(name: str, module: str, source: str, entry_points: dict[str, str]) -> Path:
        if name not in cache:
            base = tmp_path_factory.mktemp(name)
            folder = make_distribution(base / "src", name, module, source, entry_points)
            pip_install(folder, base / "site")
            cache[name] = base / "site"
        return cache[name]

    return install


#: A narrow brnn that trains in seconds on the CPU.
TINY = ["-o", "model.n_hidden=32", "-o", "model.n_cell=32", "-o", "model.context=2"]


def add_commands(plugins):
    """Add asrkit's commands (:mod:`asrkit.commands`) to a plugin set, unless its entry point in
    asrkit's pyproject already loaded them."""
    from asrkit import commands
    from asrkit.registry import Provider

    if not any(info.module == commands.__name__ for info in plugins.plugins.values()):
        plugins.add_module(commands, Provider("commands", "asrkit", "0"))
    return plugins


def hook_section(hook: str) -> tuple[str, str]:
    """The section of the plugin-hook pages (``docs/hooks-*.md``) about ``hook``: its page's
    name, for messages, and its text up to the next section."""
    import re

    for page in sorted((ROOT / "docs").glob("hooks-*.md")):
        found = re.search(rf"^## `{hook}`\n(.*?)(?=^## |\Z)", page.read_text(), re.S | re.M)
        if found:
            return f"docs/{page.name}", found.group(1)
    raise AssertionError(f"no docs/hooks-*.md page has a section for {hook}")


def run_doc_snippet(page: str, marker: str, replacements: dict[str, str], blocked: tuple[str, ...],
                    cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run the Python snippet of ``docs/PAGE`` that follows ``<!-- MARKER -->``, with its example
    paths replaced, in a fresh process where importing any of the ``blocked`` top-level modules
    fails: what a user runs with only what the page says to install."""
    import re

    text = (ROOT / "docs" / page).read_text()
    code = re.search(rf"<!-- {re.escape(marker)} -->\n```python\n(.*?)```", text, re.S).group(1)
    for old, new in replacements.items():
        assert old in code, f"docs/{page}'s snippet no longer mentions {old}"
        code = code.replace(old, new)
    program = "\n".join([
        "import sys", "class Block:",
        "    def find_spec(self, name, path=None, target=None):",
        f"        if name.split('.')[0] in {blocked!r}:",
        "            raise ImportError(name + ' is blocked in this test')",
        "sys.meta_path.insert(0, Block())", code])
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASRKIT_")}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=timeout, check=False)


def ok(result):
    """``result`` of a ``cli`` call, asserted to have succeeded (its stderr shown if not)."""
    assert result.exit_code == 0, result.stderr[-3000:]
    return result


@pytest.fixture
def datasets_cli(datasets, monkeypatch, make_plugins, asrkit_cli):
    """``cli(args)`` as :func:`cli`, with ``ASRKIT_HOME`` holding the :func:`datasets`."""
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    plugins = add_commands(make_plugins(entry_points=True))
    return lambda args: asrkit_cli(args, plugins)


@pytest.fixture
def cli(make_plugins, asrkit_cli):
    """``cli(args)``: the asrkit CLI with the installed plugins and asrkit's commands. A test
    module that needs more (a dataset, its own plugins) defines its own ``cli``."""
    plugins = add_commands(make_plugins(entry_points=True))
    return lambda args: asrkit_cli(args, plugins)


@pytest.fixture(scope="session")
def datasets(tmp_path_factory):
    """ASRKIT_HOME with the `sample` and `ldc93s1` datasets imported once."""
    home = tmp_path_factory.mktemp("home")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASRKIT_")}
    env["ASRKIT_HOME"] = str(home)
    ldc = SPEECH / "ldc93s1"
    for args in (["sample"], ["ldc93s1", "--archive", ldc / "LDC93S1.wav",
                              "--archive", ldc / "LDC93S1.txt"]):
        subprocess.run([sys.executable, "-m", "asrkit", "import", *map(str, args),
                        "--no-progress"], env=env, check=True, capture_output=True)
    return home
