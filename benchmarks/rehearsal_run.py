"""One size of benchmarks/scale_rehearsal.py: a whole ``aihpc run`` with simulated workers.

Run by scale_rehearsal.py in a process of its own (its peak memory is the
master's; a stage that runs too long is stopped by killing it):

    python benchmarks/rehearsal_run.py --run-dir DIR --workers N --epoch-seconds S --minutes M
                                       --weight-bytes B --progress FILE [--dataset digits]

It does what :func:`aihpc.runner.run.run_benchmark` does, with the same
functions (``prepare``, ``initialise``, ``Placement``, the
:class:`~aihpc.runner.search.master.Master`, ``record_peak_after``,
``results_fields``, ``trial_records``, ``write_results``, the MLPerf log's ``run_stop``,
``summary_lines``), with three differences: the executor is
:class:`rehearsal_executor.SimulatedExecutor`, the master runs on its
virtual clock (so ``run_stop`` is logged at the clock's time), and no
energy meters start (the energy block says why).  Console
lines and the summary go to stdout (scale_rehearsal.py keeps them in a log).

``--progress FILE`` is rewritten (atomically, JSON) at each stage and every
few seconds: the stage running and since when (wall time), and all that has
been measured, so that a stopped run still says how far it got.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

from master_capacity import VirtualClock
from rehearsal_executor import COUNTER, SimulatedExecutor, peak_rss_bytes

from aihpc.tasks import read_config

# results.json's energy: the simulated workers have no meters to start
NO_ENERGY = "a scale rehearsal (benchmarks/scale_rehearsal.py): its workers are simulated"


class Progress:
    """The progress file: one JSON object, replaced whole at every update."""

    def __init__(self, path: Path) -> None:
        self.path, self.state = path, {"stage": "init", "stage_start": time.time()}
        self.write()

    def update(self, **values: Any) -> None:
        self.state.update(values)
        self.write()

    def stage(self, name: str, **values: Any) -> None:
        self.update(stage=name, stage_start=time.time(), **values)

    def write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, sort_keys=True))
        os.replace(tmp, self.path)


def store_bytes(run_dir: Path) -> int:
    """The run store on disk: the database and its write-ahead log."""
    names = ("aihpc.sqlite", "aihpc.sqlite-wal")
    return sum((run_dir / n).stat().st_size for n in names if (run_dir / n).exists())


def open_run(args: argparse.Namespace, progress: Progress):
    """Config, store, MLPerf log and simulated executor of a new run, its init phase done; or,
    with ``--resume``, of the run in ``--run-dir`` (a master that was killed), as
    ``aihpc run --resume`` opens it.

    Returns (run, clock).
    """
    from aihpc.launch.executor import Layout
    from aihpc.launch.placement import Placement
    from aihpc.runner.run import OpenRun, initialise, open_mlperf_log, prepare
    from aihpc.tasks import task_of

    config = read_config(dict(
        task=args.task,
        dataset=args.dataset,
        minutes=args.minutes,
        workers=args.workers,
        **({"peak_seconds": args.peak_seconds} if args.peak_seconds else {}),
    ))
    if args.resume:
        config, store = prepare(config, args.run_dir, resume=True)
        task = task_of(config.run.task)
    else:
        task = task_of(config.run.task)
        config = task.default_workload(config, args.device)
    data_info = task.inspect_data(config, args.device)
    if not args.resume:
        config, store = prepare(config, args.run_dir, resume=False)
    clock = VirtualClock(time.time())
    expected = args.workers * args.minutes * 60.0 / args.epoch_seconds
    executor = SimulatedExecutor(
        args.workers,
        clock,
        args.epoch_seconds,
        args.weight_bytes,
        data_info,
        args.device,
        args.sample_every or int(expected / 100) + 1,
    )
    progress.update(counter=COUNTER, expected_epochs=expected)
    print(f"operations counted with {COUNTER}", flush=True)
    mlperf = open_mlperf_log(args.run_dir, task, config, data_info, args.resume)
    layout = Layout(workers=args.workers, threads=1, device=args.device)
    run = OpenRun(config, task, store, executor, mlperf, layout, args.device, data_info)
    placement = Placement(executor, layout.device, config.launch.procs_per_trial)
    store.set_meta("devices", placement.place())
    if args.resume:
        from aihpc.runner.display.observer import resume_log

        metric = run.task.quality(config, data_info).metric
        resume_log(mlperf, store, args.run_dir / "mlperf.log", metric)
    else:
        initialise(run)
    return run, clock


def run_quality(run) -> Any:
    """How the run's task judges models."""
    return run.task.quality(run.config, run.data_info)


