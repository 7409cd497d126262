"""Level 0 of Deep500: single operators, validated, then timed and placed on the roofline.

For each operator of :mod:`aihpc.bench.op_catalogue` and each dtype asked
(float32, bfloat16, float16, those the device runs) one row is produced:

1. **Validation**.  An operator that is wrong is reported ``"failed"`` with
   the reason and is *not* timed (Deep500's rule).

   * Once per operator, in float64 at the tiny ``check`` shape: the candidate
     against its independent reference (relative L2 of every output and every
     gradient within :data:`~aihpc.bench.op_check.FLOAT64_TOLERANCE`),
     and ``torch.autograd.gradcheck`` of the candidate (its analytic
     backward against central finite differences, settings
     :data:`~aihpc.bench.op_check.GRADCHECK`) with respect to every
     floating input and every parameter
     (:func:`~aihpc.bench.op_check.check_case`).
   * Per dtype, at the timed shape: the candidate at the dtype against the
     reference in float64 on the *same* values (inputs and parameters cast
     up, so only the dtype's arithmetic differs): ``l2`` = ||y - y64|| /
     ||y64|| and ``max_abs`` = max |y - y64| of the outputs, and
     ``grad_l2``/``grad_max_abs`` of the gradients of every differentiated
     input and parameter for one random output gradient.  Over several
     tensors each figure is the worst tensor's.  ``l2`` and ``grad_l2`` must
     be within :data:`TOLERANCES` of the dtype.

2. **Counting**: operations from :func:`aihpc.count_ops` with ``train=True``
   and ``loss="sum"`` on the operator wrapped so that its floating inputs are
   differentiated too (``count_ops`` itself treats inputs as data).  The sum
   loss's own operations -- forward n - 1 adds, backward an ``expand`` (0) --
   are read from ``by_module["(loss)"]`` and subtracted, so the counts are
   the operator's alone.  Ops the counter does not know are listed in the
   row's ``uncounted`` (its FLOP/s are then a lower bound), never dropped.

3. **Timing** through :func:`aihpc.bench.timing.measure`
   (``torch.utils.benchmark``: warm-up apart, synchronised, repeated until
   the median is stable, spread and warning reported).  ``forward``: the
   module (training mode) under ``torch.no_grad``.  ``forward_backward``:
   the forward with autograd, then ``torch.autograd.grad`` of the first
   output for a fixed output gradient with respect to every differentiated
   tensor (gradients returned, not accumulated into ``.grad``: no extra add).

4. **Bytes**, the compulsory traffic: forward = every input, parameter and
   output tensor once; forward+backward = that plus the output gradient read
   and one gradient written per differentiated input and parameter.
   Re-reading saved tensors in backward, and buffers (batch norm's running
   statistics), are not counted, so this is a lower bound and the intensity
   an upper bound -- except where autograd hands the output gradient through
   unchanged (``add``'s backward writes nothing new: its forward+backward
   bytes overstate its traffic).  ``intensity`` = ops / bytes (ops/byte);
   ``flops_per_s`` = ops / median seconds; ``roofline_share`` = flops_per_s
   / ``Roofline.attainable(intensity, dtype)`` (None when the dtype has no
   measured roof: "unknown").  The memory roof is STREAM triad from DRAM, so
   an operator whose tensors stay in cache (quick shapes, small element-wise
   ops) can show a share above 100 %: read it as "cache-resident".

Result format (``data`` of a ``"bench-operators"`` result document, the record
:class:`aihpc.records.kinds_bench.BenchOperatorsData`)::

    {"device": "cpu", "dtypes": ["float32", ...], "quick": bool, "scale": int,
     "roofline": RooflineRecord | None,
     "tolerances": {dtype: relative L2}, "float64_tolerance": float,
     "gradcheck": {"eps", "atol", "rtol"},
     "rows": [{"name", "family", "note", "shape": {size: int}, "dtype",
               "validation": {"status": "passed" | "failed", "reason",
                              "l2", "max_abs", "grad_l2", "grad_max_abs",
                              "gradcheck": bool, "float64_l2",
                              "float64_grad_l2", "tolerance"},
               "forward": PASS | None, "forward_backward": PASS | None,
               "uncounted": {op: calls}}, ...],
     "points": [{"label", "name", "pass", "dtype", "intensity", "flops_per_s"}],
     "seconds": wall seconds of the whole command, roofline measurement included,
     "sweep_seconds": wall seconds of the sweep,
     "failed": [operator names]}

    PASS = {"seconds" (median per call), "spread" (IQR / median), "warning",
            "calls", "ops", "bytes", "flops_per_s", "bytes_per_s",
            "intensity", "roofline_share"}

Errors that are not finite are written as null (JSON has no inf), with the
reason saying so.  Failed rows have ``forward`` and ``forward_backward`` null.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import msgspec
import torch
from torch import Tensor, nn

from aihpc.base.errors import ConfigError, OutOfMemory
from aihpc.bench.op_catalogue import OpCase
from aihpc.bench.op_check import (
    FLOAT64_TOLERANCE,
    GRADCHECK,
    CaseCheck,
    build_case,
    call_module,
    check_case,
    errors,
    evaluate,
)
from aihpc.bench.op_passes import (
    FULL_TIMING,
    QUICK_TIMING,
    TimingPlan,
    count_case,
    finite_or_none,
    pass_result,
    time_passes,
    traffic,
)
from aihpc.records.kinds_bench import (
    BenchOperatorsData,
    GradcheckRecord,
    OperatorPointRecord,
    OperatorRowRecord,
    OperatorValidationRecord,
)
from aihpc.roofline.model import Roofline

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
"""The dtypes Level 0 runs, by name."""

TOLERANCES: dict[str, float] = {
    # Relative L2 error against float64 on the same values, outputs and each
    # gradient.  Unit roundoff u: float32 2**-24 = 6e-8, bfloat16 2**-8 =
    # 3.9e-3, float16 2**-11 = 4.9e-4; rounding a result alone costs about
    # u / sqrt(3) in L2, and sums accumulated in the dtype add more.  Measured
    # worst over the catalogue, quick and full shapes (CPU, torch 2.13,
    # oneDNN): float32 1.6e-6 (conv weight gradients), bfloat16 5.4e-3 and
    # float16 6.9e-4 (the LSTM cell's backward).  The limits leave 4-60x
    # margin; float32 and float16 still fail an operator 1% wrong, bfloat16
    # cannot tell 1% from its rounding, so a wrong operator is caught there by
    # the float64 check of the case (FLOAT64_TOLERANCE), which every row carries.
    "float32": 1e-4,
    "bfloat16": 2e-2,
    "float16": 4e-3,
}


@dataclass(frozen=True)
class OperatorsResult:
    """A Level 0 sweep: every row, the roofline used and the wall time (s)."""

    device: str
    dtypes: tuple[str, ...]
    roofline: Roofline | None
    rows: tuple[OperatorRowRecord, ...]
    seconds: float
    quick: bool = False
    scale: int = 1

    @property
    def failed(self) -> list[str]:
        """Names of the operators with at least one failed row, in catalogue order."""
        return list(dict.fromkeys(r.name for r in self.rows if not r.validation.passed))

    def to_record(self, seconds: float) -> BenchOperatorsData:
        """The result's data; ``seconds``: the whole command's (the roofline measured included),
        the sweep's being ``sweep_seconds``."""
        return BenchOperatorsData(
            device=self.device,
            dtypes=tuple(self.dtypes),
            quick=self.quick,
            scale=self.scale,
            roofline=self.roofline.to_record() if self.roofline else None,
            tolerances=dict(TOLERANCES),
            float64_tolerance=FLOAT64_TOLERANCE,
            gradcheck=GradcheckRecord(**GRADCHECK),
            rows=self.rows,
            points=tuple(p for r in self.rows for p in row_points(r)),
            seconds=seconds,
            sweep_seconds=self.seconds,
            failed=tuple(self.failed),
        )


