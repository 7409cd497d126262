"""One ``aihpc train-to-target`` invocation: settings, plan, data, workers, rounds, ``ttt.json``.

:func:`train_to_target` is what the CLI calls.  It validates the
:class:`Settings` into a :class:`~aihpc.workloads.ttt.Plan`, generates the
workload's data (unless ``data_dir`` is given), opens the executors of
``aihpc run`` (a LocalCluster, a running scheduler, or SLURM jobs; none
with ``in_process``), runs the rounds (:func:`aihpc.workloads.ttt.run_rounds`)
and after each one checks its MLPerf logs and rewrites ``ttt.json``, so a
cut-short session keeps its finished runs.  It returns an :class:`Outcome`:
the :class:`~aihpc.records.ttt.TTTSummary`, the document written, the table
for a terminal and the line naming a target not reached.
"""

from __future__ import annotations

import os
import platform
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aihpc.base.errors import ConfigError, DataError
from aihpc.base.fmt import text_table
from aihpc.machine.cluster import check_interface
from aihpc.records.ttt import TTTSummary
from aihpc.workloads.ttt import Plan

if TYPE_CHECKING:
    from aihpc.launch.executor import DaskExecutor
    from aihpc.workloads.instance import InstanceResult

RESULT_FILE = "ttt.json"
WORKER_WAIT_S = 600.0  # for every instance's worker to join (batch jobs may queue)


@dataclass(frozen=True)
class Settings:
    """What the user asked for (the CLI's flags); the workload's own rules are :func:`plan`'s."""

    workload: str
    runs: int = 5
    instances: int = 1
    size: str | None = None  # None: the workload's reference size
    target: float | None = None  # None: the workload's reference target
    max_epochs: int | None = None  # None: the size's
    max_minutes: float = 10.0
    seed: int = 0
    data_dir: Path | None = None  # None: generate the data into the output folder
    stage_dir: str | None = None  # None: a temporary folder on each worker
    threads_per_worker: int | None = None  # None: the cores split among the instances
    scheduler: str | None = None
    in_process: bool = False
    batch_system: str | None = None
    partition: str | None = None
    walltime: str | None = None
    worker_memory: str | None = None
    interface: str | None = None  # the network the scheduler and the worker jobs use, e.g. ib0
    out: Path | None = None  # None: runs/ttt-<workload>-<time>

    def __post_init__(self) -> None:
        for name, low in (
            ("runs", 1),
            ("instances", 1),
            ("max_epochs", 1),
            ("threads_per_worker", 1),
        ):
            value = getattr(self, name)
            if value is not None and value < low:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= {low}, got {value}")
        if not self.max_minutes > 0:
            raise ConfigError(f"--max-minutes must be > 0, got {self.max_minutes}")
        if self.interface is not None:
            if self.batch_system is None:
                raise ConfigError(
                    f"--interface is for worker jobs (--slurm), got {self.interface!r} without"
                )
            check_interface(self.interface)  # before any data or folder is made
        if self.data_dir is not None and not Path(self.data_dir).is_dir():
            raise DataError(
                "--data-dir must be a folder with train/ and validation/, "
                f"got {str(self.data_dir)!r}"
            )


