"""How the input pipeline makes batches (``-o pipeline.KEY=VALUE``): a section of a run's
configuration, kept beside the others so that building a run's configuration needs no
TensorFlow and no input pipeline (:mod:`asrkit.pipeline.batches` reads it)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from asrkit.core.errors import AsrkitError
from asrkit.core.settings import MAX_BATCH_SIZE, MAX_SEED, setting, validate

#: ``tf.data.AUTOTUNE``, without importing TensorFlow.
AUTOTUNE = -1


#: A tf.data service dispatcher's address: ``HOST:PORT``, optionally with ``grpc://``.
SERVICE_ADDRESS = re.compile(r"^(grpc://)?[^\s:/]+:\d{1,5}$")


class PipelineError(AsrkitError):
    """A dataset that cannot be read as asked (no shards, bad options)."""


@dataclass(frozen=True)
class PipelineConfig:
    """How batches are made. Defaults suit training; :meth:`for_evaluation` suits evaluation."""

    #: Utterances a batch, per input pipeline (per replica under ``tf.distribute``).
    batch_size: int = setting(16, min=1, max=MAX_BATCH_SIZE)
    #: Batch by duration instead: at most this many seconds of *padded* audio a batch (its
    #: longest utterance's length times its utterances), per input pipeline; 0 = off (batches
    #: of ``batch_size``). Each length bucket gets the batch size that fits its longest length.
    #: At most ten hours (2.3 GB of audio alone).
    batch_seconds: float = setting(0.0, min=0, max=36_000)
    #: Group utterances by length before batching (much less padding).
    bucketing: bool = True
    #: Bucket edges in seconds of audio; empty: :data:`num_buckets` quantiles of the split's
    #: lengths (from ``<split>.csv``'s ``wav_filesize``, else a scan of the shards). At most a
    #: day each.
    bucket_boundaries: tuple[float, ...] = setting((), above=0, max=86_400)
    #: Each bucket holds a batch being filled.
    num_buckets: int = setting(16, min=1, max=1024)
    shuffle: bool = True
    #: Utterances (their features, not audio) held for shuffling, in memory: at most a million
    #: (a typo guard; a million long utterances' features already take hundreds of GB).
    shuffle_buffer: int = setting(1024, min=1, max=1_000_000)
    #: Seeds shuffling and augmentation; None draws a fresh seed each run.
    seed: int | None = setting(0, min=0, max=MAX_SEED)
    #: Same seed -> same batches in the same order (slightly slower: no out-of-order results).
    deterministic: bool = False
    #: "none", "memory", or a directory for cache files (features before shuffling and
    #: SpecAugment; the parsed audio instead when speed perturbation is on).
    cache: str = "none"
    #: Frames of context each side stacked onto every frame (Deep Speech: 9); 0 = none. Models
    #: usually do this themselves on the accelerator with :func:`asrkit.features.context_windows`.
    #: Each frame grows 2 * context + 1 times.
    context: int = setting(0, min=0, max=100)
    #: SpecAugment (off while ``freq_masks`` and ``time_masks`` are 0): masks an utterance, and
    #: their widths in feature bins and frames.
    freq_masks: int = setting(0, min=0, max=100)
    freq_mask_width: int = setting(27, min=0, max=1024)
    time_masks: int = setting(0, min=0, max=100)
    time_mask_width: int = setting(100, min=0, max=10_000)
    time_mask_max_ratio: float = setting(0.2, min=0, max=1)
    #: Speed perturbation factors drawn uniformly per utterance, e.g. (0.9, 1.0, 1.1); () = off.
    #: From a quarter to four times the speed: a factor f makes the audio 1/f times as long.
    speed_factors: tuple[float, ...] = setting((), min=0.25, max=4)
    #: Pitch perturbation: (low, high) semitones, drawn uniformly per utterance; () = off.
    pitch_semitones: tuple[float, ...] = setting((), min=-12, max=12)
    #: Additive noise: (low, high) signal-to-noise ratio in dB, drawn per utterance; () = off.
    noise_snr_db: tuple[float, ...] = setting((), min=-20, max=100)
    #: A folder of 16 kHz noise recordings (WAV/FLAC) to mix in; "" = synthesised noise.
    noise_folder: str = ""
    #: Vocal-tract-length perturbation: (low, high) frequency-warp factor drawn per utterance,
    #: e.g. (0.9, 1.1); () = off.
    vtlp_alpha: tuple[float, ...] = setting((), min=0.5, max=2)
    #: Formant shift: (low, high) ratio the formants move by, drawn per utterance, with the
    #: pitch kept (VTLP moves both), e.g. (0.9, 1.1); () = off.
    formant_ratio: tuple[float, ...] = setting((), min=0.5, max=2)
    #: Reverberation in synthesised rooms: (low, high) RT60 in seconds drawn per utterance;
    #: () = off.
    reverb_rt60: tuple[float, ...] = setting((), above=0, max=4)
    #: The synthesised rooms' direct-to-reverberant energy ratio: (low, high) dB, drawn.
    reverb_drr_db: tuple[float, ...] = setting((0.0, 10.0), min=-20, max=40)
    #: Reverberation in recorded rooms: a folder of 16 kHz room impulse responses (WAV/FLAC),
    #: one drawn per utterance; "" = none.
    rir_folder: str = ""
    #: The share of utterances reverberated (the others stay dry).
    reverb_prob: float = setting(0.5, min=0, max=1)
    #: Add ``ids`` and ``transcripts`` to each batch (for evaluation reports).
    with_text: bool = False
    #: Parallel calls of the per-utterance maps (threads); -1 lets tf.data tune it.
    parallel_calls: int = setting(AUTOTUNE, min=AUTOTUNE, max=1024)
    #: Batches prepared ahead, in memory; -1 lets tf.data tune it.
    prefetch: int = setting(AUTOTUNE, min=AUTOTUNE, max=256)
    #: Training batches made by the workers of a tf.data service: its dispatcher's address,
    #: ``HOST:PORT`` or ``grpc://HOST:PORT``; "" = none (made in the training process).
    #: See docs/data-service.md for what changes (order, augmentation draws, resume).
    service: str = ""
    #: Seconds the training waits for the service (to reach its dispatcher, for a batch)
    #: before it stops with an error, instead of waiting for ever.
    service_timeout: float = setting(300.0, above=0, max=86_400)

    def __post_init__(self) -> None:
        validate(self, PipelineError)
        if list(self.bucket_boundaries) != sorted(set(self.bucket_boundaries)):
            raise PipelineError("bucket_boundaries must be increasing positive seconds, not "
                                f"{','.join(map(str, self.bucket_boundaries))}")
        if self.parallel_calls == 0:
            raise PipelineError("setting parallel_calls=0 is not allowed: must be -1 (tuned by "
                                "tf.data) or >= 1")
        if self.batch_seconds and not self.bucketing:
            raise PipelineError("batch_seconds needs bucketing=true (each length bucket's batch "
                                "size is what fits the budget)")
        if self.noise_folder and not self.noise_snr_db:
            raise PipelineError("noise_folder needs noise_snr_db (the range of SNRs to mix at)")
        for name in ("pitch_semitones", "noise_snr_db", "vtlp_alpha", "formant_ratio",
                     "reverb_rt60", "reverb_drr_db"):
            value = getattr(self, name)
            if value and (len(value) != 2 or value[0] > value[1]):
                raise PipelineError(f"{name} must be a range LOW,HIGH, not {value}")
        if self.reverb_rt60 and not self.reverb_drr_db:
            raise PipelineError("reverb_rt60 needs reverb_drr_db (the range of direct-to-"
                                "reverberant ratios)")
        if self.service and not SERVICE_ADDRESS.match(self.service):
            raise PipelineError(f"pipeline.service must be a dispatcher's address HOST:PORT or "
                                f"grpc://HOST:PORT, not {self.service!r}")
        if self.service and self.cache != "none":
            raise PipelineError("cache does not work with service: each service worker sees "
                                "only a changing part of the split (set cache=none)")
        if self.reverb_rt60 and self.rir_folder:
            raise PipelineError("set reverb_rt60 (synthesised rooms) or rir_folder (recorded "
                                "ones), not both")

    @property
    def service_target(self) -> str:
        """The dispatcher's address as TensorFlow takes it (``grpc://HOST:PORT``)."""
        return self.service if self.service.startswith("grpc://") else f"grpc://{self.service}"

    @property
    def spec_augment(self) -> bool:
        return self.freq_masks > 0 or self.time_masks > 0

    @property
    def audio_augment(self) -> bool:
        """Whether the audio itself changes each epoch (speed, pitch, VTLP, formants, reverb or
        noise)."""
        return bool(self.speed_factors or self.pitch_semitones or self.noise_snr_db
                    or self.vtlp_alpha or self.formant_ratio or self.reverb)

    @property
    def reverb(self) -> bool:
        """Whether some utterances are reverberated (synthesised or recorded rooms)."""
        return bool(self.reverb_rt60 or self.rir_folder) and self.reverb_prob > 0

    def for_evaluation(self) -> PipelineConfig:
        """The same batching without shuffling or augmentation, in a fixed order, with text."""
        return replace(
            self,
            shuffle=False,
            deterministic=True,
            freq_masks=0,
            time_masks=0,
            speed_factors=(),
            pitch_semitones=(),
            noise_snr_db=(),
            noise_folder="",
            vtlp_alpha=(),
            formant_ratio=(),
            reverb_rt60=(),
            rir_folder="",
            with_text=True,
            service="",
        )
