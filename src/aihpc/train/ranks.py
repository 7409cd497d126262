"""Data-parallel trials: one epoch trained by several processes with ``torch.distributed``.

A worker whose task asks for ``procs > 1`` keeps a *rank pool*: that many
processes (``python -m aihpc.train.ranks``), started the way
``torchrun`` starts them (``MASTER_ADDR``/``MASTER_PORT``, ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE`` in the environment), which join one process
group — NCCL on GPUs, gloo on CPU — once, and then train epoch after epoch,
trial after trial.  Each epoch they wrap the model in
``DistributedDataParallel`` and split every global batch between them
(:func:`aihpc.train.trainer.train_epoch`).  Rank 0 writes the epoch's
weights file; its result is the worker's, as if it had trained alone.
Operations are counted once, from the global samples processed, never once
per rank.

Lifecycle.  A worker has at most one pool, keyed by :class:`PoolKey` (the
number of processes, the device kind and the GPUs): a task with another key
closes it and starts a new one.  Because the ranks live on, each stages the
data set once (the trainer caches it per process) and keeps the trial's
model and optimizer between epochs exactly as a single-process worker does
(``take_resident``/``keep_resident``: only for a task that starts from the
very weight file the last epoch wrote).

Channel.  The worker writes one JSON line per request to every rank's
standard input; each rank answers with one JSON line on its standard output
(the ranks' own prints go to their standard error).  Requests: ``epoch``
(rank 0 answers with the :class:`EpochResult`), ``peak`` (every rank
measures its device's matmul peak at the same moment), ``stage`` (every rank
loads the data set); their fields: :mod:`aihpc.train.rank_channel`.  Nothing is pickled; the
weights are files.

Failures.  A rank that raises answers with its error and exits; a rank that
dies answers nothing (end of file).  Either way the pool is closed at once
(every rank killed: a peer of a dead rank may hang in a collective) and the
request fails with one line, ``rank R of N failed: ...``; the next task
starts a new pool.  A rank reads end of file when its worker exits, and a
thread in it watches for its worker to disappear, so no rank outlives its
worker.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import IO, Any

import torch
import torch.distributed as dist

from aihpc.machine.devices import device_kind, gpu_indices, training_dtype
from aihpc.records.messages import DataRef, EpochResult, EpochTask, WeightsRef
from aihpc.tasks import Task, load_task, task_path
from aihpc.train.group import Group
from aihpc.train.rank_channel import (
    EpochRequest,
    PeakRequest,
    RankAnswer,
    RankRequest,
    StageRequest,
    epoch_task,
    weights_ref,
)
from aihpc.train.staging import StagingRecord
from aihpc.train.trainer import train_epoch

# Bytes for the weight reference rank 0 broadcasts after each epoch (JSON of name and digest).
_REF_BYTES = 512


class ProcessGroup(Group):
    """This rank's view of the ``torch.distributed`` group (collectives on ``device``)."""

    def __init__(self, device: torch.device) -> None:
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.device = device

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        from torch.nn.parallel import DistributedDataParallel

        ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)

    def any(self, flag: bool) -> bool:
        t = torch.tensor([1.0 if flag else 0.0], device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item() > 0)

    def sum(self, *values: float) -> tuple[float, ...]:
        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return tuple(t.tolist())

    def first(self, weights: WeightsRef | None) -> WeightsRef | None:
        buf = torch.zeros(_REF_BYTES, dtype=torch.uint8, device=self.device)
        if self.rank == 0 and weights is not None:
            data = json.dumps([weights.name, weights.digest]).encode()
            if len(data) > _REF_BYTES:
                raise ValueError(
                    f"a weight file's name must be under {_REF_BYTES - 80} bytes, got "
                    f"{weights.name!r}"
                )
            buf[: len(data)] = torch.tensor(list(data), dtype=torch.uint8)
        dist.broadcast(buf, 0)
        data = bytes(buf.cpu().tolist()).rstrip(b"\0")
        return WeightsRef(*json.loads(data)) if data else None


