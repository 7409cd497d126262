"""Hyperparameters for each trial from Optuna's TPE sampler, through ask/tell.

The master asks for a set of hyperparameters whenever it proposes a trial and
tells the search the trial's best validation accuracy when it ends (or that it
failed).  At 4,096 workers the master proposes about 200 trials a second, and
one Optuna ``ask`` costs milliseconds that grow with the study (2.7 ms at 20
trials, 12 ms at 1,000, ~50 ms at 5,000), so two things keep TPE affordable:

* :class:`~aihpc.nas.tpe_study.WindowedStudy` bounds the study the sampler sees: past a limit it is
  rebuilt from the best and the most recent finished trials, so an ask costs
  the same at trial 100 and at trial 100,000;
* :class:`HyperparameterSearch` runs that study in child processes which draw
  suggestions ahead, so the master's ``ask`` is a read from a pipe; with
  several, TPE's asks run side by side (``RunConfig.hpo_processes``).

On resume the study is rebuilt from the store's finished trials
(:meth:`HyperparameterSearch.restore`), so nothing needs pickling.

A child process is no single point of failure.  One found dead (killed, as
by the out-of-memory killer; exited, or closed its pipe without an
``("error", text)``), or silent for ``REPLY_TIMEOUT_S`` (then killed), is
replaced by a new one for the same stream, told the finished trials a
windowed study keeps (the master keeps that selection too,
:meth:`HyperparameterSearch.history`), and the ask or tell that noticed goes
on.  The dead child's trials still running are told to every child as
finished elsewhere when they end.  Each restart is a
:class:`~aihpc.nas.helper_restart.HelperRestart` in
:attr:`HyperparameterSearch.restarts`; past :data:`MAX_RESTARTS` in a run,
or on a child's own error (a bug), the search raises
:class:`~aihpc.base.errors.RunFailure`.
"""

from __future__ import annotations

from typing import Any

from aihpc.base.errors import RunFailure
from aihpc.nas.helper_restart import HelperRestart
from aihpc.nas.hpo_process import ProcessDied, SearchProcess
from aihpc.nas.tpe_study import WINDOW, BestAndRecent, SearchSpace

# Suggestions the child keeps drawn ahead: as many as the master has epochs
# in flight, within these bounds.  Each one is decided before the results told
# after it was drawn, so depth makes suggestions staler; but with S epochs in
# flight a suggestion already misses the S running trials' results, so a depth
# of S at most doubles that lag.  Depth lets the child draw while the master
# does other work: the master asks in bursts (one per slot freed), and with
# 64 in flight, 4 ahead gave 160 new trials/s and 64 ahead 206 (master_capacity).
# Constant liar counts the buffered ones as running, so they do not repeat one
# another.
PREFETCH_MIN, PREFETCH_MAX = 4, 256
# Search processes a run restarts at most, all streams together: enough for a
# few out-of-memory kills in an hour, few enough that a child dying at once
# every time ends the run within seconds (each start imports optuna: ~0.5 s).
MAX_RESTARTS = 5


