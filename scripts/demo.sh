#!/usr/bin/env bash
# The main job on built-in defaults, from a fresh machine, without the internet: set up, then
# import the built-in `sample` corpus of real speech (convert, normalise, shard) and report it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"

echo; echo "== asrkit plugins"; asrkit plugins
echo; echo "== asrkit import sample"; asrkit import sample
dataset="${ASRKIT_HOME:-$HOME/.asrkit}/datasets/sample"
echo; echo "== $dataset"; ls "$dataset" "$dataset/shards"
echo; echo "== train.csv (first rows)"; head -4 "$dataset/train.csv"
