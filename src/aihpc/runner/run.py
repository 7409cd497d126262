"""``aihpc run`` end to end: check the inputs, start the workers, run the master, write the results.

Everything that can be wrong with the user's input (data set, run directory,
scheduler address) is checked before any worker starts, so a mistake costs
seconds and leaves nothing behind.  The run's clock starts once the workers
are up and the peak is measured (MLPerf's init phase is not timed).
"""

from __future__ import annotations

import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from aihpc.config import RunConfig
from aihpc.errors import ConfigError, DataError, StorageError
from aihpc.records.store import STORE_FORMAT, RunStore, read_meta, run_dir_state
from aihpc.runner.master import Master
from aihpc.runner.placement import place_workers

# Largest network a child may grow to, by device kind, when max_params is not set
# (GPU: the ResNet-50 seed's 23.7 M parameters, with room for a widened stage).
DEFAULT_MAX_PARAMS = {"cpu": 2_000_000, "cuda": 60_000_000}
# The batch sizes the hyperparameter search picks from, when batch_sizes is not set.
# GPU: see DEFAULT_SYNTHETIC; 128 is about where a ResNet-50 step at 128x128
# stops being bound by kernel launches (4 ms of tensor-core work per step at
# 250 TFLOP/s, against 2-3 ms to launch some 500 kernels at ~5 µs each).
DEFAULT_BATCH_SIZES = {"cpu": (32, 64, 128), "cuda": (128, 256, 512)}

# The matmul peak is measured by every worker at once (config.peak_seconds),
# before the run and after it; a drift between the two past PEAK_DRIFT is flagged.
PEAK_DRIFT = 0.10
# How long the peak after the run waits for workers the run lost to come back:
# a Dask nanny restarts a killed worker within 3-10 s (importing torch), and a
# worker job the batch system lost takes minutes, longer than any wait here.
AFTER_WAIT_SECONDS = 30.0

# How long to wait for the first worker (SLURM jobs may queue).
WORKER_WAIT_SECONDS = 600.0

# The default workload: a synthetic data set sized to the device kind, chosen
# so that the search has room to improve all through a 5-minute run.
#
# CPU, 50 classes, 3x16x16, 12,000 samples, difficulty 0.6: its ceiling is
# at least 98.9-99.1 % (aihpc.data.ceiling's oracle; the data depend on the
# seed), yet the first trial reaches only 48-77 % and the best accuracy keeps
# rising, by 4.6, 30.1 and 33.7 points between minute 1 and minute 5 on seeds
# 0, 1, 2, ending at 89-91 % (measured on a 2-core CPU with
# benchmarks/search_headroom.py; figures in the README).  Difficulty 0.6
# keeps the distractor overlay below the label's own prototype, so no sample
# is ambiguous (at 0.7, the old default, the ceiling was only about 90.5 % and
# every run stalled at 87-88 % within 90 s); 50 classes of 216 training samples each make the task
# slow to learn, not impossible.  An epoch takes 10-13 s on one core, so the
# first trials finish well inside the first minute.
#
# GPU, 100 classes, 3x128x128, 50,000 samples (40,000 train, 10,000 val),
# batch sizes 128/256/512 — chosen from published figures and the counted
# operations, NOT YET MEASURED on a GPU (benchmarks/gpu_fill.py measures it):
# * The goal is 25 % of the measured bf16 matmul peak; H100 SXM's dense bf16
#   peak is 989 TFLOP/s on paper, so about 250 TFLOP/s sustained.  The
#   best-published ResNet-50 training in PyTorch reaches about that share:
#   2,470 images/s on one A100 with AMP (NVIDIA DeepLearningExamples,
#   resnet50v1.5) × 24.5 GFLOP per 224x224 training sample (aihpc count) =
#   61 TFLOP/s, 19 % of the A100's 312.
# * So the seed must be a network whose kernels are tensor-core shaped: at
#   3x128x128 the seed is ResNet-50 (aihpc.nas.seeds picks it from 96 px up;
#   64-2048 channels), 23.7 M parameters at 100 classes, 8.01 GFLOP per
#   training sample and 2.68 per evaluation sample (aihpc count).  The old
#   default, 3x32x32 with ResNet-20 (16-64 channels, 0.25 GFLOP per sample),
#   runs some 200 small kernels per step of 128 samples worth 32 GFLOP: 0.13 ms
#   of work at 250 TFLOP/s against about a millisecond of launches.
# * 128 px rather than 224: the data set lives on the GPU (bf16: 4.9 GB) and
#   is generated on the host, 0.95 ms per 3x128x128 image on one core here
#   and by the worker's threads side by side (benchmarks/staging.py: 27 s on
#   2 cores for all 50,000, 0.33 GiB of host memory beside the staged
#   tensors), before the run's clock starts, as MLPerf HPC allows; 224 px
#   would triple both for the same number of samples.  Per sample, both the
#   generation and the training scale with the pixels, so the image size
#   changes the kernels' shapes, not the data-to-compute ratio.
# * An epoch is then 40,000 × 8.01 + 10,000 × 2.68 GFLOP = 347 TFLOP, about
#   1.4 s at 250 TFLOP/s: a 5-minute run trains ~150-200 epochs, i.e. tens of
#   trials of 2-8 epochs.  Per epoch the worker also writes the weights (23.7
#   M parameters + momentum, 181 MiB): 0.43 s written synchronously on this
#   project's CPU, so it is written by a background thread during validation
#   (benchmarks/weight_writer.py; the copies to pinned memory are queued).
# * The ceiling is unknown (too large for the oracle); whether the first
#   trials pass min_accuracy 0.5 (50x chance) within 5 minutes must be measured.
DEFAULT_SYNTHETIC = {
    "cpu": {
        "num_samples": 12000,
        "num_classes": 50,
        "channels": 3,
        "image_size": 16,
        "difficulty": 0.6,
    },
    "cuda": {
        "num_samples": 50000,
        "num_classes": 100,
        "channels": 3,
        "image_size": 128,
        "difficulty": 0.6,
    },
}