@dataclasses.dataclass(frozen=True)
class PoolKey:
    """What a rank pool is for: ``procs`` processes on ``kind`` ("cpu" or "cuda"), rank r on
    ``gpus[r]``."""

    procs: int
    kind: str
    gpus: tuple[int, ...] = ()

    @classmethod
    def of(cls, device: str, procs: int) -> PoolKey:
        kind = device_kind(device)
        return cls(procs, kind, gpu_indices(procs) if kind == "cuda" else ())


#: Seconds a rank's error waits for a peer's death to show, which would be its cause (the ranks of
#: a healthy pool stay alive: an error in every one of them costs this once, as the pool dies).
PEER_EXIT_WAIT = 1.0


class RankFailure(Exception):
    """A rank of the pool raised or died; ``reason`` is one line, ``detail`` its traceback or log
    tail."""

    def __init__(self, reason: str, detail: str | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


class RankPool:
    """``key.procs`` rank processes of this worker, alive from start to :meth:`close`."""

    def __init__(self, key: PoolKey) -> None:
        self.key = key
        self.logs: list[IO[str]] = []
        self.procs: list[subprocess.Popen[str]] = []
        self.last: list[RankAnswer] = []  # the ranks' last answers
        port = _free_port()
        try:
            for rank in range(key.procs):
                self.logs.append(tempfile.TemporaryFile("w+", prefix=f"aihpc-rank{rank}-"))
                self.procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "aihpc.train.ranks"],
                        env=self._env(rank, port),
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=self.logs[-1],
                        text=True,
                    )
                )
        except BaseException:
            self.close()
            raise

    def _env(self, rank: int, port: int) -> dict[str, str]:
        return {
            **os.environ,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(self.key.procs),
            "AIHPC_RANK_DEVICE": self.key.kind
            if self.key.kind == "cpu"
            else f"cuda:{self.key.gpus[rank]}",
        }

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def ask(self, request: RankRequest) -> list[RankAnswer]:
        """Send ``request`` to every rank; their answers in rank order.  RankFailure closes the
        pool."""
        line = json.dumps(request) + "\n"
        for p in self.procs:
            try:
                stdin, _ = _pipes(p)
                stdin.write(line)
                stdin.flush()
            except OSError:  # a dead rank: its end of file below says which
                pass
        self.last = self._answers()
        return self.last

    def _answers(self) -> list[RankAnswer]:
        answers: dict[int, RankAnswer] = {}
        with selectors.DefaultSelector() as sel:
            for rank, p in enumerate(self.procs):
                sel.register(_pipes(p)[1], selectors.EVENT_READ, rank)
            while len(answers) < len(self.procs):
                for key, _ in sel.select():
                    rank = key.data
                    answer = _decode(_pipes(self.procs[rank])[1].readline())
                    if answer is None or "error" in answer:
                        raise self._failure(rank, answer)
                    answers[rank] = answer
                    sel.unregister(key.fileobj)
        return [answers[r] for r in range(len(self.procs))]

    def kill(self) -> None:
        """End every rank at once (a peer of a failed rank may be stuck in a collective)."""
        self._stop(kill=True)
        for log in self.logs:
            log.close()

    def _failure(self, rank: int, answer: RankAnswer | None) -> RankFailure:
        """Kill the pool; the failure of ``rank``: its error, or how it died (its log's last
        line).

        A rank killed by a signal is the cause wherever it is: its peers' errors
        (a connection reset in a collective) are echoes of its death, and may
        be read first, even before the dead rank's exit is visible (its sockets
        close as it dies, before it becomes a zombie): an error gives the other
        ranks :data:`PEER_EXIT_WAIT` seconds to show they died.
        """
        if answer is not None:
            self._await_a_peer_exit(rank)
        killed = [r for r, p in enumerate(self.procs) if (p.poll() or 0) < 0]
        if killed and rank not in killed:
            rank, answer = killed[0], None
        self._stop(kill=True)
        log = self._log(rank)
        self.kill()
        if answer is not None:
            return RankFailure(
                f"rank {rank} of {len(self.procs)} failed: {answer['error']}",
                answer.get("traceback"),
            )
        code = self.procs[rank].returncode
        lines = log.strip().splitlines()
        reason = (
            f"killed by signal {-code}"
            if code < 0
            else (lines[-1] if lines else f"exit code {code}")
        )
        return RankFailure(f"rank {rank} of {len(self.procs)} failed: {reason}", log or None)

    def _await_a_peer_exit(self, rank: int) -> None:
        """Up to :data:`PEER_EXIT_WAIT` s for a rank other than ``rank`` to have exited."""
        others = [p for r, p in enumerate(self.procs) if r != rank]
        deadline = time.monotonic() + PEER_EXIT_WAIT
        while time.monotonic() < deadline and all(p.poll() is None for p in others):
            time.sleep(0.02)

    def _log(self, rank: int) -> str:
        self.logs[rank].seek(0)
        return self.logs[rank].read()[-20_000:]

    def close(self) -> None:
        """End every rank (end of input: each leaves the group and exits; killed after 10 s)."""
        self._stop(kill=False)
        for log in self.logs:
            log.close()

    def _stop(self, kill: bool) -> None:
        for p in self.procs:
            with contextlib.suppress(OSError):
                p.kill() if kill else _pipes(p)[0].close()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


