"""A test's latencies split into queueing and compute at its 99th percentile.

:class:`~aihpc.infer.systems.BatchingSystem` times each sample: *queueing*
from its issue until the serving thread takes its batch, *compute* from then
until the batch's answers are on the host; the two add up to its latency.
:func:`timing_split` gives the 99th percentile of each (nearest rank: the
smallest value with at least 99 % of the samples at or below it) and, since
percentiles do not add up, the *tail*: the samples at or above the 99th
percentile latency, with the mean of their latency, queueing and compute,
which do.  A bound missed at the tail by queueing says the system fell behind
its arrivals (or a batch waited for the one running); by compute, that a
batch itself took too long.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from aihpc.records.inference_scenarios import TailTiming, TimingSplit

PERCENTILE = 99.0


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile of ``values`` by nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(math.ceil(q / 100 * len(ordered)) - 1, 0)]


def timing_split(
    latencies: Sequence[float], queueing: Sequence[float], compute: Sequence[float]
) -> TimingSplit:
    """The 99th percentiles of each part and the tail's means (the module docstring)."""
    if not len(latencies) == len(queueing) == len(compute):
        raise ValueError(
            f"one latency, queueing and compute time per sample, got {len(latencies)}, "
            f"{len(queueing)} and {len(compute)}"
        )
    p99 = percentile(latencies, PERCENTILE)
    tail = [i for i, v in enumerate(latencies) if p99 is not None and v >= p99]

    def mean(values: Sequence[float]) -> float | None:
        return sum(values[i] for i in tail) / len(tail) if tail else None

    return TimingSplit(
        p99_latency_s=p99,
        p99_queueing_s=percentile(queueing, PERCENTILE),
        p99_compute_s=percentile(compute, PERCENTILE),
        tail=TailTiming(
            samples=len(tail),
            latency_s=mean(latencies),
            queueing_s=mean(queueing),
            compute_s=mean(compute),
        ),
    )
