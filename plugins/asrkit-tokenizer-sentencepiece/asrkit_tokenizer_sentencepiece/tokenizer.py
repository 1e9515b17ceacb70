"""``sentencepiece``: subword labels learnt from a dataset's transcripts with SentencePiece.

``build`` trains a model in memory from the transcripts (no temporary text file) and writes
SentencePiece's own ``.model`` file, which any SentencePiece library reads. Training is
configured for asrkit's transcripts:

- ``normalization_rule_name="identity"``: asrkit has normalised the transcripts already (lower
  case, punctuation removed, its alphabet); SentencePiece's default NFKC rules would change
  characters, and ``decode(encode(text))`` would no longer give the text back.
- ``character_coverage=1.0``: every character of the transcripts is a piece of its own, so the
  model spells every transcript it was built from (the tokenizer contract). A lower coverage
  would turn rare characters into ``<unk>``, which a run refuses to train on.
- ``unk_id=0`` and no ``<s>``/``</s>``: CTC needs no sentence boundaries; ``<unk>`` stays a
  symbol so that SentencePiece's ids are the model's labels, but ``encode`` never yields it
  (text the model cannot spell is an error naming the characters).
- ``hard_vocab_limit``: the model has exactly ``vocab_size`` pieces, or the build fails saying
  how many the transcripts support.
- ``num_threads=1``: the same transcripts and settings give a byte-identical file (on any
  machine with the same SentencePiece version), so a run's tokenizer can be rebuilt and
  compared.

``sentencepiece`` is imported inside the functions: asrkit imports this module whenever it
builds its command line, and that must stay cheap.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asrkit.api import (
    PIECE_MARKER,
    AsrkitError,
    LabelError,
    Pieces,
    Tokenizer,
    setting,
    validate,
)

#: Model types ``-s model_type=`` accepts (SentencePiece's ``char`` and ``word`` are left out:
#: ``chars`` already gives characters, and whole words cannot spell an unseen word).
MODEL_TYPES = ("unigram", "bpe")


@dataclass(frozen=True)
class SentencePieceConfig:
    """Settings of ``asrkit tokenizer build --tokenizer sentencepiece`` (``-o NAME=VALUE``)."""

    #: Pieces in the model, ``<unk>`` included (the acoustic model outputs one more class, the
    #: CTC blank). At least the transcripts' characters plus one; at most what the transcripts
    #: support (the build says how many when asked for more).
    vocab_size: int = setting(256, min=4, max=1_000_000)
    #: ``unigram`` (a unigram language model pruned to size; SentencePiece's default) or
    #: ``bpe`` (byte-pair encoding: the most frequent pairs merged until the size is reached).
    model_type: str = setting("unigram", choices=MODEL_TYPES)
    #: Longest piece, in characters (SentencePiece's ``max_sentencepiece_length``).
    max_piece_length: int = setting(16, min=1, max=512)
    #: Keep digits apart: every digit is a piece of its own (``2024`` -> ``2 0 2 4``), as
    #: numbers spoken digit by digit need.
    split_digits: bool = False
    #: Characters to make pieces of even if no training transcript holds them, e.g. those of
    #: a test split or the rest of the dataset's alphabet (``-s required_chars=qxz``); a run
    #: checks that its tokenizer spells every character of its train and dev transcripts.
    required_chars: str = ""

    def __post_init__(self) -> None:
        validate(self)


class SentencePieceTokenizer(Tokenizer):
    """Subword pieces learnt with SentencePiece; its files are SentencePiece ``.model`` files."""

    name = "sentencepiece"
    description = "Subword pieces (unigram or BPE) learnt from the transcripts with SentencePiece."
    Config = SentencePieceConfig
    suffix = ".model"

    def build(self, texts: Sequence[str], config: Any, path: Any) -> None:
        config = SentencePieceConfig() if config is None else config
        validate(config)
        write_atomic(Path(path), train(texts, config))

    def load(self, path: Any) -> SentencePieceLabels:
        try:
            model = Path(path).read_bytes()
        except OSError as error:
            raise AsrkitError(f"cannot read the SentencePiece model {path}: "
                              f"{error.strerror or error}") from None
        return SentencePieceLabels(model, str(path))


def train(texts: Sequence[str], config: SentencePieceConfig) -> bytes:
    """The bytes of a SentencePiece model trained on ``texts`` (normalised transcripts)."""
    lines = [text for text in texts if text.strip()]
    if not lines:
        raise AsrkitError("no text to build a SentencePiece model from: every transcript is "
                          "empty")
    if any(PIECE_MARKER in line for line in lines):
        raise AsrkitError(f"the transcripts hold {PIECE_MARKER!r}, SentencePiece's word "
                          "marker; normalise them without it")
    spm = _sentencepiece()
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_writer=model,
            vocab_size=config.vocab_size, model_type=config.model_type,
            max_sentencepiece_length=config.max_piece_length, split_digits=config.split_digits,
            required_chars="".join(sorted(set(config.required_chars) - {" "})),
            character_coverage=1.0, normalization_rule_name="identity", add_dummy_prefix=True,
            unk_id=0, bos_id=-1, eos_id=-1, pad_id=-1, byte_fallback=False,
            hard_vocab_limit=True, num_threads=1, input_sentence_size=0,
            # No transcript is skipped for its length (SentencePiece's default drops lines
            # over 4192 bytes, and their rare characters with them).
            max_sentence_length=max(len(line.encode("utf-8")) for line in lines),
            minloglevel=2,  # quiet: asrkit reports what it builds
        )
    except RuntimeError as error:
        raise AsrkitError(_explain(str(error), config)) from None
    return model.getvalue()


def _explain(message: str, config: SentencePieceConfig) -> str:
    """SentencePiece's failure as a line saying what to change."""
    too_high = re.search(r"Vocabulary size too high \((\d+)\).*?<= (\d+)", message)
    if too_high:
        return (f"vocab_size={too_high[1]} is more than these transcripts support for "
                f"model_type={config.model_type}: at most {too_high[2]}; build with "
                f"--vocab-size {too_high[2]} or less, or from more text")
    too_low = re.search(r"smaller than required_chars\. (\d+) vs (\d+)", message)
    if too_low:
        return (f"vocab_size={too_low[1]} is too small: the transcripts' characters and <unk> "
                f"need {too_low[2]}; build with --vocab-size {too_low[2]} or more")
    detail = " ".join(message.split())
    return f"SentencePiece could not build a model: {detail}"


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file beside it: an interrupted build
    leaves the old file (or none), never half a model."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


