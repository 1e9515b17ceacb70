"""``asrkit evaluate``'s work: a saved run's checkpoint scored on a split
(:mod:`asrkit.runs.scoring` does the scoring), with the decoder the run or the user chooses, and
the calibration of its word confidences at the run's temperature (:mod:`asrkit.runs.calibration`;
``asrkit evaluate --calibrate`` fits it, :mod:`asrkit.evaluation.calibration`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asrkit.config.decoding import try_decoder
from asrkit.config.overrides import DecoderChoice
from asrkit.core.confidence import WordEvidence
from asrkit.core.errors import AsrkitError
from asrkit.core.storage import Location
from asrkit.dataset.shards import damaged_dataset_error
from asrkit.evaluation.restore import restore_networks
from asrkit.pipeline.batches import make_dataset
from asrkit.runs.calibration import confidence_report, load_calibration, stale_warning
from asrkit.runs.chunks import chunk_ms_of, with_chunk
from asrkit.runs.run import Run, load_run
from asrkit.runs.scoring import (
    BatchOutputs,
    Evaluation,
    Predict,
    decode_outputs,
    make_predict,
    model_outputs,
)
from asrkit.types import CTC_LOGITS

if TYPE_CHECKING:
    import tensorflow as tf


@dataclass
class SplitModel:
    """A run's checkpoint ready to run over a split: what every evaluation starts from."""

    run: Run
    predict: Predict
    batches: tf.data.Dataset
    #: Which weights, as :attr:`Evaluation.checkpoint` reports them.
    checkpoint: dict[str, Any]

    def outputs(self) -> Iterator[BatchOutputs]:
        """The model's outputs batch by batch; a damaged dataset file is a one-line error."""
        import tensorflow as tf

        try:
            yield from model_outputs(self.predict, self.batches)
        except tf.errors.DataLossError:
            error = damaged_dataset_error(self.run.dataset)
            if error is None:
                raise
            raise error from None


def load_split_model(run: Run, split: str, checkpoint: str = "best") -> SplitModel:
    """Load a run's checkpoint (``best``, else ``latest``; ``averaged``; ``best-by-METRIC``)
    and the pipeline of ``split``, warning when an older best hides a newer unscored latest."""
    model, head, state = restore_networks(run, checkpoint)
    if checkpoint in ("best", "latest"):
        scored = warn_if_latest_unscored(run.folder, state)
        if scored["kind"] == "best":
            scored["best_by"] = run.train.best_by
    else:  # averaged, or best-by-METRIC of a watcher
        scored = {"kind": checkpoint, "step": state["global_step"]}
        if "averaged_steps" in state:
            scored["averaged_steps"] = state["averaged_steps"]
    batches = make_dataset(run.dataset, split, run.labels, run.extractor, run.feature_config,
                           run.pipeline.for_evaluation())
    predict = make_predict(model, run.spec, run.model_config,
                           run.extractor.num_features(run.feature_config),
                           objective=run.objective, objective_config=run.objective_config,
                           head=head)
    return SplitModel(run, predict, batches, scored)


def evaluate_run(folder: str | Path, split: str = "test",
                 decoder: DecoderChoice | None = None, checkpoint: str = "best",
                 progress: bool = True, chunk_ms: float | None = None, *,
                 calibrated: bool = True, evidence: WordEvidence | None = None) -> Evaluation:
    """Evaluate a saved run's checkpoint (``best``, else ``latest``) on ``split`` with the
    run's decoder, or the one ``decoder`` chooses; a streaming run in chunks of ``chunk_ms``
    (:func:`asrkit.runs.chunks.with_chunk`; ``None``: its own).

    A CTC decoder's word confidences are measured at the run's calibrated temperature
    (``calibrated=False``: the model's own), and added to ``evidence`` when it is given; a
    decoder without word confidences is then refused."""
    # The decoder and the chunk first: a bad setting, or a file it needs and lacks, is said
    # before the model loads.
    run = with_chunk(load_run(folder), chunk_ms)
    chosen = run.choose_decoder(decoder or DecoderChoice())
    try_decoder(chosen, run.labels)
    if evidence is not None and chosen.reads != CTC_LOGITS:
        raise AsrkitError(f"word confidences come from CTC logits, and the {chosen.name} "
                          f"decoder reads {chosen.reads}: only a CTC run's words are calibrated")
    calibration = load_calibration(run.folder) if calibrated else None
    temperature = 1.0 if calibration is None else calibration.temperature
    words = WordEvidence(temperature) if evidence is None else evidence
    loaded = load_split_model(run, split, checkpoint)
    evaluation = decode_outputs(loaded.outputs(), chosen, loaded.run.labels, split, progress,
                                evidence=words)
    evaluation.checkpoint = loaded.checkpoint
    evaluation.chunk_ms = chunk_ms_of(run)
    stale = stale_warning(calibration, loaded.checkpoint.get("step"), run.folder)
    if stale:
        print(f"asrkit: warning: {stale}", file=sys.stderr)
    if chosen.reads == CTC_LOGITS:
        evaluation.word_confidence = confidence_report(words, temperature, calibration)
    return evaluation


def warn_if_latest_unscored(folder: Location, state: dict[str, Any]) -> dict[str, Any]:
    """Which checkpoint ``state`` is (kind and step); warn when it is an older best while the
    latest checkpoint is newer and was never scored on dev, so nobody reports stale weights by
    surprise."""
    pointers = {}
    for kind in ("best", "latest"):
        path = folder / "checkpoints" / f"{kind}.json"
        try:
            pointers[kind] = json.loads(path.read_text())["state"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
    step = int(state.get("global_step", 0))
    kind = "best" if pointers.get("best", {}).get("global_step") == step and (
        pointers.get("latest", {}).get("global_step") != step) else "latest"
    latest = pointers.get("latest", {})
    newer = int(latest.get("global_step", step))
    if kind == "best" and newer > step and latest.get("evaluated_step") != newer:
        print(f"asrkit: warning: scoring the best checkpoint (step {step}); the latest (step "
              f"{newer}) is newer and was never scored on dev: --checkpoint latest scores it",
              file=sys.stderr)
    return {"kind": kind, "step": step}
