"""The system under test: a model behind a queue, served in dynamic batches.

LoadGen calls :meth:`BatchingSystem.issue` from its own thread with the
samples of a query; the system only queues them and returns.  One serving
thread takes up to ``max_batch`` queued samples, waiting at most
``max_wait`` seconds for a batch to fill once its first sample is there
(dynamic batching: in the server scenario the batch grows with the load,
in offline every batch is full, in single-stream ``max_batch`` is 1), runs
them, and tells LoadGen they are complete.  Each sample's latency, from its
issue to its completion as this side sees it, is kept for the latency
histogram (LoadGen's own percentiles are the result; these only draw it).

What a batch is depends on the model (:class:`Step`): an image classifier's
forward pass (:class:`Classify`), or a language model's generation with a
key-value cache (:class:`Generate`: its first token reported to LoadGen as
soon as the prompt's prefill gives it, then the whole answer with its
number of tokens, for LoadGen's time to first token and time per output
token).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from aihpc.infer.accuracy import autocast_for
from aihpc.infer.loadgen import loadgen


class Step(Protocol):
    """One batch of samples (their indices into the inputs) served; ``first_token(i)`` is
    called for the ``i``-th sample of the batch when its first token exists (language models).
    Returns the tokens each sample produced (1 for a classifier)."""

    def __call__(self, indices: list[int], first_token: Callable[[int], None]) -> list[int]: ...


@dataclass
class Classify:
    """A classifier's forward pass on a batch of inputs, in the served dtype."""

    model: torch.nn.Module
    inputs: torch.Tensor
    device: torch.device
    dtype: str
    channels_last: bool = False

    def __post_init__(self) -> None:
        self.inputs = self.inputs.to(self.device)
        if self.channels_last:
            self.inputs = self.inputs.contiguous(memory_format=torch.channels_last)

    @torch.inference_mode()
    def __call__(self, indices: list[int], first_token: Callable[[int], None]) -> list[int]:
        x = self.inputs[indices]
        with autocast_for(self.device, self.dtype):
            self.model(x).argmax(-1).cpu()  # waits for the device: the answer exists
        return [1] * len(indices)


@dataclass
class Generate:
    """A language model's greedy answer of ``new_tokens`` tokens to each prompt of a batch."""

    model: Any  # an aihpc.nas.lm_net.LMNet
    prompts: torch.Tensor
    new_tokens: int
    device: torch.device
    dtype: str

    def __post_init__(self) -> None:
        self.prompts = self.prompts.to(self.device)

    @torch.inference_mode()
    def __call__(self, indices: list[int], first_token: Callable[[int], None]) -> list[int]:
        from aihpc.nas.lm_decode import generate

        def on_token(step: int, tokens: torch.Tensor) -> None:
            if step == 0:
                tokens.cpu()  # waits for the device: the first tokens exist
                for i in range(len(indices)):
                    first_token(i)

        with autocast_for(self.device, self.dtype):
            generate(self.model, self.prompts[indices], self.new_tokens, on_token=on_token).cpu()
        return [self.new_tokens] * len(indices)


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
    first_token_latencies: list[float] = field(default_factory=list)
    batches: int = 0
    # queue.Queue, not SimpleQueue: CPython 3.11's SimpleQueue.get(timeout=t) can wait forever
    # when its lock was free on an empty queue and the deadline has passed by the time it loops
    # (it then waits with a negative timeout, which means no timeout).  A batch's short wait for
    # one more sample hung so under load, its samples never completed, and LoadGen waited for them.
    _queue: queue.Queue = field(default_factory=queue.Queue)
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
        self.latencies, self.first_token_latencies, self.batches, self.error = [], [], 0, None
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

    def _serve(self, step: Step) -> None:
        lg = loadgen()
        while (batch := self._next_batch()) is not None:

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
            with self._lock:
                self.batches += 1
                self.latencies += [done - issued for _, _, issued in batch]
            responses = [
                lg.QuerySampleResponse(qid, 0, 0, n)
                for (qid, _, _), n in zip(batch, tokens, strict=True)
            ]
            lg.QuerySamplesComplete(responses)
