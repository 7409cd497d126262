"""One time-to-train instance, as MLPerf HPC runs it: stage, initialise, train to the target.

:func:`run_instance` runs on a Dask worker (or in-process) and writes one
MLPerf log (``:::MLLOG`` lines, :class:`aihpc.mlperf.log.MLPerfLog`)::

    submission_* number_of_nodes accelerators_per_node cache_clear
    init_start
      staging_start  (copy DATA/{train,validation,...} to node-local STAGE)  staging_stop
      seed global_batch_size opt_name opt_base_learning_rate opt_learning_rate_decay_schedule
      quality_target workload_size
    init_stop
    (with several instances on Dask: wait until every instance of the run has
     reached here, so they start together and the throughput interval is theirs)
    run_start
      (read the staged files into memory)  train_samples eval_samples
      per epoch k = 1, 2, ...: epoch_start(k) epoch_stop(k) eval_start(k) eval_stop(k)
                               eval_error | eval_accuracy (value, epoch_num=k)
    run_stop (status success: the target was met; aborted: the budget ran out)

Time to train is ``run_stop - run_start``: staging is timed apart (MLPerf HPC
v3.0 excludes it), reading the staged files is inside the run.  The model
is evaluated after every epoch and training stops at the first evaluation
that meets the target, or when ``max_epochs`` or ``max_seconds`` (checked
after each epoch) run out, or when the metric is no longer finite (the
training diverged; ``run_stop`` then says ``diverged``).
"""

from __future__ import annotations

import math
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aihpc.base.errors import StorageError, WorkersLost

if TYPE_CHECKING:
    import torch

    from aihpc.mlperf.log import MLPerfLog
    from aihpc.workloads.base import Samples, Size, Workload


@dataclass(frozen=True)
class InstanceTask:
    """What one instance needs, sent to a worker; paths are strings (workers may be remote)."""

    workload: str
    size: str
    data_dir: str  # the source data (a shared file system)
    stage_root: str | None  # node-local folder for staging (None: a temporary folder on the worker)
    log_path: str
    seed: int
    target: float
    max_epochs: int
    max_seconds: float
    threads: int | None
    run: int
    instance: int
    division: str
    platform: str
    number_of_nodes: int = 1
    barrier: str | None = None  # name of the run's start barrier (Dask Events), None for no peers
    peers: int = 1  # instances that meet at the barrier


BARRIER_TIMEOUT_S = 600.0  # a peer that has not staged and initialised by then has failed


@dataclass(frozen=True)
class EpochPoint:
    epoch: int
    seconds: float  # since run_start, at the end of this epoch's evaluation
    value: float  # the quality metric after this epoch


@dataclass(frozen=True)
class InstanceResult:
    """What one instance did; times are ms since the Unix epoch, seconds are durations."""

    run: int
    instance: int
    seed: int
    reached: bool
    quality: float  # the metric at the last evaluation
    best: float  # the best metric of any evaluation
    epochs: int
    staging_seconds: float
    staged_bytes: int
    run_start_ms: int
    run_stop_ms: int
    curve: tuple[EpochPoint, ...]
    train_ops_per_sample: int
    eval_ops_per_sample: int
    samples_trained: int
    samples_evaluated: int
    log_path: str
    host: str  # the node it trained on

    @property
    def time_to_train(self) -> float:
        """Seconds from run_start to run_stop."""
        return (self.run_stop_ms - self.run_start_ms) / 1000.0

    @property
    def total_ops(self) -> int:
        return (
            self.train_ops_per_sample * self.samples_trained
            + self.eval_ops_per_sample * self.samples_evaluated
        )


def now_ms() -> int:
    return int(time.time() * 1000)


def stage(source: Path, target: Path) -> int:
    """Copy the data folder ``source`` to ``target`` (node-local); return the bytes copied."""
    try:
        shutil.copytree(source, target)
    except OSError as exc:
        raise StorageError(f"cannot stage {source} to {target}: {exc}") from None
    return sum(p.stat().st_size for p in target.rglob("*") if p.is_file())


def run_instance(task: InstanceTask) -> InstanceResult:
    """Stage, initialise and train one model to the target; see the module docstring."""
    import torch

    from aihpc.mlperf.log import MLPerfLog
    from aihpc.workloads import get

    if task.threads:
        torch.set_num_threads(task.threads)
    workload = get(task.workload)
    size = workload.size(task.size)
    stage_root = Path(task.stage_root) if task.stage_root else Path(tempfile.gettempdir())
    stage_root.mkdir(parents=True, exist_ok=True)
    staged = Path(
        tempfile.mkdtemp(prefix=f"aihpc-stage-r{task.run}i{task.instance}-", dir=stage_root)
    )
    try:
        with MLPerfLog(task.log_path, benchmark=workload.benchmark) as log:
            init = _initialise(task, workload, size, log, staged / "data")
            _meet_peers(task)
            return _train(task, workload, size, init, log, staged / "data")
    finally:
        shutil.rmtree(staged, ignore_errors=True)


@dataclass(frozen=True)
class _Initialised:
    """What MLPerf's init phase leaves for the run: the model, its optimiser, the staging."""

    model: Any
    optimizer: Any
    schedule: Any
    staging_seconds: float
    staged_bytes: int
    train_ops: int  # per training sample
    eval_ops: int  # per evaluated sample


