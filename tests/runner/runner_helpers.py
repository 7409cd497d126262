"""A deterministic in-process stand-in for the Dask executor, for master tests.

It runs each task to completion inside ``submit`` (the real trainer, the real
data), so the master sees every result on its next ``wait``, in submission
order; nothing runs concurrently and nothing depends on a second process.
The master's clock is a :class:`StepClock` that each task advances by a fixed
step, so how many tasks fit before the deadline does not depend on how fast
the machine is.  Workers read the real clock, so each task is given no
deadline of its own (the master's, on its step clock, could pass in real
time on a busy machine and cut the epoch short), and each result's start and
end are put on the step clock (the master sizes trials' epoch budgets from
epoch durations); the master still ends the run at its own deadline.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import sqlite3
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from aihpc.base.config import RunConfig
from aihpc.records.store import RunStore
from aihpc.records.trial import Hyperparameters
from aihpc.runner.search.lineage import Lineage
from aihpc.runner.search.master import Master
from aihpc.runner.search.trials import LiveTrial
from aihpc.tasks import read_config, task_of

#: The digits data set as the image task describes it (Task.inspect_data), for a master's tests.
DIGITS = {
    "input_shape": [1, 8, 8],
    "num_classes": 10,
    "num_train": 1438,
    "num_val": 359,
    "max_params": 2_000_000,
}


def live_trial(**fields: Any) -> LiveTrial:
    """A running trial as the master keeps it, made by hand: ``fields`` over a seed-like trial's
    (trial 0, no parent, its lineage's root at the run's start)."""
    trial_id = fields.get("id", 0)
    return LiveTrial(
        **{
            "id": trial_id,
            "parent": None,
            "arch": {},
            "arch_hash": "h",
            "morph": "m",
            "hparams": Hyperparameters(lr=0.1, batch_size=32),
            "hpo_number": trial_id,
            "budget": 8,
            "num_params": 1,
            "seed": 0,
            "lineage": Lineage(0.0, 0),
            "hparams_origin": "tpe",
            **fields,
        }
    )


def query_store(db: Path, sql: str, *args) -> list[tuple]:
    """``sql``'s rows in a run store as it is now (read-only, beside the running master); none
    while the store does not exist yet."""
    if not db.exists():
        return []
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
            return con.execute(sql, args).fetchall()
    except sqlite3.Error:  # not created yet, or its tables not yet
        return []


class StepClock:
    def __init__(self, step: float) -> None:
        self.now = time.time()
        self.step = step

    def __call__(self) -> float:
        return self.now


class InProcessExecutor:
    """Runs each task inside ``submit``: the function the master gives, or else ``script``."""

    def __init__(self, clock: StepClock, slots: int = 2, script=None) -> None:
        self.clock = clock
        self._slots = slots
        self.script = script
        self.keys: list[str] = []
        self.tasks: list[Any] = []  # every task submitted, in order

    def slots(self) -> int:
        return self._slots

    def submit(self, fn, task: Any, key: str) -> Future:
        """``script`` stands in for the trainer only: a proxy screening runs the real ``fn``."""
        self.keys.append(key)
        self.tasks.append(task)
        self.clock.now += self.clock.step
        future: Future = Future()
        try:
            epoch = hasattr(task, "deadline")
            result = (self.script if epoch and self.script else fn)(
                dataclasses.replace(task, deadline=math.inf) if epoch else task
            )
            future.set_result(
                dataclasses.replace(
                    result, t_start=self.clock.now - self.clock.step, t_end=self.clock.now
                )
            )
        except Exception as exc:  # as Dask does: the exception surfaces in result()
            future.set_exception(exc)
        return future

    def wait(self, futures, timeout: float) -> set[Future]:
        return {f for f in futures if f.done()}


class NullObserver:
    def update(self, status) -> None: ...
    def report(self, status) -> None: ...
    def event(self, text: str) -> None: ...
    def epoch(self, number: int, result, best) -> None: ...
    def screening(self, record) -> None: ...


def scripted_epoch(
    accuracy,
    lost=lambda task: False,
    samples: int | None = None,
    phase_seconds: dict[str, float] | None = None,
):
    """A stand-in for the trainer: epoch ``e`` of trial ``t`` scores ``accuracy(t, e)``.

    It trains nothing, but makes its starting weights as a worker does (a
    child replays its parent's morphs) and writes them as the epoch's
    weights, so children morph real weights of the right shape;
    ``lost(task)`` true makes the epoch's task raise, as a dead worker's
    does.  Every epoch counts 1000 training and 100 evaluation operations;
    with ``samples``, it counts as a worker does: ``samples`` training
    samples and 10 validation samples at the architecture's counted
    operations per sample (the task's fast recount).  ``phase_seconds``: the seconds by phase
    it reports (none by default).
    """
    from pathlib import Path

    import torch

    from aihpc.records.messages import EpochResult
    from aihpc.tasks import task_of
    from aihpc.tasks.image.build import SpecNet
    from aihpc.tasks.image.spec import ArchSpec
    from aihpc.train.weights import file_name, save, starting_state

    image = task_of("image")

    def run(task):
        if lost(task):
            raise RuntimeError(f"worker lost trial {task.trial_id} epoch {task.epoch}")
        state, opt_state = starting_state(image, task)
        if state is None:
            torch.manual_seed(task.seed)
            state = SpecNet(ArchSpec.from_dict(task.arch)).state_dict()
        weights = save(
            Path(task.weights_dir),
            file_name(task.trial_id, task.epoch, task.attempt),
            state,
            opt_state,
        )
        now = time.time()
        per_sample, seen = (10.0, 10.0), 100
        if samples is not None:
            spec, hp = ArchSpec.from_dict(task.arch), task.hparams
            per_sample, seen = (
                image.recount_per_sample(spec, hp.batch_size, 0.0),
                samples,
            )
        ops_train, ops_eval = round(per_sample[0] * seen), round(per_sample[1] * 10)
        schedule_from, schedule_to = task.positions()
        metrics = {
            "epoch": task.epoch,
            "schedule_from": schedule_from,  # as a worker records them
            "schedule_to": schedule_to,
            "train_samples": seen,
            "train_loss": 1.0,
            "train_accuracy": 0.5,
            "val_samples": 10,
            "val_loss": 1.0,
            "val_accuracy": accuracy(task.trial_id, task.epoch),
            "ops": ops_train + ops_eval,
            "seconds": 0.0,
        }
        return EpochResult(
            task.trial_id,
            task.epoch,
            "ok",
            "w0",
            now,
            now,
            metrics=metrics,
            ops_train=ops_train,
            ops_eval=ops_eval,
            ops_per_sample={"train": per_sample[0], "eval": per_sample[1]},
            weights=weights,
            phase_seconds=dict(phase_seconds or {}),
        )

    return run


def scripted_master(
    tmp_path: Path, accuracy, slots=1, step=10.0, samples=None, script=None, **config
) -> tuple[Master, RunStore, InProcessExecutor]:
    """A master of the image task on the scripted trainer (:func:`scripted_epoch`) and an
    :class:`InProcessExecutor` of ``slots``, ``step`` seconds of its clock a task (nothing run)."""
    cfg = read_config(
        dict(
            dataset="digits",
            report_seconds=600,
            batch_sizes=(32, 64, 128),
            **{"minutes": 2.0, "epochs_min": 3, "epochs_max": 3, "patience": 10, **config},
        )
    )
    store = RunStore(tmp_path / "run")
    clock = StepClock(step)
    executor = InProcessExecutor(
        clock, slots=slots, script=script or scripted_epoch(accuracy, samples=samples)
    )
    return image_master(cfg, store, executor, clock), store, executor


def image_master(
    cfg: RunConfig, store: RunStore, executor, clock: StepClock, data=DIGITS, observer=None, **kw
) -> Master:
    """The image task's master of ``store``, on ``executor`` and ``clock``, seen by ``observer``
    (None: nothing sees it); ``kw``: the rest of Master's arguments."""
    return Master(
        task_of("image"),
        cfg,
        store,
        executor,
        data,
        layout=None,
        observer=observer or NullObserver(),
        clock=clock,
        **kw,
    )
