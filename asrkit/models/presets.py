"""Preset pieces the bundled models share (presets themselves: :mod:`asrkit.presets`)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

#: The ``full`` preset of the log-mel models (``ds2``, ``conformer``): Deep Speech 2's
#: spectrogram normalisation (each log-mel bin to zero mean and unit variance over the
#: utterance), and the augmentation long GPU runs profit from: Kaldi's speed perturbation and
#: SpecAugment's LibriSpeech "LD" masks (the Conformer paper trains with SpecAugment too).
#: Read-only; each model takes its own copy (``dict(LOGMEL_FULL)``).
LOGMEL_FULL: Mapping[str, str] = MappingProxyType({
    "features.normalize": "feature",
    "pipeline.speed_factors": "0.9,1.0,1.1",
    "pipeline.freq_masks": "2",
    "pipeline.freq_mask_width": "27",
    "pipeline.time_masks": "2",
    "pipeline.time_mask_width": "100",
})
