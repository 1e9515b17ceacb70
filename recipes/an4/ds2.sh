#!/usr/bin/env bash
# AN4 (an hour of census answers), Deep Speech 2 with the TensorFlow Model Garden's DeepSpeech2
# settings (README.md: where each setting comes from, what differs, time, results).
set -euo pipefail
CORPUS=an4
source "$(dirname "$0")/../common.sh"
DATASET=an4
RUN=$WORK/runs/ds2

# CMU publishes no checksum for AN4's archive: --no-verify (docs/importers.md).
asrkit import an4 --no-verify
asrkit train --model ds2 --dataset "$DATASET" --run-dir "$RUN" -o preset=none \
  -o model.conv_channels=32 -o model.time_stride=2 -o model.rnn_layers=5 -o model.rnn_units=800 \
  -o model.dropout=0 -o features.normalize=feature -o dev_split=test \
  --epochs 60 --batch-size 32 --learning-rate 0.0005 "$@"
score_with_lm "$RUN" "$DATASET" best test
