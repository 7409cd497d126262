"""Timing one callable as pyperf and ``torch.utils.benchmark`` do.

:func:`measure` warms the callable up apart from the measurement (first calls
allocate, pick kernels, fill caches), then lets ``torch.utils.benchmark``'s
``Timer.adaptive_autorange`` repeat blocks of calls until the median is
stable (interquartile range within ``threshold`` of the median) or the time
runs out.  ``torch.utils.benchmark`` synchronises CUDA around each block, so
queued kernels are inside the timed interval.  The spread reported is
:func:`aihpc.base.spread.spread` of the blocks (IQR over the median); past
:data:`aihpc.base.spread.SPREAD_WARNING` the timing carries a warning.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from aihpc.base.spread import spread as spread_of
from aihpc.base.spread import spread_warning


@dataclass(frozen=True)
class Timing:
    """Seconds per call: the median of the timed blocks and their spread.

    ``spread`` is ``iqr / median``; ``blocks`` how many timed blocks,
    ``calls`` the calls they held in all; ``warning`` a sentence when the
    spread exceeds :data:`aihpc.base.spread.SPREAD_WARNING` (None otherwise).
    """

    median: float
    iqr: float
    spread: float
    blocks: int
    calls: int
    warning: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def measure(
    fn: Callable[[], Any],
    *,
    warmup_s: float = 0.05,
    min_run_time: float = 0.2,
    max_run_time: float = 2.0,
    threshold: float = 0.1,
    label: str = "",
) -> Timing:
    """Time ``fn()`` (no arguments; returns are ignored); at least one warm-up call runs."""
    import torch
    from torch.utils import benchmark

    start = time.perf_counter()
    while True:  # warm-up, untimed
        fn()
        if time.perf_counter() - start >= warmup_s:
            break
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    timer = benchmark.Timer(
        stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads(), label=label
    )
    m = timer.adaptive_autorange(
        threshold=threshold, min_run_time=min_run_time, max_run_time=max_run_time
    )
    median, iqr = float(m.median), float(m.iqr)
    spread = spread_of(m.times)  # iqr / median, as torch's
    warning = spread_warning(label or "timing", f"{len(m.times)} timed blocks", spread)
    return Timing(
        median=median,
        iqr=iqr,
        spread=spread,
        blocks=len(m.times),
        calls=len(m.times) * int(m.number_per_run),
        warning=warning,
    )
