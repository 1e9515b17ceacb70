#!/usr/bin/env bash
# Common Voice English, Conformer-CTC on characters, as NeMo's conformer_ctc_char configuration
# trains it (README.md: where each setting comes from, what differs, time, results).
# Common Voice cannot be downloaded for you: CV_ARCHIVE names the archive you downloaded.
set -euo pipefail
CORPUS=commonvoice-en
source "$(dirname "$0")/../common.sh"
: "${CV_ARCHIVE:?set CV_ARCHIVE to the Common Voice English archive (see README.md)}"
DATASET=commonvoice-en
RUN=$WORK/runs/conformer

asrkit import commonvoice --archive "$CV_ARCHIVE" --language en
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
