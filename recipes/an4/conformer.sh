#!/usr/bin/env bash
# AN4 (an hour of census answers), Conformer-CTC with the model of ESPnet's AN4 conformer-CTC
# recipe (README.md: where each setting comes from, what differs, time, results).
set -euo pipefail
CORPUS=an4
source "$(dirname "$0")/../common.sh"
DATASET=an4
RUN=$WORK/runs/conformer

# CMU publishes no checksum for AN4's archive: --no-verify (docs/importers.md).
asrkit import an4 --no-verify
asrkit train --model conformer --dataset "$DATASET" --run-dir "$RUN" -o preset=none \
  -o model.d_model=256 -o model.num_heads=4 -o model.num_blocks=12 -o model.ff_multiplier=4 \
  -o model.conv_kernel=31 -o model.subsampling_channels=256 -o model.dropout=0.1 \
  -o model.attention_dropout=0.1 -o features.normalize=feature -o dev_split=test \
  --epochs 100 --batch-size 16 --learning-rate 0.063 -o lr_schedule=noam -o noam_d_model=1 \
  -o warmup_steps=1000 -o pipeline.freq_masks=2 -o pipeline.freq_mask_width=27 \
  -o pipeline.time_masks=5 -o pipeline.time_mask_width=10000 \
  -o pipeline.time_mask_max_ratio=0.05 -o checkpoint_minutes=0 -o keep_checkpoints="$AVERAGE" "$@"
asrkit average "$RUN" --last "$AVERAGE"
score_with_lm "$RUN" "$DATASET" averaged test
