#!/usr/bin/env bash
# TED-LIUM 3 (its legacy split), Deep Speech 2 with the TensorFlow Model Garden's DeepSpeech2
# settings (README.md: where each setting comes from, what differs, time, results).
set -euo pipefail
CORPUS=tedlium3
source "$(dirname "$0")/../common.sh"
DATASET=ted-3
RUN=$WORK/runs/ds2

asrkit import ted --release 3
asrkit train --model ds2 --dataset "$DATASET" --run-dir "$RUN" -o preset=none \
  -o model.conv_channels=32 -o model.time_stride=2 -o model.rnn_layers=5 -o model.rnn_units=800 \
  -o model.dropout=0 -o features.normalize=feature \
  --epochs 15 --batch-size 128 --learning-rate 0.0005 "$@"
score_with_lm "$RUN" "$DATASET" best dev
