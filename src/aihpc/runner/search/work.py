"""What the master sends its workers: each epoch's task, on its learning-rate schedule, and each
proxy screening's."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from aihpc.base.config import RunConfig
from aihpc.records.messages import DataRef, EpochTask, ScreenTask
from aihpc.runner.search import lineage, screening
from aihpc.runner.search.proposals import Moment
from aihpc.runner.search.trials import LiveTrial

if TYPE_CHECKING:
    from aihpc.launch.executor import Layout


class Work:
    """Makes the run's tasks: its data, weight directory, workers' layout and schedule rule are
    the same for every one."""

    def __init__(
        self,
        config: RunConfig,
        weights_dir: str,
        layout: Layout | None,
        lineage_schedule: bool,
    ) -> None:
        self.config = config
        self.data = DataRef.of(config)
        self.weights_dir = weights_dir
        self.device = layout.device if layout else "auto"
        self.threads = layout.threads if layout else None
        self.lineage_schedule = lineage_schedule  # aihpc.runner.search.lifecycle.Mechanisms'
        self.run_length = config.run.minutes * 60.0  # seconds of the run's clock

    def epoch(self, trial: LiveTrial, attempt: int, deadline: float) -> EpochTask:
        """The task of ``trial``'s next epoch, its schedule's positions still to set
        (:meth:`scheduled`, when it is sent)."""
        return EpochTask(
            trial_id=trial.id,
            epoch=trial.epochs_done + 1,
            epochs=trial.budget,
            arch=trial.arch,
            hparams=trial.hparams,
            data=self.data,
            deadline=deadline,
            seed=trial.seed,
            weights_dir=self.weights_dir,
            start=trial.weights,
            morph=trial.recipe if trial.weights is None else None,
            device=self.device,
            threads=self.threads,
            procs=self.config.launch.procs_per_trial,
            compile=self.config.run.compile,
            attempt=attempt,
            carry_optimizer=self.config.search.carry_optimizer,
        )

    def scheduled(
        self, task: EpochTask, trial: LiveTrial, moment: Moment, recent: list[float]
    ) -> EpochTask:
        """``task`` as it is sent at ``moment``: sized to the time left where it would end after
        the deadline (:func:`aihpc.runner.search.lineage.last_share`); along its lineage's
        schedule where the run keeps one, from the clock now to the epoch's expected end
        (``recent``: the run's recent epochs' seconds), else along the trial's own (the task's
        default)."""
        seconds = lineage.expected_seconds(
            trial.epoch_seconds,
            trial.first_seconds,
            recent,
            moment.left,
            trial.budget or self.config.search.epochs_max,
        )
        share = lineage.last_share(seconds, trial.eval_seconds or 0.0, moment.left)
        if share < 1.0:
            task, seconds = dataclasses.replace(task, share=share), moment.left
        if not self.lineage_schedule:
            return task
        at, end = lineage.positions(
            trial.lineage.start, moment.t, seconds, self.run_length, trial.reached
        )
        return dataclasses.replace(task, schedule_from=at, schedule_to=end)

    def screening(
        self, screen_id: int, parent: int, candidates: list[dict[str, Any]]
    ) -> ScreenTask:
        """The proxy screening ``screen_id`` of ``parent``'s ``candidates`` (architectures)."""
        return ScreenTask(
            screen_id=screen_id,
            parent=parent,
            candidates=tuple(candidates),
            data=self.data,
            seed=screening.screen_seed(self.config.run.seed, screen_id),
            device=self.device,
            threads=self.threads,
        )
