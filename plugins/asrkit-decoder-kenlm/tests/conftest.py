"""Let the tests run from a source checkout too: when the plugin is not installed, import it
from the folder above (installed copies, as tox and the set-up make them, take precedence)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

try:
    import asrkit_decoder_kenlm  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


#: A few sentences about a cat, repeated so that every order has its discounts.
CAT_SENTENCES = ["the cat sat on the mat", "the cat ran", "a cat sat", "the mat",
                 "a cat ran on the mat", "the cat sat"] * 5


@pytest.fixture
def cat_lm(tmp_path: Path) -> Path:
    """A trigram ARPA model of :data:`CAT_SENTENCES` (the tests that decode need kenlm)."""
    pytest.importorskip("kenlm")
    from asrkit_decoder_kenlm.arpa import estimate

    path = tmp_path / "lm.arpa"
    estimate(CAT_SENTENCES, 3).write(path)
    return path
