"""The spread of repeated measurements and the warning past it, one form for every command.

Every timing in aihpc reports the median of its repeats (a peak's repeats, a
bandwidth's, ``bench``'s timed blocks, ``bench distributed``'s steps,
``profile``'s steps) and flags it as unreliable when the repeats disagree.
The statistic is the **interquartile range over the median**, ``(q3 - q1) /
median``, with the quartiles interpolated linearly between the sorted samples
(``statistics.quantiles(method="inclusive")``, numpy's and torch's default, so
it equals ``torch.utils.benchmark``'s ``iqr / median``).  Why it and not the
range ``(max - min) / median``:

* the figure reported is the median, which one stray repeat does not move; the
  IQR is what moves the median, and it ignores the same stray repeat;
* the range of ``n`` samples grows with ``n`` (about 2.3 standard deviations
  for 5 samples, 5 for 100), so one threshold on it would be lax for a
  5-repeat peak and strict for a 100-block ``bench`` timing; the IQR is about
  1.35 standard deviations whatever ``n``, so :data:`SPREAD_WARNING` means
  the same for every command.

For a peak's usual 5 repeats the IQR spans the 2nd to the 4th fastest; for 2
repeats it is half their range, for 1 it is 0.  results.json files written
before this recorded a peak's ``spread`` as the range;
:func:`aihpc.scoring.peak.PeakResult.from_dict` recomputes it from the
recorded repeats.

Pure Python, layer 0: every layer above may use it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

SPREAD_WARNING = 0.10
"""Spread (IQR / median) of repeated measurements above which a result carries a warning."""

STATISTIC = "iqr/median"
"""The name records carry beside a spread computed by :func:`spread`."""


def spread(samples: Sequence[float]) -> float:
    """``(q3 - q1) / median`` of ``samples`` (0 for one sample, inf where the median is <= 0).

    Raises ValueError for no samples: a caller words its own error.
    """
    if not samples:
        raise ValueError("the spread of no samples is undefined")
    median = statistics.median(samples)
    if median <= 0:
        return math.inf
    if len(samples) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return float((q3 - q1) / median)


def spread_warning(subject: str, samples: str, value: float) -> str | None:
    """The warning of a ``value`` spread above :data:`SPREAD_WARNING`, else None.

    ``subject`` names what was measured ("peak", a ``bench`` label, "2
    process(es)"); ``samples`` the repeats ("5 repeats' FLOP/s", "12 timed
    blocks"), e.g. "peak: the 5 repeats' FLOP/s spread over 18% of the median
    (IQR / median > 10%): the machine was busy or its clocks changed; treat it
    as unreliable".
    """
    if not value > SPREAD_WARNING:  # NaN: no warning, as before
        return None
    return (
        f"{subject}: the {samples} spread over {value:.0%} of the median "
        f"(IQR / median > {SPREAD_WARNING:.0%}): the machine was busy or its clocks changed; "
        "treat it as unreliable"
    )