def search(run, clock: VirtualClock, progress: Progress) -> tuple[Any, dict[str, Any]]:
    """The master's search until the deadline, as ``search_and_score`` runs it; (score, stats)."""
    from aihpc.energy.run import unmeasured_block
    from aihpc.runner.display.console import Console
    from aihpc.runner.display.observer import Observers
    from aihpc.runner.measure import record_peak_after
    from aihpc.runner.search.master import Master

    config, store, executor = run.config, run.store, run.executor
    # where a run starts its energy meters on the workers (start_meters): there are none
    store.set_meta("energy", unmeasured_block(NO_ENERGY))
    console = Console(live=False)
    # The run's clock starts as the master does.  A resumed master's goes on from the last
    # segment's end at the earliest: the killed master's virtual clock ran ahead of the wall clock
    # (a simulated epoch takes no wall time), and segments that overlap do not verify.
    segments = store.segments()
    clock.now = max(time.time(), segments[-1].stop if segments else 0.0)
    master = Master(
        run.task,
        config,
        store,
        executor,
        run.data_info,
        run.layout,
        Observers(console, run.mlperf, run_quality(run)),
        clock=clock,
    )
    progress.stage("master")

    def report(snapshot: dict[str, Any]) -> None:
        progress.update(master=snapshot, trials=master.next_id, epochs=master.epoch_counter)

    executor.on_progress = report
    executor.begin(clock.now + config.run.minutes * 60.0)
    with console:
        score = master.run()
    stats = executor.finish()
    stats.update(
        trials=master.next_id,
        epochs=master.epoch_counter,
        store_bytes=store_bytes(run.store.run_dir),
    )
    progress.update(master=stats, trials=master.next_id, epochs=master.epoch_counter)
    progress.stage("after")  # the peak after the run: not timed
    record_peak_after(store, executor, run.layout, config.run.peak_seconds, run.task.peak_kernels)
    return score, stats


def finish(run, score, clock: VirtualClock, progress: Progress) -> dict[str, float]:
    """results.json, the MLPerf log's run_stop, the summary: what ``aihpc run`` does last, timed."""
    from aihpc.results.write import results_fields, trial_records, write_results
    from aihpc.runner.display.summary import summary_lines

    progress.stage("results.json")
    t0 = time.perf_counter()
    head = results_fields(run.store, score)
    t1 = time.perf_counter()
    quality = run_quality(run)
    written = write_results(run.store.run_dir, head, trial_records(run.store, quality))
    t2 = time.perf_counter()
    run.mlperf.run_stop(
        "success" if head.score.valid else "aborted",
        chain_sha256=head.integrity.chain_sha256 if head.integrity else None,
        time_ms=int(clock.now * 1000),
    )
    run.store.set_meta("finished", True)
    t3 = time.perf_counter()
    for line in summary_lines(written.head, written.trials, run.store.run_dir):
        print(line)
    t4 = time.perf_counter()
    return {
        "build_s": t1 - t0,
        "write_s": t2 - t1,
        "mlperf_stop_s": t3 - t2,
        "summary_s": t4 - t3,
        "peak_rss": peak_rss_bytes(),
        "results_file": written.path.name,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", type=Path, required=True)
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--epoch-seconds", type=float, required=True)
    ap.add_argument("--minutes", type=float, required=True)
    ap.add_argument("--weight-bytes", type=int, required=True)
    ap.add_argument("--progress", type=Path, required=True)
    ap.add_argument("--task", choices=["image", "lm"], default="image")
    ap.add_argument("--dataset", default="digits")
    ap.add_argument(
        "--resume", action="store_true", help="continue the killed run in --run-dir"
    )
    ap.add_argument(
        "--device", choices=["cpu", "cuda"], default="cpu", help="the defaults of which device kind"
    )
    ap.add_argument(
        "--sample-every",
        type=int,
        default=0,
        help="results between weight-directory scans (0: 1 %% of the run)",
    )
    ap.add_argument(
        "--peak-seconds",
        type=float,
        default=0.0,
        help="the peak's measurement (0: the run's default)",
    )
    args = ap.parse_args()
    progress = Progress(args.progress)
    run, clock = open_run(args, progress)
    try:
        score, _ = search(run, clock, progress)
        timing = finish(run, score, clock, progress)
    finally:
        run.mlperf.close()
        run.store.close()
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    progress.stage(
        "done",
        results_json=timing,
        tpe_peak_rss=children,  # the largest child: a TPE process or the counting process
        store_bytes_closed=store_bytes(args.run_dir),
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
