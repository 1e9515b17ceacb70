#!/usr/bin/env bash
# The main job on built-in defaults, from a fresh machine, without the internet and without a GPU:
# set up; import the built-in `sample` corpus of real speech; train Deep Speech's `brnn` on the
# CPU until it transcribes one real utterance exactly (DeepSpeech's own smoke test: the TIMIT
# sample LDC93S1, the corpus's test split); evaluate it and show the transcription.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"

echo; echo "== asrkit plugins"; asrkit plugins
echo; echo "== asrkit import sample"; asrkit import sample
run=runs/demo
rm -rf "$run"
echo; echo "== asrkit train --model brnn (about a minute on 2 CPU cores)"
asrkit train --model brnn --dataset sample --epochs 300 --batch-size 1 -o preset=full \
  -o train_split=test -o evaluate_dev=false -o model.n_hidden=100 -o model.n_cell=100 \
  --run-dir "$run"
echo; echo "== asrkit evaluate $run --split test"; asrkit evaluate "$run" --split test --no-progress
