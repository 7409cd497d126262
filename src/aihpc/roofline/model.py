"""The roofline model of one device, from measured peaks only.

For a kernel of arithmetic intensity I (operations per byte moved), the
attainable rate is ``min(peak FLOP/s, I x bandwidth)`` (Williams, Waterman and
Patterson, 2009).  Here the compute roof is the measured peak (the fastest
dense kernel) of the kernel's dtype and the memory roof the measured STREAM triad bandwidth
(bytes/s).  A dtype that was not measured has no roof:
:meth:`Roofline.attainable` returns None and tables say "unknown", never a
made-up peak.

A :class:`RooflinePoint` is one measured kernel (a Level-0 operator, a
Level-1 layer) placed under the roofs: its intensity and achieved FLOP/s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aihpc.base.checks import number
from aihpc.base.errors import ConfigError, DataError
from aihpc.records.kinds_bench import RooflineRecord
from aihpc.records.kinds_measure import PlacedPointRecord


@dataclass(frozen=True)
class Roofline:
    """``peaks``: dtype name -> measured peak FLOP/s (the fastest kernel); ``bandwidth``:
    triad bytes/s (None if unmeasured)."""

    device: str
    peaks: dict[str, float] = field(default_factory=dict)
    bandwidth: float | None = None

    def attainable(self, intensity: float | None, dtype: str) -> float | None:
        """FLOP/s the roofline allows at ``intensity`` ops/byte in ``dtype``; None where unknown.

        Without a bandwidth (or an intensity) only the compute roof bounds the rate.
        """
        peak = self.peaks.get(dtype)
        if peak is None:
            return None
        if self.bandwidth is None or intensity is None:
            return peak
        return min(peak, intensity * self.bandwidth)

    def share(self, flops_per_s: float, intensity: float | None, dtype: str) -> float | None:
        """Achieved FLOP/s as a fraction of :meth:`attainable`; None where unknown (or zero)."""
        bound = self.attainable(intensity, dtype)
        return None if not bound else flops_per_s / bound

    def ridge(self, dtype: str) -> float | None:
        """The intensity (ops/byte) where the memory roof meets ``dtype``'s compute roof; None where
        unknown."""
        peak = self.peaks.get(dtype)
        return None if peak is None or not self.bandwidth else peak / self.bandwidth

    def to_record(self) -> RooflineRecord:
        """The roofline as result files record it."""
        return RooflineRecord(device=self.device, peaks=dict(self.peaks), bandwidth=self.bandwidth)

    @classmethod
    def from_record(cls, record: RooflineRecord) -> Roofline:
        """The inverse of :meth:`to_record`; a peak or bandwidth that is not > 0 is a one-line
        :class:`DataError`."""
        bandwidth = record.bandwidth
        return cls(
            device=record.device,
            peaks={k: _positive(v, f"peak of {k}") for k, v in record.peaks.items()},
            bandwidth=None if bandwidth is None else _positive(bandwidth, "bandwidth"),
        )


@dataclass(frozen=True)
class RooflinePoint:
    """One measured kernel under the roofs.

    ``intensity`` is operations per byte moved (FLOP/byte), ``flops_per_s``
    the achieved rate, both >= 0; ``source`` the kind of result file it came
    from (e.g. "bench-operators"), None when made in this process.
    """

    label: str
    dtype: str
    intensity: float
    flops_per_s: float
    source: str | None = None

    def placed(self, roofline: Roofline) -> PlacedPointRecord:
        """The point under ``roofline``: with the FLOP/s it allows at the point's intensity and
        the share of it achieved (None where unknown)."""
        return PlacedPointRecord(
            label=self.label,
            dtype=self.dtype,
            intensity=self.intensity,
            flops_per_s=self.flops_per_s,
            source=self.source,
            attainable_flops_per_s=roofline.attainable(self.intensity, self.dtype),
            share=roofline.share(self.flops_per_s, self.intensity, self.dtype),
        )


def measure_roofline(
    device: str = "cpu",
    dtypes: tuple[str, ...] = ("float32",),
    seconds: float = 1.0,
    elements: int | None = None,
) -> Roofline:
    """Measure the compute roofs (per dtype, the best kernel:
    :func:`aihpc.roofline.peak.search_peak`) and the memory roof (triad) of ``device``."""
    from aihpc.roofline.bandwidth import measure_bandwidth
    from aihpc.roofline.peak import search_peak

    peaks = {d: search_peak(device, d, seconds=seconds).flops_per_s for d in dtypes}
    bandwidth = measure_bandwidth(device, "triad", elements=elements, seconds=seconds).bytes_per_s
    return Roofline(device=str(device), peaks=peaks, bandwidth=bandwidth)


def load_or_measure(
    path: Path | str | None, device: str, dtypes: tuple[str, ...], seconds: float = 0.5
) -> Roofline:
    """The roofline saved by ``aihpc roofline`` at ``path`` (``data.roofline``), or one measured
    now.

    A saved roofline of another device type is refused (one line); a dtype
    it has no peak for stays unknown (its shares print as "unknown").
    """
    if path is None:
        return measure_roofline(device, dtypes, seconds=seconds)
    from aihpc.records.files import RooflineFile, read_result_file

    document = read_result_file(Path(path), "roofline")
    assert isinstance(document, RooflineFile)  # read_result_file checked its kind
    try:
        saved = Roofline.from_record(document.data.roofline)
    except DataError as exc:
        raise DataError(f"{path}: {exc}") from None
    if saved.device.split(":")[0] != str(device).split(":")[0]:
        raise ConfigError(f"{path} holds the roofline of {saved.device}, not of {device}")
    return saved


def _positive(value: Any, name: str) -> float:
    number(name, value, 0, error=DataError)  # a negative value is told ">= 0", as ever
    return number(name, value, 0, low_open=True, error=DataError)
