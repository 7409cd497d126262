"""Measured matrix-multiply peak of this machine, per dtype.

:func:`measure_peak` times square ``n x n @ n x n`` matmuls on one device and
reports the achieved FLOP/s, counting ``2 * n**3`` floating-point operations
per matmul (:func:`matmul_flops`: ``n**3`` multiplies and ``n**3`` adds, the
usual convention).  The procedure:

1. allocate ``a``, ``b`` and an output buffer (random normal values);
2. warm up for ``warmup`` seconds (at least one matmul, untimed), synchronising
   the device after each matmul; the last warm-up matmul's duration sets how
   many matmuls one timed repeat holds (about ``seconds / repeats`` each);
3. time ``repeats`` repeats, each bracketed by a device synchronisation
   (``torch.cuda.synchronize`` on CUDA) so queued kernels are inside the
   measured interval;
4. report the median FLOP/s, the min/max, and the relative spread
   ``(max - min) / median``; a spread above :data:`RANGE_SPREAD_WARNING` (10 %) sets
   :attr:`PeakResult.warning`, because the peak is then unreliable (busy
   machine, throttling, turbo changes).

The float32 matmul precision is set for the measurement and restored after:
"float32" means IEEE float32 (``torch.set_float32_matmul_precision("highest")``),
"tf32" (CUDA only) means float32 tensors on TF32 tensor cores ("high").  This
touches process-global torch state while it runs, so do not run other torch
work concurrently in the same process.

Default sizes: 1024 on CPU (a default CPU measurement takes about 1.3 s),
8192 on CUDA.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from aihpc.devices import resolve_device
from aihpc.errors import ConfigError, OutOfMemory
from aihpc.records.peak import PeakResult

RANGE_SPREAD_WARNING = 0.10
"""Relative range ``(max - min) / median`` of repeated measurements above which a result
carries a warning (a peak, a bandwidth, profile's step times)."""

DEFAULT_SIZE: dict[str, int] = {"cpu": 1024, "cuda": 8192}
"""Default matrix side ``n`` per device type."""

# dtype name -> (torch dtype, float32 matmul precision or None)
_DTYPES: dict[str, tuple[torch.dtype, str | None]] = {
    "float64": (torch.float64, None),
    "float32": (torch.float32, "highest"),
    "tf32": (torch.float32, "high"),
    "bfloat16": (torch.bfloat16, None),
    "float16": (torch.float16, None),
}
_DEVICE_DTYPES: dict[str, tuple[str, ...]] = {
    "cpu": ("float64", "float32", "bfloat16", "float16"),
    "cuda": ("float64", "float32", "tf32", "bfloat16", "float16"),
}
_NOTES: dict[str, str] = {
    "float32": "IEEE float32 matmuls (TF32 off)",
    "tf32": "float32 tensors on TF32 tensor cores (10-bit mantissa), "
    "torch.set_float32_matmul_precision('high')",
}

# The clock used for every timed interval; a module attribute so tests can
# substitute a deterministic one.
_clock: Callable[[], float] = time.perf_counter


def matmul_flops(n: int) -> int:
    """Floating-point operations of one ``n x n @ n x n`` matmul: ``2 * n**3``.

    Each of the ``n**2`` outputs takes ``n`` multiplies and ``n`` adds
    (accumulating into zero), the convention used for peak FLOP/s figures.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"matrix size must be an integer >= 1, got {n!r}")
    return 2 * n**3


def summarise(
    rates: Sequence[float], unit: str = "FLOP/s", subject: str = "peak"
) -> tuple[float, float, float, float, str | None]:
    """``(median, min, max, spread, warning)`` of per-repeat ``rates``.

    ``spread = (max - min) / median``; ``warning`` is None unless the spread
    exceeds :data:`RANGE_SPREAD_WARNING`.  ``unit`` (e.g. "FLOP/s", "bytes/s") and
    ``subject`` (e.g. "peak", "bandwidth") only word the warning.
    """
    if not rates:
        raise ConfigError("need at least one repeat to summarise, got 0")
    median = float(statistics.median(rates))
    lo, hi = float(min(rates)), float(max(rates))
    spread = (hi - lo) / median if median > 0 else math.inf
    warning = None
    if spread > RANGE_SPREAD_WARNING:
        warning = (
            f"{unit} of the {len(rates)} repeats spread over {spread:.0%} of the median "
            f"(> {RANGE_SPREAD_WARNING:.0%}): the machine was busy or its clocks changed; "
            f"treat this {subject} as unreliable"
        )
    return median, lo, hi, spread, warning


def measure_peak(
    device: str | torch.device = "cpu",
    dtype: torch.dtype | str = torch.float32,
    size: int | None = None,
    seconds: float = 1.0,
    warmup: float | None = None,
    repeats: int = 5,
) -> PeakResult:
    """Measure the achieved square-matmul FLOP/s of ``device`` in ``dtype``.

    ``dtype`` is a torch dtype or one of "float64", "float32", "tf32" (CUDA
    only), "bfloat16", "float16".  ``size`` is the matrix side (default
    :data:`DEFAULT_SIZE` for the device type).  ``seconds`` is the total timed
    time spread over ``repeats`` repeats; ``warmup`` is the untimed warm-up in
    seconds (default ``seconds / 4``; at least one matmul always runs).
    Raises :class:`ConfigError` for an unknown or unavailable device or dtype
    or bad numbers.
    """
    dev = resolve_device(device)
    name = _dtype_name(dtype, dev)
    n = DEFAULT_SIZE[dev.type] if size is None else size
    flops = matmul_flops(n)
    warmup = _check_timing(seconds, warmup, repeats)
    torch_dtype, precision = _DTYPES[name]
    a, b, out = _allocate(n, torch_dtype, dev)
    with _matmul_precision(precision):
        rates, iters = _time_matmuls(a, b, out, dev, seconds, warmup, repeats)
    rates = [iters * flops / max(elapsed, 1e-12) for elapsed in rates]
    median, lo, hi, spread, warning = summarise(rates)
    return PeakResult(
        device=str(dev),
        dtype=name,
        size=n,
        flops_per_s=median,
        min_flops_per_s=lo,
        max_flops_per_s=hi,
        spread=spread,
        repeats=tuple(rates),
        matmuls_per_repeat=iters,
        flops_per_matmul=flops,
        threads=int(torch.get_num_threads()),
        note=_NOTES.get(name) if dev.type == "cuda" else None,
        warning=warning,
    )


def _check_timing(seconds: float, warmup: float | None, repeats: int) -> float:
    """The warm-up seconds (default ``seconds / 4``), after checking the three numbers."""
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ConfigError(f"repeats must be an integer >= 1, got {repeats!r}")
    if not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0):
        raise ConfigError(f"seconds must be a finite number > 0, got {seconds!r}")
    warmup = seconds / 4 if warmup is None else warmup
    if not (isinstance(warmup, (int, float)) and math.isfinite(warmup) and warmup >= 0):
        raise ConfigError(f"warmup must be a finite number >= 0, got {warmup!r}")
    return warmup


def _time_matmuls(
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor,
    dev: torch.device,
    seconds: float,
    warmup: float,
    repeats: int,
) -> tuple[list[float], int]:
    """Seconds of each of ``repeats`` timed repeats, and the matmuls each held.

    The warm-up runs matmuls until ``warmup`` seconds have passed (at least
    one); the last one's duration sets the matmuls per repeat.
    """

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    sync()
    start = last = _clock()
    while True:
        torch.matmul(a, b, out=out)
        sync()
        now = _clock()
        per_matmul, last = now - last, now
        if now - start >= warmup:
            break
    iters = max(1, round(seconds / repeats / per_matmul)) if per_matmul > 0 else 1
    elapsed = []
    for _ in range(repeats):
        sync()
        t0 = _clock()
        for _ in range(iters):
            torch.matmul(a, b, out=out)
        sync()
        elapsed.append(_clock() - t0)
    return elapsed, iters


def default_dtypes(device: str | torch.device = "cpu") -> tuple[str, ...]:
    """Dtypes :func:`measure_peaks` measures by default on ``device``.

    CPU: float32 only (bfloat16/float16 only when asked).  CUDA: float32,
    tf32, bfloat16 (when the GPU supports it) and float16.
    """
    dev = resolve_device(device)
    if dev.type == "cpu":
        return ("float32",)
    names = ["float32", "tf32"]
    if torch.cuda.is_bf16_supported():
        names.append("bfloat16")
    names.append("float16")
    return tuple(names)


def measure_peaks(
    device: str | torch.device = "cpu",
    dtypes: Sequence[torch.dtype | str] | None = None,
    **kwargs: Any,
) -> dict[str, PeakResult]:
    """Measure :func:`measure_peak` for several dtypes; ``{dtype name: result}``.

    ``dtypes`` defaults to :func:`default_dtypes`; ``kwargs`` (size, seconds,
    warmup, repeats) apply to every dtype.  All dtypes are validated before
    any measurement starts.
    """
    names = default_dtypes(device) if dtypes is None else tuple(dtypes)
    if not names:
        raise ConfigError("dtypes must name at least one dtype, got none")
    dev = resolve_device(device)
    resolved = [_dtype_name(d, dev) for d in names]
    return {name: measure_peak(dev, name, **kwargs) for name in resolved}


def _dtype_name(dtype: torch.dtype | str, dev: torch.device) -> str:
    allowed = _DEVICE_DTYPES[dev.type]
    if isinstance(dtype, torch.dtype):
        name = str(dtype).removeprefix("torch.")
    elif isinstance(dtype, str):
        name = dtype.removeprefix("torch.")
    else:
        name = None
    if name not in allowed:
        raise ConfigError(f"dtype must be one of {list(allowed)} on {dev.type}, got {dtype!r}")
    if name == "bfloat16" and dev.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"dtype bfloat16 is not supported by GPU {dev}, got {dtype!r}")
    return name


def _allocate(
    n: int, dtype: torch.dtype, dev: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    try:
        a = torch.randn(n, n, dtype=dtype, device=dev)
        b = torch.randn(n, n, dtype=dtype, device=dev)
        out = torch.empty(n, n, dtype=dtype, device=dev)
    except (RuntimeError, MemoryError) as exc:  # torch.OutOfMemoryError is a RuntimeError
        need = 3 * n * n * torch.finfo(dtype).bits // 8
        raise OutOfMemory(
            f"size {n} needs about {need / 2**30:.1f} GiB on {dev}, which could not be "
            f"allocated ({type(exc).__name__})"
        ) from None
    return a, b, out


@contextlib.contextmanager
def _matmul_precision(precision: str | None) -> Iterator[None]:
    """Set ``torch.set_float32_matmul_precision`` inside the block, then restore it."""
    if precision is None:
        yield
        return
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)
