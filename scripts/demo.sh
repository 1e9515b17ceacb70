#!/usr/bin/env bash
# The main job on built-in defaults, from a fresh machine, without the internet and without a GPU:
# 1. set up; import the built-in `sample` corpus of real speech; train Deep Speech's `brnn` on
#    the CPU until it transcribes one real utterance exactly (DeepSpeech's own smoke test, the
#    TIMIT sample LDC93S1); evaluate it (about 2 minutes);
# 2. speech it never heard: build an open-vocabulary corpus (real English sentences from the
#    fortunes collection, spoken by espeak-ng voices; test sentences and many of their words are
#    never in training), train `ds2` on it with its CPU preset for DEMO_MINUTES (10) minutes,
#    evaluate it on the unseen test sentences, by training voices and by voices it never heard,
#    and transcribe one unseen utterance.
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

minutes=${DEMO_MINUTES:-10}
corpus=data/openvocab
echo; echo "== an open-vocabulary corpus (benchmarks/open_vocab.py)"
python benchmarks/open_vocab.py "$corpus"
asrkit import folder "$corpus" --name openvocab --no-progress
run=runs/demo-openvocab
rm -rf "$run"
echo; echo "== asrkit train --model ds2 --dataset openvocab (${minutes} minutes, the CPU preset)"
asrkit train --model ds2 --dataset openvocab --epochs 1000 -o max_minutes="$minutes" \
  --run-dir "$run"
for split in test test-unseen; do
  echo; echo "== asrkit evaluate $run --split $split (sentences never trained on)"
  asrkit evaluate "$run" --split "$split" --no-progress
done
clip=$(awk -F'\t' '$3 == "test-unseen" {print $1; exit}' "$corpus/listing.tsv")
echo; echo "== asrkit transcribe $corpus/$clip (an unseen voice and sentence)"
echo "reference: $(awk -F'\t' -v f="$clip" '$1 == f {print $2}' "$corpus/listing.tsv")"
asrkit transcribe "$corpus/$clip" --model "$run"
