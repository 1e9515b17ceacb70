#!/usr/bin/env bash
# Set up and run the checks CI runs: lint, type checks of the public plugin API, the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"; ruff check .
echo "== mypy (public plugin API)"; mypy
echo "== pytest"; pytest "$@"
