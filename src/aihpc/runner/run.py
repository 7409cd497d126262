"""``aihpc run`` end to end: check the inputs, start the workers, run the master, write the results.

Everything that can be wrong with the user's input (data set, run directory,
scheduler address) is checked before any worker starts, so a mistake costs
seconds and leaves nothing behind.  The run's clock starts once the workers
are up and the peak is measured (MLPerf's init phase is not timed).
"""

from __future__ import annotations

import contextlib
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aihpc.base.config import RunConfig
from aihpc.base.errors import ConfigError, DataError, StorageError, WorkersLost
from aihpc.launch.placement import Placement
from aihpc.machine.cluster import check_interface
from aihpc.machine.environment import Environment
from aihpc.records.meta import MetaKey
from aihpc.records.store import STORE_FORMAT, RunDirState, RunStore, read_meta, run_dir_state
from aihpc.results.read import results_file
from aihpc.runner.measure import (
    measure_run_peak,
    record_energy,
    record_peak_after,
    stage_data,
    start_meters,
)
from aihpc.runner.search.master import Master
from aihpc.scoring.score import Score
from aihpc.tasks import Task, read_config, task_of

if TYPE_CHECKING:  # for the types only: a run imports them (mlperf_logging, dask) when it starts
    from distributed import Client

    from aihpc.launch.executor import DaskExecutor, Layout
    from aihpc.launch.interface import Executor
    from aihpc.mlperf.log import MLPerfLog
    from aihpc.results.model import RunHead
    from aihpc.results.write import WrittenResults
    from aihpc.runner.display.console import Console
    from aihpc.runner.search.memory import MemoryWatch

# How long to wait for the first worker (SLURM jobs may queue).
WORKER_WAIT_SECONDS = 600.0
# How long, once the first has joined, to wait for the rest of the workers the run started, so
# that they are placed and their devices measured in the peak before the clock starts; a
# worker later than that joins the run when it comes
ALL_WORKERS_WAIT_SECONDS = 60.0


def default_run_dir() -> Path:
    return Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def prepare(config: RunConfig, run_dir: Path, resume: bool) -> tuple[RunConfig, RunStore]:
    """Open (or create) the run store after checking the directory; returns the run's config."""
    state = run_dir_state(run_dir)
    if resume and state != RunDirState.RUN:
        raise DataError(f"no run to resume in {run_dir}")
    if resume:
        check_resumable(run_dir)
    if not resume and state != RunDirState.NEW:
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
        stored = store.meta().config
        assert stored is not None  # check_resumable found it
        return read_config(stored, source=str(run_dir / "aihpc.sqlite")), store
    store.set_meta(MetaKey.CONFIG, config.to_dict())
    store.set_meta(MetaKey.RUN_ID, run_dir.name)
    store.set_meta(MetaKey.STORE_FORMAT, STORE_FORMAT)
    return config, store


def check_resumable(run_dir: Path) -> None:
    """Raise unless ``run_dir``'s store holds a run that was stopped before it finished.

    StorageError if the store cannot be read, DataError if it holds no run
    configuration or is of an older format, ConfigError if the run has
    finished (there is nothing to resume).  Read-only: a refused resume
    changes nothing in the run directory.
    """
    db = run_dir / "aihpc.sqlite"
    try:
        meta = read_meta(db)
    except StorageError as exc:
        raise StorageError(f"cannot resume {run_dir}: {exc}") from None
    if meta.config is None:
        raise DataError(
            f"cannot resume {run_dir}: its store {db} holds no run configuration "
            "(the run never started, or the file is not an aihpc run store)"
        )
    if meta.finished:
        raise ConfigError(
            f"cannot resume {run_dir}: the run has finished (its results are in "
            f"{results_file(run_dir)}); --resume continues only a run that was stopped"
        )
    if meta.store_format != STORE_FORMAT:
        raise DataError(
            f"cannot resume {run_dir}: its store has format {meta.store_format}, written by an "
            f"older aihpc; this one resumes format {STORE_FORMAT} only"
        )


