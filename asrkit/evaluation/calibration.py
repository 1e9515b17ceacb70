"""``asrkit evaluate --calibrate``: fit the temperature of a run's word confidences on its dev
split (:func:`asrkit.core.confidence.fit_temperature`) and save it in the run folder
(:mod:`asrkit.runs.calibration`), where ``asrkit transcribe`` and ``asrkit evaluate`` find it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asrkit.config.overrides import DecoderChoice
from asrkit.core.confidence import WordEvidence, fit_temperature
from asrkit.core.errors import AsrkitError
from asrkit.core.storage import Location, location
from asrkit.evaluation.evaluate import evaluate_run
from asrkit.runs.calibration import (
    Calibration,
    ConfidenceReport,
    confidence_report,
    save_calibration,
)
from asrkit.runs.scoring import Evaluation


@dataclass
class Calibrated:
    """The split scored at the fitted temperature, the confidences before it, and the file."""

    evaluation: Evaluation
    before: ConfidenceReport
    calibration: Calibration
    path: Location

    def text(self) -> str:
        c = self.calibration
        return (self.evaluation.text() + f"\n\ncalibration: temperature {c.temperature:.3g} "
                f"fitted on {c.words} words of {c.split}: ECE {c.ece_before:.2%} -> "
                f"{c.ece_after:.2%}, Brier {self.before.brier:.3f} -> "
                f"{self.evaluation.word_confidence.brier:.3f}; saved to {self.path}")

    def to_json(self) -> dict[str, Any]:
        return {**self.evaluation.to_json(),
                "calibration": {**self.calibration.to_json(), "file": str(self.path),
                                "before": self.before.to_json()}}


def calibrate_run(folder: str | Path, split: str = "dev", decoder: DecoderChoice | None = None,
                  checkpoint: str = "best", progress: bool = True) -> Calibrated:
    """Score ``split`` with the run's decoder (or ``decoder``), fit the temperature that
    calibrates its words' confidences, and save it as ``RUN/calibration.json``."""
    evidence = WordEvidence()
    evaluation = evaluate_run(folder, split, decoder, checkpoint, progress, calibrated=False,
                              evidence=evidence)
    if not len(evidence):
        raise AsrkitError(f"the {evaluation.decoder} decoder transcribed no word of the {split} "
                          "split: there is nothing to calibrate on (a model this untrained "
                          "needs more training first)")
    before = evaluation.word_confidence
    assert before is not None  # a CTC decoder, or evaluate_run refused it
    temperature = fit_temperature(evidence)
    step = (evaluation.checkpoint or {}).get("step")
    after = confidence_report(evidence, temperature)
    calibration = Calibration(temperature, split, evaluation.decoder,
                              None if step is None else int(step), len(evidence), before.ece,
                              after.ece)
    after.calibration = calibration
    evaluation.word_confidence = after
    path = save_calibration(location(folder), calibration)
    return Calibrated(evaluation, before, calibration, path)
