"""Which dev evaluation becomes the ``best`` checkpoint: the error rate users read (``best_by``,
WER by default), ties broken by the other rate and then the loss; old runs keep their choice."""

from __future__ import annotations

import pytest

from asrkit.config.run import read_train
from asrkit.train.evaluations import improves, ranked
from asrkit.train.state import LoopState


def dev(loss: float, wer: float, cer: float) -> dict[str, float]:
    return {"loss": loss, "wer": wer, "cer": cer}


def best_of(evaluations: list[dict[str, float]], best_by: str, min_delta: float = 0.0) -> int:
    """The index of the evaluation kept as best, as a run would keep it."""
    state, kept = LoopState(), -1
    for index, evaluation in enumerate(evaluations):
        score, *ties = ranked(best_by, evaluation)
        if improves(score, ties, state, min_delta):
            state.best, state.best_ties, kept = score, ties, index
    return kept


# A confident model: the loss rises after the second evaluation while the errors keep falling.
CONFIDENT = [dev(40.0, 1.0, 1.0), dev(31.1, 0.60, 0.20), dev(33.0, 0.52, 0.16),
             dev(35.1, 0.46, 0.12)]


def test_when_loss_and_wer_disagree_the_default_keeps_the_lowest_wer():
    assert best_of(CONFIDENT, "wer") == 3
    assert best_of(CONFIDENT, "cer") == 3
    assert best_of(CONFIDENT, "loss") == 1


def test_a_young_models_100_percent_wer_ties_go_to_the_lower_cer_then_loss():
    young = [dev(90.0, 1.0, 1.0), dev(70.0, 1.0, 1.0), dev(60.0, 1.0, 0.95), dev(65.0, 1.0, 0.95)]
    assert best_of(young, "wer") == 2


def test_min_delta_applies_to_the_chosen_score():
    close = [dev(10.0, 0.50, 0.20), dev(9.0, 0.495, 0.19)]
    assert best_of(close, "wer", min_delta=0.01) == 0
    assert best_of(close, "wer") == 1


def test_a_resumed_state_saved_before_ties_were_kept_still_compares():
    state = LoopState.from_json({"best": 0.5, "best_step": 3})
    assert state.best_ties == []
    assert improves(0.4, [0.1, 5.0], state, 0.0)
    assert not improves(0.5, [0.1, 5.0], state, 0.0)


@pytest.mark.parametrize(("saved", "chosen"), [
    ({}, "loss"),
    ({"early_stop_metric": "cer"}, "cer"),
    ({"best_by": "wer"}, "wer"),
])
def test_runs_saved_before_best_by_keep_choosing_as_they_did(saved, chosen):
    assert read_train({"model": "brnn", **saved}).best_by == chosen