def row_points(row: OperatorRowRecord) -> list[OperatorPointRecord]:
    """The roofline points of a row's timed passes (for ``aihpc roofline --points``)."""
    return [
        OperatorPointRecord(
            label=f"{row.name} {label}",
            name=row.name,
            pass_=label,
            dtype=row.dtype,
            intensity=result.intensity,
            flops_per_s=result.flops_per_s,
        )
        for label, result in (("fwd", row.forward), ("fwd+bwd", row.forward_backward))
        if result is not None
    ]


# ------------------------------------------------------------ device, dtypes
def dtype_supported(name: str, device: str) -> bool:
    """Whether ``device`` runs a tiny matmul and element-wise op in dtype ``name``."""
    dev = torch.device(device)
    if dev.type == "cuda" and name == "bfloat16" and not torch.cuda.is_bf16_supported():
        return False
    try:
        a = torch.ones(4, 4, dtype=DTYPES[name], device=dev)
        float((torch.relu(a @ a) + a).sum())
    except (RuntimeError, TypeError, NotImplementedError):
        return False
    return True


def resolve_dtypes(requested: Iterable[str] | None, device: str) -> tuple[str, ...]:
    """The dtypes asked (comma-separated items allowed), each checked; None: all the device runs."""
    if requested is None:
        return tuple(name for name in DTYPES if dtype_supported(name, device))
    names: list[str] = []
    for item in requested:
        for name in (part.strip() for part in item.split(",")):
            if name not in DTYPES:
                raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, got {name!r}")
            if not dtype_supported(name, device):
                raise ConfigError(f"dtype {name} is not supported on {device}")
            if name not in names:
                names.append(name)
    if not names:
        raise ConfigError("--dtype must name at least one dtype, got none")
    return tuple(names)