class SentencePieceLabels(Pieces):
    """A SentencePiece model's pieces as labels: label ``i`` is piece ``i`` (``<unk>`` is 0),
    the blank is the class after the last piece.

    ``encode`` is the model's own best segmentation (no sampling), so training sees the pieces
    SentencePiece would choose; decoding needs only the symbols and ``"▁"``, as for any
    :class:`~asrkit.api.Pieces`. ``<unk>`` (and any control piece of a model made elsewhere)
    decodes to nothing.
    """

    def __init__(self, model: bytes, source: str = "the model") -> None:
        spm = _sentencepiece()
        processor = spm.SentencePieceProcessor()
        try:
            processor.LoadFromSerializedProto(model)
        except RuntimeError:
            raise AsrkitError(f"{source} is not a SentencePiece model; build one with `asrkit "
                              "tokenizer build --tokenizer sentencepiece`") from None
        size = processor.get_piece_size()
        if any(processor.is_byte(i) for i in range(size)):
            raise AsrkitError(f"{source} is a SentencePiece model with byte fallback pieces, "
                              "which asrkit cannot decode; build it without byte_fallback")
        super().__init__([processor.id_to_piece(i) for i in range(size)])
        self._model = model
        self._processor = processor
        self._unk = processor.unk_id()
        self._silent = frozenset(i for i in range(size)
                                 if processor.is_unknown(i) or processor.is_control(i))

    @property
    def model(self) -> bytes:
        """The model file's bytes."""
        return self._model

    def encode(self, text: str, utterance: str = "") -> list[int]:
        labels = list(self._processor.encode(text, out_type=int))
        if self._unk in labels:
            shown = "".join(self.missing(text)) or text
            where = f" in utterance {utterance!r}" if utterance else ""
            raise LabelError(f"{shown!r}{where} is not spelt by the SentencePiece model; build "
                             "it from transcripts that hold it")
        return labels

    def missing(self, text: str) -> list[str]:
        return [char for char in dict.fromkeys(text)
                if char != " " and self._unk in self._processor.encode(char, out_type=int)]

    def starts_word(self, label: int) -> bool:
        return label not in self._silent and super().starts_word(label)

    def body(self, label: int) -> str:
        return "" if label in self._silent else super().body(label)

    def fingerprint(self) -> str:
        """A hash of the model file: the scores (and merges) decide the segmentation too."""
        digest = hashlib.sha256(type(self).__qualname__.encode())
        digest.update(self._model)
        return digest.hexdigest()[:16]

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.model == self._model

    def __hash__(self) -> int:
        return hash(self._model)

    def __getstate__(self) -> dict[str, Any]:
        return {"model": self._model}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["model"])  # type: ignore[misc]


def _sentencepiece() -> Any:
    try:
        import sentencepiece
    except ImportError:
        raise AsrkitError("the sentencepiece tokenizer needs the sentencepiece package: pip "
                          "install 'sentencepiece>=0.2'") from None
    return sentencepiece