_POOL: RankPool | None = None
_LOCK = threading.Lock()  # one request at a time on a worker's pool


def rank_pool(key: PoolKey) -> RankPool:
    """This worker's pool for ``key``: the running one, or a new one (closing another key's, or a
    broken one)."""
    global _POOL
    if _POOL is not None and (_POOL.key != key or not _POOL.alive()):
        _POOL.close()
        _POOL = None
    if _POOL is None:
        _POOL = RankPool(key)
    return _POOL


def close_pool() -> None:
    """Close this worker's pool, if any.  (A worker that exits needs not: its ranks read end of
    input then, or see it gone, and exit.)"""
    global _POOL
    with _LOCK:
        if _POOL is not None:
            _POOL.close()
            _POOL = None


def _ask(key: PoolKey, request: RankRequest) -> list[RankAnswer]:
    """``request`` answered by the pool for ``key``; a failed pool is forgotten (the next request
    starts one)."""
    global _POOL
    with _LOCK:
        pool = rank_pool(key)
        try:
            return pool.ask(request)
        # a rank failed (the pool is killed already), or this worker is stopping
        except BaseException:
            pool.kill()
            _POOL = None
            raise


def _decode(line: str) -> RankAnswer | None:
    """A rank's answer; None for end of file (it died) or a line cut short by its death."""
    try:
        answer: RankAnswer | None = json.loads(line) if line else None
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def run_epoch_parallel(kind: Task, task: EpochTask, worker: str, t_start: float) -> EpochResult:
    """Train ``task`` (of ``kind``'s trial) in this worker's pool of ``task.procs`` processes;
    rank 0's result is the epoch's."""
    request: EpochRequest = {
        "op": "epoch",
        "kind": task_path(kind),
        "task": dataclasses.asdict(task),
        "worker": worker,
        "t_start": t_start,
    }
    try:
        answers = _ask(PoolKey.of(task.device, task.procs), request)
    except RankFailure as failure:
        return EpochResult.failed(task, worker, t_start, failure.reason, failure.detail)
    fields = answers[0]["result"]
    return EpochResult(**{**fields, "weights": weights_ref(fields["weights"])})


