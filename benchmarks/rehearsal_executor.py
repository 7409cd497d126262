"""The simulated workers of benchmarks/scale_rehearsal.py: thousands of them, on one core.

:class:`SimulatedExecutor` stands where a run's Dask executor stands, for
``workers`` workers whose trial-epochs last ``epoch_seconds`` on the
master's virtual clock (master_capacity's :class:`VirtualClock`).  Epochs
come back one at a time, oldest first, and each result moves the clock on by
``epoch_seconds / workers``: in steady state an epoch submitted at ``t``
ends at ``t + epoch_seconds``; the first wave ends staggered, as if the
workers had started one after another.  An epoch that would end past the
run's deadline is cut there, as a worker cuts it: its finished steps count,
it has no evaluation, its status is ``deadline``.

Each result is what a worker would return (:func:`aihpc.train.trainer.train_epoch`):
samples as the trainer takes them from the data set (whole batches), operations per
sample counted from the trial's architecture, batch size and dropout with the
worker's counter, ``ops_train = round(train ops/sample x train samples)``, a
validation accuracy from master_capacity's learning curve, and a weight file
of ``weight_bytes`` written to the run's weight directory, sparse (its
apparent size is real, its blocks are not).

Everything the "workers" do (counting, writing files) and what the rehearsal
measures (the weight directory's size) is left out of the master's time:
it is timed and subtracted, and the hyperparameter search's processes are
paused meanwhile (SIGSTOP, SIGCONT), so that they cannot draw suggestions in
time that the real master would not have.  What remains is the master's own
work per result: collect, commit, decide, propose, submit.

A new trial's operations are counted in a process of their own, at a lower
priority (nice 10), from its submission on: as a real worker counts on its
own node, beside the master, which takes the count when the trial's first
epoch comes back (an epoch later on the clock).  Only handing the trial over
and any wait for its count are the workers' time in the master's process;
the counting process takes the second core where the search's processes
leave it idle, so a 2-core machine runs the rehearsal in less wall time.
"""

from __future__ import annotations

import hashlib
import math
import multiprocessing
import os
import resource
import signal
import time
from array import array
from collections import OrderedDict, deque
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from master_capacity import VirtualClock, learning_curve

from aihpc.records.messages import EpochResult, EpochTask, WeightsRef
from aihpc.train.weights import file_name

WORKERS_PER_NODE = 8  # simulated hosts: eight accelerators a node
PROGRESS_SECONDS = 5.0  # wall seconds between progress snapshots
COUNT_TIMEOUT = 600.0  # seconds to wait for one trial's count (a lost counting process ends it)
# How the epoch's seconds split into phases (the trainer's names); a rough GPU epoch.
PHASES = {
    "data": 0.02,
    "forward": 0.3,
    "backward": 0.5,
    "optimizer": 0.08,
    "eval": 0.08,
    "other": 0.02,
}


COUNTER = "aihpc.tasks.base.Task.recount_per_sample"
"""The counter the simulated workers use: the task's fast recount (for images layer by layer),
which tests hold equal, bit for bit, to the worker's own (``count_per_sample``, ~100 ms an
architecture here)."""

#: (train, eval) operations per sample, parameters, and model FLOPs per trained sample (None:
#: the task has none)
Counts = tuple[float, float, int, float | None]


def count_trial(task: str, arch: dict[str, Any], batch: int, dropout: float) -> Counts:
    """What a worker counts of a trial of ``task``, with :data:`COUNTER`."""
    from aihpc.tasks import task_of

    kind = task_of(task)
    spec = kind.arch(arch)
    train, evaluate = kind.recount_per_sample(spec, batch, dropout)
    return train, evaluate, spec.num_params(), kind.model_flops(spec, 1)


def _lower_priority() -> None:
    os.nice(10)