def validate(
    case: OpCase, module: nn.Module, inputs: Sequence[Tensor], dtype: str, check: CaseCheck
) -> tuple[OperatorValidationRecord, tuple[Tensor, ...]]:
    """The row's validation and the candidate's outputs (at the dtype)."""
    outputs, grads, grad_output = evaluate(call_module, module, inputs, None)
    module64 = copy.deepcopy(module).to(torch.float64)
    inputs64 = tuple(x.detach().to(torch.float64) if x.is_floating_point() else x for x in inputs)
    refs, ref_grads, _ = evaluate(case.reference, module64, inputs64, grad_output.to(torch.float64))
    l2, max_abs = errors(outputs, refs)
    grad_l2, grad_max_abs = errors(grads, ref_grads)
    tolerance = TOLERANCES[dtype]
    problems = check.problems()
    if not l2 <= tolerance:
        problems.append(f"{dtype} output L2 error {l2:.1e} > {tolerance:.0e}")
    if not grad_l2 <= tolerance:
        problems.append(f"{dtype} gradient L2 error {grad_l2:.1e} > {tolerance:.0e}")
    validation = OperatorValidationRecord(
        status="failed" if problems else "passed",
        reason="; ".join(problems) or None,
        l2=finite_or_none(l2),
        max_abs=finite_or_none(max_abs),
        grad_l2=finite_or_none(grad_l2),
        grad_max_abs=finite_or_none(grad_max_abs),
        gradcheck=check.gradcheck,
        float64_l2=finite_or_none(check.l2),
        float64_grad_l2=finite_or_none(check.grad_l2),
        tolerance=tolerance,
    )
    return validation, outputs


# ------------------------------------------------------------------- rows
_MEMORY_WORDS = (
    "out of memory",
    "can't allocate memory",
    "cannot allocate memory",
    "not enough memory",
)


def _is_memory_error(exc: BaseException) -> bool:
    return isinstance(exc, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(exc, RuntimeError) and any(w in str(exc).lower() for w in _MEMORY_WORDS)
    )


def _first_line(exc: BaseException, limit: int = 200) -> str:
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return text if len(text) <= limit else text[:limit] + "..."


@contextlib.contextmanager
def memory_guard(case: OpCase, shape: dict[str, int], dtype: str, device: str) -> Iterator[None]:
    """Turn an allocation failure inside the block into one OutOfMemory line naming the shape."""
    try:
        yield
    except (MemoryError, RuntimeError) as exc:
        if not _is_memory_error(exc):
            raise
        sizes = " ".join(f"{k}={v}" for k, v in shape.items())
        raise OutOfMemory(
            f"operator {case.name} at {sizes} in {dtype} does not fit in the memory of "
            f"{device}: {_first_line(exc)}"
        ) from None


Counts = tuple[int, int, dict[str, int]]


