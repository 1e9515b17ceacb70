"""A run's calibration of its word confidences: the temperature ``asrkit evaluate --calibrate``
fits on dev (:mod:`asrkit.core.confidence`), saved as ``RUN/calibration.json`` and read by
``asrkit transcribe`` and ``asrkit evaluate``, which then report calibrated confidences unless
told not to; and the report of how well a split's word confidences are calibrated.

The file is written atomically and on disk before the command reports it
(:func:`asrkit.core.files.write_json`): a crash leaves the old calibration or the new one. It
names the checkpoint step it was fitted on; a command that loads another step still uses it and
says so, since the temperature of a model trained further is usually close but not the same.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from asrkit.core.confidence import (
    BINS,
    Bin,
    WordEvidence,
    brier_score,
    expected_calibration_error,
    reliability,
)
from asrkit.core.errors import AsrkitError
from asrkit.core.files import write_json
from asrkit.core.storage import Location

#: The file in a run folder.
CALIBRATION_FILE = "calibration.json"


@dataclass(frozen=True)
class Calibration:
    """A temperature fitted on a split's words with a decoder, at a checkpoint step, and the
    split's calibration error before and after it."""

    temperature: float
    split: str
    decoder: str
    step: int | None
    words: int
    ece_before: float
    ece_after: float

    def to_json(self) -> dict[str, Any]:
        return {"temperature": round(self.temperature, 4), "split": self.split,
                "decoder": self.decoder, "step": self.step, "words": self.words,
                "ece_before": round(self.ece_before, 4), "ece_after": round(self.ece_after, 4)}

    def describe(self) -> str:
        """``temperature 1.42, fitted on dev at step 1200``, for report lines."""
        step = "" if self.step is None else f" at step {self.step}"
        return f"temperature {self.temperature:.3g}, fitted on {self.split}{step}"


def save_calibration(folder: Location, calibration: Calibration) -> Location:
    """Write ``RUN/calibration.json`` atomically and durably; returns its path."""
    path = folder / CALIBRATION_FILE
    write_json(path, calibration.to_json())
    return path


def stale_warning(calibration: Calibration | None, step: Any, folder: Location) -> str | None:
    """One line when ``calibration`` was fitted at another checkpoint step than ``step``."""
    if calibration is None or calibration.step is None or step is None:
        return None
    if int(step) == calibration.step:
        return None
    return (f"the confidences' temperature ({calibration.temperature:.3g}) was fitted at step "
            f"{calibration.step} and this is step {step}: asrkit evaluate {folder} --split "
            f"{calibration.split} --calibrate fits it again")


def load_calibration(folder: Location) -> Calibration | None:
    """The run's calibration, ``None`` when it has none; a file that cannot be read is a
    one-line error saying how to replace it."""
    path = folder / CALIBRATION_FILE
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        calibration = Calibration(float(data["temperature"]), str(data["split"]),
                                  str(data["decoder"]),
                                  None if data["step"] is None else int(data["step"]),
                                  int(data["words"]), float(data["ece_before"]),
                                  float(data["ece_after"]))
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise AsrkitError(f"{path} cannot be read ({error}): fit it again with asrkit evaluate "
                          f"{folder} --split dev --calibrate, or delete it") from None
    if not (math.isfinite(calibration.temperature) and calibration.temperature > 0):
        raise AsrkitError(f"{path} holds temperature {calibration.temperature}, not a positive "
                          f"number: fit it again with asrkit evaluate {folder} --split dev "
                          "--calibrate, or delete it")
    return calibration


@dataclass
class ConfidenceReport:
    """How well a split's word confidences, at ``temperature``, predict which words are right:
    the expected calibration error over :data:`~asrkit.core.confidence.BINS` bins, the Brier
    score, the mean confidence against the share of words right, and the reliability bins."""

    temperature: float
    #: The run's calibration the temperature came from; ``None``: the model's own (1).
    calibration: Calibration | None
    words: int
    ece: float
    brier: float
    confidence: float
    accuracy: float
    bins: list[Bin] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"temperature": round(self.temperature, 4),
                "calibration": None if self.calibration is None else self.calibration.to_json(),
                "words": self.words, "ece": round(self.ece, 4), "ece_bins": BINS,
                "brier": round(self.brier, 4), "mean_confidence": round(self.confidence, 4),
                "accuracy": round(self.accuracy, 4),
                "reliability": [b.to_json() for b in self.bins]}

    def text(self) -> str:
        source = (self.calibration.describe() if self.calibration is not None
                  else "uncalibrated: --calibrate on the dev split fits a temperature")
        return (f"  word confidence: ECE {self.ece:.2%} ({BINS} bins), Brier {self.brier:.3f}, "
                f"mean {self.confidence:.2%} for {self.accuracy:.2%} right, {self.words} words "
                f"({source})")


def confidence_report(evidence: WordEvidence, temperature: float = 1.0,
                      calibration: Calibration | None = None) -> ConfidenceReport:
    """The calibration of ``evidence``'s words at ``temperature``."""
    confidences = evidence.confidences(temperature)
    correct = evidence.correct
    return ConfidenceReport(
        temperature, calibration, len(evidence),
        expected_calibration_error(confidences, correct), brier_score(confidences, correct),
        float(confidences.mean()) if len(evidence) else 0.0,
        float(correct.mean()) if len(evidence) else 0.0, reliability(confidences, correct))
