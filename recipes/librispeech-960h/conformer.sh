#!/usr/bin/env bash
# LibriSpeech 960 h, Conformer-CTC on characters, as NeMo's conformer_ctc_char configuration
# trains it (README.md: where each setting comes from, what differs, time, results).
set -euo pipefail
CORPUS=librispeech-960h
source "$(dirname "$0")/../common.sh"
DATASET=librispeech-dev-clean+dev-other+test-clean+train-clean-100+train-clean-360+train-other-500
RUN=$WORK/runs/conformer

asrkit import librispeech --subset train-clean-100 --subset train-clean-360 \
  --subset train-other-500 --subset dev-clean --subset dev-other --subset test-clean
asrkit train --model conformer --dataset "$DATASET" --run-dir "$RUN" -o preset=none \
  -o model.d_model=256 -o model.num_heads=8 -o model.num_blocks=16 -o model.ff_multiplier=4 \
  -o model.conv_kernel=31 -o model.subsampling_channels=256 -o model.dropout=0.1 \
  -o model.attention_dropout=0.1 -o features.normalize=feature \
  --epochs 100 --batch-size 32 -o accumulate_steps=4 --learning-rate 2.0 -o lr_schedule=noam \
  -o noam_d_model=256 -o warmup_steps=10000 -o beta2=0.98 \
  -o pipeline.freq_masks=2 -o pipeline.freq_mask_width=27 -o pipeline.time_masks=10 \
  -o pipeline.time_mask_width=10000 -o pipeline.time_mask_max_ratio=0.05 \
  -o checkpoint_minutes=0 -o keep_checkpoints="$AVERAGE" "$@"
asrkit average "$RUN" --last "$AVERAGE"
score_with_lm "$RUN" "$DATASET" averaged dev