def rank_peaks(
    device: str, procs: int, threads: int | None, seconds: float, kinds: tuple[str, ...]
) -> list[dict[str, Any]]:
    """Every rank's peak (the best of the ``kinds`` of kernel), measured at the same moment on
    its own device; in rank order."""
    request: PeakRequest = {
        "op": "peak",
        "threads": threads,
        "seconds": seconds,
        "kinds": list(kinds),
    }
    return [a["peak"] for a in _ask(PoolKey.of(device, procs), request)]


def rank_stage(kind: Task, ref: DataRef, device: str, procs: int) -> list[StagingRecord]:
    """Every rank loads the data set of task ``kind`` onto its device now (kept for its epochs):
    seconds and bytes per rank."""
    request: StageRequest = {
        "op": "stage",
        "kind": task_path(kind),
        "data": dataclasses.asdict(ref),
    }
    return [a["staged"] for a in _ask(PoolKey.of(device, procs), request)]


def pool_ranks() -> list[RankAnswer]:
    """The ranks of this worker's pool as they last answered (pid, requests served, data sets
    loaded)."""
    pool = _POOL
    return [] if pool is None else list(pool.last)


# -- inside a rank process -----------------------------------------------------------------
def _rank_main() -> None:
    channel = os.fdopen(os.dup(1), "w")  # answers only; stray prints go to standard error
    os.dup2(2, 1)
    _exit_with_parent()
    device = torch.device(os.environ["AIHPC_RANK_DEVICE"])
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    group, served = ProcessGroup(device), 0
    try:
        for line in sys.stdin:
            try:
                answer = _serve(json.loads(line), group, device)
            # the worker closes the pool: leave at once, peers may hang
            except BaseException as exc:
                first = (str(exc).splitlines() or [""])[0]
                channel.write(
                    json.dumps(
                        {
                            "error": f"{type(exc).__name__}: {first}",
                            "traceback": traceback.format_exc(),
                        }
                    )
                    + "\n"
                )
                channel.flush()
                os._exit(1)
            served += 1
            channel.write(
                json.dumps(
                    {**answer, "pid": os.getpid(), "served": served, "data_loads": _data_loads()}
                )
                + "\n"
            )
            channel.flush()
    finally:
        dist.destroy_process_group()


def _serve(request: RankRequest, group: ProcessGroup, device: torch.device) -> RankAnswer:
    op = request["op"]
    if request["op"] == "epoch":
        kind = load_task(request["kind"])
        task = epoch_task(request["task"])
        result = train_epoch(kind, task, request["worker"], request["t_start"], group, device)
        return {"result": dataclasses.asdict(result)} if group.rank == 0 else {}
    if request["op"] == "peak":
        from aihpc.roofline.peak import search_peak

        if request["threads"]:
            torch.set_num_threads(request["threads"])
        dist.barrier()  # all ranks measure at once, sharing the machine as they do when training
        return {
            "peak": search_peak(
                device,
                training_dtype(device),
                seconds=request["seconds"],
                kinds=tuple(request["kinds"]),
            ).to_dict()
        }
    if request["op"] == "stage":
        from aihpc.train.staging import stage

        ref = DataRef.from_dict(request["data"])
        return {"staged": stage(load_task(request["kind"]), ref, str(device)).record()}
    raise ValueError(f"rank request op must be epoch, peak or stage, got {op!r}")


def _data_loads() -> int:
    """Data sets this rank has staged so far (:func:`aihpc.train.staging.stage`'s misses in this
    process)."""
    from aihpc.train.staging import loads

    return loads()


def _exit_with_parent() -> None:
    """End this rank when its worker is gone (re-parented), even in the middle of an epoch."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="aihpc-parent-watch", daemon=True).start()


def _pipes(p: subprocess.Popen[str]) -> tuple[IO[str], IO[str]]:
    """A rank process's stdin and stdout: both pipes (see RankPool.__init__)."""
    assert p.stdin is not None and p.stdout is not None
    return p.stdin, p.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


if __name__ == "__main__":
    _rank_main()
