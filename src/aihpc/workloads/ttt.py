"""Time to train to a quality target, MLPerf HPC's way: repeated runs, concurrent instances.

``runs`` rounds, one after another; in each, ``instances`` models train at
once, each on its own Dask worker (the executors of ``aihpc run``:
:mod:`aihpc.launch.executor`), each from its own seed, each writing its own
MLPerf log (:mod:`aihpc.workloads.instance`), which is then checked by
MLPerf's compliance checker with our rules
(``mlperf/rules/<benchmark>.yaml``).

Aggregates (Farrell et al., "MLPerf HPC", 2021, section 4):

* **time to train**: per instance ``run_stop - run_start`` (staging apart);
  over the runs, the *olympic mean* -- drop the fastest and the slowest
  run, average the rest -- which needs at least 3 runs (fewer: the plain
  mean, and the result says so).  With several instances per run, the
  run's time to train is the mean over its instances.
* **throughput** (weak scaling): models per minute = instances / (time from
  the first instance's run_start to the last one's run_stop), per run.
* **operations**: samples trained and evaluated times :func:`aihpc.count_ops`
  per sample, over the same interval: operations per second.
"""

from __future__ import annotations

import math
import statistics
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from aihpc.base.errors import WorkersLost
from aihpc.records.ttt import TTTInstance, TTTRun, TTTSummary
from aihpc.workloads.instance import InstanceResult, InstanceTask, run_instance

if TYPE_CHECKING:
    from aihpc.launch.executor import DaskExecutor

OLYMPIC_MIN_RUNS = 3


def olympic_mean(values: list[float]) -> float:
    """Mean without the single smallest and largest value (MLPerf's olympic mean); needs >= 3."""
    if len(values) < OLYMPIC_MIN_RUNS:
        raise ValueError(
            f"the olympic mean needs at least {OLYMPIC_MIN_RUNS} values, got {len(values)}"
        )
    ordered = sorted(values)
    return statistics.fmean(ordered[1:-1])


def aggregate(values: list[float]) -> tuple[float, str]:
    """(value, how): the olympic mean of >= 3 values, else the plain mean, saying so."""
    if len(values) >= OLYMPIC_MIN_RUNS:
        return olympic_mean(
            values
        ), f"olympic mean of {len(values)} runs (fastest and slowest dropped)"
    return statistics.fmean(values), (
        f"plain mean of {len(values)} run(s): the olympic mean needs at least {OLYMPIC_MIN_RUNS}"
    )


@dataclass(frozen=True)
class Plan:
    """What to run: validated settings of one ``train-to-target`` invocation."""

    workload: str
    size: str
    runs: int
    instances: int
    target: float
    max_epochs: int
    max_seconds: float
    seed: int
    data_dir: Path
    out_dir: Path
    stage_root: str | None
    threads: int | None
    platform: str
    number_of_nodes: int = 1

    def division(self) -> str:
        """closed: the workload's reference size and target; open otherwise."""
        from aihpc.workloads import get

        w = get(self.workload)
        return "closed" if (self.target == w.target and self.size == w.default_size) else "open"

    def tasks(self, run: int) -> list[InstanceTask]:
        return [
            InstanceTask(
                workload=self.workload,
                size=self.size,
                data_dir=str(self.data_dir.resolve()),
                stage_root=self.stage_root,
                log_path=str((self.out_dir / f"mlperf_r{run}_i{i}.log").resolve()),
                seed=self.seed + 1000 * run + i + 1,
                target=self.target,
                max_epochs=self.max_epochs,
                max_seconds=self.max_seconds,
                threads=self.threads,
                run=run,
                instance=i,
                division=self.division(),
                platform=self.platform,
                number_of_nodes=self.number_of_nodes,
            )
            for i in range(self.instances)
        ]


def run_rounds(
    plan: Plan,
    executor: DaskExecutor | None,
    on_round: Callable[[list[list[InstanceResult]]], None] | None = None,
) -> list[list[InstanceResult]]:
    """Every run, one after another; the instances of a run at once, one per worker.

    ``executor``: a :class:`aihpc.launch.executor.DaskExecutor`, or None to run
    the instances in this process one by one.  An instance that raises on its
    worker is one line naming the worker, its traceback in the output folder
    (:mod:`aihpc.launch.remote`).  ``on_round(results so far)`` is
    called after each run (e.g. to save them, so a cut-short session keeps
    its finished runs).
    """
    from aihpc.launch.remote import contained, gather

    results: list[list[InstanceResult]] = []
    # import torch and the workload on every worker first, so instances start together
    if executor is not None:
        executor.run_on_each(warm_up, plan.workload)
    for run in range(plan.runs):
        tasks = plan.tasks(run)
        if executor is None:
            results.append([run_instance(t) for t in tasks])
        else:
            workers = _workers(executor, len(tasks))
            # the instances start their runs together
            barrier = f"aihpc-ttt-{uuid.uuid4().hex}-r{run}"
            futures = [
                executor.client.submit(
                    contained,
                    run_instance,
                    replace(t, barrier=barrier, peers=len(tasks)),
                    workers=[w],
                    allow_other_workers=False,
                    pure=False,
                    key=f"ttt-r{run}-i{t.instance}",
                )
                for t, w in zip(tasks, workers[: len(tasks)], strict=True)
            ]
            results.append(gather(executor.client, futures, plan.out_dir))
        if on_round is not None:
            on_round(results)
    return results


#: How long a round waits for its instances' workers: a worker the scheduler dropped for a
#: missed heartbeat (a loaded node) reconnects within seconds; one that died does not.
ROUND_WAIT_S = 60.0


