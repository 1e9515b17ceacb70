#!/usr/bin/env bash
# Common Voice English, Deep Speech 2 with the TensorFlow Model Garden's DeepSpeech2 settings
# (README.md: where each setting comes from, what differs, time, results).
# Common Voice cannot be downloaded for you: CV_ARCHIVE names the archive you downloaded.
set -euo pipefail
CORPUS=commonvoice-en
source "$(dirname "$0")/../common.sh"
: "${CV_ARCHIVE:?set CV_ARCHIVE to the Common Voice English archive (see README.md)}"
DATASET=commonvoice-en
RUN=$WORK/runs/ds2

asrkit import commonvoice --archive "$CV_ARCHIVE" --language en
asrkit train --model ds2 --dataset "$DATASET" --run-dir "$RUN" -o preset=none \
  -o model.conv_channels=32 -o model.time_stride=2 -o model.rnn_layers=5 -o model.rnn_units=800 \
  -o model.dropout=0 -o features.normalize=feature \
  --epochs 10 --batch-size 128 --learning-rate 0.0005 "$@"
score_with_lm "$RUN" "$DATASET" best dev
