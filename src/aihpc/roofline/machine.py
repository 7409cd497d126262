"""The machine's roofs, measured together, and measured kernels placed under them.

:func:`measure_machine` measures every compute roof (the peak of each dtype:
the best of the dense kernels searched, :func:`aihpc.roofline.peak.search_peak`,
with the hardware's nominal peak beside it) and both STREAM kernels (copy and triad,
:mod:`aihpc.roofline.bandwidth`) on one device and returns the ``data`` of an
``aihpc roofline`` result file (:class:`aihpc.records.kinds_measure.RooflineData`)::

    {"device": "cpu",
     "seconds": 2.0,                                 timed seconds per measurement
     "peaks": {dtype: PeakRecord},                   FLOP/s, the kernel that won, the nominal
     "left_out": {dtype: why},                       defaults the processor does not compute
     "bandwidth": {"copy": BandwidthRecord, "triad": ...},  bytes/s
     "roofline": RooflineRecord,                     the triad bandwidth is the memory roof
     "ridge": {dtype: FLOP/byte or None},
     "points": [PlacedPointRecord],                  kernels of bench files
     "warnings": [str]}

:func:`read_points` reads the kernels of an ``aihpc bench operators`` or
``aihpc bench network`` file (:class:`PointsFile`); :func:`add_points`
places them (attainable FLOP/s and the share of it achieved, None where the
dtype has no roof); :func:`format_table` renders the readable table,
"unknown" wherever nothing was measured.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from aihpc.base.checks import number
from aihpc.base.errors import ConfigError, DataError
from aihpc.base.fmt import format_si
from aihpc.base.spread import STATISTIC
from aihpc.base.spread import spread as spread_of
from aihpc.machine.processor import (
    HALF_PRECISION_ARITHMETIC,
    Processor,
    describe_processor,
    emulation,
)
from aihpc.records.codec import exact
from aihpc.records.kinds_bench import (
    BenchNetworkData,
    BenchOperatorsData,
    NetworkPointRecord,
    OperatorPointRecord,
)
from aihpc.records.kinds_measure import BandwidthRecord, PlacedPointRecord, RooflineData
from aihpc.records.peak import PeakRecord
from aihpc.roofline.model import Roofline, RooflinePoint
from aihpc.scoring.peak import NominalPeak, PeakResult

POINT_KINDS = ("bench-operators", "bench-network")
"""Result kinds whose ``data.points`` can be placed under the roofs."""

Progress = Callable[[str], None]
"""Receives one line of progress text (no newline)."""


def machine_dtypes(device: str, processor: Processor | None = None) -> tuple[str, ...]:
    """Dtypes measured by default: :func:`aihpc.roofline.peak.default_dtypes`, plus on a CPU the
    half precisions ``processor`` (default: this machine's) computes natively.

    bfloat16 is the dtype the CPU path may train in, and ``aihpc bench operators`` runs
    every operator in bfloat16 and float16 too: their peaks are measured wherever the
    processor computes them (else those operators' roofline shares stay "unknown").  A half
    precision it only emulates is left out (:func:`left_out_dtypes` says why).
    """
    from aihpc.roofline.peak import default_dtypes

    names = default_dtypes(device)
    if not device.startswith("cpu"):
        return names
    left_out = left_out_dtypes(device, processor)
    half = [d for d in HALF_PRECISION_ARITHMETIC if d not in names and d not in left_out]
    return (*names, *half)


def left_out_dtypes(device: str, processor: Processor | None = None) -> dict[str, str]:
    """The half precisions a CPU's defaults leave out, each with why: ``processor`` (default:
    this machine's) does not compute them natively (:func:`aihpc.machine.processor.emulation`).
    Empty on a GPU."""
    if not device.startswith("cpu"):
        return {}
    processor = processor or describe_processor()
    why = {d: emulation(processor, d) for d in HALF_PRECISION_ARITHMETIC}
    return {d: reason for d, reason in why.items() if reason is not None}


def check_dtypes(device: str, dtypes: Sequence[str]) -> tuple[str, ...]:
    """``dtypes`` checked for ``device`` (ConfigError naming a bad one), duplicates dropped, order
    kept."""
    import torch

    from aihpc.roofline.peak import _dtype_name

    if not dtypes:
        raise ConfigError("dtypes must name at least one dtype, got none")
    dev = torch.device(device)
    return tuple(dict.fromkeys(_dtype_name(d, dev) for d in dtypes))


def check_seconds(seconds: float) -> float:
    """``seconds`` if it is a finite number > 0, else a one-line ConfigError."""
    return number("seconds", seconds, 0, low_open=True)


def measure_machine(
    device: str,
    dtypes: Sequence[str],
    seconds: float = 2.0,
    elements: int | None = None,
    progress: Progress | None = None,
    left_out: Mapping[str, str] | None = None,
    processor: Processor | None = None,
) -> RooflineData:
    """Measure the roofs of ``device`` (a :func:`aihpc.machine.devices.resolve_device`, as a
    string) into a result's ``data``.

    One peak per dtype (the kernel search; on a CPU that does not compute the dtype natively,
    ``processor``'s extensions deciding, one kernel: :func:`aihpc.roofline.peak.search_peak`),
    then STREAM copy and triad over ``elements`` float64 per array (default
    :func:`aihpc.roofline.bandwidth.default_elements`), each timed for ``seconds``.
    ``progress`` receives one line as each measurement starts.  ``left_out`` (dtype -> why)
    is recorded as given.  ``points`` is empty; :func:`add_points` fills it.
    """
    from aihpc.roofline.bandwidth import default_elements, measure_bandwidth
    from aihpc.roofline.peak import search_peak

    seconds = check_seconds(seconds)
    names = check_dtypes(device, dtypes)
    n = default_elements(device) if elements is None else elements
    say = progress or (lambda _line: None)
    cpu = device.startswith("cpu")
    if cpu:
        processor = processor or describe_processor()
    steps = len(names) + 2
    peaks: dict[str, PeakResult] = {}
    for i, name in enumerate(names, 1):
        emulated = cpu and processor is not None and emulation(processor, name) is not None
        how = (
            "one kernel: not computed natively"
            if emulated
            else "the fastest of matmuls and convolutions"
        )
        say(f"[{i}/{steps}] {name} peak on {device} ({how})")
        peaks[name] = search_peak(device, name, seconds=seconds, processor=processor)
    bandwidth: dict[str, BandwidthRecord] = {}
    for i, kernel in enumerate(("copy", "triad"), len(names) + 1):
        mib = n * 8 / 2**20
        say(
            f"[{i}/{steps}] STREAM {kernel} bandwidth on {device} ({n} float64 = {mib:.4g} MiB "
            f"per array, {seconds:g} s)"
        )
        bandwidth[kernel] = measure_bandwidth(device, kernel, elements=n, seconds=seconds)
    return machine_data(device, seconds, peaks, bandwidth, left_out)


def machine_data(
    device: str,
    seconds: float,
    peaks: dict[str, PeakResult],
    bandwidth: dict[str, BandwidthRecord],
    left_out: Mapping[str, str] | None = None,
) -> RooflineData:
    """The result ``data`` (module docstring) of measured ``peaks`` and ``bandwidth``.

    The memory roof is ``bandwidth["triad"]`` (None without it); the warnings
    of every measurement are collected, each prefixed with what it concerns;
    ``left_out`` (dtype -> why it was not measured) is kept as ``left_out``.
    """
    triad = bandwidth.get("triad")
    roofline = Roofline(
        device=device,
        peaks={d: r.flops_per_s for d, r in peaks.items()},
        bandwidth=None if triad is None else triad.bytes_per_s,
    )
    warnings = [f"{d} peak: {r.warning}" for d, r in peaks.items() if r.warning]
    warnings += [f"{k} bandwidth: {r.warning}" for k, r in bandwidth.items() if r.warning]
    return RooflineData(
        device=device,
        seconds=seconds,
        peaks={d: _peak_record(r) for d, r in peaks.items()},
        left_out=dict(left_out or {}),
        bandwidth=dict(bandwidth),
        roofline=roofline.to_record(),
        ridge={d: roofline.ridge(d) for d in peaks},
        points=(),
        warnings=tuple(warnings),
    )


def _peak_record(peak: PeakResult) -> PeakRecord:
    """A measured peak as result files record it (every field of it kept)."""
    record: PeakRecord = exact(peak.to_dict(), PeakRecord, f"the {peak.dtype} peak")
    return record


def peak_result(path: Path | None, device: str, dtype: str, seconds: float = 0.5) -> PeakResult:
    """The peak of ``device`` in ``dtype``: from an ``aihpc roofline`` result at ``path``, or
    searched now (:func:`aihpc.roofline.peak.search_peak`, ``seconds`` per stage).

    A file of another device type, or without that dtype's peak, is a one-line error.
    """
    from aihpc.records.files import RooflineFile, read_result_file
    from aihpc.roofline.peak import search_peak

    if path is None:
        return search_peak(device, dtype, seconds=seconds)
    document = read_result_file(Path(path), "roofline")
    assert isinstance(document, RooflineFile)  # read_result_file checked its kind
    data = document.data
    if data.device.split(":")[0] != device.split(":")[0]:
        raise ConfigError(f"{path} holds the roofline of {data.device}, not of {device}")
    record = data.peaks.get(dtype)
    if record is None:
        raise DataError(
            f"{path} holds no {dtype} peak (measure it: aihpc roofline --dtype {dtype})"
        )
    try:
        return record.peak_result()
    except DataError as exc:
        raise DataError(f"{path}: {exc}") from None


@dataclass(frozen=True)
class PointsFile:
    """The kernels of one ``bench operators`` or ``bench network`` result file.

    ``kind`` is the file's kind (each point's ``source``); ``device`` its
    ``data.device``.
    """

    path: Path
    kind: str
    device: str
    points: tuple[RooflinePoint, ...]

    def check_device(self, device: str) -> None:
        """ConfigError when the kernels were timed on another device type: a GPU's say nothing under
        a CPU's roofs."""
        if self.device.split(":")[0] != device.split(":")[0]:
            raise ConfigError(
                f"{self.path} holds kernels measured on {self.device}, not on {device}"
            )


def read_points(path: Path) -> PointsFile:
    """Read ``data.points`` of a ``bench operators`` or ``bench network`` result file.

    A missing or malformed file, a file of another kind, or a point with a negative intensity
    or rate is a one-line DataError naming the file (and the point's index).
    """
    from aihpc.records.files import BenchNetworkFile, BenchOperatorsFile, read_result_file

    doc = read_result_file(path)
    kind = doc.kind()
    data: BenchOperatorsData | BenchNetworkData
    if isinstance(doc, BenchOperatorsFile):
        data = doc.data
    elif isinstance(doc, BenchNetworkFile):
        data = doc.data
    else:
        raise DataError(f"{path} holds {kind} results, not {' or '.join(POINT_KINDS)}")
    found: Sequence[OperatorPointRecord | NetworkPointRecord] = data.points
    points = []
    for i, point in enumerate(found):
        for name, value in (("intensity", point.intensity), ("flops_per_s", point.flops_per_s)):
            number(f"{path}: points[{i}].{name}", value, 0, error=DataError)
        points.append(
            RooflinePoint(point.label, point.dtype, point.intensity, point.flops_per_s, kind)
        )
    return PointsFile(path=Path(path), kind=kind, device=data.device, points=tuple(points))


def add_points(data: RooflineData, points: Sequence[RooflinePoint]) -> RooflineData:
    """``data`` with ``points`` appended to its points, each with its attainable FLOP/s and
    share.

    A point whose dtype has no measured peak keeps None for both, and one
    warning per such dtype says so.
    """
    roofline = Roofline.from_record(data.roofline)
    placed = tuple(p.placed(roofline) for p in points)
    warnings = tuple(
        f"no {dtype} peak was measured: {dtype} points have no roof (unknown)"
        for dtype in sorted({p.dtype for p in points} - set(roofline.peaks))
    )
    return msgspec.structs.replace(
        data, points=data.points + placed, warnings=data.warnings + warnings
    )


def format_table(data: RooflineData) -> str:
    """The readable table of a roofline result's ``data``: roofs, ridge points, placed kernels,
    warnings."""
    lines = [f"roofline of {data.device}", "", f"{'roof':<22}{'rate':>16}{'spread':>9}  detail"]
    nominal = []
    for dtype, record in data.peaks.items():
        peak = record.peak_result()
        detail = f"{peak.kernel}, {peak.threads} threads"
        rate = format_si(peak.flops_per_s, "FLOP/s")
        lines.append(_row(f"peak {dtype}", rate, peak.spread, detail))
        if peak.nominal is not None:
            nominal.append(_nominal_line(peak.nominal))
    for kernel, r in data.bandwidth.items():
        element_bytes = r.bytes_per_call // r.elements
        detail = f"{r.elements} float64 per array, {element_bytes} bytes per element"
        lines.append(_row(f"STREAM {kernel}", format_si(r.bytes_per_s, "B/s"), _spread(r), detail))
    notes = [f"  {d:<10} {r.note}" for d, r in data.peaks.items() if r.note]
    if notes:
        lines += ["", "notes:", *notes]
    left_out = data.left_out or {}  # absent in files from before it was recorded
    if left_out:
        lines += ["", "left out of the defaults (measure one with --dtype):"]
        lines += [f"  {d:<10} {why}" for d, why in left_out.items()]
    if nominal:
        lines += ["", "nominal peaks (the hardware's figures):", *nominal]
    lines += ["", "ridge (triad memory roof meets the compute roof):"]
    for dtype, ridge in data.ridge.items():
        lines.append(f"  {dtype:<10} {_unknown(ridge, lambda v: f'{v:.3g} FLOP/byte')}")
    if data.points:
        lines += ["", *_points_table(data.points)]
    if data.warnings:
        lines += ["", "warnings:", *(f"  - {w}" for w in data.warnings)]
    return "\n".join(lines)


def _points_table(points: Sequence[PlacedPointRecord]) -> list[str]:
    width = max(len("kernel"), *(len(p.label) for p in points))
    head = (
        f"{'kernel':<{width}}  {'dtype':<9}{'FLOP/byte':>11}{'achieved':>16}"
        f"{'attainable':>16}{'share':>9}  source"
    )
    rows = [head]
    for p in points:
        share = _unknown(p.share, lambda v: f"{v:.0%}")
        bound = _unknown(p.attainable_flops_per_s, lambda v: format_si(v, "FLOP/s"))
        rows.append(
            f"{p.label:<{width}}  {p.dtype:<9}{p.intensity:>11.3g}"
            f"{format_si(p.flops_per_s, 'FLOP/s'):>16}{bound:>16}{share:>9}  {p.source}"
        )
    return rows


def _nominal_line(nominal: NominalPeak) -> str:
    """A nominal peak: its figure and derivation, or why it is not known."""
    if nominal.flops_per_s is None:
        return f"  {nominal.dtype:<10} unknown: {nominal.note}"
    line = f"  {nominal.dtype:<10} {format_si(nominal.flops_per_s, 'FLOP/s')}"
    line += f" = {nominal.derivation}" if nominal.derivation else ""
    return line + (f" ({nominal.note})" if nominal.note else "")


def _spread(record: BandwidthRecord) -> float:
    """A bandwidth's spread: recomputed from its repeats where it was written as the range
    (no ``spread_statistic``: a file from before :mod:`aihpc.base.spread`)."""
    if record.spread_statistic == STATISTIC or not record.repeats:
        return record.spread
    return spread_of(record.repeats)


def _row(name: str, rate: str, spread: float, detail: str) -> str:
    return f"{name:<22}{rate:>16}{spread:>9.1%}  {detail}"


def _unknown(value: float | None, text: Callable[[float], str]) -> str:
    """``text(value)``, or "unknown" where nothing was measured (None): never a made-up number."""
    return "unknown" if value is None else text(value)
