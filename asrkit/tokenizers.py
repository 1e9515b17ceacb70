"""Tokenizers: which labels a run trains on, and the built-in ``chars``.

A run's ``tokenizer`` setting is ``chars`` (the default: the dataset's alphabet, one label per
character) or a file a registered tokenizer built (``asrkit tokenizer build``), found by the
end of its name (``Tokenizer.suffix``: ``.model`` for SentencePiece). A run keeps a copy of the
file (``RUN/tokenizer<suffix>``, described by ``RUN/tokenizer.json``), so that evaluating,
transcribing, exporting or resuming it never depends on the file the user named staying put.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asrkit.errors import AsrkitError
from asrkit.files import write_json
from asrkit.hookspecs import Register, hookimpl
from asrkit.labels import Labels
from asrkit.text import Alphabet, AlphabetError
from asrkit.types import Tokenizer

#: ``-o tokenizer=`` for characters: the dataset's own alphabet.
CHARS = "chars"
#: What a run folder records about its tokenizer file.
RECORD = "tokenizer.json"


class CharTokenizer(Tokenizer):
    """One label per character. ``build`` writes an alphabet file holding exactly the
    characters of the texts (space first, then in code-point order); ``-o tokenizer=chars``
    needs no file: it is the dataset's ``alphabet.txt``."""

    name = CHARS
    description = "One label per character: the dataset's alphabet (the default)."
    suffix = ".txt"

    def build(self, texts: Sequence[str], config: Any, path: Any) -> None:
        chars = sorted(set("".join(texts)) - {" "})
        Alphabet((" ", *chars)).save(path)

    def load(self, path: Any) -> Labels:
        try:
            return Alphabet.load(path)
        except (AlphabetError, OSError, UnicodeDecodeError) as error:
            raise AsrkitError(f"{path} is not an alphabet file: {error}") from None


@hookimpl
def register_tokenizers(register: Register) -> None:
    register(CharTokenizer())


def find_tokenizer(path: Path) -> Tokenizer:
    """The registered tokenizer whose files end like ``path`` (the longest suffix that fits)."""
    from asrkit import plugins

    registry = plugins.get_plugins().registry
    fitting = [plugins.get("tokenizer", name) for name in registry.names("tokenizer")]
    fitting = [t for t in fitting if path.name.endswith(t.suffix)]
    if not fitting:
        known = ", ".join(f"{plugins.get('tokenizer', n).suffix} ({n})"
                          for n in registry.names("tokenizer"))
        raise AsrkitError(f"no installed tokenizer reads {path.name}: their files end in {known}")
    longest = max(len(t.suffix) for t in fitting)
    fitting = [t for t in fitting if len(t.suffix) == longest]
    if len(fitting) > 1:
        names = ", ".join(t.name for t in fitting)
        raise AsrkitError(f"tokenizers {names} all read files ending in {fitting[0].suffix}: "
                          "uninstall one of them")
    return fitting[0]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class TokenizerFile:
    """A tokenizer's file as a run uses it: which tokenizer reads it and its labels."""

    tokenizer: str
    path: Path
    labels: Labels

    @classmethod
    def open(cls, value: str) -> TokenizerFile:
        """The file ``-o tokenizer=VALUE`` names, loaded; a one-line error if it is missing or
        not a tokenizer's file."""
        path = Path(value).expanduser()
        if not path.is_file():
            raise AsrkitError(f"-o tokenizer={value}: no such file; build one with `asrkit "
                              "tokenizer build --dataset D --output FILE`, or use chars")
        tokenizer = find_tokenizer(path)
        return cls(tokenizer.name, path, tokenizer.load(path))

    def save_in(self, folder: Path) -> None:
        """Copy the file into the run ``folder`` and record where it came from."""
        suffix = _suffix(self.tokenizer)
        target = folder / f"tokenizer{suffix}"
        if self.path.resolve() != target.resolve():
            shutil.copyfile(self.path, target)
        write_json(folder / RECORD, {"tokenizer": self.tokenizer, "file": target.name,
                                     "source": str(self.path), "sha256": sha256(target),
                                     "symbols": self.labels.size})


def read_record(folder: Path) -> tuple[str, Path]:
    """The tokenizer a run folder's labels come from, and the copy of its file the run keeps."""
    import json

    record = folder / RECORD
    try:
        saved = json.loads(record.read_text(encoding="utf-8"))
        return str(saved["tokenizer"]), folder / str(saved["file"])
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise AsrkitError(f"{record} is missing or damaged ({type(error).__name__}); the run's "
                          "labels are unknown without it: train again in a new --run-dir") from None


def _suffix(name: str) -> str:
    from asrkit import plugins

    return str(plugins.get("tokenizer", name).suffix)
