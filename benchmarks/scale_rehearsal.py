"""Benchmark: a full-scale rehearsal of a one-hour run on thousands of accelerators, on one machine.

For each size, a whole run as ``aihpc run`` makes it — the real master,
search, store, results.json, MLPerf log and summary
(benchmarks/rehearsal_run.py) — with simulated workers on a virtual clock
(benchmarks/rehearsal_executor.py): every result moves the clock on by
``epoch_seconds / workers``, epochs finish at once with master_capacity's
learning curve, operations counted exactly as a worker counts them (so that
``aihpc verify`` can pass), and each epoch writes a sparse weight file of
``--weight-bytes`` to the run's weight directory.  Then ``aihpc report``,
``aihpc verify`` and ``aihpc rank`` on the run directory, through the CLI
as a user types them, timed.  verify records its verdict in ``--out``'s
``cache/`` (:mod:`aihpc.verify.verdicts`), and rank shows it for the same
bytes: rank's time is hashing the files verify read, and reading results.

Measured, per size: trials, epochs, the sizes of results.json, of the store
(aihpc.sqlite + WAL), of the MLPerf log, of the report's HTML, the weights
on disk (apparent bytes and files: their peak, sampled every 1 % of the run,
and at the end), the time to write results.json, to report, verify and rank,
the master's peak memory (its own process), its sustained rate (epoch
results per second of the master's own time, over the run and per tenth of
the virtual run: a slowdown late in the run shows) against the rate the
workers need (``workers / epoch_seconds``), and the decision latency (wall
time from a result's arrival to the next task submitted: collect + decide +
propose), median and 99th percentile.  The workers' own work (counting,
writing files) is left out of the master's time.

A stage (init, master, results.json, report, verify, rank) that runs past
``--stage-timeout`` seconds is stopped and recorded "stopped after S s",
with how far it got; the next size still runs.  Writes, into ``--out``:
``rehearsal.md`` (the tables), ``rehearsal.json`` (every number),
``rehearsal.png`` (or ``.svg`` without matplotlib: each size and time
against workers, log-log), and per size the run directory ``wN/``, its
console log ``wN.log`` and its progress ``wN.progress.json``.

    python benchmarks/scale_rehearsal.py --out DIR [--workers 4096] [--epoch-seconds 10]
                                         [--minutes 60] [--weight-bytes 190000000]
                                         [--sizes 64,512,4096] [--stage-timeout S]
                                         [--task image|lm] [--dataset digits] [--device cpu]
                                         [--peak-seconds S]

``--sizes`` defaults to 64, 512 and ``--workers`` (those not above it).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import rehearsal_table
from rehearsal_executor import COUNTER, scan_weights

from aihpc.results.read import results_file

HERE = Path(__file__).resolve().parent
# The GPU default's weight file: ResNet-50 at 3x128x128, 100 classes, with its SGD momentum
# (benchmarks/weight_writer.py: 23.7 M parameters, twice, in float32).
WEIGHT_BYTES = 190_000_000
POLL_SECONDS = 0.5
CHILD_STAGES = ("init", "master", "after", "results.json")


def child_env() -> dict[str, str]:
    """The environment of every subprocess: this aihpc first on the import path."""
    import aihpc

    src = str(Path(aihpc.__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": src + (os.pathsep + path if path else "")}


def read_progress(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def kill_group(proc: subprocess.Popen) -> None:
    """Stop the run's process and the hyperparameter search's (its session, which it leads)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_child(cmd: list[str], progress: Path, log: Path, timeout: float | None) -> dict[str, Any]:
    """Run one size's master in its own process; stop it when a stage runs past ``timeout``.

    Returns its last progress, with ``stopped`` (the stage stopped, or None) and ``rc``.
    """
    progress.unlink(missing_ok=True)
    with open(log, "w") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=child_env(),
            cwd=HERE,
            start_new_session=True,
        )
        stopped = None
        while proc.poll() is None:
            time.sleep(POLL_SECONDS)
            state = read_progress(progress)
            if timeout and state and time.time() - state["stage_start"] > timeout:
                stopped = state["stage"]
                kill_group(proc)
        if stopped is None:
            kill_group(proc)  # the search's processes, should any be left
    state = read_progress(progress)
    return {**state, "stopped": stopped, "rc": proc.returncode}


def cli_stage(command: str, run_dir: Path, timeout: float | None) -> dict[str, Any]:
    """``aihpc COMMAND RUN_DIR`` as a user types it, timed; its status and first lines."""
    cmd = [sys.executable, "-m", "aihpc", command, str(run_dir)]
    t = time.perf_counter()
    try:
        p = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout or None, env=child_env()
        )
    except subprocess.TimeoutExpired:
        return {"seconds": None, "status": f"stopped after {timeout:g} s", "passed": False}
    seconds = time.perf_counter() - t
    lines = (p.stdout + p.stderr).strip().splitlines()
    status = "ok" if p.returncode == 0 else f"failed (exit {p.returncode})"
    return {
        "seconds": seconds,
        "status": status,
        "passed": p.returncode == 0,
        "rc": p.returncode,
        "first_lines": lines[:3],
        "last_line": lines[-1] if lines else "",
    }


def child_stages(state: dict[str, Any], timeout: float | None) -> dict[str, str]:
    """Each stage of the run's own process: ok, stopped after S s, failed, or not run."""
    reached = state.get("stage", "init")
    order = [*CHILD_STAGES, "done"]
    at = order.index(reached) if reached in order else 0
    out = {}
    for i, stage in enumerate(CHILD_STAGES):
        if i < at:
            out[stage] = "ok"
        elif i == at and state.get("stopped") == stage:
            out[stage] = f"stopped after {timeout:g} s"
        elif i == at:
            out[stage] = f"failed (exit {state.get('rc')})"
        else:
            out[stage] = "not run"
    return out