def run_benchmark(
    config: RunConfig,
    run_dir: Path,
    resume: bool,
    console: Console,
    client: Client | None = None,
) -> WrittenResults:
    """Run (or resume) the benchmark in ``run_dir``; returns what it wrote in results.json.

    ``client``: a Dask client of workers started elsewhere (inside a SLURM
    allocation); otherwise the executor is made from the configuration.
    """
    from aihpc.results.write import trial_records, write_results

    inputs = check_inputs(config, run_dir, resume, client)
    config, store, task = inputs.config, inputs.store, inputs.task
    mlperf = open_mlperf_log(run_dir, task, config, inputs.data_info, resume)
    executor = None
    try:
        executor = open_executor(config, inputs.layout, run_dir, client)
        run = OpenRun.of(inputs, executor, mlperf)
        score, head = search_and_score(run, resume, console)
        quality = task.quality(config, inputs.data_info)
        written = write_results(run_dir, head, trial_records(store, quality))
        chain_sha256, _ = store.chain_head()  # as results.json's integrity records it
        mlperf.run_stop("success" if score.valid else "aborted", chain_sha256=chain_sha256)
        store.set_meta(MetaKey.FINISHED, True)
        return written
    finally:
        try:
            if executor is not None:
                executor.close()  # a batch run's TLS key goes with its workers
        finally:
            mlperf.close()
            store.close()


def open_mlperf_log(
    run_dir: Path, task: Task, config: RunConfig, data_info: dict[str, Any], resume: bool
) -> MLPerfLog:
    """The run's MLPerf log, under its task's benchmark name and quality (an accuracy that never
    falls, or a loss that never rises); continued on a resume."""
    from aihpc.mlperf.log import MLPerfLog

    return MLPerfLog(
        run_dir / "mlperf.log",
        task.mlperf_benchmark,
        append=resume,
        higher_is_better=task.quality(config, data_info).higher_is_better,
    )


@dataclass(frozen=True)
class RunInputs:
    """What :func:`check_inputs` found, before any worker starts."""

    config: RunConfig  # the run's own: with the task's defaults, or the resumed run's
    task: Task  # the run's task, resolved here once
    store: RunStore  # open, the run directory made
    layout: Layout | None  # None: a scheduler's workers, as they are
    device: str  # the kind of device the workers train on: cpu or cuda
    data_info: dict[str, Any]  # the data set (inspect_data), results.json's data


def check_inputs(
    config: RunConfig, run_dir: Path, resume: bool, client: Client | None
) -> RunInputs:
    """The configuration, store, layout, device kind and data, checked before any worker starts.

    A new run's directory is made only once the data are known good: bad data cost nothing.
    """
    store = None
    if resume:  # the run's own configuration; flags other than --resume do not apply
        config, store = prepare(config, run_dir, resume)
    try:
        task = task_of(config.run.task)
        if config.launch.interface and client is None:
            # the login side's; a node's is checked on the node
            check_interface(config.launch.interface)
        layout = choose_layout(config, client)
        if layout is not None and client is None and not config.launch.batch_system:
            from aihpc.launch.memory import worker_limit

            # workers on this machine can start
            worker_limit(config.launch.worker_memory, layout.workers)
        device = layout.device if layout else ("cuda" if config.run.device == "cuda" else "cpu")
        if not resume:  # what the task sizes to the device, where the user did not set it
            config = task.default_workload(config, device)
        data_info = task.inspect_data(config, device)  # the data set checked, described
    except BaseException:
        if store is not None:
            store.close()
        raise
    if store is None:
        config, store = prepare(config, run_dir, resume)
    return RunInputs(config, task, store, layout, device, data_info)


