"""Benchmark: how many trial proposals and results per second the master sustains.

The real search (aging evolution + Optuna TPE + random morphisms of the real
seed network, duplicate checks) and the real store (SQLite) are driven with
epochs that "finish" the moment they are submitted, so the master is the
only thing working.  Each cycle is: collect one result (store the epoch and
its weights' reference, delete the weight file it supersedes), decide, and
propose the next trial (choose a parent, plan the morphisms, ask TPE).
Workers write weight files; here the instant "worker" writes a small one
per epoch, so that the master deletes real files, and the seconds spent
writing them (work that real workers do in parallel) are left out of the
master's time.

From the sustained rate R (cycles per second) and a trial-epoch length T,
the master saturates at about R × T workers.

    python benchmarks/master_capacity.py [--trials 2000] [--warmup 100] [--epoch-seconds 2.5,8,60]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from aihpc.config import RunConfig
from aihpc.runner.master import Master
from aihpc.runner.store import RunStore
from aihpc.train.task import EpochResult, WeightsRef


class InstantExecutor:
    """Returns every epoch at once, as a worker would: trained, evaluated, weights attached."""

    def __init__(self, slots: int) -> None:
        self._slots = slots
        self.done = 0
        self.write_seconds = 0.0  # the "workers'" time writing weight files

    def slots(self) -> int:
        return self._slots

    def submit(self, fn, task, key):
        acc = 0.5 + 0.4 * ((hash(key) % 1000) / 1000)
        now = time.time()
        name = f"{key}.pt"
        t0 = time.perf_counter()
        Path(task.weights_dir, name).write_bytes(b"weights")
        self.write_seconds += time.perf_counter() - t0
        return _Done(EpochResult(
            trial_id=task.trial_id, epoch=task.epoch, status="ok", worker=f"w{self.done % self._slots}",
            t_start=now, t_end=now,
            metrics={"epoch": task.epoch, "train_samples": 1000, "val_samples": 200, "train_loss": 1.0,
                     "train_accuracy": acc, "val_loss": 1.0, "val_accuracy": acc, "ops": 10**12, "seconds": 0.0},
            ops_train=9 * 10**11, ops_eval=10**11, ops_per_sample={"train": 9e8, "eval": 5e8},
            phase_seconds={"data": 0.0, "forward": 0.0, "backward": 0.0, "optimizer": 0.0, "eval": 0.0, "other": 0.0},
            num_params=0, device="cpu", weights=WeightsRef(name, "0" * 64),
        ))  # fmt: skip

    def wait(self, futures, timeout):
        self.done += len(futures)
        return set(futures)


class _Done:
    def __init__(self, result):
        self._result = result

    def result(self):
        return self._result

    def cancel(self):
        pass


class _Quiet:
    def update(self, status): ...
    def report(self, status): ...
    def event(self, text): ...
    def epoch(self, number, result, best): ...


def measure(trials: int, slots: int, dataset: str, warmup: int) -> tuple[float, float, int]:
    """(epoch results per second, new trials per second, epochs) over ``trials`` trials after ``warmup``.

    The warm-up trials (the hyperparameter search's process starting, TPE's
    random start-up trials, the first morphs) are run but not timed.
    """
    from aihpc.runner.run import inspect_data, with_default_workload

    config = RunConfig(dataset=dataset, minutes=60.0, report_seconds=3600.0)  # default epochs 2..8, patience 2
    config = with_default_workload(config, "cpu")
    info = inspect_data(config, "cpu")
    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore(Path(tmp))
        store.set_meta("config", config.to_dict())
        executor = InstantExecutor(slots)
        master = Master(config, store, executor, info, None, _Quiet())
        now = time.time()
        master.segment = store.open_segment(now)
        master.deadline, master.run_start = now + 3600, now
        t0 = epochs0 = None
        while master.next_id < warmup + trials:
            if t0 is None and master.next_id >= warmup:
                t0, epochs0, written0 = time.perf_counter(), master.epoch_counter, executor.write_seconds
            master._fill_slots()
            for future in executor.wait(list(master.in_flight), 0):
                master._collect(future, master.in_flight.pop(future))
        if t0 is None:  # one fill proposed every trial: nothing in the steady state was timed
            raise SystemExit(f"--warmup ({warmup}) and --trials ({trials}) must each exceed --slots ({slots})")
        seconds = time.perf_counter() - t0 - (executor.write_seconds - written0)
        epochs = master.epoch_counter - epochs0
        master.hpo.close()
        store.close()
    return epochs / seconds, trials / seconds, epochs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=100, help="trials run before the clock starts")
    ap.add_argument("--slots", type=int, default=64, help="epochs in flight at once")
    ap.add_argument("--dataset", default="digits", help="sets the seed network's size")
    ap.add_argument("--epoch-seconds", default="2.5,8,60", help="trial-epoch lengths to convert the rate at")
    args = ap.parse_args()
    rate, proposals, epochs = measure(args.trials, args.slots, args.dataset, args.warmup)
    print(f"master: {rate:.1f} epoch results per second with {proposals:.1f} new trials per second "
          f"({epochs} epochs of {args.trials} trials after {args.warmup} untimed, {args.dataset} seed network, "
          f"{args.slots} in flight)")
    for t in (float(x) for x in args.epoch_seconds.split(",")):
        print(f"  epochs of {t:>5.1f} s: saturates at about {rate * t:,.0f} workers")


if __name__ == "__main__":
    main()
