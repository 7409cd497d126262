"""The run's measurements beside its score: the peak before and after, the data staged, the energy.

Each runs on every worker at once (:meth:`executor.run_on_each`); the
functions named ``worker_*`` are the parts that run on a worker.  A failure
to measure the peak after the run or the energy becomes a reason in the
results, not a failed run.
"""

from __future__ import annotations

import secrets
import time
from typing import TYPE_CHECKING, Any

from aihpc.base.config import RunConfig
from aihpc.base.errors import DataError, WorkersLost
from aihpc.records.meta import MetaKey
from aihpc.records.store import RunStore
from aihpc.scoring.peak import PEAK_DRIFT, PeakResult, RunPeak, WorkerPeak

if TYPE_CHECKING:
    from aihpc.energy.run import EnergySession
    from aihpc.launch.executor import Layout
    from aihpc.launch.interface import Executor
    from aihpc.records.messages import DataRef
    from aihpc.tasks import Task

# The peak is measured by every worker at once (config.run.peak_seconds), before the run and
# after it; a drift between the two past scoring.peak.PEAK_DRIFT is flagged.
# How long the peak before the run waits for every worker the run placed: one the scheduler
# dropped for a moment (its nanny restarting it) is back within 3-10 s.  The peak after the run
# waits for none: it is measured on the workers left.
PLACED_WAIT_SECONDS = 30.0


def measure_run_peak(
    executor: Executor,
    layout: Layout | None,
    seconds: float,
    procs: int = 1,
    workers: int = 1,
    kinds: tuple[str, ...] = ("matmul", "conv"),
) -> RunPeak:
    """The peak of the devices the run uses, measured the way the run uses them, once the
    ``workers`` the run placed are all there (``PLACED_WAIT_SECONDS``; else WorkersLost), and
    measured again where one of them left before it answered and came back in that time.

    Every worker measures at once, with its own device and torch threads, in
    the dtype it trains in (float32 on CPU, bfloat16 — the trainer's
    autocast dtype — on GPU); the total is the sum.  Workers that share a
    machine's cores or memory bandwidth slow each other down here as they do
    in the run, which one worker alone, times the workers, would hide.  With
    ``procs`` processes per trial, each worker's peak is that of its ``procs``
    rank processes (GPUs) measuring at once, its ``parts``.  ``kinds``: the kernels the task's
    networks call (:attr:`aihpc.tasks.base.Task.peak_kernels`).
    """
    deadline = time.monotonic() + PLACED_WAIT_SECONDS
    executor.wait_for_workers(workers, timeout=PLACED_WAIT_SECONDS)
    peak = measure_peak_now(executor, layout, seconds, procs, kinds)
    # a worker the scheduler dropped between joining and measuring (a heartbeat missed on a
    # loaded node) comes back: measure again with it, or the peak would leave its device out
    while peak.workers < workers and time.monotonic() < deadline:
        try:
            executor.wait_for_workers(workers, timeout=max(deadline - time.monotonic(), 0.1))
        except WorkersLost:  # it did not come back in time: the peak is that of those there
            break
        peak = measure_peak_now(executor, layout, seconds, procs, kinds)
    return peak


def measure_peak_now(
    executor: Executor,
    layout: Layout | None,
    seconds: float,
    procs: int,
    kinds: tuple[str, ...],
) -> RunPeak:
    """The peak of the workers alive now, measured at once (as :func:`measure_run_peak`);
    WorkersLost if there is none, or one dies while measuring."""
    threads = layout.threads if layout else None
    per_worker = executor.run_on_each(
        worker_peak, layout.device if layout else "auto", threads, seconds, procs, kinds
    )
    if not per_worker:
        raise WorkersLost("no worker was alive to measure the peak")
    return RunPeak.of([WorkerPeak.from_dict(w) for w in per_worker], procs)