def _initialise(
    task: InstanceTask, workload: Workload, size: Size, log: MLPerfLog, staged_data: Path
) -> _Initialised:
    """MLPerf's init phase, logged: stage the data (timed apart), build the model, count it."""
    import torch

    log.submission_info(
        "aihpc",
        task.platform,
        division=task.division,
        status="research",
        number_of_nodes=task.number_of_nodes,
        accelerators_per_node=0,
    )
    log.cache_clear(False)
    log.init_start()
    t0 = time.perf_counter()
    log.staging_start()
    staged_bytes = stage(Path(task.data_dir), staged_data)
    log.staging_stop(staged_bytes=staged_bytes)
    staging_seconds = time.perf_counter() - t0
    torch.manual_seed(task.seed)
    model = workload.model(size)
    optimizer, schedule, hyper = workload.optimizer(model, size)
    for key, value in {
        "seed": task.seed,
        "global_batch_size": size.batch_size,
        **hyper,
        "quality_target": task.target,
        "workload_size": task.size,
    }.items():
        log.event(key, value)
    train_ops, eval_ops = _ops_per_sample(workload, model, size)
    log.init_stop()
    return _Initialised(
        model, optimizer, schedule, staging_seconds, staged_bytes, train_ops, eval_ops
    )


def _meet_peers(task: InstanceTask) -> None:
    """Runs on a Dask worker: set this instance's Event of the barrier, then wait for the peers'."""
    if task.barrier is None:
        return
    from distributed import Event  # Dask leaves Event unannotated

    Event(f"{task.barrier}-{task.instance}").set()  # type: ignore[no-untyped-call]
    for i in range(task.peers):
        event = Event(f"{task.barrier}-{i}")  # type: ignore[no-untyped-call]
        if not event.wait(timeout=BARRIER_TIMEOUT_S):  # type: ignore[no-untyped-call]
            raise WorkersLost(
                f"instance {i} of run {task.run} did not finish staging and initialisation "
                f"within {BARRIER_TIMEOUT_S:.0f} s of instance {task.instance}"
            )


def _ops_per_sample(workload: Workload, model: torch.nn.Module, size: Size) -> tuple[int, int]:
    """Operations of one training sample (forward, loss, backward) and one evaluated sample."""
    from aihpc.counting import count_ops

    shape = (1, *workload.input_shape(size))
    train = count_ops(model, shape, train=True, loss=workload.loss_name)
    evaluation = count_ops(model, shape, train=False)
    return train.total, evaluation.total


def _train(
    task: InstanceTask,
    workload: Workload,
    size: Size,
    init: _Initialised,
    log: MLPerfLog,
    data_dir: Path,
) -> InstanceResult:
    """MLPerf's run phase, logged: read the staged data, train epochs until the target or
    the budget, and the instance's result."""
    start = now_ms()
    log.run_start(time_ms=start)
    train, valid = (
        workload.read(data_dir, "train", size),
        workload.read(data_dir, "validation", size),
    )
    log.train_samples(len(train))
    log.eval_samples(len(valid))
    curve, best, reached, value = _epochs(task, workload, size, init, log, (train, valid), start)
    stop = now_ms()
    log.run_stop(
        "success" if reached else "aborted",
        time_ms=stop,
        epochs=len(curve),
        diverged=not math.isfinite(value),
    )
    return InstanceResult(
        run=task.run,
        instance=task.instance,
        seed=task.seed,
        reached=reached,
        quality=value,
        best=best if best is not None else value,
        epochs=len(curve),
        staging_seconds=init.staging_seconds,
        staged_bytes=init.staged_bytes,
        run_start_ms=start,
        run_stop_ms=stop,
        curve=tuple(curve),
        train_ops_per_sample=init.train_ops,
        eval_ops_per_sample=init.eval_ops,
        samples_trained=len(curve) * len(train),
        samples_evaluated=len(curve) * len(valid),
        log_path=task.log_path,
        host=socket.gethostname(),
    )


def _epochs(
    task: InstanceTask,
    workload: Workload,
    size: Size,
    init: _Initialised,
    log: MLPerfLog,
    data: tuple[Samples, Samples],
    start: int,
) -> tuple[list[EpochPoint], float | None, bool, float]:
    """Train and evaluate epoch after epoch; stop at the target, the budget or divergence.

    Returns (the curve, the best metric or None, whether the target was reached, the last metric).
    """
    import torch

    train, valid = data
    loss_fn = workload.loss(train)
    generator = torch.Generator().manual_seed(task.seed)
    curve: list[EpochPoint] = []
    best, reached, value = None, False, float("nan")
    while len(curve) < task.max_epochs and not reached:
        epoch = len(curve) + 1
        log.epoch_start(epoch)
        init.model.train()
        order = torch.randperm(len(train), generator=generator)
        for i in range(0, len(train), size.batch_size):
            idx = order[i : i + size.batch_size]
            init.optimizer.zero_grad(set_to_none=True)
            loss_fn(init.model(train.x[idx]), train.y[idx]).backward()
            init.optimizer.step()
        init.schedule.step()
        log.epoch_stop(epoch)
        log.eval_start(epoch)
        value = workload.evaluate(init.model, valid, 64)
        log.eval_stop(epoch)
        if not math.isfinite(value):  # diverged: no quality to log (MLPerf values are finite); stop
            curve.append(EpochPoint(epoch, (now_ms() - start) / 1000.0, value))
            break
        log.event(workload.metric_key, value, {"epoch_num": epoch})
        reached = workload.reached(value, task.target)
        best = value if workload.better(value, best) else best
        curve.append(EpochPoint(epoch, (now_ms() - start) / 1000.0, value))
        if curve[-1].seconds > task.max_seconds:
            break
    return curve, best, reached, value
