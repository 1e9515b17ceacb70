#!/usr/bin/env bash
# LibriSpeech 100 h, Deep Speech 2, as the TensorFlow Model Garden's DeepSpeech2 (the MLPerf
# speech reference) trains it (README.md: where each setting comes from, what differs, time,
# results).
set -euo pipefail
CORPUS=librispeech-100h
source "$(dirname "$0")/../common.sh"
DATASET=librispeech-dev-clean+test-clean+train-clean-100
RUN=$WORK/runs/ds2

asrkit import librispeech --subset train-clean-100 --subset dev-clean --subset test-clean
asrkit train --model ds2 --dataset "$DATASET" --run-dir "$RUN" -o preset=none \
  -o model.conv_channels=32 -o model.time_stride=2 -o model.rnn_layers=5 -o model.rnn_units=800 \
  -o model.dropout=0 -o features.normalize=feature \
  --epochs 30 --batch-size 128 --learning-rate 0.0005 "$@"
score_with_lm "$RUN" "$DATASET" best dev
