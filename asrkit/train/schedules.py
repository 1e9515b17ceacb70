"""Learning-rate schedules: the rate of every step, from the settings and the loop state alone.

::

    rate(step) = shape(step) * lr_factor

``shape`` is the schedule (``lr_schedule``), a pure function of the step:

- ``constant``: a linear warm-up over ``warmup_steps``, then ``learning_rate``.
- ``cosine``: the same warm-up, then half a cosine from ``learning_rate`` down to
  ``lr_floor * learning_rate`` at the horizon (below), and the floor after it.
- ``noam``: ``learning_rate * noam_d_model**-0.5 * min(s**-0.5, s * warmup_steps**-1.5)`` with
  ``s`` the step counted from 1 ("Attention is all you need"; ``learning_rate`` is the factor,
  typically 1 to 2).
- ``newbob``: like ``constant``; its decay acts on ``lr_factor``.

``lr_factor`` changes only after a dev evaluation (:func:`after_evaluation`): on a plateau
(``plateau_patience`` evaluations without improvement: times ``plateau_factor``, with any
schedule), and with ``newbob`` (RETURNN's rule) whenever the dev score improved on the previous
evaluation's by less than ``newbob_threshold`` (relative): times ``newbob_factor``.

Cosine's horizon, in updates: ``lr_decay_steps`` if set, else ``max_steps`` if set, else the run's
``epochs`` times the updates an epoch (counted at the end of the first epoch; estimated before it
from the split's utterance count). With a time budget (``max_minutes``) the horizon is the updates
done plus those the remaining minutes allow (the smaller of that and the epochs' horizon), at the
average time an update has taken since update :data:`PROBE_FROM` of this process; the minutes left
are the run's clock's (:class:`asrkit.train.clock.RunClock`), the one the loop's stop and the
progress bar read. It is first estimated after :data:`PROBE_STEPS` more updates and then again at
every update, so that the average comes to include what the first updates do not show: dev
evaluations, checkpoints, epoch boundaries. The first updates are left out of the average: they
include compiling the step and filling the input pipeline, which made a 30-minute run's horizon 27 %
short, so its rate reached zero eight minutes before the budget ended; estimated only once, from the
updates after them, a 30-minute ``ds2`` run's horizon came out 21 % long (its nine dev evaluations),
so its rate ended at 8 % of its peak instead of at the floor. Until a horizon is known the rate
stays at ``learning_rate``, where cosine starts flat anyway.

Everything the rate depends on besides the settings (``lr_factor``, the previous dev score, an
estimated horizon) is in the loop state that every checkpoint saves, so a resumed run continues
the same curve: a resumed process keeps the horizon its run had estimated (set
``lr_decay_steps`` to change it).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from asrkit.config.train import TrainConfig
    from asrkit.train.clock import RunClock
    from asrkit.train.state import LoopState

#: A time budget's horizon comes from the average time of the updates since update PROBE_FROM
#: of this process (the first ones compile the step), first after PROBE_STEPS of them.
PROBE_FROM, PROBE_STEPS = 5, 30


def warmup(config: TrainConfig, step: int) -> float:
    """The linear warm-up's factor for update ``step`` (counted from 0)."""
    return min(1.0, (step + 1) / config.warmup_steps) if config.warmup_steps else 1.0


def shape(config: TrainConfig, step: int, horizon: int | None) -> float:
    """The schedule's rate for update ``step`` (counted from 0), before ``lr_factor``."""
    base = config.learning_rate
    if config.lr_schedule == "noam":
        s = step + 1
        return base * config.noam_d_model ** -0.5 * min(s ** -0.5,
                                                         s * config.warmup_steps ** -1.5)
    rate = base * warmup(config, step)
    if config.lr_schedule != "cosine" or not horizon or step < config.warmup_steps:
        return rate
    progress = min(1.0, (step - config.warmup_steps) / max(1, horizon - config.warmup_steps))
    floor = config.lr_floor
    return base * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))


