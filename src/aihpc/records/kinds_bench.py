"""The ``data`` of ``aihpc bench operators`` (Deep500 Level 0) and ``aihpc bench network``
(Level 1) result files, field by field (:mod:`aihpc.bench.operators` and
:mod:`aihpc.bench.model` say what each figure means).

The roofline both are placed under is a :class:`RooflineRecord`, as ``aihpc roofline`` writes
it too (:mod:`aihpc.records.kinds_measure`).
"""

from __future__ import annotations

import msgspec

from aihpc.records.codec import Record


class RooflineRecord(Record, frozen=True):
    """The roofs of one device (:class:`aihpc.roofline.model.Roofline`): the measured peak
    FLOP/s of each dtype and the triad bandwidth in bytes/s (None: not measured)."""

    device: str
    peaks: dict[str, float]
    bandwidth: float | None


# ------------------------------------------------------------------ Level 0: operators
class OperatorValidationRecord(Record, frozen=True):
    """An operator's validation in one dtype: errors against float64 (None: not finite), the
    float64 check of the case, the tolerance (:mod:`aihpc.bench.operators` says how each is
    measured)."""

    status: str
    reason: str | None
    l2: float | None
    max_abs: float | None
    grad_l2: float | None
    grad_max_abs: float | None
    gradcheck: bool
    float64_l2: float | None
    float64_grad_l2: float | None
    tolerance: float

    @property
    def passed(self) -> bool:
        return self.status == "passed"


class PassRecord(Record, frozen=True):
    """One timed pass of an operator (:mod:`aihpc.bench.op_passes`): median seconds per call,
    their spread, the counted operations and bytes, and the rates."""

    seconds: float
    spread: float | None
    warning: str | None
    calls: int
    ops: int
    bytes: int
    flops_per_s: float
    bytes_per_s: float
    intensity: float
    roofline_share: float | None


class OperatorRowRecord(Record, frozen=True):
    """One (operator, dtype): its validation and, if it passed, its two timed passes; ``uncounted``
    the ops the counter does not know, with their calls."""

    name: str
    family: str
    note: str
    shape: dict[str, int]
    dtype: str
    validation: OperatorValidationRecord
    forward: PassRecord | None
    forward_backward: PassRecord | None
    uncounted: dict[str, int]


class OperatorPointRecord(Record, frozen=True):
    """A timed pass as a roofline point (``pass``: "fwd" or "fwd+bwd")."""

    label: str
    name: str
    pass_: str = msgspec.field(name="pass")
    dtype: str
    intensity: float
    flops_per_s: float


class GradcheckRecord(Record, frozen=True):
    """``torch.autograd.gradcheck``'s settings the float64 check ran with."""

    eps: float
    atol: float
    rtol: float


class BenchOperatorsData(Record, frozen=True):
    """``aihpc bench operators``: every (operator, dtype) validated and timed, on the roofline
    used; ``seconds`` the whole command's, ``sweep_seconds`` the sweep's."""

    device: str
    dtypes: tuple[str, ...]
    quick: bool
    scale: int
    roofline: RooflineRecord | None
    tolerances: dict[str, float]
    float64_tolerance: float
    gradcheck: GradcheckRecord
    rows: tuple[OperatorRowRecord, ...]
    points: tuple[OperatorPointRecord, ...]
    seconds: float
    sweep_seconds: float
    failed: tuple[str, ...]


# ------------------------------------------------------------------ Level 1: a network
class PhaseRecord(Record, frozen=True):
    """A row's work in one phase, per step: operations, seconds (and their share of the step),
    rate, bytes, intensity and share of the roof (None where unknown)."""

    ops: int
    seconds: float
    share: float
    flops_per_s: float | None
    bytes: int
    intensity: float | None
    roofline_share: float | None


class LayerRecord(PhaseRecord, frozen=True):
    """A reported module's own work, both phases together; in training, each phase apart too
    (absent in inference)."""

    name: str
    type: str
    forward: PhaseRecord | None = None
    backward: PhaseRecord | None = None


class OperatorTypeRecord(Record, frozen=True):
    """The profiled time of one operator type per step, beside its counted operations."""

    type: str
    seconds: float
    ops: int
    flops_per_s: float | None


class ModeRecord(Record, frozen=True):
    """One mode (inference or training): the whole step measured, its profiled layers and
    operator types (slowest first, "other" last)."""

    seconds: float
    spread: float
    warning: str | None
    profiled_seconds: float
    profiled_steps: int
    ops: int
    flops_per_s: float
    peak_share: float | None
    other_seconds: float
    layers: tuple[LayerRecord, ...]
    operators: tuple[OperatorTypeRecord, ...]


class NetworkPointRecord(Record, frozen=True):
    """A profiled layer as a roofline point (``label``: "MODE:LAYER")."""

    label: str
    dtype: str
    intensity: float
    flops_per_s: float


class BenchNetworkData(Record, frozen=True):
    """``aihpc bench network``: a zoo model (``model``) or a spec file (``spec``) timed layer by
    layer in each mode asked, on the roofline used."""

    model: str | None
    spec: str | None
    device: str
    dtype: str
    batch: int
    input_shape: tuple[int, ...]
    depth: int | None
    threads: int
    roofline: RooflineRecord
    modes: dict[str, ModeRecord]
    points: tuple[NetworkPointRecord, ...]