def default_run_dir() -> Path:
    return Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def prepare(config: RunConfig, run_dir: Path, resume: bool) -> tuple[RunConfig, RunStore]:
    """Open (or create) the run store after checking the directory; returns the run's config."""
    state = run_dir_state(run_dir)
    if resume and state != "run":
        raise ConfigError(f"no run to resume in {run_dir}")
    if resume:
        check_resumable(run_dir)
    if not resume and state != "new":
        raise ConfigError(
            f"run directory {run_dir} is not empty; use --resume {run_dir} or another --out"
        )
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(
            f"cannot create run directory {run_dir}: {exc.strerror or exc}"
        ) from None
    store = RunStore(run_dir)
    if resume:
        return RunConfig.from_dict(
            store.meta("config"), source=str(run_dir / "aihpc.sqlite")
        ), store
    store.set_meta("config", config.to_dict())
    store.set_meta("run_id", run_dir.name)
    store.set_meta("store_format", STORE_FORMAT)
    return config, store


def check_resumable(run_dir: Path) -> None:
    """ConfigError unless ``run_dir``'s store holds a run that was stopped before it finished.

    Read-only: a refused resume changes nothing in the run directory.
    """
    db = run_dir / "aihpc.sqlite"
    try:
        config, finished, layout = (
            read_meta(db, "config"),
            read_meta(db, "finished"),
            read_meta(db, "store_format"),
        )
    except StorageError as exc:
        raise ConfigError(f"cannot resume {run_dir}: {exc}") from None
    if config is None:
        raise ConfigError(
            f"cannot resume {run_dir}: its store {db} holds no run configuration "
            "(the run never started, or the file is not an aihpc run store)"
        )
    if finished:
        raise ConfigError(
            f"cannot resume {run_dir}: the run has finished (its results are in "
            f"{run_dir / 'results.json'}); --resume continues only a run that was stopped"
        )
    if layout != STORE_FORMAT:
        raise ConfigError(
            f"cannot resume {run_dir}: its store has format {layout or 1}, written by an older "
            f"aihpc; this one resumes format {STORE_FORMAT} only"
        )


def with_default_workload(config: RunConfig, device: str) -> RunConfig:
    """Fill in the batch sizes, and the synthetic data set's size, for this device kind where the user did not."""
    if config.batch_sizes is None:
        config = config.replace(batch_sizes=list(DEFAULT_BATCH_SIZES[device]))
    if config.dataset != "synthetic":
        return config
    options = {**DEFAULT_SYNTHETIC[device], **config.data_options}
    return config.replace(data_options=options)


