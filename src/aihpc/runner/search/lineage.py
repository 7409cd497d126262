"""Where a trial's learning-rate schedule stands: along its lineage, or over its own epochs.

A *lineage* is a root trial (the seed network trained afresh, or a child of
the seed before the seed has trained) and every trial that starts from the
trained weights of one of its members: a child continues its parent's
lineage.  A trial records its lineage's start (:attr:`Lineage.start`: when
the root started, in seconds of the run's clock, the seconds its masters
ran from the run's start) and the epochs trained along it before the
trial's first (:attr:`Lineage.epochs`), so a resumed master rebuilds both
from the store.

With one schedule per lineage (``RunConfig.lineage_schedule``, and always
for strategy "seed"), the schedule's position at run time ``t`` is::

    f = (t - lineage start) / (run length - lineage start)      in [0, 1]

a lineage's learning rate starts (with its root's warm-up) when the root
starts and anneals to zero at the deadline, and a child continues at its
lineage's position without warming up again.  The master puts the
position at an epoch's start and at its expected end in the epoch's task
(:func:`positions`), and the worker interpolates between them step by step
(:meth:`aihpc.records.messages.EpochTask.positions`) and records them, so the
rate a step used is a function of recorded values.  An epoch that runs
longer than expected still ends at its expected position: the next one
starts from the clock.  One that ends sooner than expected leaves the
schedule ahead of the clock, and the schedule never runs back: the next
epoch starts where it ended, and goes on only as far as the clock will be
at its own expected end (it holds its rate while the clock catches up).

A worker's last epoch is sized to the time left (:func:`last_share`): an
epoch expected to end after the deadline trains only the share of its steps
that ends, with its validation, before it, so the run's last, annealed
training is evaluated, where a whole epoch would be cut unevaluated; along a
lineage it ends at the schedule's end.  This holds for a trial's own
schedule too.

Without the lineage schedule, a trial's schedule runs over its own epoch
budget: epoch ``e`` of ``E`` goes from ``(e - 1) / E`` to ``e / E`` (the
task's default).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Lineage:
    """A trial's place in its lineage: when the lineage's root started (seconds of the run's
    clock) and the epochs trained along it before the trial's first."""

    start: float
    epochs: int

    def after(self, epochs: int) -> Lineage:
        """The lineage as a trial that trained ``epochs`` epochs leaves it to its children."""
        return Lineage(self.start, self.epochs + epochs)


#: The share of the seconds left that a last epoch sized to the deadline leaves unused: an
#: epoch's duration varies, and one that overruns the deadline is cut unevaluated.
MARGIN = 0.1
#: The least share of its steps a sized epoch trains: less is not worth its validation pass, and
#: such an epoch is sent whole (the deadline cuts it).  After a sized epoch, what is left of the
#: run is about MARGIN of it, so one sized epoch ends a worker's run, not a train of ever
#: shorter ones.
MIN_SHARE = 0.1


def positions(
    start: float, t: float, seconds: float, run_length: float, reached: float = 0.0
) -> tuple[float, float]:
    """The lineage schedule's positions for an epoch sent at run time ``t`` and expected to last
    ``seconds``, for a lineage that started at ``start``, in a run of ``run_length`` seconds
    (whose schedule ends with the run: the module docstring): from the clock's position, or
    from ``reached`` (where the lineage's last epoch ended) if that is later, to the clock's
    position at its expected end, or no further than it starts (each within [0, 1])."""
    span = run_length - start
    if span <= 0:
        return 1.0, 1.0
    at = min(max((t - start) / span, reached, 0.0), 1.0)
    return at, min(max((t + seconds - start) / span, at), 1.0)


def last_share(seconds: float, eval_seconds: float, left: float) -> float:
    """The share of its training steps an epoch sent ``left`` seconds before the deadline trains,
    expected to take ``seconds``, ``eval_seconds`` of them validating: 1 where it ends in time;
    else the share that ends its validation :data:`MARGIN` of ``left`` before the deadline;
    1 where that share is under :data:`MIN_SHARE` (the deadline cuts it, as it cuts any
    epoch)."""
    if seconds <= left:
        return 1.0
    room, train = left * (1.0 - MARGIN) - eval_seconds, seconds - eval_seconds
    share = room / train if train > 0 else 0.0
    return share if share >= MIN_SHARE else 1.0


#: The phases of an epoch (aihpc.train.trainer's) that a trial's next epoch on the same worker
#: does not repeat, or repeats shorter: building the model, counting its operations, compiling
ONCE = ("other", "compile")


def steady_seconds(seconds: float, phase_seconds: dict[str, float]) -> float:
    """An epoch's ``seconds`` less its phases of :data:`ONCE`: what the trial's next epoch
    should take (its first epoch pays for them; an estimate too short only leaves the schedule
    behind the clock, which the next epoch makes up); all of them where nothing else was
    timed."""
    rest = seconds - sum(phase_seconds.get(name, 0.0) for name in ONCE)
    return rest if rest > 0 else seconds


def expected_seconds(
    own: float | None, first: float | None, recent: list[float], left: float, epochs: int
) -> float:
    """How long a trial's next epoch should take: its own last epoch's :func:`steady_seconds`
    (``own``), else the estimate made for its first (``first``: its parent's last, scaled by
    their operations per sample), else the median of the run's ``recent`` epochs, else the
    ``left`` seconds of the run over ``epochs`` (nothing measured yet: the run's first
    epochs)."""
    for value in (own, first):
        if value is not None and value > 0:
            return value
    if recent:
        return statistics.median(recent)
    return left / max(epochs, 1)