@dataclass(frozen=True)
class OpenRun:
    """A run being made: what :func:`check_inputs` found and what :func:`run_benchmark` opened."""

    config: RunConfig
    task: Task  # the run's task
    store: RunStore
    executor: Executor  # its workers joined
    mlperf: MLPerfLog
    layout: Layout | None  # None: a scheduler's workers, as they are
    device: str  # the kind of device the workers train on: cpu or cuda
    data_info: dict[str, Any]  # the data set (inspect_data), results.json's data

    @classmethod
    def of(cls, inputs: RunInputs, executor: Executor, mlperf: MLPerfLog) -> OpenRun:
        """The run of ``inputs``, with its workers and its MLPerf log."""
        return cls(
            inputs.config,
            inputs.task,
            inputs.store,
            executor,
            mlperf,
            inputs.layout,
            inputs.device,
            inputs.data_info,
        )


def search_and_score(run: OpenRun, resume: bool, console: Console) -> tuple[Score, RunHead[Any]]:
    """Place the workers, measure (a new run), search until the deadline, measure again, score.

    Returns the score and results.json's fields but its trials, for the caller to write with them.
    """
    from aihpc.results.write import results_fields
    from aihpc.runner.display.observer import Observers, resume_log

    config, store, executor, layout = run.config, run.store, run.executor, run.layout
    placement = Placement(
        executor, layout.device if layout else "auto", config.launch.procs_per_trial
    )
    store.set_meta(MetaKey.DEVICES, placement.place())
    quality = run.task.quality(config, run.data_info)
    if resume:
        resume_log(run.mlperf, store, store.run_dir / "mlperf.log", quality.metric)
    else:
        initialise(run)
    memory = watch_memory(run, resume)

    def place_joined() -> None:
        mapping = placement.joined()
        if mapping is not None:
            store.set_meta(MetaKey.DEVICES, mapping)
            measure_memory(run, memory)

    meters = start_meters(store, executor, layout, run.device, resume)
    observers = Observers(console, run.mlperf, quality)
    master = Master(
        run.task,
        config,
        store,
        executor,
        run.data_info,
        layout,
        observers,
        workers_joined=place_joined,
        memory=memory,
    )
    with console:
        score = master.run()
    record_energy(store, executor, meters, config.launch.procs_per_trial)
    record_peak_after(store, executor, layout, config.run.peak_seconds, run.task.peak_kernels)
    return score, results_fields(store, score)


def watch_memory(run: OpenRun, resume: bool) -> MemoryWatch:
    """The master's view of its workers' memory (:mod:`aihpc.runner.search.memory`), each worker
    measured now, before its first trial; ConfigError if not even the seed network fits."""
    from aihpc.runner.search.memory import MemoryWatch

    staged = 0
    if resume and run.device == "cpu":  # the data each worker stages into its memory, not yet
        per_worker = (run.store.meta().staging or {}).get("per_worker") or []
        staged = max((w["bytes"] for w in per_worker if w.get("tier") == "device"), default=0)
    memory = MemoryWatch(run.task, run.config, run.device, run.executor.memory_kill, staged)
    measure_memory(run, memory)
    memory.check_seed(run.data_info)
    return memory


def measure_memory(run: OpenRun, memory: MemoryWatch) -> None:
    """Measure the workers alive now that ``memory`` has not measured, and keep every record in
    the store (results.json's ``worker_memory``)."""
    from aihpc.launch.memory import RULE, TERMINATE_FRACTION, worker_memory

    device = run.layout.device if run.layout else "auto"
    answers = run.executor.ask_each(worker_memory, device)
    limits = run.executor.memory_limits()
    memory.add(
        [{"worker": name, **answers[name], "limit_bytes": limits.get(name)} for name in answers]
    )
    block = {
        "rule": RULE,
        "terminate_fraction": TERMINATE_FRACTION,
        "workers": [memory.records[name] for name in sorted(memory.records)],
    }
    run.store.set_meta(MetaKey.WORKER_MEMORY, block)


