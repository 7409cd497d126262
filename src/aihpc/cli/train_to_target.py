"""aihpc train-to-target: MLPerf HPC's time to train on a science workload (staging timed apart).

Generates the workload's data (or reads real-format files with
``--data-dir``), then runs ``--runs`` rounds of ``--instances`` concurrent
models on Dask workers, each staging the data to node-local storage, training
until the quality target, and writing an MLPerf log that is checked by
MLPerf's compliance checker.  Prints time to train (olympic mean), staging
time and throughput; writes ``ttt.json`` in the output folder.  A target not
reached within the budget (``--max-epochs``, ``--max-minutes``) is reported
in one line, exit 4, after the results are written.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workload", required=True, help="cosmoflow or deepcam")
    p.add_argument(
        "--runs",
        type=int,
        default=5,
        help="rounds one after another (default 5; olympic mean needs >= 3)",
    )
    p.add_argument(
        "--instances", type=int, default=1, help="models trained at once per round (default 1)"
    )
    p.add_argument("--size", help="workload size: small (default, the reference) or tiny")
    p.add_argument(
        "--target", type=float, help="quality target (default: the workload's reference target)"
    )
    p.add_argument("--max-epochs", type=int, help="epoch budget per model (default: the size's)")
    p.add_argument(
        "--max-minutes", type=float, default=10.0, help="time budget per model (default 10)"
    )
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the data and the models (default 0)"
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        help="existing data (DIR/train, DIR/validation) instead of generated",
    )
    p.add_argument(
        "--stage-dir", help="node-local folder to stage the data to (default: a temporary folder)"
    )
    p.add_argument(
        "--threads-per-worker",
        type=int,
        help="torch threads per instance (default: cores / instances)",
    )
    p.add_argument("--scheduler", help="address of a running Dask scheduler, tcp://HOST:PORT")
    p.add_argument(
        "--in-process",
        action="store_true",
        help="no Dask workers: run the instances here, one by one",
    )
    batch = p.add_argument_group("batch systems")
    batch.add_argument(
        "--slurm",
        dest="batch_system",
        action="store_const",
        const="slurm",
        help="workers as SLURM jobs (dask-jobqueue), one per instance",
    )
    batch.add_argument("--partition", help="SLURM partition")
    batch.add_argument(
        "--time", dest="walltime", help="time limit of each worker job, e.g. 01:00:00"
    )
    batch.add_argument("--worker-memory", help="memory limit of each worker, e.g. 8GiB")
    p.add_argument("--out", type=Path, help="output folder (default runs/ttt-<workload>-<time>)")
    p.add_argument(
        "--json", action="store_true", help="print the JSON document instead of the table"
    )


def run(args: argparse.Namespace) -> int:
    import json
    import time

    from aihpc.errors import TargetNotReached
    from aihpc.records.files import result_document, write_result
    from aihpc.workloads import ttt

    plan = _plan(args)
    plan.out_dir.mkdir(parents=True, exist_ok=True)
    generated = None
    if args.data_dir is None:
        t0 = time.perf_counter()
        _generate(plan)
        generated = time.perf_counter() - t0
    compliance: dict[str, bool] = {}
    failures: dict[str, str] = {}
    saved: dict = {}

    def save(rounds) -> None:  # after every run: check its logs, (re)write ttt.json
        ok, output = ttt.check_logs(rounds[-1:], _workload(plan).benchmark)
        compliance.update(ok)
        failures.update({k: v for k, v in output.items() if not ok[k]})
        summary = ttt.summarise(plan, rounds, compliance)
        summary.update(
            generation_s=generated, data_dir=str(plan.data_dir), compliance_output=failures
        )
        saved["doc"] = result_document("train-to-target", summary)
        write_result(plan.out_dir / "ttt.json", saved["doc"])

    executor = None if args.in_process else _executor(args, plan)
    try:
        ttt.run_rounds(plan, executor, on_round=save)
    finally:
        if executor is not None:
            executor.close()
    doc = saved["doc"]
    summary = doc["data"]
    print(json.dumps(doc, sort_keys=True, indent=2) if args.json else _table(summary, plan.out_dir))
    missed = ttt.not_reached_message(plan, summary)
    if missed:
        raise TargetNotReached(missed)
    return 0


def _workload(plan):
    from aihpc.workloads import get

    return get(plan.workload)


def _plan(args: argparse.Namespace):
    import os
    import secrets
    import time

    from aihpc.errors import ConfigError
    from aihpc.workloads import get
    from aihpc.workloads.ttt import Plan

    workload = get(args.workload)
    size = workload.size(args.size)
    for name, value, low in (
        ("runs", args.runs, 1),
        ("instances", args.instances, 1),
        ("max-epochs", args.max_epochs, 1),
        ("threads-per-worker", args.threads_per_worker, 1),
    ):
        if value is not None and value < low:
            raise ConfigError(f"--{name} must be >= {low}, got {value}")
    if not args.max_minutes > 0:
        raise ConfigError(f"--max-minutes must be > 0, got {args.max_minutes}")
    target = workload.target if args.target is None else args.target
    if not target > 0 or (workload.higher_is_better and target > 1):
        raise ConfigError(
            f"--target must be a {workload.metric.upper()} in "
            f"{'(0, 1]' if workload.higher_is_better else '(0, inf)'}, got {target}"
        )
    if args.data_dir is not None and not args.data_dir.is_dir():
        raise ConfigError(
            f"--data-dir must be a folder with train/ and validation/, got {str(args.data_dir)!r}"
        )
    out = (
        args.out
        or Path("runs")
        / f"ttt-{args.workload}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    )
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"output folder {out} is not empty; choose another --out")
    cores = (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )
    threads = args.threads_per_worker or max(1, cores // args.instances)
    return Plan(
        workload=args.workload,
        size=args.size or workload.default_size,
        runs=args.runs,
        instances=args.instances,
        target=target,
        max_epochs=args.max_epochs or size.max_epochs,
        max_seconds=60.0 * args.max_minutes,
        seed=args.seed,
        data_dir=args.data_dir or out / "data",
        out_dir=out,
        stage_root=args.stage_dir,
        threads=threads,
        platform=_platform(),
    )


def _platform() -> str:
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _generate(plan) -> None:
    workload = _workload(plan)
    workload.generate(plan.data_dir, workload.size(plan.size), plan.seed)


def _executor(args: argparse.Namespace, plan):
    """The executors of ``aihpc run``: a LocalCluster, a running scheduler, or SLURM jobs."""
    from aihpc.config import RunConfig
    from aihpc.runner.executor import Layout, batch_executor, local_executor, remote_executor

    if args.scheduler:
        executor = remote_executor(args.scheduler)
    elif args.batch_system:
        config = RunConfig.from_dict(
            {
                k: v
                for k, v in {
                    "batch_system": args.batch_system,
                    "partition": args.partition,
                    "walltime": args.walltime,
                    "worker_memory": args.worker_memory,
                }.items()
                if v is not None
            },
            source="flags",
        )
        executor = batch_executor(
            Layout(plan.instances, plan.threads or 1, "cpu"), config, plan.out_dir
        )
    else:
        executor = local_executor(Layout(plan.instances, plan.threads or 1, "cpu"))
    executor.log_dir = plan.out_dir
    try:
        executor.wait_for_workers(plan.instances, timeout=600.0)
    except BaseException:
        executor.close()
        raise
    return executor


def _num(value: float | None) -> str:
    return "nan" if value is None else f"{value:.4f}"


def _table(s: dict, out_dir: Path) -> str:
    sense = ">=" if s["higher_is_better"] else "<="
    lines = [
        f"{s['workload']} ({s['benchmark']}, size {s['size']}, {s['division']} division): "
        f"target {s['metric'].upper()} {sense} {s['target']}",
        f"{'run':>3} {'inst':>4} {'reached':>7} {'epochs':>6} {s['metric']:>8} {'staging s':>9} "
        f"{'time to train s':>15} {'GOPS':>7} {'compliant':>9}",
    ]
    for r in s["runs"]:
        for i in r["instances"]:
            gops = (i["ops_per_s"] or 0) / 1e9
            lines.append(
                f"{i['run']:>3} {i['instance']:>4} {str(i['reached']):>7} {i['epochs']:>6} "
                f"{_num(i['quality']):>8} {i['staging_s']:>9.2f} {i['time_to_train_s']:>15.1f} "
                f"{gops:>7.2f} {str(i['compliant']):>9}"
            )
    lines.append(
        f"time to train: {s['time_to_train_s']:.1f} s ({s['time_to_train_aggregate']}); "
        f"staging {s['staging_s']:.2f} s per instance, timed apart"
    )
    if s["instances"] > 1:
        lines.append(
            f"throughput: {s['models_per_minute']:.3f} models per minute with {s['instances']} "
            f"instances ({s['models_per_minute_aggregate']})"
        )
    lines.append(f"results: {out_dir / 'ttt.json'}; MLPerf logs: {out_dir}/mlperf_r*_i*.log")
    return "\n".join(lines)
