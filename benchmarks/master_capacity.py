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

The master runs on a virtual clock that stands for ``--slots`` workers with
``--epoch-seconds`` epochs: every result moves it on by one epoch over the
workers, and the run lasts the default ``--minutes`` of virtual time.  So the
whole run's budget ramp (2 epochs a trial at the start, up to 8 at the end,
fewer where the deadline is near) and early stopping decide how many epochs a
trial gets, as in a real run.  The instant worker's validation accuracy
follows a saturating learning curve with noise (each epoch gains half the
previous one's gain), so trials stop by patience or budget as real ones do.
The benchmark prints epochs per trial beside the rates; real default runs on
a 2-core machine had 2.5 to 3.1 (28 epochs of 9 to 11 trials).

From the sustained rate R (epoch results per second) and a trial-epoch
length T, the master saturates at about R x T workers.

    python benchmarks/master_capacity.py [--slots 64] [--epoch-seconds 8] [--minutes 5] [--warmup 100]
                                         [--hpo-processes 2]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench_main import script

from aihpc.base.config import SearchSection
from aihpc.records.messages import EpochResult, WeightsRef
from aihpc.records.store import RunStore
from aihpc.runner.search.master import Master
from aihpc.tasks import read_config, task_of


class VirtualClock:
    """The master's clock: seconds that move on only when the executor says so."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def learning_curve(trial_id: int, epoch: int, key: str) -> float:
    """Validation accuracy after ``epoch`` epochs: a trial's ceiling times (1 - 2^-epoch), plus noise.

    Deterministic (seeded by the trial and the task's key, never by ``hash``,
    which differs between processes).
    """
    ceiling = random.Random(f"ceiling{trial_id}").uniform(0.6, 0.95)
    return ceiling * (1.0 - 0.5**epoch) + random.Random(key).uniform(-0.01, 0.01)


class InstantExecutor:
    """Returns every epoch at once, as a worker would: trained, evaluated, weights attached.

    Each result moves ``clock`` on by one epoch over the workers
    (``epoch_seconds / slots``), so virtual time passes as it would for
    ``slots`` workers running ``epoch_seconds`` epochs.
    """

    def __init__(self, slots: int, clock: VirtualClock, epoch_seconds: float) -> None:
        self._slots = slots
        self._clock = clock
        self._step = epoch_seconds / slots
        self._epoch_seconds = epoch_seconds
        self.done = 0
        self.write_seconds = 0.0  # the "workers'" time writing weight files

    def slots(self) -> int:
        return self._slots

    def submit(self, fn, task, key):
        acc = learning_curve(task.trial_id, task.epoch, key)
        self._clock.now += self._step
        now = self._clock.now
        name = f"{key}.pt"
        t0 = time.perf_counter()
        Path(task.weights_dir, name).write_bytes(b"weights")
        self.write_seconds += time.perf_counter() - t0
        return _Done(EpochResult(
            trial_id=task.trial_id, epoch=task.epoch, status="ok", worker=f"w{self.done % self._slots}",
            t_start=now - self._epoch_seconds, t_end=now,
            metrics={"epoch": task.epoch, "train_samples": 1000, "val_samples": 200, "train_loss": 1.0,
                     "train_accuracy": acc, "val_loss": 1.0, "val_accuracy": acc, "ops": 10**12,
                     "seconds": self._epoch_seconds},
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
    def screening(self, record): ...


@dataclass(frozen=True)
class Capacity:
    results_per_second: float
    trials_per_second: float
    epochs: int  # timed epoch results
    trials: int  # timed new trials


def measure(slots: int, epoch_seconds: float, minutes: float, dataset: str, warmup: int,
            hpo_processes: int = SearchSection.hpo_processes) -> Capacity:
    """The master's rates over a whole virtual run, after ``warmup`` trials.

    The warm-up trials (the hyperparameter search's process starting, TPE's
    random start-up trials, the first morphs) are run but not timed.
    """
    config = read_config(dict(dataset=dataset, minutes=minutes, report_seconds=1e9,
                              hpo_processes=hpo_processes))  # default epochs 2..8, patience 2
    task = task_of(config.run.task)
    config = task.default_workload(config, "cpu")
    info = task.inspect_data(config, "cpu")
    clock = VirtualClock(time.time())
    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore(Path(tmp))
        store.set_meta("config", config.to_dict())
        executor = InstantExecutor(slots, clock, epoch_seconds)
        master = Master(task, config, store, executor, info, None, _Quiet(), clock=clock)
        master.segment = store.open_segment(clock.now)
        master.deadline, master.run_start = clock.now + minutes * 60.0, clock.now
        t0 = None
        while clock.now < master.deadline:
            if t0 is None and master.next_id >= warmup:
                t0, epochs0, trials0, written0 = (time.perf_counter(), master.epoch_counter, master.next_id,
                                                  executor.write_seconds)  # fmt: skip
            master._fill_slots()
            for future in executor.wait(list(master.in_flight), 0):
                master._collect(future, master.in_flight.pop(future))
        if t0 is None:
            raise SystemExit(f"the run ended before --warmup ({warmup}) trials: raise --minutes or --slots")
        seconds = time.perf_counter() - t0 - (executor.write_seconds - written0)
        epochs, trials = master.epoch_counter - epochs0, master.next_id - trials0
        if trials == 0:
            raise SystemExit(f"no trial started after the --warmup ({warmup}) trials: raise --minutes or --slots")
        master.hpo.close()
        store.close()
    return Capacity(epochs / seconds, trials / seconds, epochs, trials)


@script
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slots", type=int, default=64, help="workers: epochs in flight at once")
    ap.add_argument("--epoch-seconds", type=float, default=8.0, help="virtual length of one trial-epoch")
    ap.add_argument("--minutes", type=float, default=5.0, help="virtual length of the run")
    ap.add_argument("--warmup", type=int, default=100, help="trials run before the clock starts")
    ap.add_argument("--dataset", default="digits", help="sets the seed network's size")
    ap.add_argument("--hpo-processes", type=int, default=SearchSection.hpo_processes,
                    help="TPE processes (a run's hpo_processes)")
    args = ap.parse_args(argv)
    c = measure(args.slots, args.epoch_seconds, args.minutes, args.dataset, args.warmup, args.hpo_processes)
    print(f"master: {c.results_per_second:.1f} epoch results per second with {c.trials_per_second:.1f} "
          f"new trials per second ({c.epochs} epochs of {c.trials} trials, {c.epochs / c.trials:.2f} epochs "
          f"a trial, after {args.warmup} untimed; a {args.minutes:g}-minute run of {args.slots} workers at "
          f"{args.epoch_seconds:g}-s epochs; {args.dataset} seed network; {args.hpo_processes} TPE process(es))")
    for t in (2.5, 8.0, 60.0):
        print(f"  epochs of {t:>5.1f} s: saturates at about {c.results_per_second * t:,.0f} workers")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
