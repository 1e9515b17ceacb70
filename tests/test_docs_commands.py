"""Every ``asrkit ...`` command line in the docs and the README names a command that exists,
with options that exist and choices it accepts: a renamed command, flag or choice fails here,
not for the user who copies the page.

The command lines are those of the pages' shell blocks (a line starting with ``asrkit``, after
an optional ``$``; ``\\`` continues it; a comment, a pipe or a redirection ends it) and of their
text, written as code. They are checked against the command-line interface asrkit builds (its
commands, their options, the options' choices), not run: the paths in them exist on the
writer's machine only."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from asrkit.cli import build_cli
from asrkit.plugins import get_plugins

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         *sorted((ROOT / "plugins").glob("*/README.md")),
         *sorted((ROOT / "recipes").rglob("*.md")), *sorted((ROOT / "recipes").rglob("*.sh"))]
#: The languages of shell code blocks (none given: shell too).
SHELL = ("", "sh", "bash", "console", "shell")
#: Where a command ends on its line: a comment, a pipe, a redirection, another command.
END = re.compile(r"\s(?:#|\||>|2>|&&|;)")


def command_lines(pages: list[Path] = PAGES) -> Iterator[tuple[str, int, str]]:
    """``(page, line number, command)`` for every asrkit command line of the pages: in their
    shell blocks, and in their text as code (`` `asrkit evaluate RUN --decoder beam` ``). A
    shell script (``.sh``) is one shell block."""
    for page in pages:
        text = page.read_text()
        shift = 0  # lines added before the page's own
        if page.suffix == ".sh":
            text, shift = f"```sh\n{text}\n```", 1
        for span in re.finditer(r"`(asrkit [^`]+)`", text):
            yield page.relative_to(ROOT).as_posix(), \
                text.count("\n", 0, span.start()) + 1 - shift, span.group(1)
        for first, lines in shell_blocks(text):
            index = 0
            while index < len(lines):
                line, number = lines[index].strip(), first + index - shift
                while line.endswith("\\") and index + 1 < len(lines):
                    index += 1
                    line = line[:-1] + " " + lines[index].strip()
                index += 1
                line = line.removeprefix("$ ")
                if line.startswith("asrkit "):
                    end = END.search(line)
                    yield (page.relative_to(ROOT).as_posix(), number,
                           line[:end.start()] if end else line)


def shell_blocks(text: str) -> Iterator[tuple[int, list[str]]]:
    """The shell code blocks of a page: the line number of each one's first line, and its
    lines."""
    block: list[str] | None = None
    language, start = "", 0
    for number, line in enumerate(text.split("\n"), 1):
        if block is None and line.startswith("```"):
            block, language, start = [], line[3:].split(" ")[0].strip(), number + 1
        elif block is not None and line.strip() == "```":
            if language in SHELL:
                yield start, block
            block = None
        elif block is not None:
            block.append(line)


def problems(cli: click.Group, command: str) -> list[str]:
    """What in ``command`` the interface does not know: a command, an option, a choice."""
    try:
        words = shlex.split(command)[1:]
    except ValueError as error:
        return [f"cannot be split as a shell line ({error})"]
    found: list[str] = []
    group: click.Command = cli
    while isinstance(group, click.Group):
        words = _options(group, words, found)
        if not words or words[0].startswith("-"):
            return found
        name, words = words[0], words[1:]
        if _placeholder(name):  # IMPORTER, [ARGS]...
            return found
        sub = group.commands.get(name)
        if sub is None:
            return [*found, f"no command {name!r} (commands: {', '.join(sorted(group.commands))})"]
        group = sub
    _options(group, words, found)
    return found


def _options(command: click.Command, words: list[str], found: list[str]) -> list[str]:
    """Check ``words``' options against ``command``'s (what is wrong goes to ``found``), up to
    its first argument when it is a group; returns what is left."""
    params = {opt: param for param in command.params if isinstance(param, click.Option)
              for opt in [*param.opts, *param.secondary_opts]}
    params["--help"] = click.Option(["--help"], is_flag=True)
    index = 0
    while index < len(words):
        word = words[index]
        if word == "--":
            break
        if word.startswith("["):  # [--verbose]: a synopsis' optional part
            index += 1
            continue
        if not word.startswith("-") or word == "-" or re.fullmatch(r"-\d.*", word):
            if isinstance(command, click.Group):
                return words[index:]
            index += 1
            continue
        name, equals, value = word.partition("=")
        option = params.get(name)
        if option is None and not name.startswith("--") and len(name) > 2:
            option, equals, value = params.get(name[:2]), "=", name[2:]  # -ofoo
        if option is None:
            found.append(f"{command.name} has no option {name}")
            index += 1
            continue
        if not (option.is_flag or option.count) and not equals:
            index += 1
            value = words[index] if index < len(words) else ""
        choices = option.type.choices if isinstance(option.type, click.Choice) else None
        if choices and value and not _placeholder(value) and value not in choices:
            found.append(f"{name} {value}: not one of {', '.join(choices)}")
        index += 1
    return []


def _placeholder(value: str) -> bool:
    return value.isupper() or value.startswith(("<", "$", "{", "[", "..."))


#: Commands that a page's own plugin adds (the tutorial's importer and command, which other
#: tests install and run): not in asrkit's interface.
PAGE_COMMANDS = {"docs/writing-a-plugin.md": ("import foo",),
                 "docs/plugin-command.md": ("datasets",)}

LINES = [(page, number, command) for page, number, command in command_lines()
         if not any(f" {name}" in command for name in PAGE_COMMANDS.get(page, ()))]


def test_the_pages_hold_command_lines():
    pages = {page for page, _, _ in LINES}
    assert len(LINES) > 50 and {"README.md", "docs/cli.md", "docs/transducers.md",
                                "recipes/an4/README.md", "recipes/an4/ds2.sh",
                                "recipes/common.sh"} <= pages


@pytest.fixture(scope="module")
def cli() -> click.Group:
    return build_cli(get_plugins())


@pytest.mark.parametrize(("page", "number", "command"), LINES,
                         ids=[f"{page}:{number}" for page, number, _ in LINES])
def test_every_command_line_in_the_docs_is_one_asrkit_accepts(cli, page, number, command):
    assert not problems(cli, command), f"{page}:{number}: {command}: {problems(cli, command)}"


def test_the_check_sees_a_renamed_flag_a_command_and_a_choice(cli):
    assert problems(cli, "asrkit train --model brnn --epochs 3") == []
    assert problems(cli, "asrkit train --modell brnn") == ["train has no option --modell"]
    assert problems(cli, "asrkit trian --model brnn")[0].startswith("no command 'trian'")
    assert problems(cli, "asrkit export runs/x --format onnx") == []
    assert problems(cli, "asrkit export runs/x --format zip") == [
        "--format zip: not one of savedmodel, tflite, onnx, sherpa-onnx"]
    assert problems(cli, "asrkit import librispeech --subset SUBSET") == []