def _workers(executor: DaskExecutor, n: int) -> list[str]:
    """The addresses of ``n`` or more workers alive now, waiting up to ROUND_WAIT_S for them."""
    try:
        executor.client.wait_for_workers(n, timeout=ROUND_WAIT_S)
    except TimeoutError:
        pass
    workers = sorted(executor.alive())
    if len(workers) < n:
        raise WorkersLost(f"{n} instances need as many Dask workers, {len(workers)} are alive")
    return workers


def warm_up(workload: str) -> bool:
    """Runs on a worker: import torch and the workload's module (seconds, on a cold worker)."""
    import importlib

    from aihpc.workloads import get

    importlib.import_module("torch")
    get(workload)
    return True


def summarise(
    plan: Plan,
    rounds: list[list[InstanceResult]],
    compliance: dict[str, bool],
    generation_s: float | None = None,
    compliance_output: dict[str, str] | None = None,
) -> TTTSummary:
    """The summary of the runs so far: every instance, and the aggregates of the module docstring.

    ``compliance``: each log's verdict from MLPerf's checker; ``compliance_output``: the
    checker's output for the logs that failed; ``generation_s``: the seconds the data took
    to generate (None: it was given).
    """
    from aihpc.workloads import get

    workload = get(plan.workload)
    runs = tuple(_run_record(instances, compliance) for instances in rounds)
    ttt, how = aggregate([r.time_to_train_s for r in runs])
    throughput, how_tp = aggregate([r.models_per_minute for r in runs if r.models_per_minute])
    return TTTSummary(
        workload=plan.workload,
        benchmark=workload.benchmark,
        size=plan.size,
        metric=workload.metric,
        higher_is_better=workload.higher_is_better,
        target=plan.target,
        reference_target=workload.target,
        target_note=workload.target_note,
        division=plan.division(),
        runs=runs,
        instances=plan.instances,
        runs_planned=plan.runs,
        runs_completed=len(runs),
        max_epochs=plan.max_epochs,
        max_seconds=plan.max_seconds,
        seed=plan.seed,
        time_to_train_s=ttt,
        time_to_train_aggregate=how,
        staging_s=statistics.fmean(i.staging_s for r in runs for i in r.instances),
        models_per_minute=throughput,
        models_per_minute_aggregate=how_tp,
        all_reached=all(r.reached for r in runs),
        all_compliant=all(compliance.values()),
        generation_s=generation_s,
        data_dir=str(plan.data_dir),
        compliance_output=dict(compliance_output or {}),
    )


def _run_record(instances: list[InstanceResult], compliance: dict[str, bool]) -> TTTRun:
    first = min(r.run_start_ms for r in instances)
    last = max(r.run_stop_ms for r in instances)
    wall = (last - first) / 1000.0
    return TTTRun(
        instances=tuple(_instance_record(r, compliance) for r in instances),
        time_to_train_s=statistics.fmean(r.time_to_train for r in instances),
        wall_s=wall,
        models_per_minute=len(instances) / (wall / 60.0) if wall > 0 else None,
        ops_per_s=sum(r.total_ops for r in instances) / wall if wall > 0 else None,
        reached=all(r.reached for r in instances),
    )


def _instance_record(r: InstanceResult, compliance: dict[str, bool]) -> TTTInstance:
    return TTTInstance(
        run=r.run,
        instance=r.instance,
        seed=r.seed,
        reached=r.reached,
        quality=_finite(r.quality),
        best=_finite(r.best),
        epochs=r.epochs,
        time_to_train_s=r.time_to_train,
        staging_s=r.staging_seconds,
        staged_bytes=r.staged_bytes,
        run_start_ms=r.run_start_ms,
        run_stop_ms=r.run_stop_ms,
        curve=tuple((p.epoch, p.seconds, _finite(p.value)) for p in r.curve),
        train_ops_per_sample=r.train_ops_per_sample,
        eval_ops_per_sample=r.eval_ops_per_sample,
        total_ops=r.total_ops,
        ops_per_s=r.total_ops / r.time_to_train if r.time_to_train > 0 else None,
        mlperf_log=r.log_path,
        compliant=compliance.get(r.log_path),
        host=r.host,
    )


def _finite(value: float) -> float | None:
    """``value``, or None where it is NaN or infinite (a diverged run; JSON has no NaN)."""
    return value if math.isfinite(value) else None


def check_logs(
    rounds: list[list[InstanceResult]], benchmark: str
) -> tuple[dict[str, bool], dict[str, str]]:
    """Run MLPerf's compliance checker on every instance's log with the benchmark's rules."""
    from aihpc.mlperf.check import RULES_DIR, check_compliance

    ok, output = {}, {}
    for r in (r for instances in rounds for r in instances):
        ok[r.log_path], output[r.log_path] = check_compliance(
            r.log_path, rules=RULES_DIR / f"{benchmark}.yaml"
        )
    return ok, output


def not_reached_message(summary: TTTSummary) -> str | None:
    """One line naming the runs that missed the target within the budget (None if all met it)."""
    missed = summary.missed()
    if not missed:
        return None
    worst = missed[0]
    sense = ">=" if summary.higher_is_better else "<="
    return (
        f"target {summary.metric} {sense} {summary.target} not reached by {len(missed)} of "
        f"{sum(len(r.instances) for r in summary.runs)} instance(s) within the budget of "
        f"{summary.max_epochs} epochs / {summary.max_seconds:.0f} s (e.g. run {worst.run} "
        f"instance {worst.instance}: best {_show(worst.best)} after {worst.epochs} epochs)"
    )


def _show(value: float | None) -> str:
    return "none (diverged)" if value is None else f"{value:.4f}"
