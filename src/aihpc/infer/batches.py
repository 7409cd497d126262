"""Batches of fixed sizes: padded, every size warmed up and timed, each a CUDA graph where faster.

A model meets only the batch sizes of :func:`batch_sizes` (powers of two up to
``--max-batch`` and the number of samples): a batch of ``n`` samples runs at
the smallest of them that holds it (:func:`size_for`), padded with copies of
its first sample (:func:`padded`), whose answers are dropped.  Before
LoadGen's clock starts, :meth:`FixedBatches.prepare` runs every size
(:data:`WARMUPS` untimed passes: cuDNN picks and tunes its kernels per shape
then) and times it (the median of :data:`REPEATS` passes); on a GPU each
size is then captured as a CUDA graph (:class:`Replay`), timed the same way,
and the faster of the two kept (:class:`SizeTiming`).  On the CPU there are
no CUDA graphs: every size runs eagerly.

A size's work reads and writes only tensors allocated once (its input
buffer, a language model's cache and tokens), so the same calls are replayed
as a graph.  The graphs of one device share one memory pool: safe because
one thread serves each device and reads a graph's output before it replays
another.
"""

from __future__ import annotations

import statistics
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from aihpc.records.inference import WarmUpRecord

#: Untimed passes of a size before it is timed (the first tunes its kernels).
WARMUPS = 2
#: Timed passes of a size; its time is their median.
REPEATS = 3

#: The work of one batch size: zero-argument calls on its fixed tensors, run in order.
Calls = tuple[Callable[[], Any], ...]


def batch_sizes(max_batch: int, samples: int) -> tuple[int, ...]:
    """The powers of two up to ``max_batch`` and ``samples`` (1 at least)."""
    top = max(1, min(max_batch, samples))
    return tuple(1 << k for k in range(top.bit_length()))


def size_for(sizes: Sequence[int], n: int) -> int:
    """The smallest of ``sizes`` holding ``n`` samples; ValueError where none does."""
    for size in sorted(sizes):
        if size >= n:
            return size
    raise ValueError(f"a batch of {n} samples is larger than the largest size {max(sizes)}")


def padded(indices: list[int], size: int) -> list[int]:
    """``indices`` filled up to ``size`` with copies of the first."""
    return indices + [indices[0]] * (size - len(indices))


@dataclass(frozen=True)
class SizeTiming:
    """One batch size warmed up: its seconds eager and as a CUDA graph (None where none was
    captured, ``why_eager`` saying why), and whether the graph was kept (the faster)."""

    eager_s: float
    graph_s: float | None
    graph: bool
    why_eager: str | None

    @property
    def seconds(self) -> float:
        """The seconds of a batch as it is served."""
        return self.graph_s if self.graph and self.graph_s is not None else self.eager_s

    def record(self) -> WarmUpRecord:
        """As infer.json's ``warm_up`` records it."""
        return WarmUpRecord(
            eager_s=self.eager_s,
            graph_s=self.graph_s,
            served_as="cuda-graph" if self.graph else "eager",
            why_eager=self.why_eager,
        )


def time_batch(run: Callable[[], Any], warmups: int = WARMUPS, repeats: int = REPEATS) -> float:
    """The median seconds of ``repeats`` calls of ``run`` after ``warmups`` untimed ones
    (``run`` returns when its answers are on the host)."""
    for _ in range(warmups):
        run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


class Replay:
    """``call`` captured once as a CUDA graph on ``device`` (after :data:`WARMUPS` calls on a
    side stream, as capture requires); calling the object replays it and returns the
    captured call's output (its tensors are the graph's, overwritten by the next replay)."""

    def __init__(self, call: Callable[[], Any], device: torch.device, pool: Any) -> None:
        with torch.cuda.device(device):
            side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(WARMUPS):
                    call()
            torch.cuda.current_stream().wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, pool=pool):
                self.output = call()

    def __call__(self) -> Any:
        self.graph.replay()
        return self.output


def choose(
    device: torch.device, batch: Callable[[Calls], None], eager: Calls, pool: Any
) -> tuple[Calls, SizeTiming]:
    """The calls one size is served with, and its timing: ``batch(calls)`` serves one full
    batch with ``calls`` and waits for its answers; eager, and on a GPU as CUDA graphs, the
    faster kept (the module docstring)."""
    eager_s = time_batch(lambda: batch(eager))
    if device.type != "cuda":
        return eager, SizeTiming(eager_s, None, False, f"no CUDA graphs on a {device.type}")
    try:
        graphs = tuple(Replay(call, device, pool) for call in eager)
    except RuntimeError as exc:  # an operation that cannot be captured
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return eager, SizeTiming(eager_s, None, False, f"not capturable: {reason}")
    graph_s = time_batch(lambda: batch(graphs))
    if graph_s < eager_s:
        return graphs, SizeTiming(eager_s, graph_s, True, None)
    return eager, SizeTiming(eager_s, graph_s, False, "the graph was not faster")


class FixedBatches(ABC):
    """A served model's step at fixed sizes: per size the calls it runs (``calls``, filled by
    the subclass; :meth:`prepare` may replace them by their graphs) and, once prepared, their
    timing.  ``samples``: how many inputs there are to index."""

    def __init__(self, device: torch.device, sizes: tuple[int, ...], samples: int) -> None:
        self.device, self.sizes, self.samples = device, sizes, samples
        self.calls: dict[int, Calls] = {}
        self.timings: dict[int, SizeTiming] = {}

    def __call__(self, indices: list[int], first_token: Callable[[int], None]) -> list[int]:
        return self.serve(indices, first_token)

    @abstractmethod
    def serve(self, indices: list[int], first_token: Callable[[int], None]) -> list[int]:
        """One batch of samples (at most the largest size) served: :class:`~aihpc.infer.
        systems.Step`'s call."""

    def prepare(self) -> dict[int, SizeTiming]:
        """Every size warmed up, timed and served the faster way (the module docstring), the
        largest first (its graph's memory is then reused by the smaller ones')."""
        pool = torch.cuda.graph_pool_handle() if self.device.type == "cuda" else None
        for size in sorted(self.sizes, reverse=True):
            indices = [i % self.samples for i in range(size)]

            def batch(calls: Calls, size: int = size, indices: list[int] = indices) -> None:
                self.calls[size] = calls
                self.serve(indices, lambda _: None)

            self.calls[size], self.timings[size] = choose(
                self.device, batch, self.calls[size], pool
            )
        return dict(sorted(self.timings.items()))
