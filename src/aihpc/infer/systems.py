"""The system under test: a model behind a queue, served in batches of fixed sizes.

LoadGen calls :meth:`BatchingSystem.issue` from its own thread with the
samples of a query; the system only queues them and returns.  One serving
thread per device takes up to ``max_batch`` queued samples, waiting at most
``max_wait`` seconds for a batch to fill once its first sample is there
(dynamic batching: in the server scenario the batch grows with the load,
in offline every batch is full, in single-stream ``max_batch`` is 1), runs
them (a :class:`Step`, padded to the smallest of its sizes that holds them),
and tells LoadGen they are complete.

Each sample's time is split where the serving thread takes its batch:
*queueing* from its issue until then (waiting in the queue, and for its batch
to fill), *compute* from then until its batch's answers are on the host.  The
two add up to its latency as this side sees it.  These only explain LoadGen's
figures (its percentiles are the result): which part a missed bound was.

What a batch is depends on the model (:mod:`aihpc.infer.steps`): an image
classifier's forward pass, or a language model's generation with a
key-value cache.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aihpc.infer.batches import size_for
from aihpc.infer.loadgen import loadgen


class Step(Protocol):
    """One batch of samples (their indices into the inputs) served at one of ``sizes``;
    ``first_token(i)`` is called for the ``i``-th sample of the batch when its first token
    exists (language models).  Returns the tokens each sample produced (1 for a classifier).
    ``prepare`` warms every size up and times it (:mod:`aihpc.infer.batches`)."""

    sizes: tuple[int, ...]

    def __call__(self, indices: list[int], first_token: Callable[[int], None]) -> list[int]: ...

    def prepare(self) -> dict[int, Any]: ...


@dataclass
class BatchingSystem:
    """Steps (:class:`Step`) behind one queue (the module docstring); start, run LoadGen, stop.

    ``steps``: one per device (a copy of the model on each GPU of the node), each served by
    its own thread taking batches from the same queue, so one LoadGen drives them all and
    its rates are their sum."""

    steps: Sequence[Step]
    max_batch: int
    max_wait: float
    latencies: list[float] = field(default_factory=list)
    queueing: list[float] = field(default_factory=list)
    compute: list[float] = field(default_factory=list)
    first_token_latencies: list[float] = field(default_factory=list)
    sizes: Counter[int] = field(default_factory=Counter)  # batches served, by size
    padding: int = 0  # samples added to fill batches to their size
    # queue.Queue, not SimpleQueue: CPython 3.11's SimpleQueue.get(timeout=t) can wait forever
    # when its lock was free on an empty queue and the deadline has passed by the time it loops
    # (it then waits with a negative timeout, which means no timeout).  A batch's short wait for
    # one more sample hung so under load, its samples never completed, and LoadGen waited for them.
    _queue: queue.Queue[tuple[int, int, float] | None] = field(default_factory=queue.Queue)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    error: BaseException | None = None

    def issue(self, samples: list[Any]) -> None:
        now = time.perf_counter()
        for s in samples:
            self._queue.put((s.id, s.index, now))

    def flush(self) -> None:
        """LoadGen's flush: nothing is held back (a batch waits at most ``max_wait``)."""

    def __enter__(self) -> BatchingSystem:
        for step in self.steps:  # a larger batch would meet a size never warmed up
            if self.max_batch > max(step.sizes):
                raise ValueError(
                    f"batches of up to {self.max_batch} samples, but the largest size warmed up "
                    f"is {max(step.sizes)}"
                )
        self.latencies, self.queueing, self.compute, self.first_token_latencies = [], [], [], []
        self.sizes, self.padding, self.error = Counter(), 0, None
        self._threads = [
            threading.Thread(target=self._serve, args=(step,), name=f"aihpc-infer-{i}", daemon=True)
            for i, step in enumerate(self.steps)
        ]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join()

    def _next_batch(self) -> list[tuple[int, int, float]] | None:
        first = self._queue.get()
        if first is None:
            return None
        batch = [first]
        deadline = time.perf_counter() + self.max_wait
        while len(batch) < self.max_batch:
            try:
                item = self._queue.get(timeout=max(deadline - time.perf_counter(), 1e-6))
            except queue.Empty:
                break
            if item is None:
                self._queue.put(None)  # seen again by the loop, after this batch
                break
            batch.append(item)
        return batch

    @property
    def batches(self) -> int:
        return sum(self.sizes.values())

    def _serve(self, step: Step) -> None:
        lg = loadgen()
        while (batch := self._next_batch()) is not None:
            started = time.perf_counter()

            def first_token(i: int, batch: list[tuple[int, int, float]] = batch) -> None:
                with self._lock:
                    self.first_token_latencies.append(time.perf_counter() - batch[i][2])
                lg.FirstTokenComplete([lg.QuerySampleResponse(batch[i][0], 0, 0)])

            try:
                tokens = step([index for _, index, _ in batch], first_token)
            except BaseException as exc:  # told to the caller after LoadGen returns
                self.error = self.error or exc
                tokens = [0] * len(batch)
            done = time.perf_counter()
            size = size_for(step.sizes, len(batch))
            with self._lock:
                self.sizes[size] += 1
                self.padding += size - len(batch)
                self.latencies += [done - issued for _, _, issued in batch]
                self.queueing += [started - issued for _, _, issued in batch]
                self.compute += [done - started] * len(batch)
            responses = [
                lg.QuerySampleResponse(qid, 0, 0, n)
                for (qid, _, _), n in zip(batch, tokens, strict=True)
            ]
            lg.QuerySamplesComplete(responses)