def inspect_data(config: RunConfig, device: str) -> dict[str, Any]:
    """Load the data set once in the master: checks it exists and gives its shape."""
    from aihpc.data import load_dataset

    data = load_dataset(
        config.dataset, path=config.data_path, seed=config.seed, **config.data_options
    )
    from aihpc.nas.seeds import seed_spec

    seed_params = seed_spec(data.input_shape, data.num_classes).num_params()
    max_params = config.max_params or DEFAULT_MAX_PARAMS[device]
    if seed_params > max_params:
        raise ConfigError(
            f"max_params must be at least the seed network's {seed_params} parameters, got {max_params}"
        )
    from aihpc.data.ceiling import task_description

    return {
        "name": data.name,
        "input_shape": list(data.input_shape),
        "num_classes": data.num_classes,
        "num_train": data.num_train,
        "num_val": data.num_val,
        "max_params": max_params,
        **task_description(data),
    }


def run_benchmark(
    config: RunConfig, run_dir: Path, resume: bool, console, client=None
) -> dict[str, Any]:
    """Run (or resume) the benchmark in ``run_dir``; returns results.json's content.

    ``client``: a Dask client of workers started elsewhere (inside a SLURM
    allocation); otherwise the executor is made from the configuration.
    """
    from aihpc.records.mlperf import MLPerfLog
    from aihpc.records.schema import build_results, write_json
    from aihpc.runner.observer import Observers

    store = None
    if resume:  # the run's own configuration; flags other than --resume do not apply
        config, store = prepare(config, run_dir, resume)
    try:
        layout = choose_layout(config, client)
        device = layout.device if layout else ("cuda" if config.device == "cuda" else "cpu")
        if not resume:
            config = with_default_workload(config, device)
        data_info = inspect_data(
            config, device
        )  # before a new run directory is made: bad data costs nothing
    except BaseException:
        if store is not None:
            store.close()
        raise
    if store is None:
        config, store = prepare(config, run_dir, resume)
    mlperf = MLPerfLog(run_dir / "mlperf.log", append=resume)
    executor = None
    try:
        executor = open_executor(config, layout, run_dir, client)
        store.set_meta(
            "devices",
            place_workers(executor, layout.device if layout else "auto", config.procs_per_trial),
        )
        if resume:
            done = [e.metrics["val_accuracy"] for e in store.epochs() if e.status == "ok"]
            mlperf.resumed(last_epoch=len(done), best_accuracy=max(done, default=None))
        else:
            initialise(config, store, executor, mlperf, layout, device, data_info)
        meters = start_meters(store, executor, layout, device, resume)
        master = Master(config, store, executor, data_info, layout, Observers(console, mlperf))
        with console:
            score = master.run()
        record_energy(store, executor, meters, config.procs_per_trial)
        record_peak_after(store, executor, layout, config.peak_seconds)
        results = build_results(store, score)
        write_json(run_dir / "results.json", results)
        mlperf.run_stop(
            "success" if score.valid else "aborted",
            chain_sha256=results["integrity"]["chain_sha256"],
        )
        store.set_meta("finished", True)
        return results
    finally:
        try:
            if executor is not None:
                executor.close()
        finally:
            shutil.rmtree(
                run_dir / "tls", ignore_errors=True
            )  # the run's TLS key goes with its workers
            mlperf.close()
            store.close()


