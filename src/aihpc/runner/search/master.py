"""The master: one process that runs the asynchronous search.

Whenever a worker slot is free the master fills it at once: with the next
epoch of a running trial, an epoch to retry, or a new trial — a child grown
from a parent the strategy chooses, starting from the parent's trained
weights, or a fork of the running trial that leads the run, grown where
that leader is kept past its plateau (:mod:`aihpc.runner.search.fork`,
:mod:`aihpc.runner.search.lifecycle`; with strategy "none" or "seed", the seed
network afresh), with hyperparameters from TPE or its parent's
(:mod:`aihpc.runner.search.proposals`).
Each epoch's task carries its learning-rate schedule's positions
(:mod:`aihpc.runner.search.lineage`).  Results come back epoch by epoch and
are committed to the store as they arrive; after each, the trial trains on
or ends (:mod:`aihpc.runner.search.lifecycle`: its budget, successive
halving, its plateau, patience).  With ``screen = K``, a new child is first
a proxy screening of K candidate children on a worker, and the best scored
becomes the trial (:mod:`aihpc.runner.search.screening`).  A resumed master
rebuilds the search from the store (:mod:`aihpc.runner.search.resume`).

Weights never pass through the master: workers write them to the run's
weight directory and return references (:mod:`aihpc.train.weights`), and the
master keeps or deletes each file (:mod:`aihpc.runner.search.files`).  The
master morphs architectures only, and sends a child's first epoch a
recipe that the worker replays on the parent's weights; its work per
epoch does not grow with the model.

Data flow: config → master → strategy/HPO propose → executor → worker trains
and counts → result → store → score.  Nothing downstream calls back upstream.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections import deque
from collections.abc import Callable
from traceback import format_exception
from typing import TYPE_CHECKING, Any, cast

from aihpc.base.config import RunConfig
from aihpc.base.errors import MorphError
from aihpc.records.messages import (
    EpochResult,
    EpochStatus,
    EpochTask,
    Morph,
    ScreenResult,
    ScreenStatus,
    ScreenTask,
)
from aihpc.records.meta import MetaKey
from aihpc.records.rows import LostEpoch, TrialStatus
from aihpc.records.store import RunStore
from aihpc.runner.search import fork, screening
from aihpc.runner.search.files import TrialFiles
from aihpc.runner.search.growth import worker_room
from aihpc.runner.search.lifecycle import Judge, Mechanisms, trial_budget
from aihpc.runner.search.lineage import steady_seconds
from aihpc.runner.search.parents import ParentPool
from aihpc.runner.search.proposals import Child, Moment, Proposer
from aihpc.runner.search.resume import rebuild
from aihpc.runner.search.trials import LiveTrial
from aihpc.runner.search.work import Work
from aihpc.scoring.score import Score, active_seconds, compute_score, wall_seconds

if TYPE_CHECKING:
    from aihpc.launch.executor import Layout
    from aihpc.launch.interface import TaskExecutor, TaskFuture
    from aihpc.runner.search.memory import MemoryWatch
    from aihpc.runner.search.observer import Observer
    from aihpc.tasks import Arch, Task

    #: A task in flight: an epoch's, or a screening's (which of the two, its task says).
    Pending = TaskFuture[EpochResult | ScreenResult]

EPOCH_HISTORY = 8  # recent epoch durations from which the time an epoch takes is estimated
# how long in-flight epochs may run past the deadline before they are cancelled
GRACE_SECONDS = 60.0
TICK_SECONDS = 1.0  # the master's idle loop: segment clock, live view, workers that joined
# new trials proposed for one free slot before it waits for the next fill, when every one is
# refused for want of memory
PROPOSALS_PER_SLOT = 8
# an epoch whose worker its nanny killed for memory this many times in a row fails its trial
MEMORY_KILLS = 2


class Master:
    """Runs one benchmark run (or resumes one) in ``store``'s run directory."""

    def __init__(
        self,
        task: Task,
        config: RunConfig,
        store: RunStore,
        executor: TaskExecutor,
        data_info: dict[str, Any],
        layout: Layout | None,
        observer: Observer,
        clock: Callable[[], float] = time.time,
        workers_joined: Callable[[], object] = lambda: None,
        memory: MemoryWatch | None = None,
    ) -> None:
        self.config = config
        self.clock = clock  # seconds since the epoch; tests pass a clock they advance themselves
        # called when the task slots grow, before they are filled: the run places new workers
        self.workers_joined = workers_joined
        # the workers' memory: a trial is sent only where it fits (None: not known, all are sent)
        self.memory = memory
        self.store = store
        self.executor = executor
        self.layout = layout
        self.observer = observer
        self.task = task  # the run's, resolved where it started
        self.quality = self.task.quality(config, data_info)
        self.running: dict[int, LiveTrial] = {}
        self.weights_dir = str(store.weights_dir.resolve())
        self._assemble(data_info)
        self.next_id = 0
        self.epoch_counter = 0  # completed trial-epochs, in completion order (MLPerf epoch numbers)
        self.ops = 0  # operations of every recorded epoch (the store's sum, kept in memory)
        self.best: float | None = None  # the best validation metric so far (the task's quality)
        # durations of recent full epochs
        self.epoch_seconds: deque[float] = deque(maxlen=EPOCH_HISTORY)
        self.pending: list[EpochTask] = []  # epochs ready to submit (continuations and retries)
        self.in_flight: dict[Pending, EpochTask | ScreenTask] = {}
        # screening id -> parent, candidate children (spec, recipe, morphs)
        self.screens: dict[int, tuple[int, list[tuple[Arch, Morph, str]]]] = {}
        self.next_screen = len(store.screenings())
        self.slots = 0  # the executor's task slots at the last fill
        self.restarts_seen = 0  # the hyperparameter search's restarts recorded so far

    def _assemble(self, data_info: dict[str, Any]) -> None:
        """The search's parts, each from the run's config: the strategy, the hyperparameter
        search, the parent pool, the proposer, what ends a trial, the leader's rules, the work."""
        from aihpc.nas.hpo import HyperparameterSearch
        from aihpc.nas.search import make_strategy

        config = self.config
        # None: no architecture search (strategy "none"), every trial retrains the seed network
        self.strategy = make_strategy(
            config.search.strategy, config.search.population, config.search.tournament
        )
        self.hpo = HyperparameterSearch(
            config.run.seed, self.task.search_space(config), processes=config.search.hpo_processes
        )
        self.parents = ParentPool(
            self.store.weights_dir, config.search.population, parse=self.task.arch
        )
        self.proposer = Proposer(
            config, self.task, self.strategy, self.hpo, self.parents, data_info
        )
        self.mechanisms = Mechanisms.of(config)
        # what ends a trial: its budget, successive halving, its plateau, patience
        self.judge = Judge(self.mechanisms, self.quality.resolution, config.search.patience)
        # the run's leader: which running trial a new trial starts from, which trial is kept
        self.leadership = fork.Leadership(
            self.mechanisms, self.quality.resolution, self.running, self.parents
        )
        self.work = Work(config, self.weights_dir, self.layout, self.mechanisms.lineage_schedule)
        self.files = TrialFiles(self.weights_dir, self.parents)  # the running trials' weights

    # -- the loop -----------------------------------------------------------------------
    def run(self) -> Score:
        """Run (or resume) the search until the deadline; returns the score."""
        try:
            return self._search()
        finally:
            self.hpo.close()  # the hyperparameter search's process

    def _search(self) -> Score:
        now = self.clock()
        self.segment = self.store.open_segment(now)
        segments = self.store.segments()
        remaining = self.config.run.minutes * 60.0 - active_seconds(segments[:-1])
        self.deadline = now + max(remaining, 0.0)
        self.run_start = segments[0].start
        self._restore()
        last_report = last_tick = last_fill = 0.0
        stop_by = self.deadline + GRACE_SECONDS
        done: set[Pending] = set()
        first = True  # fill the slots on the first pass
        while True:
            now = self.clock()
            if now < self.deadline:
                # workers may also join (or restart) at any time
                if first or done or now - last_fill >= TICK_SECONDS:
                    self._fill_slots()
                    last_fill, first = now, False
            elif not self.in_flight or now >= stop_by:
                break
            done = self.executor.wait(self.in_flight, timeout=TICK_SECONDS)
            # in the order they were sent, not the set's (memory addresses): results that arrive
            # together are judged in the same order in every run
            for future in [f for f in self.in_flight if f in done]:
                self._collect(future, self.in_flight.pop(future))
            if len(self.hpo.restarts) > self.restarts_seen:
                self._restarted()
            now = self.clock()
            if now - last_tick >= TICK_SECONDS:
                self.store.touch_segment(self.segment, now)
                self.observer.update(self.status(now))
                last_tick = now
            if now - last_report >= self.config.run.report_seconds:
                self._report(now)
                last_report = now
        for future in self.in_flight:
            future.cancel()
        for trial in list(self.running.values()):
            self._finish(trial, TrialStatus.DEADLINE, None)
        if len(self.hpo.restarts) > self.restarts_seen:
            self._restarted()
        now = self.clock()
        self.store.touch_segment(self.segment, now)
        self._report(now)
        return self.score(now)

    def _fill_slots(self) -> None:
        slots = self.executor.slots()
        if slots > self.slots:
            self.workers_joined()
        self.slots = self.leadership.slots = slots
        free = self.slots - len(self.in_flight)
        for _ in range(max(free, 0)):
            task = self._next() if self.pending else self._new_work()
            if task is None:  # every trial proposed was refused: the slot waits for the next fill
                return
            if isinstance(task, EpochTask):
                task = self._scheduled(task)
            self.in_flight[self._submit(task)] = task

    def _next(self) -> EpochTask:
        """The next waiting epoch to send: a lost epoch's next attempt first, the oldest work the
        run has (behind the continuations, a run left with one worker near its end might never
        send it again), else the first waiting."""
        index = next((i for i, task in enumerate(self.pending) if task.attempt > 1), 0)
        return self.pending.pop(index)

    def _submit(self, task: EpochTask | ScreenTask) -> Pending:
        if isinstance(task, ScreenTask):
            from aihpc.recommend.screen import screen_children

            screen = functools.partial(screen_children, self.task)
            return self.executor.submit(screen, task, f"screen{task.screen_id}")
        from aihpc.train.worker import run_epoch

        return self.executor.submit(
            functools.partial(run_epoch, self.task),
            task,
            f"trial{task.trial_id}-epoch{task.epoch}-try{task.attempt}",
        )

    # -- proposals --------------------------------------------------------------------
    def _new_work(self) -> EpochTask | ScreenTask | None:
        """A new trial's first epoch; with screening, a screening of candidate children first;
        None where ``PROPOSALS_PER_SLOT`` trials in a row did not fit in memory."""
        screens = self.config.search.screen and self.strategy is not None and self.next_id > 0
        # a fork of the leader is no new architecture
        if screens and self.leadership.start() is None:
            with contextlib.suppress(MorphError):  # no screen of new children: a trial as above
                return self._screen_task()
        for _ in range(PROPOSALS_PER_SLOT):
            task = self._new_trial_task()
            if task is not None:
                return task
        return None

    def _screen_task(self) -> ScreenTask:
        parent, children = self.proposer.children(self.config.search.screen, self._moment().room)
        # none is proposed again
        self.proposer.seen_hashes.update(spec.content_hash() for spec, _, _ in children)
        screen_id, self.next_screen = self.next_screen, self.next_screen + 1
        self.screens[screen_id] = (parent, children)
        self.parents.pin(parent)  # the chosen child's recipe names its weights
        return self.work.screening(screen_id, parent, [s.to_dict() for s, _, _ in children])

    def _moment(self) -> Moment:
        """The run now: its clock, the seconds left, and what one worker can still do."""
        left = self.deadline - self.clock()
        t = self.work.run_length - left
        return Moment(t, left, worker_room(self.ops, t, self.slots, left))

    def _new_trial_task(self, child: Child | None = None) -> EpochTask | None:
        """A new trial's first epoch; None if the trial does not fit in its worker's memory: it is
        recorded as failed, with the reason."""
        moment = self._moment()
        recent = list(self.epoch_seconds)
        budget = trial_budget(self.config, self.mechanisms, moment.left, recent)
        leader = self.leadership.start() if child is None else None
        if leader is not None:
            start = fork.snapshot(self.weights_dir, leader, self.next_id)
            grows = self.leadership.grows(leader)
            child = self.proposer.fork(leader, start, grows, moment.room)
        running_parent = leader.trained() if leader is not None else None
        trial = self.proposer.trial(self.next_id, budget, self.slots, moment, child, running_parent)
        self.next_id += 1
        self.running[trial.id] = trial
        self.files.start(trial)
        self.store.add_trial(trial.new_row(self.clock()))
        refused = self.memory.refusal(trial) if self.memory is not None else None
        if refused is not None:
            self._finish(trial, TrialStatus.FAILED, refused)
            return None
        return self._task(trial, attempt=1)

    def _task(self, trial: LiveTrial, attempt: int) -> EpochTask:
        """The task of ``trial``'s next epoch (its schedule set when it is sent)."""
        return self.work.epoch(trial, attempt, self.deadline)

    def _scheduled(self, task: EpochTask) -> EpochTask:
        """``task`` on its schedule, as it is sent now."""
        trial = self.running[task.trial_id]
        return self.work.scheduled(task, trial, self._moment(), list(self.epoch_seconds))

    # -- results ----------------------------------------------------------------------
    def _collect(self, future: Pending, task: EpochTask | ScreenTask) -> None:
        if isinstance(task, ScreenTask):  # a screening's future (_submit)
            self._collect_screening(cast("TaskFuture[ScreenResult]", future), task)
            return
        trial = self.running.get(task.trial_id)
        if trial is None:
            return
        try:
            result = cast(EpochResult, future.result())  # an epoch's future (_submit)
        except Exception as exc:  # the worker died or the task was lost
            self._lost(trial, task, exc)
            return
        self.store.add_epoch(result, task.attempt)
        self.ops += result.ops
        if result.status == EpochStatus.FAILED:
            self._finish(trial, TrialStatus.FAILED, result.reason, result.traceback)
            return
        if result.status == EpochStatus.DIVERGED:
            self._finish(trial, TrialStatus.DIVERGED, result.reason)
            return
        self.files.commit(trial, result.weights)
        if result.status == EpochStatus.DEADLINE:
            self._finish(trial, TrialStatus.DEADLINE, None)
            return
        trial.epochs_done, trial.memory_kills = task.epoch, 0
        seconds = result.t_end - result.t_start
        if task.share == 1.0:  # a sized last epoch's seconds are no epoch's
            trial.epoch_seconds = steady_seconds(seconds, result.phase_seconds)
            self.epoch_seconds.append(seconds)
        trial.eval_seconds = result.phase_seconds.get("eval")
        trial.ops_per_sample = result.ops_per_sample.get("train")
        trial.reached = task.schedule_to if task.schedule_to is not None else trial.reached
        self.epoch_counter += 1
        value = result.metrics[self.quality.metric]
        self._better(value)
        self.observer.epoch(self.epoch_counter, result, self.best)
        ended = self.judge.after(trial, self.quality.goodness(value), self.leadership.kept)
        if ended is not None:
            self._finish(trial, *ended)
        else:
            self.pending.insert(0, self._task(trial, attempt=1))

    def _better(self, value: float) -> None:
        """``value`` of the quality metric is the run's best if it beats the best so far."""
        if self.best is None or self.quality.goodness(value) > self.quality.goodness(self.best):
            self.best = value

    def _lost(self, trial: LiveTrial, task: EpochTask, exc: Exception) -> None:
        """``task``'s worker died or vanished: the epoch is sent again, or after ``max_attempts``
        (or ``MEMORY_KILLS`` in a row by its nanny, for memory) the trial fails; either way the
        loss is recorded (who, when, why: its memory against its limit, where its nanny killed
        it)."""
        cause = self.memory.killed(exc) if self.memory is not None else None
        trial.memory_kills = trial.memory_kills + 1 if cause else 0
        requeue = task.attempt < self.config.run.max_attempts and trial.memory_kills < MEMORY_KILLS
        loss = LostEpoch.of(exc, self.clock(), trial.id, task.epoch, task.attempt, requeue, cause)
        self.store.add_attempt(trial.id)
        self.store.add_loss(loss)
        if not requeue:
            reason = f"{task.attempt} attempts failed; last: {loss.reason}"
            self._finish(trial, TrialStatus.FAILED, reason, "".join(format_exception(exc)))
            return
        self.observer.event(f"trial {trial.id} epoch {task.epoch} lost ({loss.reason}); requeued")
        self.pending.append(self._task(trial, attempt=task.attempt + 1))  # sent first: _next

    def _restarted(self) -> None:
        """Record the hyperparameter search processes restarted since the last call (the store's
        ``helper_restarts``, over every segment of the run), and say so."""
        new = self.hpo.restarts[self.restarts_seen :]
        self.restarts_seen = len(self.hpo.restarts)
        recorded = self.store.meta().helper_restarts
        self.store.set_meta(MetaKey.HELPER_RESTARTS, recorded + [r.to_dict() for r in new])
        for r in new:
            self.observer.event(
                f"hyperparameter search process {r.stream} (pid {r.pid}) {r.how}; restarted with "
                f"{r.history} finished trials"
            )

    def _collect_screening(self, future: TaskFuture[ScreenResult], task: ScreenTask) -> None:
        """Start the trial of the best-scored candidate (the first if the screening failed).

        The screening is recorded in the store.
        """
        parent, children = self.screens.pop(task.screen_id)
        result = screening.outcome(future, task, self.clock())
        trial_id = None
        if self.clock() < self.deadline:
            spec, recipe, how = children[result.chosen if result.status == ScreenStatus.OK else 0]
            trial_id = self.next_id
            first = self._new_trial_task((parent, spec, recipe, how))
            if first is not None:
                self.pending.insert(0, first)
        self.parents.unpin(parent)  # the trial, if one started, holds its own pin
        record = screening.row(
            task, result, [(spec.content_hash(), how) for spec, _, how in children], trial_id
        )
        self.store.add_screening(record)
        self.ops += record.ops
        self.observer.screening(record)

    def _finish(
        self,
        trial: LiveTrial,
        status: TrialStatus,
        reason: str | None,
        traceback: str | None = None,
    ) -> None:
        self.running.pop(trial.id, None)
        self.pending = [t for t in self.pending if t.trial_id != trial.id]
        self.store.finish_trial(trial.id, status, self.clock(), reason, traceback)
        self.hpo.tell(trial.hpo_number, trial.best_goodness)
        self.files.finish(trial)
        if status in (TrialStatus.FAILED, TrialStatus.DIVERGED):
            self.observer.event(f"trial {trial.id} {status}: {reason}")

    # -- resume -----------------------------------------------------------------------
    def _restore(self) -> None:
        """Rebuild the search's state from a store that already holds trials
        (:mod:`aihpc.runner.search.resume`); weight files that nothing names any more are
        deleted, and each trial that was running goes on from its last finished epoch."""
        self.ops = self.store.total_ops()
        rebuilt = rebuild(
            self.store, self.config, self.quality, self.hpo, self.parents, self.judge.rungs
        )
        self.next_id = max(self.next_id, rebuilt.next_id)
        self.proposer.seen_hashes |= rebuilt.hashes
        self.epoch_counter += rebuilt.epochs
        for value in rebuilt.values:
            self._better(value)
        for trial in rebuilt.running:
            self.running[trial.id] = trial
            self.pending.append(self._task(trial, attempt=1))
            self.files.start(trial)
        self.parents.sweep({name for t in self.running.values() for name in t.files()})

    # -- progress ---------------------------------------------------------------------
    def status(self, now: float) -> dict[str, Any]:
        ops = self.ops
        wall = now - self.run_start
        return {
            "t": wall,
            "ops": ops,
            "ops_per_second": ops / wall if wall > 0 else 0.0,
            self.quality.best_key: self.best,
            "trials_done": self.next_id - len(self.running),
            "running": len(self.running),
            "in_flight": len(self.in_flight),
            "time_left": max(self.deadline - now, 0.0),
        }

    def _report(self, now: float) -> None:
        value = self.status(now)
        self.store.add_timeline(value["t"], value)
        self.observer.report(value)

    def score(self, now: float) -> Score:
        meta = self.store.meta()
        return compute_score(
            ops=self.store.total_ops(),
            wall_seconds=wall_seconds(self.store.segments()),
            best=self.best,
            quality=self.quality,
            peak_flops_per_s=meta.peak_flops_per_s,
            nominal_peak_flops_per_s=meta.nominal_peak_flops_per_s,
        )
