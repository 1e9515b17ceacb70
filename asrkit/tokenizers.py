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

from asrkit import plugins
from asrkit.core.errors import AsrkitError
from asrkit.core.files import copy_file, download_file, write_json
from asrkit.core.labels import Labels
from asrkit.core.settings import apply, to_dict
from asrkit.core.storage import Location, StoragePath
from asrkit.core.text import Alphabet, AlphabetError
from asrkit.dataset.folders import resolve_dataset
from asrkit.dataset.manifest import read_csv
from asrkit.hookspecs import Register, hookimpl
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

    def build(self, texts: Sequence[str], config: Any, path: Path) -> None:
        chars = sorted(set("".join(texts)) - {" "})
        Alphabet((" ", *chars)).save(path)

    def load(self, path: Path) -> Labels:
        try:
            return Alphabet.load(path)
        except (AlphabetError, OSError, UnicodeDecodeError) as error:
            raise AsrkitError(f"{path} is not an alphabet file: {error}") from None


@hookimpl
def register_tokenizers(register: Register) -> None:
    register(CharTokenizer())


def find_tokenizer(path: Path) -> Tokenizer:
    """The registered tokenizer whose files end like ``path`` (the longest suffix that fits)."""
    installed = [r.obj for r in plugins.get_plugins().registry.registrations("tokenizer")]
    fitting = [t for t in installed if path.name.endswith(t.suffix)]
    if not fitting:
        known = ", ".join(f"{t.suffix} ({t.name})" for t in installed)
        raise AsrkitError(f"no installed tokenizer reads {path.name}: their files end in {known}")
    longest = max(len(t.suffix) for t in fitting)
    fitting = [t for t in fitting if len(t.suffix) == longest]
    if len(fitting) > 1:
        names = ", ".join(t.name for t in fitting)
        raise AsrkitError(f"tokenizers {names} all read files ending in {fitting[0].suffix}: "
                          "uninstall one of them")
    return fitting[0]


def sha256(path: Location) -> str:
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

    def save_in(self, folder: Location) -> None:
        """Copy the file into the run ``folder`` and record where it came from."""
        suffix = _suffix(self.tokenizer)
        target = folder / f"tokenizer{suffix}"
        if isinstance(target, StoragePath):
            copy_file(self.path, target)
        elif self.path.resolve() != target.resolve():
            shutil.copyfile(self.path, target)
        write_json(folder / RECORD, {"tokenizer": self.tokenizer, "file": target.name,
                                     "source": str(self.path), "sha256": sha256(target),
                                     "symbols": self.labels.size})


def read_record(folder: Location) -> tuple[str, Path]:
    """The tokenizer a run folder's labels come from, and the copy of its file the run keeps
    (for a run at a URL, a local copy of that: tokenizers read local files)."""
    import json

    record = folder / RECORD
    try:
        saved = json.loads(record.read_text(encoding="utf-8"))
        kept = folder / str(saved["file"])
        return str(saved["tokenizer"]), kept if isinstance(kept, Path) else download_file(kept)
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise AsrkitError(f"{record} is missing or damaged ({type(error).__name__}); the run's "
                          "labels are unknown without it: train again in a new --run-dir") from None


def _suffix(name: str) -> str:
    return str(plugins.get("tokenizer", name).suffix)


@dataclass(frozen=True)
class BuildReport:
    """What ``asrkit tokenizer build`` made: for the user, and as JSON for programs."""

    tokenizer: str
    output: Path
    dataset: str
    split: str
    transcripts: int
    symbols: int
    #: Labels per transcript, on average: characters (what ``chars`` trains on) and the new
    #: tokenizer's. Fewer labels means shorter CTC targets and, for a subsampling model, fewer
    #: utterances too long for their transcript.
    characters_per_transcript: float
    labels_per_transcript: float
    settings: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {**to_dict(self), "output": str(self.output)}

    def summary(self) -> str:
        ratio = self.labels_per_transcript / max(self.characters_per_transcript, 1e-9)
        return (f"{self.tokenizer}: {self.symbols} symbols from {self.transcripts} transcripts "
                f"of {self.dataset}/{self.split}; {self.labels_per_transcript:.1f} labels a "
                f"transcript against {self.characters_per_transcript:.1f} characters "
                f"({ratio:.2f}x); wrote {self.output}")


def build_tokenizer(name: str, dataset: str, split: str, settings: Sequence[tuple[str, str]],
                    output: Path | None) -> BuildReport:
    """Build tokenizer ``name`` from the transcripts of ``dataset``'s ``split`` with
    ``settings`` (``KEY=VALUE`` pairs of its ``Config``), write it to ``output`` (default:
    ``<dataset>-<name>[-<vocab_size>]<suffix>`` here), load it back and check that it spells
    every transcript."""
    tokenizer = plugins.get("tokenizer", name)
    config = apply(tokenizer.Config(), settings)
    folder = resolve_dataset(dataset)
    listing = folder / f"{split}.csv"
    if not listing.is_file():
        raise AsrkitError(f"dataset {dataset} has no split {split!r} ({listing} is missing)")
    texts = [row.transcript for row in read_csv(listing)]
    if not texts:
        raise AsrkitError(f"{listing} holds no transcripts to build a tokenizer from")
    if output is None:
        size = getattr(config, "vocab_size", None)
        output = Path(f"{folder.name}-{name}{'' if size is None else f'-{size}'}"
                      f"{tokenizer.suffix}")
    if not output.name.endswith(tokenizer.suffix):
        raise AsrkitError(f"{output}: a {name} tokenizer's file name must end in "
                          f"{tokenizer.suffix}, so that -o tokenizer=FILE finds its reader")
    output.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.build(texts, config, output)
    labels = tokenizer.load(output)
    count = 0
    for number, text in enumerate(texts):
        try:
            count += len(labels.encode(text, f"{split} transcript {number + 1}"))
        except AsrkitError as error:
            raise AsrkitError(f"the {name} tokenizer built into {output} cannot spell its own "
                              f"transcripts: {error}") from None
    return BuildReport(name, output, folder.name, split, len(texts), labels.size,
                       sum(map(len, texts)) / len(texts), count / len(texts), to_dict(config))