def plan(settings: Settings) -> Plan:
    """The plan of ``settings``: the workload's size, target and budget; an empty output folder."""
    from aihpc.workloads import get

    workload = get(settings.workload)
    size = workload.size(settings.size)
    target = workload.target if settings.target is None else settings.target
    if not target > 0 or (workload.higher_is_better and target > 1):
        raise ConfigError(
            f"--target must be a {workload.metric.upper()} in "
            f"{'(0, 1]' if workload.higher_is_better else '(0, inf)'}, got {target}"
        )
    stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    out = settings.out or Path("runs") / f"ttt-{settings.workload}-{stamp}"
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"output folder {out} is not empty; choose another --out")
    cores = (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )
    return Plan(
        workload=settings.workload,
        size=settings.size or workload.default_size,
        runs=settings.runs,
        instances=settings.instances,
        target=target,
        max_epochs=settings.max_epochs or size.max_epochs,
        max_seconds=60.0 * settings.max_minutes,
        seed=settings.seed,
        data_dir=settings.data_dir or out / "data",
        out_dir=out,
        stage_root=settings.stage_dir,
        threads=settings.threads_per_worker or max(1, cores // settings.instances),
        platform=platform_name(),
    )


def platform_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what Python's ``platform`` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def open_executor(settings: Settings, plan: Plan) -> DaskExecutor:
    """The executors of ``aihpc run``: a LocalCluster, a running scheduler, or SLURM jobs, one
    worker per instance, every one joined; a task's failure is logged in the output folder."""
    from aihpc.base.config import LaunchSection, read_section
    from aihpc.launch.executor import Layout, batch_executor, local_executor, remote_executor

    layout = Layout(plan.instances, plan.threads or 1, "cpu")
    if settings.scheduler:
        executor = remote_executor(settings.scheduler)
    elif settings.batch_system:
        given = {
            "batch_system": settings.batch_system,
            "partition": settings.partition,
            "walltime": settings.walltime,
            "worker_memory": settings.worker_memory,
            "interface": settings.interface,
        }
        launch = read_section(
            LaunchSection, {k: v for k, v in given.items() if v is not None}, "flags"
        )
        executor = batch_executor(layout, launch, plan.out_dir)
    else:
        executor = local_executor(layout)
    executor.log_dir = plan.out_dir
    try:
        executor.wait_for_workers(plan.instances, timeout=WORKER_WAIT_S)
    except BaseException:
        executor.close()
        raise
    return executor


class _Recorder:
    """Called after every run: check its MLPerf logs, rewrite ``ttt.json``; keeps the summary."""

    def __init__(self, plan: Plan, generation_s: float | None) -> None:
        self.plan = plan
        self.generation_s = generation_s
        self.compliance: dict[str, bool] = {}
        self.failures: dict[str, str] = {}
        self.outcome: Outcome | None = None

    def __call__(self, rounds: list[list[InstanceResult]]) -> None:
        from aihpc.records.files import result_document, write_result
        from aihpc.workloads import get
        from aihpc.workloads.ttt import check_logs, summarise

        ok, output = check_logs(rounds[-1:], get(self.plan.workload).benchmark)
        self.compliance.update(ok)
        self.failures.update({k: v for k, v in output.items() if not ok[k]})
        summary = summarise(self.plan, rounds, self.compliance, self.generation_s, self.failures)
        document = result_document("train-to-target", summary)
        write_result(self.plan.out_dir / RESULT_FILE, document)
        self.outcome = Outcome(summary, document.to_dict(), self.plan.out_dir)


def train_to_target(settings: Settings) -> Outcome:
    """Plan, generate the data, run every round on the workers; the outcome, also in ttt.json."""
    from aihpc.workloads import get
    from aihpc.workloads.ttt import run_rounds

    the_plan = plan(settings)
    the_plan.out_dir.mkdir(parents=True, exist_ok=True)
    generation_s = None
    if settings.data_dir is None:
        t0 = time.perf_counter()
        workload = get(the_plan.workload)
        workload.generate(the_plan.data_dir, workload.size(the_plan.size), the_plan.seed)
        generation_s = time.perf_counter() - t0
    recorder = _Recorder(the_plan, generation_s)
    executor = None if settings.in_process else open_executor(settings, the_plan)
    try:
        run_rounds(the_plan, executor, on_round=recorder)
    finally:
        if executor is not None:
            executor.close()
    assert recorder.outcome is not None  # run_rounds calls it after each of >= 1 runs
    return recorder.outcome


@dataclass(frozen=True)
class Outcome:
    """What a train-to-target invocation gives: its summary and the document in ``ttt.json``."""

    summary: TTTSummary
    document: dict[str, Any]
    out_dir: Path

    def table(self) -> str:
        return table(self.summary, self.out_dir)

    def missed(self) -> str | None:
        """One line naming the instances that missed the target (None if all met it)."""
        from aihpc.workloads.ttt import not_reached_message

        return not_reached_message(self.summary)


def _num(value: float | None) -> str:
    return "nan" if value is None else f"{value:.4f}"


def table(s: TTTSummary, out_dir: Path) -> str:
    """The summary for a terminal: the target, one row per instance, the aggregates, the files."""
    sense = ">=" if s.higher_is_better else "<="
    head = [
        "run",
        "inst",
        "host",
        "reached",
        "epochs",
        s.metric,
        "staging s",
        "time to train s",
        "GOPS",
        "compliant",
    ]
    rows = [
        [
            str(i.run),
            str(i.instance),
            i.host or "?",
            str(i.reached),
            str(i.epochs),
            _num(i.quality),
            f"{i.staging_s:.2f}",
            f"{i.time_to_train_s:.1f}",
            f"{(i.ops_per_s or 0) / 1e9:.2f}",
            str(i.compliant),
        ]
        for r in s.runs
        for i in r.instances
    ]
    lines = [
        f"{s.workload} ({s.benchmark}, size {s.size}, {s.division} division): "
        f"target {s.metric.upper()} {sense} {s.target}",
        text_table(head, rows),
        f"time to train: {s.time_to_train_s:.1f} s ({s.time_to_train_aggregate}); "
        f"staging {s.staging_s:.2f} s per instance, timed apart",
    ]
    if s.instances > 1:
        lines.append(
            f"throughput: {s.models_per_minute:.3f} models per minute with {s.instances} "
            f"instances ({s.models_per_minute_aggregate})"
        )
    lines.append(f"results: {out_dir / RESULT_FILE}; MLPerf logs: {out_dir}/mlperf_r*_i*.log")
    return "\n".join(lines)