def initialise(run: OpenRun) -> None:
    """MLPerf's init phase of a new run: record the machine and the data, measure the peak."""
    from aihpc.machine.environment import collect

    config, store, layout, mlperf = run.config, run.store, run.layout, run.mlperf
    environment = collect()
    mlperf.submission_info(
        org="aihpc",
        platform=_platform(environment, run.device),
        number_of_nodes=config.launch.nodes if config.launch.batch_system else 1,
        accelerators_per_node=(layout.workers * layout.procs // max(config.launch.nodes, 1))
        if run.device == "cuda" and layout
        else 0,  # every GPU of a node: workers x their processes
    )
    mlperf.cache_clear(False)
    mlperf.init_start()
    mlperf.train_samples(run.data_info["num_train"])
    mlperf.eval_samples(run.data_info["num_val"])
    store.set_meta(MetaKey.ENVIRONMENT, environment.to_dict())
    store.set_meta(MetaKey.DATA, run.data_info)
    store.set_meta(
        MetaKey.LAYOUT, layout.__dict__ if layout else {"scheduler": config.launch.scheduler}
    )
    devices = store.meta().devices
    assert devices is not None  # placed by search_and_score before this
    placed = len(devices["workers"])
    peak = measure_run_peak(
        run.executor,
        layout,
        config.run.peak_seconds,
        config.launch.procs_per_trial,
        placed,
        run.task.peak_kernels,
    )
    store.set_meta(MetaKey.PEAK, peak.to_dict())
    store.set_meta(MetaKey.PEAK_FLOPS_PER_S, peak.total_flops_per_s)
    nominal = peak.nominal
    store.set_meta(MetaKey.NOMINAL_PEAK_FLOPS_PER_S, nominal.flops_per_s if nominal else None)
    mlperf.staging_start()
    staged = stage_data(run.task, config, run.executor, layout)
    store.set_meta(MetaKey.STAGING, staged)
    mlperf.staging_stop(staged_bytes=staged["bytes"])
    mlperf.init_stop()
    mlperf.run_start()


def choose_layout(config: RunConfig, client: Client | None) -> Layout | None:
    """How many workers of which kind: from the allocation, the SLURM flags, or this machine."""
    from aihpc.launch.executor import allocation_layout, batch_layout, local_layout

    if client is not None:
        return allocation_layout(config.launch.procs_per_trial)
    if config.launch.scheduler:
        return None  # the scheduler's workers are what they are
    if config.launch.batch_system:
        return batch_layout(config.launch)
    return local_layout(
        config.launch.workers,
        config.launch.threads_per_worker,
        config.run.device,
        config.launch.procs_per_trial,
    )


def open_executor(
    config: RunConfig, layout: Layout | None, run_dir: Path, client: Client | None
) -> DaskExecutor:
    """The run's workers (those of ``client``, of the scheduler, batch jobs, or on this machine),
    once the first has joined, and every one the run started itself within
    ``ALL_WORKERS_WAIT_SECONDS`` after it; ``layout`` is :func:`choose_layout`'s."""
    from aihpc.launch.executor import DaskExecutor, batch_executor, local_executor, remote_executor

    if client is not None:
        executor = DaskExecutor(client, owns_client=False)
    elif config.launch.scheduler:
        executor = remote_executor(config.launch.scheduler, config.launch.worker_memory)
    else:
        assert layout is not None  # choose_layout's, for any workers but a scheduler's
        if config.launch.batch_system:
            executor = batch_executor(layout, config.launch, run_dir)
        else:
            executor = local_executor(layout, config.launch.worker_memory)
    executor.log_dir = run_dir
    try:
        executor.wait_for_workers(1, timeout=WORKER_WAIT_SECONDS)
    except BaseException:
        executor.close()
        raise
    started_here = client is None and not config.launch.scheduler
    if started_here and layout is not None and layout.workers > 1:
        with contextlib.suppress(WorkersLost):  # the run starts with those there
            executor.wait_for_workers(layout.workers, timeout=ALL_WORKERS_WAIT_SECONDS)
    return executor


def _platform(environment: Environment, device: str) -> str:
    """The MLPerf platform name: the GPU model on GPU machines, else the CPU model."""
    gpus = environment.gpus
    if device == "cuda" and gpus:
        return f"{len(gpus)}x {gpus[0].name}"
    return str(environment.cpu_model or environment.hostname or "unknown")
