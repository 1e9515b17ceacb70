"""``asrkit average RUN --last N``: the mean of a run's last N checkpoints, as a checkpoint.

Averaging the weights of the last few checkpoints of a run usually scores a little better than
any one of them (as fairseq's and ESPnet's recipes do). A run keeps its newest
``keep_checkpoints`` checkpoints for this (``checkpoints/history.json``; by default only the
latest and the best are kept). The averaged checkpoint holds the mean of their trainable
weights (the model's, and the training objective's head's when it has one); non-trainable ones
(batch-norm statistics) are the newest checkpoint's. It is written as
``checkpoints/averaged.json`` and its folder, like the others, and ``evaluate``, ``transcribe``
and ``export`` take it with ``--checkpoint averaged``. A later ``asrkit average``
replaces it; training keeps it (it is never trained on, and never used as a fallback).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from asrkit.core.errors import AsrkitError
from asrkit.runs.run import load_run
from asrkit.train.checkpoints import AVERAGED, Checkpoints, networks, trainable_variables
from asrkit.train.growth import saved_model_config

if TYPE_CHECKING:
    import numpy as np


def average_run(folder: str | Path, last: int) -> dict[str, Any]:
    """Write the averaged checkpoint of ``folder``'s last ``last`` kept checkpoints; return its
    state (``global_step``: the newest one's; ``averaged_steps``: the steps averaged)."""
    import numpy as np
    import tensorflow as tf

    run = load_run(folder)
    checkpoints = Checkpoints(run.folder / "checkpoints")
    kept = checkpoints.history()
    if len(kept) < last:
        raise AsrkitError(
            f"{run.folder} keeps {len(kept)} checkpoint(s), not the {last} to average; train "
            f"with -o keep_checkpoints={last} (or more), or average fewer with --last"
        )
    chosen = kept[-last:]
    # A growing run (asrkit.train.growth): the size of its latest checkpoint, and every one
    # averaged must hold all of that model's weights (none from before a growth).
    width = run.encoder_width()
    model = run.spec.build(saved_model_config(run, "latest"),
                           run.extractor.num_features(run.feature_config), width)
    head = run.objective.build(run.objective_config, width, run.labels)
    variables = trainable_variables(model, head)
    reader = tf.train.Checkpoint(**networks(model, head))
    total: list[np.ndarray] = []
    for entry in chosen:  # the newest last, so its non-trainable weights stay
        status = reader.read(str(checkpoints.folder / entry["folder"] / "ckpt"))
        try:
            status.assert_existing_objects_matched()
        except AssertionError:
            raise AsrkitError(
                f"the checkpoint of step {entry['step']} in {run.folder} lacks weights of the "
                "model as it is now (saved before it grew); average fewer with --last"
            ) from None
        status.expect_partial()
        weights = [np.asarray(w.numpy(), np.float64) for w in variables]
        total = weights if not total else [t + w for t, w in zip(total, weights, strict=True)]
    for weight, summed in zip(variables, total, strict=True):
        weight.assign((summed / len(chosen)).astype(weight.dtype))
    steps = [int(entry["step"]) for entry in chosen]
    state = {"global_step": steps[-1], "averaged_steps": steps, "ema_from_step": -1}
    Checkpoints(checkpoints.folder, **networks(model, head)).save(AVERAGED, steps[-1], state)
    return state
