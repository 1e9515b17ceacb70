#!/usr/bin/env bash
# The published RNN-T loss the test suite checks asrkit's against (tests/test_rnnt_reference.py):
# torchaudio's (torchaudio.functional.rnnt_loss; the last release that has it is 2.8), in a
# virtual environment of its own, .venv-rnnt-reference, apart from asrkit's (PyTorch is no
# dependency of asrkit). About 3 GB from PyPI (PyTorch's wheels bring CUDA's libraries; no GPU is
# needed). Safe to rerun.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
venv=.venv-rnnt-reference
if ! "$venv/bin/python" -c "import torchaudio.functional as F; F.rnnt_loss" 2>/dev/null; then
  echo "rnnt reference: installing torch 2.8.0 and torchaudio 2.8.0 into $venv (about 3 GB)"
  [ -x "$venv/bin/python" ] || "$PYTHON" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "torch==2.8.0" "torchaudio==2.8.0" numpy
fi