def train_samples(n: int, batch: int) -> int:
    """Samples one epoch trains on: whole batches only (all ``n`` if fewer than a batch)."""
    return min(n, max(1, n // batch) * batch)


def worker_name(i: int) -> str:
    return f"worker-{i:05d}"


def rss_bytes() -> int:
    """This process's resident memory now (Linux), else its peak so far."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def scan_weights(directory: Path) -> tuple[int, int, int]:
    """(files, apparent bytes, bytes in blocks) of the weight directory now."""
    files = apparent = blocks = 0
    with os.scandir(directory) as entries:
        for entry in entries:
            try:
                st = entry.stat()
            except FileNotFoundError:  # deleted by the master meanwhile
                continue
            files, apparent, blocks = files + 1, apparent + st.st_size, blocks + st.st_blocks * 512
    return files, apparent, blocks


@contextmanager
def tpe_paused(besides: frozenset[int]):
    """The hyperparameter search's processes (this process's children but those in ``besides``)
    stopped for the duration (the workers' time)."""
    children = [p for p in multiprocessing.active_children() if p.pid not in besides]
    for p in children:
        os.kill(p.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for p in children:
            os.kill(p.pid, signal.SIGCONT)


class _Epoch:
    """A submitted epoch: the future the master waits on."""

    __slots__ = ("task", "key", "worker", "t_start", "value")

    def __init__(self, task: EpochTask, key: str, worker: int, t_start: float) -> None:
        self.task, self.key, self.worker, self.t_start = task, key, worker, t_start
        self.value: EpochResult | None = None

    def result(self) -> EpochResult:
        assert self.value is not None, "an epoch's result is made when it comes back"
        return self.value

    def cancel(self) -> None:
        pass


def epoch_result(
    fut: _Epoch,
    status: str,
    t_end: float,
    samples: tuple[int, int],
    counts: Counts,
    weights: WeightsRef,
    device: str,
) -> EpochResult:
    """The worker's result for ``fut``'s epoch, ``samples`` (train, validation) processed."""
    task, (seen, val), (train, evaluate, params, model_flops) = fut.task, samples, counts
    acc = learning_curve(task.trial_id, task.epoch, fut.key)
    ok = status == "ok"
    ops_train, ops_eval = round(train * seen), round(evaluate * val)
    seconds = t_end - fut.t_start
    metrics = {
        "epoch": task.epoch,
        "train_samples": seen,
        "train_loss": 2.0 * (1.0 - acc) + 0.05 if seen else None,
        "train_accuracy": min(1.0, acc + 0.02) if seen else None,
        "val_samples": val,
        "val_loss": 2.0 * (1.0 - acc) + 0.1 if ok else None,
        "val_accuracy": acc if ok else None,
        "ops": ops_train + ops_eval,
        "seconds": seconds,
        **({} if model_flops is None else {"model_flops": model_flops * seen}),
    }
    return EpochResult(
        trial_id=task.trial_id,
        epoch=task.epoch,
        status=status,
        worker=worker_name(fut.worker),
        t_start=fut.t_start,
        t_end=t_end,
        metrics=metrics,
        ops_train=ops_train,
        ops_eval=ops_eval,
        ops_per_sample={"train": train, "eval": evaluate},
        phase_seconds={k: share * seconds for k, share in PHASES.items()},
        num_params=params,
        device="cuda:0" if device == "cuda" else "cpu",
        weights=weights,
    )


def _as_worker(answer: Any, i: int) -> Any:
    """One worker's answer, made from the one the master's process gave: its name and host."""
    if not isinstance(answer, dict):
        return answer
    out = dict(answer)
    if "worker" in out:
        out["worker"] = worker_name(i)
    if "host" in out:
        out["host"] = f"node{i // WORKERS_PER_NODE:04d}"
    return out


def quantiles(values: array) -> tuple[float | None, float | None]:
    """The median and the 99th percentile of ``values`` (None, None if empty)."""
    if not values:
        return None, None
    s = sorted(values)
    return s[(len(s) - 1) // 2], s[int(0.99 * (len(s) - 1))]


class SimulatedExecutor:
    """``workers`` simulated workers on ``clock`` (see the module docstring).

    The executor's interface as :mod:`aihpc.runner.run` and the master use
    it; ``run_on_each`` runs the function once, here, and gives every
    worker that answer under its own name and host (the peak, the data
    staging, the device mapping and the energy meters of a run).
    """

    def __init__(
        self,
        workers: int,
        clock: VirtualClock,
        epoch_seconds: float,
        weight_bytes: int,
        data_info: dict[str, Any],
        device: str,
        sample_every: int,
    ) -> None:
        self.workers, self.clock, self.device = workers, clock, device
        self.step = epoch_seconds / workers
        self.weight_bytes, self.sample_every = weight_bytes, max(1, sample_every)
        self.num_train, self.num_val = int(data_info["num_train"]), int(data_info["num_val"])
        self.queue: deque[_Epoch] = deque()
        self.free = list(range(workers - 1, -1, -1))  # idle workers; pop() gives worker 0 first
        self.counts: OrderedDict[int, tuple[float, float, int]] = OrderedDict()
        self.counting: dict[int, Any] = {}  # trial id -> its count under way (AsyncResult)
        # started before the master starts the search's processes: its process is not paused
        self.pool = multiprocessing.get_context("spawn").Pool(1, initializer=_lower_priority)
        self.pool_pids = frozenset(p.pid for p in multiprocessing.active_children())
        self.seconds = {"worker": 0.0, "count": 0.0, "write": 0.0, "scan": 0.0}
        self.counted = self.results = 0
        self.latencies = array("f")  # seconds from a result's arrival to the next submission
        self._arrived: float | None = None
        self.checkpoints: list[dict[str, Any]] = []
        self.weights = {"files": 0, "apparent": 0, "blocks": 0}
        self.weights_peak = dict(self.weights)
        self.weights_dir: Path | None = None
        self.on_progress: Callable[[dict[str, Any]], None] | None = None
        self.log_dir: Path | None = None

    # -- the executor's interface ---------------------------------------------------
    def slots(self) -> int:
        return self.workers

    def wait_for_workers(self, n: int, timeout: float) -> None:
        pass

    def register_plugin(self, plugin) -> None:
        pass

    def workers_per_host(self) -> dict[str, int]:
        return {worker_name(i): WORKERS_PER_NODE for i in range(self.workers)}

    def run_on_each(self, fn, *args: Any) -> list[Any]:
        answer = fn(*args)
        return [_as_worker(answer, i) for i in range(self.workers)]

    def alive(self) -> dict[str, int]:
        return {worker_name(i): 1 for i in range(self.workers)}

    def ask_each(self, fn, *args: Any, workers=None) -> dict[str, Any]:
        answer = fn(*args)
        names = [worker_name(i) for i in range(self.workers)]
        return {n: _as_worker(answer, i) for i, n in enumerate(names) if workers is None or n in workers}

    def close(self) -> None:
        pass

    def submit(self, fn, task, key: str) -> _Epoch:
        if self._arrived is not None:
            self.latencies.append(time.perf_counter() - self._arrived)
            self._arrived = None
        if not isinstance(task, EpochTask):
            raise NotImplementedError("proxy screening (screen > 0) is not simulated")
        self._start_count(task)
        future = _Epoch(task, key, self.free.pop(), self.clock.now)
        self.queue.append(future)
        return future

    def wait(self, futures, timeout: float) -> set[_Epoch]:
        """The oldest epoch in flight comes back; the clock moves on by one step."""
        t = time.perf_counter()
        future = self.queue.popleft()
        future.value = self._finish(future, self.clock.now + self.step)
        self.clock.now = max(self.clock.now, future.value.t_end)
        self.free.append(future.worker)
        self.results += 1
        self._observe(t)
        self.seconds["worker"] += time.perf_counter() - t
        self._arrived = time.perf_counter()
        return {future}

    # -- the workers' side ------------------------------------------------------------
    def _finish(self, future: _Epoch, t_end: float) -> EpochResult:
        """What the worker returns, trained until ``t_end``, counted, saved.

        An epoch that would end past the deadline stops there (a worker checks
        the deadline before each step): its steps begun by then count, it has
        no evaluation, and it ends at the deadline.
        """
        task = future.task
        counts = self._counts(task)
        batch = task.hparams.batch_size
        full = train_samples(self.num_train, batch)
        status, samples = "ok", (full, self.num_val)
        if t_end > task.deadline:
            steps = max(1, self.num_train // batch)
            share = max(0.0, (task.deadline - future.t_start) / (t_end - future.t_start))
            status, samples = "deadline", (full * min(steps, math.ceil(share * steps)) // steps, 0)
            t_end = max(task.deadline, self.clock.now)
        return epoch_result(future, status, t_end, samples, counts, self._write(task), self.device)

    def _start_count(self, task: EpochTask) -> None:
        """The counting process takes a trial new to it (the workers' time: handing it over)."""
        if task.trial_id in self.counts or task.trial_id in self.counting:
            return
        t = time.perf_counter()
        args = (task.data.task, task.arch, task.hparams.batch_size, task.hparams.dropout)
        self.counting[task.trial_id] = self.pool.apply_async(count_trial, args)
        spent = time.perf_counter() - t
        self.seconds["count"] += spent
        self.seconds["worker"] += spent

    def _counts(self, task: EpochTask) -> Counts:
        """What a worker counts of the task's trial (:func:`count_trial`), counted once: the
        counts of the trials that trained most recently are kept (a trial that trains on while
        many others start and end keeps its own)."""
        cached = self.counts.get(task.trial_id)
        if cached is not None:
            self.counts.move_to_end(task.trial_id)
        else:
            t = time.perf_counter()
            with tpe_paused(self.pool_pids):
                cached = self.counting.pop(task.trial_id).get(timeout=COUNT_TIMEOUT)
            self.seconds["count"] += time.perf_counter() - t
            self.counted += 1
            self.counts[task.trial_id] = cached
            while len(self.counts) > 2 * self.workers + 16:  # the trials running, and some
                self.counts.popitem(last=False)
        return cached

    def _write(self, task: EpochTask) -> WeightsRef:
        """The epoch's weight file, sparse: ``weight_bytes`` long, no blocks written."""
        name = file_name(task.trial_id, task.epoch, task.attempt)
        t = time.perf_counter()
        with open(Path(task.weights_dir, name), "wb") as f:
            f.truncate(self.weight_bytes)
        self.seconds["write"] += time.perf_counter() - t
        self.weights_dir = Path(task.weights_dir)
        return WeightsRef(name, hashlib.sha256(name.encode()).hexdigest())

    # -- the rehearsal's measurements -------------------------------------------------
    def begin(self, deadline: float) -> None:
        """The master starts now; its run ends at ``deadline`` on the clock."""
        self.t0, self.v0, self.span = time.perf_counter(), self.clock.now, deadline - self.clock.now
        self._last_progress = self.t0
        self._checkpoint(0, self.t0)

    def master_seconds(self, now: float | None = None) -> float:
        """Wall seconds since :meth:`begin`, less the workers' (and the measurements')."""
        return (now or time.perf_counter()) - self.t0 - self.seconds["worker"]

    def _observe(self, t: float) -> None:
        if self.results % self.sample_every == 0:
            self._sample_weights()
        tenth = len(self.checkpoints)
        if tenth <= 10 and self.clock.now >= self.v0 + tenth * self.span / 10:
            self._sample_weights()
            self._checkpoint(tenth, t)
        if t - self._last_progress >= PROGRESS_SECONDS:
            self._sample_weights()
            self._report(t)

    def _sample_weights(self) -> None:
        if self.weights_dir is None:
            return
        t = time.perf_counter()
        with tpe_paused(self.pool_pids):
            files, apparent, blocks = scan_weights(self.weights_dir)
        self.weights = {"files": files, "apparent": apparent, "blocks": blocks}
        for k, v in self.weights.items():
            self.weights_peak[k] = max(self.weights_peak[k], v)
        self.seconds["scan"] += time.perf_counter() - t

    def _checkpoint(self, tenth: int, t: float) -> None:
        """The state at the end of a tenth of the virtual run: rate and latency over that tenth."""
        master_s = self.master_seconds(t)
        before = self.checkpoints[-1] if self.checkpoints else None
        done = self.results - (before["results"] if before else 0)
        spent = master_s - (before["master_s"] if before else 0.0)
        p50, p99 = quantiles(self.latencies[before["latencies"] if before else 0 :])
        self.checkpoints.append(
            {
                "tenth": tenth,
                "virtual_s": self.clock.now - self.v0,
                "results": self.results,
                "master_s": master_s,
                "latencies": len(self.latencies),
                "results_per_s": done / spent if before and spent > 0 else None,
                "latency_p50": p50,
                "latency_p99": p99,
                "rss": rss_bytes(),
                "weights_files": self.weights["files"],
                "weights_apparent": self.weights["apparent"],
            }
        )
        self._report(t)

    def snapshot(self, t: float | None = None) -> dict[str, Any]:
        """Everything measured so far (what a stopped run leaves).

        ``tenth_p50``, ``tenth_p99``: the decision latency in the tenth under way.
        """
        t = t or time.perf_counter()
        p50, p99 = quantiles(self.latencies[self.checkpoints[-1]["latencies"] :])
        return {
            "tenth_p50": p50,
            "tenth_p99": p99,
            "virtual_s": self.clock.now - self.v0,
            "results": self.results,
            "master_s": self.master_seconds(t),
            "worker_s": dict(self.seconds),
            "counted": self.counted,
            "counter": COUNTER,
            "rss": rss_bytes(),
            "peak_rss": peak_rss_bytes(),
            "weights_peak": dict(self.weights_peak),
            "checkpoints": list(self.checkpoints),
        }

    def _report(self, t: float) -> None:
        self._last_progress = t
        if self.on_progress is not None:
            self.on_progress(self.snapshot(t))

    def finish(self) -> dict[str, Any]:
        """The master returned: the whole run's rate, latencies and peaks."""
        self.pool.terminate()
        t = time.perf_counter()
        self._sample_weights()
        stats = self.snapshot(t)
        p50, p99 = quantiles(self.latencies)
        rate = self.results / stats["master_s"] if stats["master_s"] > 0 else None
        stats.update(
            latency_p50=p50, latency_p99=p99, decisions=len(self.latencies), results_per_s=rate
        )
        return stats
