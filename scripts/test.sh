#!/usr/bin/env bash
# Set up and run the checks CI runs: lint, type checks of the public plugin API, the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"; ruff check .
echo "== mypy (public plugin API)"; mypy
# One worker a core (pytest-xdist): most tests wait on real processes, sox and servers, and the
# suite takes half the time it takes serially. `bash scripts/test.sh -n 0` runs it serially.
echo "== pytest"; pytest -n auto "$@"