def horizon(config: TrainConfig, state: LoopState) -> int | None:
    """Cosine's length in updates, when known (see the module docstring; :class:`Schedule`
    keeps ``state.schedule_steps``)."""
    return config.lr_decay_steps or config.max_steps or state.schedule_steps or None


def learning_rate(config: TrainConfig, state: LoopState) -> float:
    """The rate of the next update."""
    return shape(config, state.global_step, horizon(config, state)) * state.lr_factor


class Schedule:
    """The run's schedule: :func:`learning_rate`, after settling cosine's horizon when it must
    be estimated (``batches_per_epoch``: the split's estimate, until an epoch has counted them;
    ``clock``: the run's, whose budget and start bound a time budget's horizon)."""

    def __init__(self, config: TrainConfig, batches_per_epoch: int | None,
                 clock: RunClock) -> None:
        self.config = config
        self.batches_per_epoch = batches_per_epoch
        self.clock = clock
        self.first_step: int | None = None
        #: (time, step) where the speed measurement began.
        self.probe: tuple[float, int] | None = None
        #: Whether this process estimates the time budget's horizon (False once it finds one
        #: that a previous process of the run estimated).
        self.estimating = True

    def rate(self, state: LoopState) -> float:
        config = self.config
        if self.first_step is None:
            self.first_step = state.global_step
            self.estimating = not state.schedule_steps
        if config.lr_schedule == "cosine" and not (config.lr_decay_steps or config.max_steps):
            state.schedule_steps = self._estimate(state)
        return learning_rate(config, state)

    def _estimate(self, state: LoopState) -> int:
        """Updates in the whole run, or 0 while not yet known: by the epochs (again each time,
        as an epoch's count replaces the estimate), and at most what the time budget allows
        (estimated at every update by the process that started it, then kept in the state)."""
        config = self.config
        per_epoch = state.steps_per_epoch or self.batches_per_epoch
        by_epochs = (config.epochs * math.ceil(per_epoch / config.accumulate_steps)
                     if per_epoch else 0)
        if not self.clock.max_minutes:
            return by_epochs
        if not self.estimating:
            return min(state.schedule_steps, by_epochs) if by_epochs else state.schedule_steps
        now, done = self.clock.now(), state.global_step - (self.first_step or 0)
        if done >= PROBE_FROM and self.probe is None:
            self.probe = (now, state.global_step)
        if self.probe is None or state.global_step - self.probe[1] < PROBE_STEPS:
            return 0
        per_update = (now - self.probe[0]) / (state.global_step - self.probe[1])
        left = self.clock.left(now)
        by_time = state.global_step + int(left / per_update)
        return min(by_time, by_epochs) if by_epochs else by_time


def after_evaluation(config: TrainConfig, state: LoopState, score: float) -> str:
    """Change ``state.lr_factor`` after a dev evaluation (the caller has already counted it in
    ``state.evaluations_since_lr_change``); return why it changed (``"plateau"``, ``"newbob"``)
    or ``""``. ``newbob`` follows ``score``, the dev loss (RETURNN's dev score): it keeps
    falling while a young model's error rates sit at 100 %, which would halve the rate for
    nothing."""
    why = ""
    patience = config.plateau_patience
    if patience and state.evaluations_since_lr_change >= patience:
        state.lr_factor *= config.plateau_factor
        state.evaluations_since_lr_change = 0
        why = "plateau"
    previous = state.last_score
    if config.lr_schedule == "newbob" and previous is not None:
        if previous:
            improvement = (previous - score) / abs(previous)
        else:
            improvement = 0.0 if score == previous else -math.inf
        if not improvement >= config.newbob_threshold:  # NaN counts as no improvement
            state.lr_factor *= config.newbob_factor
            why = why or "newbob"
    state.last_score = score if math.isfinite(score) else previous
    return why
