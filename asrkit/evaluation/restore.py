"""A saved run's model with the weights of one of its checkpoints: what evaluation,
transcription, export and averaging start from.

What reads the model's outputs as CTC logits reads the model alone (:func:`restore_model`), and
refuses a run whose training objective's are not (:attr:`asrkit.types.Objective.outputs`) in
one line, before anything loads; evaluation, transcription and a transducer run's export read
the model and the objective's head (:func:`restore_networks`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from asrkit.config.objectives import require_ctc_outputs
from asrkit.core.errors import AsrkitError
from asrkit.runs.provenance import plugin_change
from asrkit.runs.run import Run, load_run
from asrkit.train.checkpoints import Checkpoints, networks
from asrkit.train.ema import load_averaged, shadow_of
from asrkit.train.growth import saved_model_config

if TYPE_CHECKING:
    import keras


def load_run_model(folder: str | Path,
                   checkpoint: str = "best") -> tuple[Run, keras.Model, dict[str, Any]]:
    """A saved run, its model with the ``checkpoint`` weights and that checkpoint's state: what
    evaluation, transcription and export all start from (:func:`restore_model`)."""
    run = load_run(folder)
    return (run, *restore_model(run, checkpoint))


def restore_model(run: Run, checkpoint: str = "best") -> tuple[keras.Model, dict[str, Any]]:
    """``run``'s model with the ``checkpoint`` weights (:func:`restore_networks`), and that
    checkpoint's state: for what reads its outputs as CTC logits (a CTC run's export)."""
    require_ctc_outputs(run.objective, "asrkit export")
    model, _, state = restore_networks(run, checkpoint)
    return model, state


def restore_networks(run: Run, checkpoint: str = "best"
                     ) -> tuple[keras.Model, keras.Model | None, dict[str, Any]]:
    """``run``'s model and its objective's head (``None`` when it has none) with the
    ``checkpoint`` weights (``best`` or ``latest``; the other when that one is missing or
    damaged; their moving average when the run keeps one), and that checkpoint's state.

    Every weight of the model must come from the checkpoint. When they do not match and the
    run was made with another version of the model's plugin (``plugins.json``), the error says
    so and which version to install: a plugin that changed its architecture is the likely cause,
    not a damaged run."""
    model_config = saved_model_config(run, checkpoint)  # a growing run's size at that point
    width = run.encoder_width()
    model = run.spec.build(model_config, run.num_features(), width)
    head = run.objective.build(run.objective_config, width, run.labels)
    # The moving average of the weights, when the run keeps one (an averaged checkpoint holds
    # only the mean of the weights).
    keeps_average = bool(run.train.ema_decay) and checkpoint != "averaged"
    shadow = shadow_of(model, head) if keeps_average else None
    trackables = {**networks(model, head), **({"ema": shadow} if shadow is not None else {})}
    watched = checkpoint.startswith("best-by-")
    try:
        state = Checkpoints(run.folder / ("watch" if watched else "checkpoints"),
                            **trackables).restore(checkpoint, complete=True)
    except AsrkitError:
        changed = plugin_change(run.folder, "model", run.train.model)
        if changed is None:
            raise
        raise AsrkitError(changed.message(run.folder, "its checkpoint")) from None
    if state is None and watched:
        metric = checkpoint.removeprefix("best-by-")
        raise AsrkitError(f"{run.folder} has no {checkpoint} checkpoint; keep one with `asrkit "
                          f"evaluate {run.folder} --watch --best-by {metric}` beside the training")
    if state is None and checkpoint == "averaged":
        raise AsrkitError(f"{run.folder} has no averaged checkpoint; write one with `asrkit "
                          f"average {run.folder} --last N`")
    if state is None:
        raise AsrkitError(f"{run.folder} has no checkpoint yet; train it first")
    if shadow is not None:
        load_averaged(model, shadow, state, head)
    return model, head, state