def stage_data(
    task: Task, config: RunConfig, executor: Executor, layout: Layout | None
) -> dict[str, Any]:
    """Every worker stages the data set of the run's ``task`` (:mod:`aihpc.train.staging`) before
    the run's clock starts.

    MLPerf HPC times data staging apart from the run (since HPC v3.0 it need
    not be in the run's time); here it is generating or reading the data
    set into the tier each worker chose (on its device, or a node-local
    file it streams from), which it keeps for all its epochs.  Returns the
    slowest worker's seconds, the bytes staged, and each worker's record.
    """
    from aihpc.records.messages import DataRef

    device = layout.device if layout else "auto"
    per_worker = executor.run_on_each(
        worker_stage,
        task,
        DataRef.of(config),
        device,
        executor.workers_per_host(),
        config.launch.procs_per_trial,
    )
    failed = [w for w in per_worker if "error" in w]
    if failed:
        raise DataError(
            f"worker {failed[0]['worker']} could not stage the data: {failed[0]['error']}"
        )
    return {
        "seconds": max(w["seconds"] for w in per_worker),
        "bytes": sum(w["bytes"] for w in per_worker),
        "workers": len(per_worker),
        "tiers": sorted({w["tier"] for w in per_worker}),
        "per_worker": per_worker,
    }


def worker_stage(
    task: Task, ref: DataRef, device: str, sharing: dict[str, int] | None = None, procs: int = 1
) -> dict[str, Any]:
    """Runs on a worker: its staged copy of the data set (``task``'s), made now and kept for the
    epochs.

    ``sharing``: for each worker's address, the workers on its host (they
    share its memory when staging on the CPU).  With ``procs > 1`` the
    worker's data-parallel ranks, which train its epochs, each stage their
    own copy (the slowest rank's seconds, all ranks' bytes).  A data set
    that cannot be staged comes back as ``error``, for the master to raise.
    """
    from aihpc.machine.devices import resolve_device, worker_address, worker_name

    if procs > 1:
        from aihpc.train.ranks import rank_stage

        ranks = rank_stage(task, ref, device, procs)
        return {
            "worker": worker_name(),
            "tier": ranks[0]["tier"],
            "dtype": ranks[0]["dtype"],
            "seconds": max(r["seconds"] for r in ranks),
            "bytes": sum(r["bytes"] for r in ranks),
            "ranks": ranks,
        }
    from aihpc.train.staging import stage

    share = (sharing or {}).get(worker_address(), 1)
    try:
        return {
            "worker": worker_name(),
            **stage(task, ref, str(resolve_device(device)), share=share).record(),
        }
    # the master says it in one line (raised here, Dask would log a traceback)
    except DataError as exc:
        return {"worker": worker_name(), "error": str(exc)}


# Where the workers' meters save their readings, in the run directory (aihpc.energy.worker).
ENERGY_DIR = "energy"
# Why a resumed run has no energy: the meters of the segments before it died with their master.
RESUMED_ENERGY = (
    "the run was stopped and resumed: the meters of its earlier segments ended with them, "
    "so the run's energy is not known"
)


def start_meters(
    store: RunStore, executor: Executor, layout: Layout | None, device: str, resume: bool
) -> EnergySession | None:
    """Start every worker's energy meter as the run's clock starts (see aihpc.energy.run).

    None on a resume: the energy of a resumed run is not known (RESUMED_ENERGY).
    """
    from aihpc.energy.run import start_energy, unmeasured_block

    if resume:
        store.set_meta(MetaKey.ENERGY, unmeasured_block(RESUMED_ENERGY))
        return None
    return start_energy(
        executor,
        f"{store.meta().run_id}-{secrets.token_hex(4)}",
        layout.device if layout else "auto",
        device,
        store.run_dir / ENERGY_DIR,
    )


def record_energy(
    store: RunStore, executor: Executor, meters: EnergySession | None, procs_per_trial: int
) -> None:
    """Stop the meters and keep their block in the store (results.json's ``energy`` comes from it).

    Energy is measured beside the score: whatever fails here becomes the
    block's reason, and the run goes on to write its results.
    """
    from aihpc.energy.run import finish_energy, unmeasured_block

    if meters is None:
        return
    try:
        block = finish_energy(executor, meters, procs_per_trial)
    except Exception as exc:
        block = unmeasured_block(
            f"the energy meters could not be gathered: {type(exc).__name__}: {exc}"
        )
    store.set_meta(MetaKey.ENERGY, block)


