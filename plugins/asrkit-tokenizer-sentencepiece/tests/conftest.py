"""Let the tests run from a source checkout too: when the plugin is not installed, import it
from the folder above (installed copies, as tox and the set-up make them, take precedence)."""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import asrkit_tokenizer_sentencepiece  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