def run_files(run_dir: Path) -> dict[str, Any]:
    """The sizes of the run directory's files now, and the weights on disk."""

    def size(*names: str) -> int | None:
        paths = [run_dir / n for n in names if (run_dir / n).is_file()]
        return sum(p.stat().st_size for p in paths) if paths else None

    files, apparent, blocks = (
        scan_weights(run_dir / "weights") if (run_dir / "weights").is_dir() else (0, 0, 0)
    )
    return {
        "results_json": size("results.json", "results.json.gz"),
        "store": size("aihpc.sqlite", "aihpc.sqlite-wal"),
        "mlperf_log": size("mlperf.log"),
        "report_html": size("report.html"),
        "weights": {"files": files, "apparent": apparent, "blocks": blocks},
    }


def rehearse(workers: int, args: argparse.Namespace) -> dict[str, Any]:
    """One size: the run in its own process, then report, verify and rank through the CLI."""
    run_dir, progress = args.out / f"w{workers}", args.out / f"w{workers}.progress.json"
    cmd = [
        sys.executable,
        str(HERE / "rehearsal_run.py"),
        "--run-dir",
        str(run_dir.resolve()),
        "--workers",
        str(workers),
        "--epoch-seconds",
        str(args.epoch_seconds),
        "--minutes",
        str(args.minutes),
        "--weight-bytes",
        str(args.weight_bytes),
        "--task",
        args.task,
        "--dataset",
        args.dataset or ("digits" if args.task == "image" else "synthetic"),
        "--device",
        args.device,
        "--progress",
        str(progress.resolve()),
    ]
    if args.peak_seconds:
        cmd += ["--peak-seconds", str(args.peak_seconds)]
    state = run_child(cmd, progress, args.out / f"w{workers}.log", args.stage_timeout)
    row = {
        "workers": workers,
        "minutes": args.minutes,
        "epoch_seconds": args.epoch_seconds,
        "counter": state.get("counter"),
        "expected_epochs": state.get("expected_epochs"),
        "needed_results_per_s": workers / args.epoch_seconds,
        "trials": state.get("trials"),
        "epochs": state.get("epochs"),
        "master": state.get("master") or {},
        "results_json": state.get("results_json") or {},
        "tpe_peak_rss": state.get("tpe_peak_rss"),
        "stages": child_stages(state, args.stage_timeout),
    }
    for command in ("report", "verify", "rank"):
        if results_file(run_dir).is_file():
            row[command] = cli_stage(command, run_dir, args.stage_timeout)
        else:
            row[command] = {"seconds": None, "status": "not run (no results.json)", "passed": False}
        row["stages"][command] = row[command]["status"]
    row["files"] = run_files(run_dir)
    return row


def sizes_of(args: argparse.Namespace) -> list[int]:
    if args.sizes:
        return [int(s) for s in args.sizes.split(",") if s.strip()]
    return sorted({n for n in (64, 512) if n < args.workers} | {args.workers})


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=4096, help="the full scale (default 4096)")
    ap.add_argument(
        "--epoch-seconds", type=float, default=10.0, help="virtual length of one trial-epoch"
    )
    ap.add_argument("--minutes", type=float, default=60.0, help="virtual length of the run")
    ap.add_argument("--out", type=Path, required=True, help="folder for the runs and the tables")
    ap.add_argument(
        "--weight-bytes", type=int, default=WEIGHT_BYTES, help="each epoch's weight file (sparse)"
    )
    ap.add_argument("--sizes", help="worker counts, comma-separated (default 64,512,WORKERS)")
    ap.add_argument("--stage-timeout", type=float, default=None, help="seconds a stage may run")
    ap.add_argument(
        "--task",
        choices=["image", "lm"],
        default="image",
        help="the run's task: image (CNNs), or lm (language models: give --weight-bytes "
        "2400000000, a 200 M-parameter model's weights and AdamW moments in float32)",
    )
    ap.add_argument(
        "--dataset",
        default=None,
        help="the run's data set (sizes the seed network; default digits, or the language "
        "task's synthetic language)",
    )
    ap.add_argument(
        "--device", choices=["cpu", "cuda"], default="cpu", help="whose defaults the run takes"
    )
    ap.add_argument(
        "--peak-seconds",
        type=float,
        default=0.0,
        help="the peak's measurement (0: the run's default)",
    )
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    sizes = sizes_of(args)
    args.out.mkdir(parents=True, exist_ok=True)
    for n in sizes:
        if (args.out / f"w{n}").exists():
            raise SystemExit(f"{args.out / f'w{n}'} exists: give another --out")
    # verify records its verdict here, and rank shows it for the same bytes (aihpc.verify.verdicts)
    os.environ["AIHPC_CACHE_DIR"] = str((args.out / "cache").resolve())
    meta = {
        "epoch_seconds": args.epoch_seconds,
        "minutes": args.minutes,
        "weight_bytes": args.weight_bytes,
        "task": args.task,
        "dataset": args.dataset,
        "device": args.device,
        "counter": COUNTER,
        "stage_timeout": args.stage_timeout,
        "cores": os.cpu_count(),
        "load_before": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    print(f"operations counted with {COUNTER}", flush=True)
    rows: list[dict[str, Any]] = []
    for n in sizes:
        t = time.perf_counter()
        rows.append(rehearse(n, args))
        meta["load_after"] = os.getloadavg()
        rehearsal_table.write(rows, meta, args.out)
        print(
            f"{n} workers done in {time.perf_counter() - t:.0f} s: "
            + ", ".join(f"{k} {v}" for k, v in rows[-1]["stages"].items()),
            flush=True,
        )
    print(rehearsal_table.markdown(rows, meta))


if __name__ == "__main__":
    main()
