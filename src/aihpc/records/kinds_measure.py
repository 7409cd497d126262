"""The ``data`` of ``aihpc roofline`` and ``aihpc profile`` result files, field by field
(:mod:`aihpc.roofline.machine` and :mod:`aihpc.profile` say what each figure means)."""

from __future__ import annotations

from aihpc.records.codec import Record
from aihpc.records.kinds_bench import RooflineRecord
from aihpc.records.peak import NominalPeakRecord, PeakRecord


# ------------------------------------------------------------------ aihpc roofline
class BandwidthRecord(Record, frozen=True):
    """One measured STREAM kernel (:func:`aihpc.roofline.bandwidth.measure_bandwidth` says what
    each figure is); a file from before :mod:`aihpc.base.spread` has no ``spread_statistic`` (its
    spread is the range)."""

    device: str
    kernel: str
    elements: int
    bytes_per_call: int
    bytes_per_s: float
    min_bytes_per_s: float
    max_bytes_per_s: float
    spread: float
    repeats: tuple[float, ...]
    calls_per_repeat: int
    threads: int
    cache_bytes: int | None
    warning: str | None
    spread_statistic: str | None = None


class PlacedPointRecord(Record, frozen=True):
    """A kernel of a bench file placed under the roofs: its rate, the rate the roofs allow at its
    intensity and the share of it achieved (None where its dtype has no roof); ``source`` the
    kind of file it came from."""

    label: str
    dtype: str
    intensity: float
    flops_per_s: float
    source: str | None
    attainable_flops_per_s: float | None
    share: float | None


class RooflineData(Record, frozen=True):
    """``aihpc roofline``: each dtype's peak, the STREAM bandwidths, the roofline they make, its
    ridge points, the kernels placed under it and the measurements' warnings; ``left_out`` the
    dtypes the defaults left out and why (absent in files from before it was recorded)."""

    device: str
    seconds: float
    peaks: dict[str, PeakRecord]
    bandwidth: dict[str, BandwidthRecord]
    roofline: RooflineRecord
    ridge: dict[str, float | None]
    points: tuple[PlacedPointRecord, ...]
    warnings: tuple[str, ...]
    left_out: dict[str, str] | None = None


# ------------------------------------------------------------------ aihpc profile
class PhaseTimeRecord(Record, frozen=True):
    """A phase's mean seconds per step and its share of the mean step."""

    seconds: float
    share: float


class OperatorTimeRecord(Record, frozen=True):
    """An op type's self time per step, its share of the mean step and its calls per step."""

    type: str
    seconds: float
    share: float
    calls: float


class StepOpsRecord(Record, frozen=True):
    """The counted operations of one step (forward and loss, backward) and the ops not counted."""

    forward: int
    backward: int
    total: int
    conv_linear_macs: int
    uncounted: dict[str, int]


class StepPeakRecord(Record, frozen=True):
    """The float32 peak the step's rate is set against (its fastest kernel) and the nominal one,
    with the step's share of each (None where the nominal is unknown)."""

    flops_per_s: float
    kernel: str
    share: float
    nominal: NominalPeakRecord | None
    nominal_share: float | None


class MemoryRecord(Record, frozen=True):
    """Memory at the peak of a step, in bytes, by what holds it, and how the peak was measured."""

    peak_bytes: int
    parameters: int
    gradients: int
    optimizer_state: int
    activations: int
    other: int
    method: str


class SweepRowRecord(Record, frozen=True):
    """One value of a sweep: median seconds per step and peak bytes."""

    value: int
    step_seconds: float
    peak_bytes: int


class SweepRecord(Record, frozen=True):
    """A sweep over ``dimension`` (batch, resolution or seq-len), rows in the order of the
    values."""

    dimension: str
    values: tuple[int, ...]
    rows: tuple[SweepRowRecord, ...]


class ProfileData(Record, frozen=True):
    """``aihpc profile``: where one training step's time and memory go."""

    model: str
    input_kind: str
    input_shape: tuple[int, ...]
    batch: int
    device: str
    optimizer: str
    steps: int
    phases: dict[str, PhaseTimeRecord]
    step_seconds: float
    step_seconds_each: tuple[float, ...]
    step_spread: float
    operators: tuple[OperatorTimeRecord, ...]
    ops: StepOpsRecord
    flops_per_s: float
    peak: StepPeakRecord | None
    memory: MemoryRecord
    sweep: SweepRecord | None