def record_peak_after(
    store: RunStore,
    executor: Executor,
    layout: Layout | None,
    seconds: float,
    kinds: tuple[str, ...],
) -> None:
    """Measure the peak again after the run, on the workers left; keep it, and its drift, beside
    the one before.  The run's score does not depend on it.

    The run's end waits for no worker it lost: the peak after is measured on the workers alive
    now, and a worker lost while they measure (the others measured beside one that failed) has
    them measure once more.  The drift compares like for like (:func:`peak_drift`): the workers
    measured both times beside the same workers of their node (the run's ``devices`` give each
    worker's host).  Where none is left to measure, the peak after stays unmeasured and the
    results say why.
    """
    before = store.meta().peak
    if not before:
        return
    procs = before.get("procs_per_worker", 1)
    try:
        try:
            after = measure_peak_now(executor, layout, seconds, procs, kinds)
        except WorkersLost:
            after = measure_peak_now(executor, layout, seconds, procs, kinds)
    except WorkersLost as exc:
        store.set_meta(
            MetaKey.PEAK,
            {
                **before,
                "after": None,
                "drift": None,
                "drift_workers": None,
                "drift_warning": f"the peak was not measured again after the run: {exc}",
            },
        )
        return
    devices = store.meta().devices or {}
    hosts = {w["worker"]: w["host"] for w in devices.get("workers", []) if "host" in w}
    store.set_meta(MetaKey.PEAK, {**before, **peak_drift(before, after.to_dict(), hosts)})


def peak_drift(
    before: dict[str, Any], after: dict[str, Any], hosts: dict[str, str] | None = None
) -> dict[str, Any]:
    """The peak measured after the run against the one before, like for like: over the workers
    measured both times beside the same workers of their node (``drift_workers``, by name),
    their total after over their total before; a warning past ``PEAK_DRIFT``.

    A worker lost during the run is not in the peak after, nor one that joined it in the peak
    before; and the other workers of its node (``hosts``: each worker's host, by name; a worker
    of no known host is on its own) do not count either, since they shared the node's cores,
    memory or power with one more or one fewer than before.  With no worker left to compare,
    the drift is not known, and the warning says why.
    """
    peaks_before = {w["worker"]: w["flops_per_s"] for w in before["per_worker"]}
    peaks_after = {w["worker"]: w["flops_per_s"] for w in after["per_worker"]}
    on = hosts or {}

    def node_mates(names: set[str], worker: str) -> set[str]:
        return {w for w in names if on.get(w, w) == on.get(worker, worker)}

    both = sorted(
        w
        for w in peaks_before.keys() & peaks_after.keys()
        if node_mates(set(peaks_before), w) == node_mates(set(peaks_after), w)
    )
    if not both:
        return {
            "after": after,
            "drift": None,
            "drift_workers": [],
            "drift_warning": (
                f"none of the {len(peaks_before)} worker(s) measured before the run was measured "
                "after it beside the same workers of its node (workers were lost or joined): "
                "the peak's drift is not known"
            ),
        }
    drift = sum(peaks_after[w] for w in both) / sum(peaks_before[w] for w in both) - 1.0
    warning = None
    if abs(drift) > PEAK_DRIFT:
        warning = (
            f"the machine's peak changed by {100 * drift:+.1f} % during the run "
            f"(more than {100 * PEAK_DRIFT:.0f} %): throttling or other load; "
            "the score may not repeat"
        )
    return {"after": after, "drift": drift, "drift_workers": both, "drift_warning": warning}


def worker_peak(
    device: str,
    threads: int | None,
    seconds: float,
    procs: int = 1,
    kinds: tuple[str, ...] = ("matmul", "conv"),
) -> dict[str, Any]:
    """Runs on a worker: its peak in the dtype the trainer uses there (the best of the kernels
    the workload calls, :func:`aihpc.roofline.peak.search_peak`).

    The sum of its processes' ``parts``.

    One process (``procs = 1``): the worker's own.  Several: its rank pool's
    processes, each on its own device, all measuring at once.
    """
    import torch

    from aihpc.machine.devices import resolve_device, training_dtype, worker_name
    from aihpc.roofline.peak import search_peak

    if procs > 1:
        from aihpc.train.ranks import rank_peaks

        peaks = rank_peaks(device, procs, threads, seconds, kinds)
        parts = [PeakResult.from_dict(p) for p in peaks]
    else:
        if threads:
            torch.set_num_threads(threads)
        dev = resolve_device(device)
        parts = [search_peak(dev, training_dtype(dev), seconds=seconds, kinds=kinds)]
    return WorkerPeak.of(worker_name(), parts).to_dict()
