"""The run's reports: the warning before training about utterances too short to align, and the
final report after it.

The final report scores the best dev-scored checkpoint on ``test`` (else on dev): every stop
scores the final weights, so the best is never an older, unscored one. Without a dev split it
scores the final weights.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm import tqdm

from asrkit.core.errors import AsrkitError
from asrkit.core.frames import fits, frame_seconds
from asrkit.core.storage import Location, location
from asrkit.dataset.manifest import read_csv
from asrkit.pipeline.batches import WAV_HEADER_BYTES
from asrkit.runs.scoring import write_report
from asrkit.types import SAMPLE_RATE

if TYPE_CHECKING:
    from asrkit.runs.run import Run
    from asrkit.train.evaluations import SplitScorer
    from asrkit.train.model import TrainedModel
    from asrkit.train.records import RunRecords
    from asrkit.train.state import LoopState
    from asrkit.types import FeatureExtractor

#: Utterances too short for their transcripts named in ``metrics.jsonl`` (the count is all).
TOO_SHORT_NAMED = 100


def too_short(run: Run, dataset_dir: Location | str, split: str) -> list[str]:
    """The audio files of ``split`` (from ``<split>.csv``; none without it) that are too short
    for their transcripts with ``run``'s features, model and training objective (its
    ``frames_needed``)."""
    path = location(dataset_dir) / f"{split}.csv"
    if not path.is_file():
        return []
    objective, objective_config = run.objective, run.objective_config
    short = []
    for row in read_csv(path):
        samples = (round(row.duration * SAMPLE_RATE) if row.duration is not None
                   else max(0, (row.wav_filesize - WAV_HEADER_BYTES) // 2))
        try:
            needed = objective.frames_needed(objective_config,
                                             run.labels.encode(row.transcript))
        except AsrkitError:  # the pipeline names the characters the labels cannot spell
            continue
        if not fits(samples, needed, run.feature_config, run.spec, run.model_config):
            short.append(Path(row.wav_filename).stem)
    return short


def warn_too_short(run: Run, dataset_dir: Location, extractor: FeatureExtractor, split: str,
                   records: RunRecords) -> None:
    """Warn once, before training, of the utterances of ``split`` that the run's objective
    cannot align with this run's features and model (:func:`asrkit.core.frames.fits`, from
    the split's CSV). The import checked only the loosest case, every 10 ms frame kept; a
    model that subsamples time needs longer audio. Training leaves them out of the loss and
    names them as it meets them."""
    short = too_short(run, dataset_dir, split)
    if not short:
        return
    seconds = frame_seconds(run.feature_config, run.spec, run.model_config)
    records.metrics({"event": "too_short", "split": split, "count": len(short),
                     "utterances": short[:TOO_SHORT_NAMED]})
    tqdm.write(f"asrkit: warning: {len(short)} utterance(s) of {split} are too short for "
               f"their transcripts at {run.spec.name}'s {seconds * 1000:g} ms output "
               f"frames ({extractor.name} features); the {run.objective.name} objective "
               "cannot align them: "
               f"{', '.join(short[:3])}{', ...' if len(short) > 3 else ''}",
               file=sys.stderr)


def final_report(trained: TrainedModel, scorer: SplitScorer, state: LoopState,
                 records: RunRecords) -> None:
    """Evaluate the best dev-scored checkpoint (every stop scores the final weights, so it
    is never an older unscored one), or the final weights when no dev split is scored; write
    the report of the first split there is of ``test`` and dev."""
    config = trained.config
    best = trained.checkpoints.state("best") if state.best_step >= 0 else None
    if best is not None:
        trained.checkpoints.restore("best")
        checkpoint = {"kind": "best", "step": best["global_step"], "best_by": config.best_by,
                      f"dev_{config.best_by}": best["best"]}
    else:
        checkpoint = {"kind": "latest", "step": state.global_step}
    for split in ("test", config.dev_split):
        if scorer.has_split(split):
            evaluation = scorer.evaluate(split)
            evaluation.checkpoint = checkpoint
            if records.chief:
                write_report(evaluation, trained.run.folder)
            records.metrics({"event": "report", "checkpoint": checkpoint, **{
                k: v for k, v in evaluation.to_json().items()
                if k in ("split", "wer", "cer", "loss", "utterances")}})
            return