def run_row(
    case: OpCase,
    dtype: str,
    device: torch.device,
    shape: dict[str, int],
    check: CaseCheck,
    roofline: Roofline | None,
    plan: TimingPlan,
    counts: dict[str, Counts] | None = None,
) -> OperatorRowRecord:
    """Build, validate and, if the operator is right, count and time one (operator, dtype).

    ``counts`` caches :func:`count_case` by operator name (counts do not depend on the dtype).
    """
    module, inputs = build_case(case, shape, DTYPES[dtype], device)
    try:
        validation, outputs = validate(case, module, inputs, dtype, check)
    except (RuntimeError, NotImplementedError) as exc:  # an operator that cannot run is wrong too
        if _is_memory_error(exc):
            raise
        validation, outputs = _raised_validation(dtype, check, exc), ()
    row = OperatorRowRecord(
        name=case.name,
        family=case.family,
        note=case.note,
        shape=dict(shape),
        dtype=dtype,
        validation=validation,
        forward=None,
        forward_backward=None,
        uncounted={},
    )
    if not validation.passed:
        return row
    counts = {} if counts is None else counts
    if case.name not in counts:
        counts[case.name] = count_case(module, inputs)
    ops_forward, ops_total, uncounted = counts[case.name]
    bytes_forward, bytes_total = traffic(module, inputs, outputs)
    t_forward, t_total = time_passes(module, inputs, plan, f"{case.name} {dtype}")
    return msgspec.structs.replace(
        row,
        forward=pass_result(ops_forward, bytes_forward, t_forward, roofline, dtype),
        forward_backward=pass_result(ops_total, bytes_total, t_total, roofline, dtype),
        uncounted=uncounted,
    )


def _raised_validation(
    dtype: str, check: CaseCheck, exc: BaseException
) -> OperatorValidationRecord:
    reason = "; ".join(
        [*check.problems(), f"the operator raised {type(exc).__name__}: {_first_line(exc)}"]
    )
    return OperatorValidationRecord(
        status="failed",
        reason=reason,
        l2=None,
        max_abs=None,
        grad_l2=None,
        grad_max_abs=None,
        gradcheck=check.gradcheck,
        float64_l2=finite_or_none(check.l2),
        float64_grad_l2=finite_or_none(check.grad_l2),
        tolerance=TOLERANCES[dtype],
    )


def describe(row: OperatorRowRecord) -> str:
    """One progress line for a finished row."""
    head = f"{row.name} {row.dtype}"
    if row.forward is None or row.forward_backward is None:
        return f"{head}: FAILED ({row.validation.reason})"
    return (
        f"{head}: passed, fwd {row.forward.seconds * 1e3:.3g} ms, "
        f"fwd+bwd {row.forward_backward.seconds * 1e3:.3g} ms"
    )


@contextlib.contextmanager
def ieee_float32() -> Iterator[None]:
    """float32 means IEEE float32 inside the block, as the roofline's float32 peak does.

    PyTorch lets cuDNN convolutions use TF32 by default (10-bit mantissa,
    ~1e-3 relative error, ten times the float32 tolerance), so TF32 is turned
    off for cuDNN and cuBLAS, and both settings are restored after.
    """
    precision, cudnn = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(precision)
        torch.backends.cudnn.allow_tf32 = cudnn


def run_operators(
    cases: Sequence[OpCase],
    dtypes: Sequence[str],
    device: str,
    roofline: Roofline | None,
    *,
    quick: bool = False,
    scale: int = 1,
    progress: Callable[[str], None] | None = None,
) -> OperatorsResult:
    """Validate, count and time every case in every dtype on ``device`` (rows case-major),
    float32 as IEEE float32 (:func:`ieee_float32`).

    ``dtypes`` are names of :data:`DTYPES` (check them with :func:`resolve_dtypes`);
    ``roofline`` None leaves every share unknown.  ``progress`` receives one
    line per row.  An allocation failure raises OutOfMemory (one line).
    """
    dev = torch.device(device)
    plan = QUICK_TIMING if quick else FULL_TIMING
    start = time.perf_counter()
    rows: list[OperatorRowRecord] = []
    counts: dict[str, Counts] = {}
    with ieee_float32():
        for case in cases:
            shape = case.shape(quick, scale)
            with memory_guard(case, dict(case.check), "float64", device):
                check = check_case(case, dev)
            for dtype in dtypes:
                with memory_guard(case, shape, dtype, device):
                    rows.append(run_row(case, dtype, dev, shape, check, roofline, plan, counts))
                if progress is not None:
                    progress(f"[{len(rows)}/{len(cases) * len(dtypes)}] {describe(rows[-1])}")
    return OperatorsResult(
        device=str(device),
        dtypes=tuple(dtypes),
        roofline=roofline,
        rows=tuple(rows),
        seconds=time.perf_counter() - start,
        quick=quick,
        scale=scale,
    )
