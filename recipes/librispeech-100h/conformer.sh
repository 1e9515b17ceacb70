#!/usr/bin/env bash
# LibriSpeech 100 h, Conformer-CTC, as ESPnet's librispeech_100 conformer-CTC recipe trains it
# (README.md: where each setting comes from, what differs, time, results).
set -euo pipefail
CORPUS=librispeech-100h
source "$(dirname "$0")/../common.sh"
DATASET=librispeech-dev-clean+test-clean+train-clean-100
RUN=$WORK/runs/conformer

asrkit import librispeech --subset train-clean-100 --subset dev-clean --subset test-clean
asrkit train --model conformer --dataset "$DATASET" --run-dir "$RUN" -o preset=none \
  -o model.d_model=256 -o model.num_heads=4 -o model.num_blocks=18 -o model.ff_multiplier=4 \
  -o model.conv_kernel=31 -o model.subsampling_channels=256 -o model.dropout=0.1 \
  -o model.attention_dropout=0.1 -o features.normalize=feature \
  --epochs 60 --batch-size 32 --learning-rate 0.245 -o lr_schedule=noam -o noam_d_model=1 \
  -o warmup_steps=15000 -o pipeline.speed_factors=0.9,1.0,1.1 \
  -o pipeline.freq_masks=2 -o pipeline.freq_mask_width=27 -o pipeline.time_masks=5 \
  -o pipeline.time_mask_width=10000 -o pipeline.time_mask_max_ratio=0.05 \
  -o checkpoint_minutes=0 -o keep_checkpoints="$AVERAGE" "$@"
asrkit average "$RUN" --last "$AVERAGE"
score_with_lm "$RUN" "$DATASET" averaged dev
