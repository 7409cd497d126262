"""Benchmark: what one TPE ``ask`` costs the master, and how many it sustains, as the study grows.

The master asks for one set of hyperparameters per new trial and must keep
up with ~200 new trials a second at 4,096 workers.  A plain Optuna study gets
slower with every trial (2.7 ms an ask at 20 trials, 12 ms at 1,000, ~50 ms at
5,000), so :mod:`aihpc.nas.hpo` bounds the study (``WindowedStudy``) and runs
it in a child process that draws suggestions ahead (``HyperparameterSearch``).

Both are driven here as the master drives them: one ask per new trial and one
tell per ask, for the trial asked ``--in-flight`` asks earlier (that many
trials run at once), with a synthetic accuracy that peaks at lr = 0.03.  For
each backend it prints, around 100, 1,000, 5,000 and 10,000 trials, the
median and 90th percentile of the master-side ``ask`` time over the
``--batch`` asks that end at the mark and the asks per second over that batch
(tells included), then the sustained rate over the whole run.  The process
backend is then paced at ``--paced-rate`` asks a second, below the child's
rate, to show what an ask costs the master when a suggestion is ready.

    python benchmarks/tpe_ask.py [--trials 10000] [--in-flight 64] [--window 128] [--processes 2]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

from bench_main import script

from aihpc.base.config import SearchSection
from aihpc.nas.hpo import HyperparameterSearch
from aihpc.nas.tpe_study import WINDOW, WindowedStudy
from aihpc.tasks.image.task import image_space

MARKS = (100, 1_000, 5_000, 10_000)
BATCH_SIZES = (32, 64, 128, 256)


def accuracy(params: dict) -> float:
    """A smooth objective in lr (best at 0.03) with a small batch-size term."""
    decades = math.log10(params["lr"]) - math.log10(0.03)
    return 0.9 - 0.05 * decades**2 - 0.01 * BATCH_SIZES.index(params["batch_size"])


class CoreBackend:
    """The windowed study in this process: every ask pays Optuna's full cost."""

    name = "core (in-process)"

    def __init__(self, window: int) -> None:
        self._core = WindowedStudy(0, image_space(BATCH_SIZES, "sgd", "cosine").distributions(), window)

    def ask(self):
        return self._core.ask()

    def tell(self, number, value):
        self._core.tell(number, value)

    def close(self):
        pass


class ProcessBackend:
    """The master's view: HyperparameterSearch with its child processes."""

    def __init__(self, window: int, processes: int) -> None:
        self.name = f"process (HyperparameterSearch, {processes} process(es))"
        self._search = HyperparameterSearch(0, image_space(BATCH_SIZES, "sgd", "cosine"), window=window, processes=processes)

    def ask(self):
        return self._search.ask()

    def tell(self, number, value):
        self._search.tell(number, value)

    def close(self):
        self._search.close()


def drive(backend, trials: int, in_flight: int, rate: float = 0.0) -> tuple[list[float], list[float]]:
    """Ask ``trials`` times, telling the trial asked ``in_flight`` asks earlier after each ask.

    Returns each ask's duration and the time each ask ended (seconds since
    the first ask, which is warm-up: the child's start).  ``rate`` > 0 paces
    the asks at that many a second.
    """
    number, params = backend.ask()
    running = [(number, params)]
    durations, ends = [], []
    t_start = time.perf_counter()
    for i in range(1, trials):
        if rate > 0:
            time.sleep(max(0.0, t_start + i / rate - time.perf_counter()))
        t0 = time.perf_counter()
        number, params = backend.ask()
        t1 = time.perf_counter()
        durations.append(t1 - t0)
        running.append((number, params))
        if len(running) > in_flight:
            told, told_params = running.pop(0)
            backend.tell(told, accuracy(told_params))
        ends.append(time.perf_counter() - t_start)
    return durations, ends


def report(name: str, durations: list[float], ends: list[float], batch: int) -> None:
    print(f"{name}")
    for mark in (m for m in MARKS if batch + 2 <= m <= len(durations) + 1):
        window = durations[mark - 1 - batch : mark - 1]
        seconds = ends[mark - 2] - ends[mark - 2 - batch]
        deciles = statistics.quantiles(window, n=10)
        wide = "  (wide spread)" if deciles[-1] > 3 * statistics.median(window) else ""
        print(f"  at {mark:>6,} trials: ask median {statistics.median(window) * 1e3:7.3f} ms, "
              f"p90 {deciles[-1] * 1e3:7.3f} ms, {batch / seconds:6.1f} asks/s{wide}")  # fmt: skip
    print(f"  sustained: {len(durations) / ends[-1]:.1f} asks/s over {len(durations) + 1:,} trials")


@script
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--in-flight", type=int, default=64, help="trials running at once")
    ap.add_argument("--window", type=int, default=WINDOW, help="finished trials a rebuilt study keeps")
    ap.add_argument("--batch", type=int, default=50, help="asks per mark that the median is taken over")
    ap.add_argument("--paced-rate", type=float, default=100.0, help="asks per second in the paced run")
    ap.add_argument("--paced-asks", type=int, default=1_000)
    ap.add_argument("--backends", default="core,process", help="which to run, comma-separated")
    ap.add_argument("--processes", type=int, default=SearchSection.hpo_processes, help="the process backend's children")
    args = ap.parse_args(argv)
    if args.trials < 3 or not (args.paced_asks == 0 or args.paced_asks >= 3):
        ap.error(f"--trials must be at least 3 and --paced-asks 0 or at least 3, got {args.trials} and {args.paced_asks}")
    print(f"window {args.window}, {args.in_flight} trials in flight, tell per ask")
    backends = {"core": lambda: CoreBackend(args.window), "process": lambda: ProcessBackend(args.window, args.processes)}
    for key in args.backends.split(","):
        backend = backends[key]()
        durations, ends = drive(backend, args.trials, args.in_flight)
        backend.close()
        report(backend.name, durations, ends, args.batch)
    if "process" in args.backends.split(",") and args.paced_asks > 0:
        backend = ProcessBackend(args.window, args.processes)
        durations, ends = drive(backend, args.paced_asks, args.in_flight, args.paced_rate)
        backend.close()
        deciles = statistics.quantiles(durations, n=100)
        print(f"process paced at {args.paced_rate:.0f} asks/s ({args.paced_asks:,} asks): master-side ask "
              f"median {statistics.median(durations) * 1e6:.0f} us, p99 {deciles[98] * 1e6:.0f} us, "
              f"{len(durations) / ends[-1]:.1f} asks/s achieved")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
