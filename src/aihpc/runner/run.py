"""``aihpc run`` end to end: check the inputs, start the workers, run the master, write the results.

Everything that can be wrong with the user's input (data set, run directory,
scheduler address) is checked before any worker starts, so a mistake costs
seconds and leaves nothing behind.  The run's clock starts once the workers
are up and the peak is measured (MLPerf's init phase is not timed).
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

from aihpc.config import RunConfig
from aihpc.errors import ConfigError, StorageError
from aihpc.runner.master import Master, run_dir_state
from aihpc.runner.store import RunStore

# Largest network a child may grow to, by device kind, when max_params is not set.
DEFAULT_MAX_PARAMS = {"cpu": 2_000_000, "cuda": 60_000_000}

# The default workload: a synthetic data set sized to the device kind.
DEFAULT_SYNTHETIC = {
    # difficulty 0.7: the seed network reaches about 70-85 % in a few epochs,
    # leaving the search room to improve (measured on 3x16x16).
    "cpu": {"num_samples": 6000, "num_classes": 10, "channels": 3, "image_size": 16, "difficulty": 0.7},
    "cuda": {"num_samples": 50000, "num_classes": 10, "channels": 3, "image_size": 32, "difficulty": 0.7},
}


def default_run_dir() -> Path:
    return Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def prepare(config: RunConfig, run_dir: Path, resume: bool) -> tuple[RunConfig, RunStore]:
    """Open (or create) the run store after checking the directory; returns the run's config."""
    state = run_dir_state(run_dir)
    if resume and state != "run":
        raise ConfigError(f"no run to resume in {run_dir}")
    if not resume and state != "new":
        raise ConfigError(f"run directory {run_dir} is not empty; use --resume {run_dir} or another --out")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot create run directory {run_dir}: {exc.strerror or exc}") from None
    store = RunStore(run_dir)
    if resume:
        return RunConfig.from_dict(store.meta("config"), source=str(run_dir / "aihpc.sqlite")), store
    store.set_meta("config", config.to_dict())
    store.set_meta("run_id", run_dir.name)
    return config, store


def with_default_workload(config: RunConfig, device: str) -> RunConfig:
    """Fill in the synthetic data set's size for this device kind where the user did not."""
    if config.dataset != "synthetic":
        return config
    options = {**DEFAULT_SYNTHETIC[device], **config.data_options}
    return config.replace(data_options=options)


def inspect_data(config: RunConfig, device: str) -> dict[str, Any]:
    """Load the data set once in the master: checks it exists and gives its shape."""
    from aihpc.data import load_dataset

    data = load_dataset(config.dataset, path=config.data_path, seed=config.seed, **config.data_options)
    return {
        "name": data.name,
        "input_shape": list(data.input_shape),
        "num_classes": data.num_classes,
        "num_train": data.num_train,
        "num_val": data.num_val,
        "max_params": DEFAULT_MAX_PARAMS[device],
    }


def run_benchmark(config: RunConfig, run_dir: Path, resume: bool, console) -> dict[str, Any]:
    """Run (or resume) the benchmark in ``run_dir``; returns results.json's content."""
    from aihpc.results.environment import collect
    from aihpc.results.mlperf import MLPerfLog
    from aihpc.results.schema import build_results, write_json
    from aihpc.runner.executor import DaskExecutor, local_layout
    from aihpc.runner.observer import Observers

    layout = None if config.scheduler else local_layout(config.workers, config.threads_per_worker, config.device)
    device = layout.device if layout else ("cuda" if config.device == "cuda" else "cpu")
    if not resume:
        config = with_default_workload(config, device)
    data_info = inspect_data(config, device)  # before touching the run directory: bad data costs nothing
    config, store = prepare(config, run_dir, resume)
    mlperf = MLPerfLog(run_dir / "mlperf.log", append=resume)
    if resume:
        done = [e["metrics"]["val_accuracy"] for e in store.epochs() if e["status"] == "ok"]
        mlperf.resumed(last_epoch=len(done), best_accuracy=max(done, default=None))
    else:
        environment = collect()
        mlperf.submission_info(
            org="aihpc",
            platform=_platform(environment, device),
            number_of_nodes=1,
            accelerators_per_node=layout.workers if (layout and device == "cuda") else 0,
        )
        mlperf.cache_clear(False)
        mlperf.init_start()
        mlperf.train_samples(data_info["num_train"])
        mlperf.eval_samples(data_info["num_val"])
        store.set_meta("environment", environment)
        store.set_meta("data", data_info)
        store.set_meta("layout", layout.__dict__ if layout else {"scheduler": config.scheduler})
    executor = DaskExecutor(layout, config.scheduler)
    try:
        if not resume:
            peak = measure_run_peak(device, layout)
            store.set_meta("peak", peak)
            store.set_meta("peak_flops_per_s", peak["total_flops_per_s"])
            mlperf.init_stop()
            mlperf.run_start()
        master = Master(config, store, executor, data_info, layout, Observers(console, mlperf))
        with console:
            score = master.run()
        results = build_results(store, score)
        write_json(run_dir / "results.json", results)
        mlperf.run_stop("success" if score["valid"] else "aborted")
        return results
    finally:
        executor.close()
        mlperf.close()
        store.close()


def measure_run_peak(device: str, layout) -> dict[str, Any]:
    """The matmul peak of the devices the run uses, in the dtype it trains in.

    CPU: float32 with all the cores the workers share.  GPU: bfloat16 (the
    trainer's autocast dtype) on one GPU, times the number of GPUs.
    """
    from aihpc.roofline.peak import measure_peak

    dtype = "bfloat16" if device == "cuda" else "float32"
    result = measure_peak(device, dtype, seconds=1.0)
    count = layout.workers if (layout and device == "cuda") else 1
    return {
        "device": device,
        "dtype": dtype,
        "per_device": result.to_dict(),
        "devices": count,
        "total_flops_per_s": result.flops_per_s * count,
    }


def _platform(environment: dict[str, Any], device: str) -> str:
    """The MLPerf platform name: the GPU model on GPU machines, else the CPU model."""
    gpus = environment.get("gpus") or []
    if device == "cuda" and gpus:
        return f"{len(gpus)}x {gpus[0].get('name', 'GPU')}"
    return str(environment.get("cpu_model") or environment.get("hostname") or "unknown")
