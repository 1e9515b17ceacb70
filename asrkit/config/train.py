"""How to train (``-o KEY=VALUE``, the ``train`` section of a run's configuration).

Optimiser, schedule, stopping, checkpoint and evaluation cadence, devices and precision: what
the training engine (:mod:`asrkit.train`) reads, declared here with the other sections so that
a run's configuration is built and checked before anything heavy is imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from asrkit.core.errors import AsrkitError
from asrkit.core.settings import (
    MAX_BATCH_SIZE,
    MAX_EPOCHS,
    MAX_MINUTES,
    MAX_SEED,
    MAX_STEPS,
    setting,
    validate,
)

#: The arithmetic of training (:mod:`asrkit.train.precision`).
PRECISIONS = ("auto", "float32", "mixed_float16", "mixed_bfloat16")
#: ``devices``: every GPU (empty), the CPU, GPU indices, or explicit device names.
DEVICES_PATTERN = r"\s*(|cpu|\d+(\s*,\s*\d+)*|/[^,]+(,\s*/[^,]+)*)\s*"
#: The sections of a run's configuration, as ``-o SECTION.KEY=VALUE`` names them.
SECTIONS = ("train", "model", "features", "pipeline", "decoder", "objective")
#: Learning-rate schedules (:mod:`asrkit.train.schedules`).
SCHEDULES = ("constant", "cosine", "noam", "newbob")
#: The dev scores ``best_by`` may name (:func:`asrkit.train.evaluations.ranked` breaks ties).
BEST_BY = ("wer", "cer", "loss")


@dataclass(frozen=True)
class TrainConfig:
    """How to train. Optimiser defaults are the Deep Speech notebook's."""

    model: str = "brnn"
    #: The registered feature extractor the model reads; "" = the model's own
    #: (``ModelSpec.features``). A run records the one it uses.
    features: str = ""
    dataset: str = "sample"
    epochs: int = setting(10, min=0, max=MAX_EPOCHS)
    #: Utterances per batch per device ("tower"); the global batch is this times the devices.
    batch_size: int = setting(16, min=1, max=MAX_BATCH_SIZE)
    #: Adam's rate (with ``noam``, a factor of its schedule). Beyond 100 no model trains.
    learning_rate: float = setting(0.001, above=0, max=100)
    beta1: float = setting(0.9, min=0, below=1)
    beta2: float = setting(0.999, min=0, below=1)
    epsilon: float = setting(1e-8, above=0, max=1)
    #: Clip gradients to this global norm; 0 = no clipping.
    #: Beyond the maximum nothing is clipped anyway; TensorFlow's float32 would make it inf.
    clip_norm: float = setting(0.0, min=0, max=1e6)
    #: Linear warm-up of the learning rate over this many steps.
    warmup_steps: int = setting(0, min=0, max=MAX_STEPS)
    #: Reduce the learning rate by ``plateau_factor`` after this many dev evaluations without
    #: an improvement of ``min_delta`` in ``best_by``; 0 = never.
    plateau_patience: int = setting(0, min=0, max=MAX_EPOCHS)
    plateau_factor: float = setting(0.1, above=0, max=1)
    #: Stop after this many dev evaluations without improvement of ``best_by``; 0 = never.
    early_stop_patience: int = setting(0, min=0, max=MAX_EPOCHS)
    #: The dev score that chooses the ``best`` checkpoint (what the report, ``evaluate``,
    #: ``transcribe`` and ``export`` use) and drives plateaus and early stopping. The error rate
    #: users read, by default: CTC's loss rises as a model grows confident while its errors
    #: still fall, so the lowest loss is often an older, worse model. Ties (a young model's
    #: WER stays at 100 %) are broken by the other rate, then the loss.
    best_by: str = setting("wer", choices=BEST_BY)
    min_delta: float = setting(0.0, min=0)
    seed: int = setting(0, min=0, max=MAX_SEED)
    #: Stop after this many steps in all (0 = run all epochs).
    max_steps: int = setting(0, min=0, max=MAX_STEPS)
    #: Stop after this many minutes of training in this process (0 = no limit); the run can be
    #: resumed later for more.
    max_minutes: float = setting(0.0, min=0, max=MAX_MINUTES)
    #: Write the latest checkpoint every this many minutes, and at every epoch end.
    checkpoint_minutes: float = setting(10.0, min=0, max=MAX_MINUTES)
    #: ... and also every this many steps (0 = only by time and epoch).
    checkpoint_steps: int = setting(0, min=0, max=MAX_STEPS)
    #: Devices as towers: "" = every GPU (or the CPU), else e.g. "0,1" (GPU indices) or "cpu".
    devices: str = setting("", pattern=DEVICES_PATTERN, pattern_doc=(
        "'' (every GPU, else the CPU), 'cpu', GPU indices such as '0,1', or device names "
        "such as '/cpu:0,/cpu:1'"))
    #: The arithmetic of training: ``float32``, ``mixed_float16`` (GPUs), ``mixed_bfloat16``
    #: (CPUs with AMX or AVX512-BF16), or ``auto``: bfloat16 on a CPU that multiplies it in
    #: hardware, else float32 (:mod:`asrkit.train.precision`).
    precision: str = setting("auto", choices=PRECISIONS)
    #: Seconds a collective operation (gradient all-reduce) may wait for other workers before
    #: the run stops with an error: a dead worker must not hang the others for ever. At most a
    #: day (TensorFlow takes it in whole milliseconds).
    worker_timeout: float = setting(300.0, above=0, max=86_400)
    train_split: str = "train"
    dev_split: str = "dev"
    #: Evaluate on the dev split (every epoch end, the cadence below, the stop); false when
    #: ``asrkit evaluate --watch`` scores the checkpoints in another process.
    evaluate_dev: bool = True
    decoder: str = "greedy"
    #: The decoder of the dev evaluations while training (the run's decoder settings when it
    #: is ``decoder``, else its own defaults); empty: ``decoder``. A search much dearer than
    #: greedy (an attention run's joint beam) otherwise spends a share of a short run's minutes
    #: on dev; the best checkpoint is then the best by this decoder's score, and the final
    #: report, ``asrkit evaluate``, ``transcribe`` and ``export`` still use ``decoder``.
    dev_decoder: str = ""
    #: The training objective (:class:`asrkit.types.Objective`): what the model's output frames
    #: are trained to be, with the loss; its settings are ``-o objective.KEY=VALUE``. Fixed once
    #: the run has started.
    objective: str = "ctc"
    #: The labels: ``chars`` (the dataset's alphabet) or a file a tokenizer built, such as a
    #: SentencePiece model from ``asrkit tokenizer build`` (:mod:`asrkit.tokenizers`).
    tokenizer: str = "chars"
    #: Stop with an error after this many consecutive batches with a non-finite loss.
    max_bad_batches: int = setting(10, min=1, max=MAX_STEPS)
    log_every: int = setting(10, min=1, max=MAX_STEPS)
    #: Evaluate on the dev split every this many minutes of training and/or steps (0 = off),
    #: besides every epoch end and the stop; the best checkpoint is chosen among them all.
    eval_every_minutes: float = setting(0.0, min=0, max=MAX_MINUTES)
    eval_every_steps: int = setting(0, min=0, max=MAX_STEPS)
    #: The model's size preset (:mod:`asrkit.config.presets`): auto (``full`` on GPUs, ``cpu`` on a
    #: CPU), a preset's name, or none. A run records the one it used.
    preset: str = setting("auto", pattern=r"[A-Za-z0-9_.-]+")
    #: Micro-batches whose gradients make one update: K batches of B train as one of K*B.
    #: Beyond 1024 an update comes too rarely to train.
    accumulate_steps: int = setting(1, min=1, max=1024)
    #: The learning-rate schedule (:mod:`asrkit.train.schedules`): constant after the warm-up,
    #: cosine to ``lr_floor`` over ``lr_decay_steps`` (0: the run's length), noam, newbob.
    lr_schedule: str = setting("constant", choices=SCHEDULES)
    #: Where cosine ends, as a fraction of ``learning_rate``.
    lr_floor: float = setting(0.0, min=0, max=1)
    lr_decay_steps: int = setting(0, min=0, max=MAX_STEPS)
    #: Noam's model width (``d_model ** -0.5`` scales the rate).
    noam_d_model: int = setting(512, min=1, max=65_536)
    #: Newbob: multiply the rate by ``newbob_factor`` after a dev evaluation whose relative
    #: improvement over the previous one is below ``newbob_threshold``.
    newbob_threshold: float = setting(0.01)
    newbob_factor: float = setting(0.5, above=0, max=1)
    #: Exponential moving average of the weights, used for evaluation and export; 0 = off.
    ema_decay: float = setting(0.0, min=0, below=1)
    #: Keep this many of the newest checkpoints besides latest and best (for ``asrkit average``);
    #: each is a copy of the weights on disk.
    keep_checkpoints: int = setting(0, min=0, max=10_000)
    #: Fine-tuning: the run (``RUN:best`` or ``RUN:latest``) whose weights a new run starts
    #: from, set by ``--init-from``; "" = random weights (:mod:`asrkit.train.finetune`).
    init_from: str = ""
    #: Layers not taken from ``init_from`` but initialised afresh: the output layer when the
    #: alphabet differs (recorded by ``--init-from``), and any named here.
    init_reset: tuple[str, ...] = setting((), pattern=r"[^,\s]+", pattern_doc="layer names")
    #: Layers whose weights training leaves unchanged (names as the model's layers).
    freeze: tuple[str, ...] = setting((), pattern=r"[^,\s]+", pattern_doc="layer names")
    #: Pretraining by growth (:mod:`asrkit.train.growth`): the epochs (from 1, increasing) at
    #: whose end one layer is added; the run starts with one layer per listed epoch fewer than
    #: the model's configured count. Only for models that can grow (ds2, conformer).
    grow_epochs: tuple[int, ...] = setting((), min=1, max=MAX_EPOCHS)

    def __post_init__(self) -> None:
        validate(self)
        if self.lr_schedule == "noam" and not self.warmup_steps:
            raise AsrkitError("lr_schedule=noam needs warmup_steps >= 1 (its peak)")
        if any(b <= a for a, b in pairwise(self.grow_epochs)):
            raise AsrkitError(f"grow_epochs={','.join(map(str, self.grow_epochs))}: list the "
                              "epochs in increasing order, each once")