def initialise(
    config: RunConfig,
    store: RunStore,
    executor,
    mlperf,
    layout,
    device: str,
    data_info: dict[str, Any],
) -> None:
    """MLPerf's init phase of a new run: record the machine and the data, measure the peak."""
    from aihpc.records.environment import collect

    environment = collect()
    mlperf.submission_info(
        org="aihpc",
        platform=_platform(environment, device),
        number_of_nodes=config.nodes if config.batch_system else 1,
        accelerators_per_node=(layout.workers * layout.procs // max(config.nodes, 1))
        if device == "cuda" and layout
        else 0,  # every GPU of a node: workers x their processes
    )
    mlperf.cache_clear(False)
    mlperf.init_start()
    mlperf.train_samples(data_info["num_train"])
    mlperf.eval_samples(data_info["num_val"])
    store.set_meta("environment", environment)
    store.set_meta("data", data_info)
    store.set_meta("layout", layout.__dict__ if layout else {"scheduler": config.scheduler})
    peak = measure_run_peak(executor, layout, config.peak_seconds, config.procs_per_trial)
    store.set_meta("peak", peak)
    store.set_meta("peak_flops_per_s", peak["total_flops_per_s"])
    mlperf.staging_start()
    staged = stage_data(config, executor, layout)
    store.set_meta("staging", staged)
    mlperf.staging_stop(staged_bytes=staged["bytes"])
    mlperf.init_stop()
    mlperf.run_start()


def choose_layout(config: RunConfig, client):
    """How many workers of which kind: from the allocation, the SLURM flags, or this machine."""
    from aihpc.runner.executor import allocation_layout, batch_layout, local_layout

    if client is not None:
        return allocation_layout(config.procs_per_trial)
    if config.scheduler:
        return None  # the scheduler's workers are what they are
    if config.batch_system:
        return batch_layout(config)
    return local_layout(
        config.workers, config.threads_per_worker, config.device, config.procs_per_trial
    )


def open_executor(config: RunConfig, layout, run_dir: Path, client):
    from aihpc.runner.executor import DaskExecutor, batch_executor, local_executor, remote_executor

    if client is not None:
        executor = DaskExecutor(client, owns_client=False)
    elif config.scheduler:
        executor = remote_executor(config.scheduler)
    elif config.batch_system:
        executor = batch_executor(layout, config, run_dir)
    else:
        executor = local_executor(layout, config.worker_memory)
    try:
        executor.wait_for_workers(1, timeout=WORKER_WAIT_SECONDS)
    except BaseException:
        executor.close()
        raise
    return executor


def measure_run_peak(executor, layout, seconds: float, procs: int = 1) -> dict[str, Any]:
    """The matmul peak of the devices the run uses, measured the way the run uses them.

    Every worker measures at once, with its own device and torch threads, in
    the dtype it trains in (float32 on CPU, bfloat16 — the trainer's
    autocast dtype — on GPU); the total is the sum.  Workers that share a
    machine's cores or memory bandwidth slow each other down here as they do
    in the run, which one worker alone, times the workers, would hide.  With
    ``procs`` processes per trial, each worker's peak is that of its ``procs``
    rank processes (GPUs) measuring at once, its ``parts``.
    """
    threads = layout.threads if layout else None
    per_worker = executor.run_on_each(
        worker_peak, layout.device if layout else "auto", threads, seconds, procs
    )
    return {
        "device": per_worker[0]["device"],
        "dtype": per_worker[0]["dtype"],
        "per_worker": per_worker,
        "workers": len(per_worker),
        "procs_per_worker": procs,
        "total_flops_per_s": sum(p["flops_per_s"] for p in per_worker),
        "spread": max(p["spread"] for p in per_worker),
    }


def stage_data(config: RunConfig, executor, layout) -> dict[str, Any]:
    """Every worker stages the data set (:mod:`aihpc.train.staging`) before the run's clock starts.

    MLPerf HPC times data staging apart from the run (since HPC v3.0 it need
    not be in the run's time); here it is generating or reading the data
    set into the tier each worker chose (on its device, or a node-local
    file it streams from), which it keeps for all its epochs.  Returns the
    slowest worker's seconds, the bytes staged, and each worker's record.
    """
    from aihpc.records.task import DataRef

    device = layout.device if layout else "auto"
    per_worker = executor.run_on_each(
        worker_stage,
        DataRef.of(config),
        device,
        executor.workers_per_host(),
        config.procs_per_trial,
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
    ref, device: str, sharing: dict[str, int] | None = None, procs: int = 1
) -> dict[str, Any]:
    """Runs on a worker: its staged copy of the data set, made now and kept for the epochs.

    ``sharing``: for each worker's address, the workers on its host (they
    share its memory when staging on the CPU).  With ``procs > 1`` the
    worker's data-parallel ranks, which train its epochs, each stage their
    own copy (the slowest rank's seconds, all ranks' bytes).  A data set
    that cannot be staged comes back as ``error``, for the master to raise.
    """
    from aihpc.devices import resolve_device, worker_address, worker_name

    if procs > 1:
        from aihpc.train.ranks import rank_stage

        ranks = rank_stage(ref, device, procs)
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
            **stage(ref, str(resolve_device(device)), share=share).record(),
        }
    except (
        DataError
    ) as exc:  # the master says it in one line (raised here, Dask would log a traceback)
        return {"worker": worker_name(), "error": str(exc)}


