"""The sentencepiece tokenizer: the tokenizer contract (``asrkit.testing.check_tokenizer``) for
unigram and BPE models, byte-identical builds, SentencePiece's own segmentation, text it cannot
spell, the build's one-line errors, and the plugin's registration.

The texts (``texts.txt``) are 410 sentences of the Debian ``fortunes`` collection normalised as
asrkit normalises transcripts. Uses only asrkit's public API and ``asrkit.testing``.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import asrkit_tokenizer_sentencepiece
import pytest
from asrkit_tokenizer_sentencepiece import (
    SentencePieceConfig,
    SentencePieceLabels,
    SentencePieceTokenizer,
)

from asrkit.api import PIECE_MARKER, AsrkitError, LabelError, Pieces
from asrkit.testing import check_tokenizer, held_out_texts

TEXTS = [line for line in (Path(__file__).parent / "texts.txt").read_text(encoding="utf-8")
         .splitlines() if line and not line.startswith("#")]
TOKENIZER = SentencePieceTokenizer()
#: The environment of a second Python: this plugin importable, installed or not.
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    [str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")])}


def build(tmp_path: Path, texts: list[str] = TEXTS, name: str = "tok.model",
          **settings: object) -> Path:
    path = tmp_path / name
    TOKENIZER.build(texts, SentencePieceConfig(**settings), path)  # type: ignore[arg-type]
    return path


@pytest.fixture(scope="module", params=["unigram", "bpe"])
def model(request, tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp(request.param), model_type=request.param)


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_keeps_the_tokenizer_contract(model_type):
    check_tokenizer(TOKENIZER, TEXTS, SentencePieceConfig(model_type=model_type))


def test_keeps_the_contract_on_the_sample_corpus_with_a_small_vocabulary():
    check_tokenizer(TOKENIZER, None, SentencePieceConfig(vocab_size=64))


def test_labels_are_the_models_pieces_and_fewer_than_characters(model):
    labels = TOKENIZER.load(model)
    assert isinstance(labels, SentencePieceLabels) and isinstance(labels, Pieces)
    assert labels.size == 256 and labels.num_classes == 257 and labels.blank == 256
    assert labels.symbols[0] == "<unk>" and labels.word_marker == PIECE_MARKER
    assert labels.to_json() == {"symbols": list(labels.symbols), "word_marker": PIECE_MARKER,
                                "blank": 256}
    for text in TEXTS + held_out_texts(TEXTS):
        assert labels.decode(labels.encode(text)) == text
    characters = sum(len(text) for text in TEXTS)
    pieces = sum(len(labels.encode(text)) for text in TEXTS)
    ratio = pieces / characters
    assert ratio < 0.6, f"{pieces} labels for {characters} characters: {ratio:.3f} a character"
    print(f"{model.parent.name}: {ratio:.3f} labels a character")


def test_encode_is_sentencepieces_segmentation_not_longest_match(model):
    """The model's own best segmentation (what it was trained to produce), deterministic:
    longest match from the left (``Pieces.encode``) is another valid spelling, and differs for
    some of the texts."""
    import sentencepiece

    labels = TOKENIZER.load(model)
    processor = sentencepiece.SentencePieceProcessor(model_file=str(model))
    longest = Pieces(labels.symbols)
    differs = 0
    for text in TEXTS:
        assert labels.encode(text) == processor.encode(text) == labels.encode(text)
        differs += longest.encode(text) != labels.encode(text)
    assert differs > 0


def test_build_is_byte_identical_across_processes(tmp_path):
    first = build(tmp_path, name="a.model")
    code = ("import sys; from pathlib import Path; from asrkit_tokenizer_sentencepiece import "
            "SentencePieceTokenizer as T, SentencePieceConfig as C; "
            "T().build(Path(sys.argv[1]).read_text().splitlines(), C(), Path(sys.argv[2]))")
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS), encoding="utf-8")
    subprocess.run([sys.executable, "-c", code, tmp_path / "texts.txt", tmp_path / "b.model"],
                   check=True, env=ENV)
    assert first.read_bytes() == (tmp_path / "b.model").read_bytes()
    assert TOKENIZER.load(first) == TOKENIZER.load(tmp_path / "b.model")
    other = TOKENIZER.load(build(tmp_path, name="c.model", model_type="bpe"))
    assert other != TOKENIZER.load(first)


def test_fingerprint_follows_the_scores_not_only_the_pieces(tmp_path):
    """Two models with the same pieces but other scores segment differently: they must not
    share cached encodings."""
    pytest.importorskip("google.protobuf")
    from sentencepiece import sentencepiece_model_pb2

    path = build(tmp_path)
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(path.read_bytes())
    for piece in proto.pieces:
        if len(piece.piece) > 2:
            piece.score -= 100.0  # long pieces now lose to their parts
    (tmp_path / "other.model").write_bytes(proto.SerializeToString())
    labels, other = TOKENIZER.load(path), TOKENIZER.load(tmp_path / "other.model")
    assert labels.symbols == other.symbols
    assert labels.fingerprint() != other.fingerprint() and labels != other
    assert labels.encode(TEXTS[0]) != other.encode(TEXTS[0])
    assert other.decode(other.encode(TEXTS[0])) == TEXTS[0]


def test_text_it_cannot_spell_is_an_error_naming_the_characters(model):
    labels = TOKENIZER.load(model)
    with pytest.raises(LabelError, match=r"'éж' in utterance 'clip-9' is not spelt") as error:
        labels.encode("the café is ж", "clip-9")
    assert "\n" not in str(error.value)
    assert labels.missing("the café is ж") == ["é", "ж"]
    assert labels.missing(" ".join(TEXTS)) == []


def test_unk_and_the_blank_decode_to_nothing(model):
    labels = TOKENIZER.load(model)
    the = labels.encode("the cat")
    assert labels.decode([0, *the, labels.blank, 0]) == "the cat"
    assert labels.body(0) == "" and not labels.starts_word(0)
    with pytest.raises(LabelError, match="outside"):
        labels.decode([labels.blank + 1])


def test_labels_pickle(model):
    labels = TOKENIZER.load(model)
    again = pickle.loads(pickle.dumps(labels))
    assert again == labels and again.encode(TEXTS[1]) == labels.encode(TEXTS[1])


def test_a_vocabulary_the_texts_cannot_support_names_the_size_they_do(tmp_path):
    with pytest.raises(AsrkitError) as error:
        build(tmp_path, TEXTS[:40], vocab_size=5000)
    message = str(error.value)
    assert "\n" not in message and message.startswith("vocab_size=5000 is more than"), message
    supported = int(message.split("at most ")[1].split(";")[0])
    path = build(tmp_path, TEXTS[:40], vocab_size=supported)
    assert TOKENIZER.load(path).size == supported
    with pytest.raises(AsrkitError, match=r"vocab_size=10 is too small: .* need \d+;"):
        build(tmp_path, vocab_size=10)


def test_a_failed_build_leaves_the_file_it_would_replace(tmp_path):
    path = build(tmp_path)
    before = path.read_bytes()
    with pytest.raises(AsrkitError):
        build(tmp_path, TEXTS[:5])
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok.model"]


@pytest.mark.parametrize("texts", [[], ["", "   "]], ids=["none", "empty"])
def test_no_text_is_a_one_line_error(tmp_path, texts):
    with pytest.raises(AsrkitError, match=r"^no text to build a SentencePiece model from"):
        build(tmp_path, texts)
    assert not list(tmp_path.iterdir())


def test_settings_are_checked():
    with pytest.raises(AsrkitError, match="model_type='char' is not allowed"):
        SentencePieceConfig(model_type="char")
    with pytest.raises(AsrkitError, match="vocab_size=1 is not allowed"):
        SentencePieceConfig(vocab_size=1)


def test_split_digits_and_piece_length(tmp_path):
    texts = [f"{text} {n * 7919}" for n, text in enumerate(TEXTS)]
    labels = TOKENIZER.load(build(tmp_path, texts, split_digits=True, max_piece_length=4))
    assert all(len(s.lstrip(PIECE_MARKER)) <= 4 for s in labels.symbols if s != "<unk>")
    digits = [s for s in labels.symbols if any(c.isdigit() for c in s)]
    assert digits and all(len(s.lstrip(PIECE_MARKER)) == 1 for s in digits)


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_required_chars_are_spelt_though_no_text_holds_them(tmp_path, model_type):
    """A dataset's alphabet may hold characters its transcripts lack (asrkit's English one
    has q, x and z); a run refuses a tokenizer that cannot spell its alphabet."""
    texts = [text for text in TEXTS if not set("qxz") & set(text)]
    plain = TOKENIZER.load(build(tmp_path, texts, name="plain.model", model_type=model_type))
    assert plain.missing("quiz fox") == ["q", "z", "x"]
    labels = TOKENIZER.load(build(tmp_path, texts, model_type=model_type,
                                  required_chars="zqx "))
    assert labels.missing("quiz fox") == []
    assert labels.decode(labels.encode("quiz fox")) == "quiz fox"


@pytest.mark.parametrize("content", [b"", b"hello world\n", bytes(range(256)) * 4],
                         ids=["empty", "text", "binary"])
def test_load_of_a_file_that_is_no_model_is_a_one_line_error(tmp_path, content):
    path = tmp_path / "bad.model"
    path.write_bytes(content)
    with pytest.raises(AsrkitError, match=r"bad\.model is not a SentencePiece model") as error:
        TOKENIZER.load(path)
    assert "\n" not in str(error.value)
    with pytest.raises(AsrkitError, match="cannot read the SentencePiece model"):
        TOKENIZER.load(tmp_path / "missing.model")


def test_registers_through_its_entry_point(asrkit_cli, make_plugins):
    plugins = make_plugins(entry_points=True)
    result = asrkit_cli(["plugins", "--json"], plugins)
    assert result.exit_code == 0, result.stderr
    [entry] = [p for p in json.loads(result.stdout)["plugins"] if p["name"] == "sentencepiece"]
    assert entry["distribution"] == "asrkit-tokenizer-sentencepiece"
    assert entry["registered"] == {"tokenizer": ["sentencepiece"]}
    assert asrkit_tokenizer_sentencepiece.__version__ == entry["version"]


def test_importing_the_plugin_does_not_import_sentencepiece():
    code = ("import sys, asrkit_tokenizer_sentencepiece; "
            "print('sentencepiece' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, env=ENV)
    assert result.stdout.strip() == "False"
