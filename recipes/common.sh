# What every recipe shares: its settings from the environment, and the language-model steps.
# Sourced by the recipes (`source "$(dirname "$0")/../common.sh"`), not run on its own.
#
# Environment (each has a default):
#   WORK              the folder for the runs and the language model (default: the corpus's
#                     name, in the current folder)
#   AVERAGE           the last epochs' checkpoints averaged at the end (default 10)
#   ASRKIT_HOME       asrkit's datasets and downloads (default ~/.asrkit)
#   ASRKIT_MIRROR     a host to download the corpora from instead (asrkit import --mirror)
#   ASRKIT_MAX_STEPS  stop each training after this many steps (a smoke test of the recipe)
# A recipe's arguments go at the end of its asrkit train line, so they win over its
# settings: `bash recipes/an4/ds2.sh --epochs 20 -o model.rnn_units=256`.

WORK=${WORK:-$CORPUS}
AVERAGE=${AVERAGE:-10}
mkdir -p "$WORK"

# score_with_lm RUN DATASET CHECKPOINT DEV: a word 3-gram of the training transcripts (built
# once for the corpus), its weight and word bonus chosen on the split DEV, then test scored.
score_with_lm() {
  local run=$1 dataset=$2 checkpoint=$3 dev=$4 lm=$WORK/lm.arpa best
  if [ ! -f "$lm" ]; then
    asrkit lm build --dataset "$dataset" --order 3 -o "$lm"
  fi
  asrkit evaluate "$run" --split "$dev" --checkpoint "$checkpoint" --decoder kenlm \
    -o decoder.lm="$lm" --grid decoder.alpha=0.25,0.5,1,1.5,2 --grid decoder.beta=0,1,2,3 \
    --json "$run/lm-grid.json" --no-progress
  # The best weights' options, e.g. "-o decoder.alpha=1 -o decoder.beta=2".
  best=$(python3 -c 'import json, sys; print(" ".join(json.load(open(sys.argv[1]))["best"]["options"]))' \
    "$run/lm-grid.json")
  # shellcheck disable=SC2086  # $best is several options
  asrkit evaluate "$run" --split test --checkpoint "$checkpoint" --decoder kenlm \
    -o decoder.lm="$lm" $best --json "$run/test-lm.json" --no-progress
}