# Why a resumed run has no energy: the meters of the segments before it died with their master.
RESUMED_ENERGY = (
    "the run was stopped and resumed: the meters of its earlier segments ended with them, "
    "so the run's energy is not known"
)


def start_meters(store: RunStore, executor, layout, device: str, resume: bool):
    """Start every worker's energy meter as the run's clock starts (see aihpc.energy.run); None on a resume."""
    from aihpc.energy.run import start_energy, unmeasured_block

    if resume:
        store.set_meta("energy", unmeasured_block(RESUMED_ENERGY))
        return None
    return start_energy(
        executor,
        f"{store.meta('run_id')}-{secrets.token_hex(4)}",
        layout.device if layout else "auto",
        device,
    )


def record_energy(store: RunStore, executor, meters, procs_per_trial: int) -> None:
    """Stop the meters and keep their block in the store (results.json's ``energy`` is built from it).

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
    store.set_meta("energy", block)


def record_peak_after(store: RunStore, executor, layout, seconds: float) -> None:
    """Measure the peak again after the run; keep it, and its drift, beside the one before.

    It is measured on as many workers as before, so that the totals compare:
    a worker the run lost (killed, restarting) gets ``AFTER_WAIT_SECONDS`` to
    come back; if it does not, the peak after stays unmeasured and the
    results say why.  The run's score does not depend on it.
    """
    before = store.meta("peak")
    if not before:
        return
    try:
        executor.wait_for_workers(before["workers"], timeout=AFTER_WAIT_SECONDS)
    except ConfigError as exc:
        store.set_meta(
            "peak",
            {
                **before,
                "after": None,
                "drift": None,
                "drift_warning": f"the peak was not measured again after the run: {exc}",
            },
        )
        return
    after = measure_run_peak(executor, layout, seconds, before.get("procs_per_worker", 1))
    store.set_meta("peak", {**before, **peak_drift(before, after)})


def peak_drift(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The peak measured after the run against the one before; a warning past ``PEAK_DRIFT``."""
    drift = after["total_flops_per_s"] / before["total_flops_per_s"] - 1.0
    warning = None
    if abs(drift) > PEAK_DRIFT:
        warning = (
            f"the machine's peak changed by {100 * drift:+.1f} % during the run "
            f"(more than {100 * PEAK_DRIFT:.0f} %): throttling or other load; the score may not repeat"
        )
    return {"after": after, "drift": drift, "drift_warning": warning}


def worker_peak(device: str, threads: int | None, seconds: float, procs: int = 1) -> dict[str, Any]:
    """Runs on a worker: its matmul peak in the dtype the trainer uses there, the sum of its processes' ``parts``.

    One process (``procs = 1``): the worker's own.  Several: its rank pool's
    processes, each on its own device, all measuring at once.
    """
    import torch

    from aihpc.devices import resolve_device, training_dtype, worker_name
    from aihpc.roofline.peak import measure_peak

    if procs > 1:
        from aihpc.train.ranks import rank_peaks

        parts = rank_peaks(device, procs, threads, seconds)
    else:
        if threads:
            torch.set_num_threads(threads)
        dev = resolve_device(device)
        parts = [measure_peak(dev, training_dtype(dev), seconds=seconds).to_dict()]
    return {
        "worker": worker_name(),
        "device": parts[0]["device"],
        "dtype": parts[0]["dtype"],
        "flops_per_s": sum(p["flops_per_s"] for p in parts),
        "spread": max(p["spread"] for p in parts),
        "parts": parts,
    }


def _platform(environment: dict[str, Any], device: str) -> str:
    """The MLPerf platform name: the GPU model on GPU machines, else the CPU model."""
    gpus = environment.get("gpus") or []
    if device == "cuda" and gpus:
        return f"{len(gpus)}x {gpus[0].get('name', 'GPU')}"
    return str(environment.get("cpu_model") or environment.get("hostname") or "unknown")