class HyperparameterSearch:
    """TPE suggestions for the master, from :class:`WindowedStudy` instances in child processes.

    Each child ("spawn": the master has torch threads, and the child never
    imports torch) keeps suggestions drawn ahead (``depth``, see
    :data:`PREFETCH_MIN`), so :meth:`ask` normally returns in microseconds.
    With ``processes`` > 1 the master asks the children in turn and tells
    every child every result (its own trials as tells, the others' as
    finished trials), so each study learns from all of them while their
    asks, TPE's cost, run side by side.  The master's trial numbers are
    assigned here, so a trial resumed from an earlier segment gets one
    without a round trip.  The messages to and from a child are listed in
    :mod:`aihpc.nas.hpo_process`.

    A child draws nothing before the first ask, so the trials restored before
    it shape the first suggestions.  Suggestions depend on when tells reach the
    child, so unlike :class:`WindowedStudy` the sequence is not reproducible.
    A dead or silent child is restarted (the module docstring says how), at
    most ``max_restarts`` times; ``restarts`` records each.

    As with any "spawn" child, the master's main module is imported again in
    the child (as ``__mp_main__``): it must keep its work under ``if __name__
    == "__main__"``, and should not import torch at the top (the ``aihpc``
    console script and the benchmarks do neither).  :meth:`close` stops the
    children; so does dropping the object, or the master's exit.
    """

    def __init__(
        self,
        seed: int,
        space: SearchSpace,
        *,
        window: int = WINDOW,
        processes: int = 1,
        max_restarts: int = MAX_RESTARTS,
    ) -> None:
        if processes < 1:
            raise ValueError(f"processes must be >= 1, got {processes}")
        if window < 2:
            raise ValueError(f"window must be >= 2, got {window}")
        if max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {max_restarts}")
        self.distributions: dict[str, Any] = space.distributions()
        self.fixed = dict(space.fixed)
        self.max_restarts = max_restarts
        self.restarts: list[HelperRestart] = []  # the children started again, in order
        self._seed, self._space = seed, space
        self._window = window
        # started now, so the children's start overlaps the master's own
        self._children = [self._start(stream) for stream in range(processes)]
        self._turn = 0  # the child the next ask reads from
        self._next_number = 0
        # number -> (child, token, params)
        self._tokens: dict[int, tuple[SearchProcess, int, dict[str, Any]]] = {}
        # number -> params: trials the children learn of only as finished ones, when
        # told: adopted (resumed from an earlier segment, inherited, the task's defaults), or
        # drawn by a child since restarted
        self._adopted: dict[int, dict[str, Any]] = {}
        # what a restarted child is told: the finished trials a WindowedStudy keeps
        self._history: BestAndRecent[tuple[dict[str, Any], float]] = BestAndRecent(window)

    def ask(self, depth: int = PREFETCH_MIN) -> tuple[int, dict[str, Any]]:
        """A new trial number and its hyperparameters (plus the fixed ones).

        ``depth``: how many suggestions the children should keep drawn ahead
        (the master's epochs in flight), bounded by :data:`PREFETCH_MIN` and
        :data:`PREFETCH_MAX`, and shared between the children.  A child found
        dead is restarted, and the new one asked.
        """
        depth = min(max(depth, PREFETCH_MIN), PREFETCH_MAX)
        stream = self._turn
        self._turn = (self._turn + 1) % len(self._children)
        while True:
            child = self._children[stream]
            try:
                token, params = self._suggestion(child, -(-depth // len(self._children)))
                break
            except ProcessDied as death:
                self._restart(stream, death)
        number = self._new_number()
        self._tokens[number] = (child, token, params)
        return number, {**params, **self.fixed}

    def tell(self, number: int, accuracy: float | None) -> None:
        """Report a trial's best validation accuracy; ``None`` for a failed trial."""
        accuracy = None if accuracy is None else float(accuracy)
        if number in self._tokens:
            owner, token, params = self._tokens.pop(number)
            self._finish(params, accuracy, (owner, token))
        elif number in self._adopted:
            self._finish(self._adopted.pop(number), accuracy)
        else:
            raise ValueError(f"trial number {number} was never asked, or was told already")

    def restore(self, params: dict[str, Any], accuracy: float | None) -> None:
        """Re-add a trial finished in an earlier segment of the run."""
        self._finish(self._values(params), None if accuracy is None else float(accuracy))

    def adopt(self, params: dict[str, Any]) -> int:
        """A number for a trial whose hyperparameters TPE did not draw: one that was running when
        a master died (it keeps its old ones), one that inherited its parent's, or one with the
        task's defaults.  ``params`` must lie within the search space.

        The children learn of it only when it is told (as a frozen trial), so
        constant liar does not count it as running meanwhile.
        """
        number = self._new_number()
        self._adopted[number] = self._values(params)
        return number

    def history(self) -> list[tuple[dict[str, Any], float]]:
        """What a restarted child is told: the finished trials (params, accuracy) a
        :class:`WindowedStudy` of this window keeps, oldest first."""
        return self._history.items()

    def close(self) -> None:
        """Stop the children (waits for them to exit); later calls raise.  Safe to call twice."""
        for child in self._children:
            child.stop()

    def _start(self, stream: int) -> SearchProcess:
        return SearchProcess(self._seed, stream, self._space, self._window)

    def _suggestion(self, child: SearchProcess, share: int) -> tuple[int, dict[str, Any]]:
        """The next suggestion of ``child`` (its token and params), which keeps ``share`` more
        drawn."""
        # ask for the replacements first, so the child draws them while this one is read
        short = share + 1 - (child.drawn - child.received)
        if short > 0:
            child.send(("draw", short))
            child.drawn += short
        _, token, params = child.receive()
        child.received += 1
        return token, params

    def _finish(
        self,
        params: dict[str, Any],
        accuracy: float | None,
        told: tuple[SearchProcess, int] | None = None,
    ) -> None:
        """Keep a finished trial in the history and tell every child of it: ``told``, the child
        that drew it and its token, as a tell, the others as a finished trial."""
        if accuracy is not None:
            self._history.add(accuracy, (params, accuracy))
        owner, token = told if told is not None else (None, None)
        for stream, child in enumerate(self._children):
            try:
                child.send(
                    ("tell", token, accuracy) if child is owner else ("add", params, accuracy)
                )
            except ProcessDied as death:
                # the new child's history holds this trial (unless it failed: TPE needs it not)
                self._restart(stream, death)

    def _restart(self, stream: int, death: ProcessDied) -> None:
        """Replace the dead child of ``stream`` by a new one told the history, and record it.

        The trials the dead child drew that are still running are told as
        finished elsewhere (the new child's tokens start again).  A new child
        that dies while told is restarted too.  Past ``max_restarts`` restarts
        in all, the death is a RunFailure.
        """
        while True:
            if len(self.restarts) >= self.max_restarts:
                raise RunFailure(
                    f"{death}; not restarted: the run's {self.max_restarts} restarts of "
                    f"search processes are used up"
                ) from None
            dead = self._children[stream]
            if dead.process.is_alive():
                dead.process.kill()  # it closed its pipe: of no more use
            dead.stop()
            for number in [n for n, (child, _, _) in self._tokens.items() if child is dead]:
                self._adopted[number] = self._tokens.pop(number)[2]
            child = self._children[stream] = self._start(stream)
            history = self.history()
            self.restarts.append(HelperRestart(death.t, stream, death.pid, death.how, len(history)))
            try:
                for params, accuracy in history:
                    child.send(("add", params, accuracy))
                return
            except ProcessDied as again:
                death = again

    def _new_number(self) -> int:
        number = self._next_number
        self._next_number += 1
        return number

    def _values(self, params: dict[str, Any]) -> dict[str, Any]:
        missing = sorted(set(self.distributions) - set(params))
        if missing:
            raise ValueError(f"hyperparameters {missing} missing from {sorted(params)}")
        return {name: params[name] for name in self.distributions}
