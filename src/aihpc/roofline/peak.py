"""The measured peak of this machine, per dtype: the best of the dense kernels it runs.

:func:`search_peak` is the peak every command uses (``aihpc run``'s measured
peak, ``aihpc roofline``, ``bench operators``, ``bench network``,
``profile``): it times each kernel of :func:`aihpc.roofline.kernels.candidate_kernels`
briefly (matmuls and convolutions of several shapes), then measures the
fastest one in full with :func:`measure_kernel`, and records which kernel won,
every candidate's rate, and the device's nominal peak
(:mod:`aihpc.roofline.nominal`) beside it.  :func:`measure_peak` measures one
square matmul alone.

The procedure of one measurement (:func:`measure_kernel`):

1. set the kernel up (inputs of random normal values);
2. warm up for ``warmup`` seconds (at least one call, untimed), synchronising
   the device after each call; the last warm-up call's duration sets how
   many calls one timed repeat holds (about ``seconds / repeats`` each);
3. time ``repeats`` repeats, each bracketed by a device synchronisation
   (``torch.cuda.synchronize`` on CUDA) so queued kernels are inside the
   measured interval; a repeat that runs :data:`REPEAT_OVERRUN` times its planned
   time (other work took the cores after the warm-up) ends early, timed over the
   calls it ran (:func:`time_calls`);
4. report the median FLOP/s, the min/max, and the spread of the repeats,
   :func:`aihpc.base.spread.spread` (IQR / median); a spread above
   :data:`aihpc.base.spread.SPREAD_WARNING` (10 %) sets
   :attr:`PeakResult.warning`, because the peak is then unreliable (busy
   machine, throttling, turbo changes).

The float32 matmul precision is set for the measurement and restored after:
"float32" means IEEE float32 (``torch.set_float32_matmul_precision("highest")``),
"tf32" (CUDA only) means float32 tensors on TF32 tensor cores ("high").  On a
GPU, cuDNN's autotuner is on while convolutions are timed, as the trainer runs
them.  This touches process-global torch state while it runs, so do not run
other torch work concurrently in the same process.

The work of a search is bounded, not only its timed seconds.  Each of its K candidates runs
one untimed call and a brief timing of ``seconds / K`` (at least one call); the fastest then
runs a warm-up of ``seconds / 4`` and five repeats (at least one call each).  So a search
takes about 2.25 x ``seconds`` plus a few calls of each kernel (at most
:data:`REPEAT_OVERRUN` times as long where other work slows the calls), and a call of every
candidate is milliseconds to tens of milliseconds on a core that computes the dtype.  On a
CPU that does not compute the dtype natively (:func:`aihpc.machine.processor.emulation`:
float16 without AVX512-FP16, AMX-FP16 or ARM's FP16 arithmetic; bfloat16 without
AVX512_BF16, AMX or ARM's BF16) a call is many times slower, and two calls of the largest
candidates would outlast any ``seconds``; there :func:`search_peak` measures only the
candidate of the fewest FLOP per call: 2.25 x ``seconds`` plus about nine of its calls.

Default matmul sizes: 1024 on CPU, 8192 on CUDA.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

import torch

from aihpc.base.checks import integer
from aihpc.base.errors import ConfigError, OutOfMemory
from aihpc.base.spread import spread as spread_of
from aihpc.base.spread import spread_warning
from aihpc.machine.devices import resolve_device
from aihpc.machine.processor import Processor, describe_processor, emulation
from aihpc.roofline import kernels
from aihpc.scoring.peak import KernelRate, NominalPeak, PeakResult

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

REPEAT_OVERRUN = 4.0
"""A timed repeat ends once it has run this many times its planned time (:func:`time_calls`)."""

# The clock used for every timed interval; a module attribute so tests can
# substitute a deterministic one.
_clock: Callable[[], float] = time.perf_counter


def matmul_flops(n: int) -> int:
    """Floating-point operations of one ``n x n @ n x n`` matmul: ``2 * n**3``.

    Each of the ``n**2`` outputs takes ``n`` multiplies and ``n`` adds
    (accumulating into zero), the convention used for peak FLOP/s figures.
    """
    integer("matrix size", n)
    return kernels.matmul_flops(n)


def summarise(
    rates: Sequence[float], unit: str = "FLOP/s", subject: str = "peak"
) -> tuple[float, float, float, float, str | None]:
    """``(median, min, max, spread, warning)`` of per-repeat ``rates``.

    ``spread`` is :func:`aihpc.base.spread.spread` (IQR / median); ``warning``
    is None unless it exceeds :data:`aihpc.base.spread.SPREAD_WARNING`.  ``unit``
    (e.g. "FLOP/s", "bytes/s") and ``subject`` (e.g. "peak", "bandwidth") only
    word the warning.
    """
    if not rates:
        raise ConfigError("need at least one repeat to summarise, got 0")
    median = float(statistics.median(rates))
    lo, hi = float(min(rates)), float(max(rates))
    value = spread_of(rates)
    warning = spread_warning(subject, f"{len(rates)} repeats' {unit}", value)
    return median, lo, hi, value, warning


def measure_peak(
    device: str | torch.device = "cpu",
    dtype: torch.dtype | str = torch.float32,
    size: int | None = None,
    seconds: float = 1.0,
    warmup: float | None = None,
    repeats: int = 5,
) -> PeakResult:
    """Measure the achieved square-matmul FLOP/s of ``device`` in ``dtype`` (one kernel alone).

    ``dtype`` is a torch dtype or one of "float64", "float32", "tf32" (CUDA
    only), "bfloat16", "float16".  ``size`` is the matrix side (default
    :data:`DEFAULT_SIZE` for the device type).  ``seconds`` is the total timed
    time spread over ``repeats`` repeats; ``warmup`` is the untimed warm-up in
    seconds (default ``seconds / 4``; at least one matmul always runs).
    Raises :class:`ConfigError` for an unknown or unavailable device or dtype
    or bad numbers.
    """
    dev = resolve_device(device)
    n = DEFAULT_SIZE[dev.type] if size is None else size
    matmul_flops(n)  # checks n
    return measure_kernel(kernels.matmul_kernel(n), dev, dtype, seconds, warmup, repeats)


def measure_kernel(
    kernel: kernels.Kernel,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | str = torch.float32,
    seconds: float = 1.0,
    warmup: float | None = None,
    repeats: int = 5,
) -> PeakResult:
    """Measure ``kernel``'s FLOP/s on ``device`` in ``dtype`` (the module docstring's procedure)."""
    dev = resolve_device(device)
    name = _dtype_name(dtype, dev)
    warmup = _check_timing(seconds, warmup, repeats)
    torch_dtype, precision = _DTYPES[name]
    with _matmul_precision(precision), _cudnn_autotuning(dev):
        call = _setup(kernel, dev, torch_dtype)
        timed, iters = time_calls(call, dev, seconds, warmup, repeats)
    rates = [calls * kernel.flops / max(t, 1e-12) for t, calls in timed]
    median, lo, hi, spread, warning = summarise(rates)
    return PeakResult(
        device=str(dev),
        dtype=name,
        kernel=kernel.name,
        flops_per_s=median,
        min_flops_per_s=lo,
        max_flops_per_s=hi,
        spread=spread,
        repeats=tuple(rates),
        calls_per_repeat=iters,
        flops_per_call=kernel.flops,
        threads=int(torch.get_num_threads()),
        note=_NOTES.get(name) if dev.type == "cuda" else None,
        warning=warning,
    )


def search_peak(
    device: str | torch.device = "cpu",
    dtype: torch.dtype | str = torch.float32,
    seconds: float = 1.0,
    candidates: Sequence[kernels.Kernel] | None = None,
    kinds: tuple[str, ...] = kernels.KINDS,
    processor: Processor | None = None,
) -> PeakResult:
    """The peak of ``device`` in ``dtype``: the fastest of ``candidates``, measured in full.

    Each candidate (default :func:`aihpc.roofline.kernels.candidate_kernels` of ``kinds``: the
    kernels a workload calls, matmuls and convolutions for CNNs, matmuls for transformers)
    is timed briefly, ``seconds / len(candidates)`` after one untimed call
    (at least one timed call each); the fastest is then measured by
    :func:`measure_kernel` for ``seconds``.  The result names the kernel,
    lists every candidate's brief rate, and carries the device's nominal peak
    for the dtype and its threads.

    On a CPU that does not compute ``dtype`` natively (``processor``'s extensions decide,
    :func:`aihpc.machine.processor.emulation`; default: this machine's), there is no
    search: the candidate of the fewest FLOP per call alone is measured (the module
    docstring's bound), and the result's ``note`` says why.
    """
    dev = resolve_device(device)
    name = _dtype_name(dtype, dev)
    warmup = _check_timing(seconds, None, 1)
    pool = tuple(kernels.candidate_kernels(dev.type, kinds) if candidates is None else candidates)
    if not pool:
        raise ConfigError("a peak search needs at least one kernel, got none")
    why = None
    if dev.type == "cpu":
        processor = processor or describe_processor()
        why = emulation(processor, name)
    if why is not None:
        pool = (min(pool, key=lambda k: k.flops),)
    brief = seconds / len(pool)
    timed = [(k, _brief_rate(k, dev, name, brief)) for k in pool]
    runs = [(k, rate) for k, rate in timed if rate is not None]
    if not runs:
        raise ConfigError(
            f"none of the {len(pool)} kernels of the peak search runs in {name} on {dev}"
        )
    best, _ = max(runs, key=lambda kr: kr[1].flops_per_s)
    result = measure_kernel(best, dev, name, seconds, warmup, repeats=5)
    note = result.note if why is None else f"{why}; no search: {best.name} alone was measured"
    return replace(
        result,
        candidates=tuple(rate for _, rate in runs),
        nominal=_nominal(dev, name, processor),
        note=note,
    )


def _brief_rate(
    kernel: kernels.Kernel, dev: torch.device, dtype: str, seconds: float
) -> KernelRate | None:
    """``kernel``'s rate timed briefly (one untimed call first); None where it cannot run in
    ``dtype`` on this device (a convolution some CPUs lack in half precision, inputs too large)."""
    try:
        result = measure_kernel(kernel, dev, dtype, seconds, warmup=0.0, repeats=1)
    except (RuntimeError, OutOfMemory):
        return None
    return KernelRate(kernel.name, result.flops_per_s)


def _nominal(dev: torch.device, dtype: str, processor: Processor | None) -> NominalPeak:
    """The device's nominal peak in ``dtype`` for this process's threads; never raises."""
    from aihpc.roofline.nominal import nominal_peak

    try:
        return nominal_peak(str(dev), dtype, int(torch.get_num_threads()), processor)
    except Exception as exc:  # noqa: BLE001 - the nominal figure is beside the measurement
        return NominalPeak.unknown(dtype, f"could not be derived: {type(exc).__name__}: {exc}")


def _check_timing(seconds: float, warmup: float | None, repeats: int) -> float:
    """The warm-up seconds (default ``seconds / 4``), after checking the three numbers."""
    integer("repeats", repeats)
    if not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0):
        raise ConfigError(f"seconds must be a finite number > 0, got {seconds!r}")
    warmup = seconds / 4 if warmup is None else warmup
    if not (isinstance(warmup, (int, float)) and math.isfinite(warmup) and warmup >= 0):
        raise ConfigError(f"warmup must be a finite number >= 0, got {warmup!r}")
    return warmup


def time_calls(
    call: kernels.Call,
    dev: torch.device,
    seconds: float,
    warmup: float,
    repeats: int,
) -> tuple[list[tuple[float, int]], int]:
    """(seconds, calls) of each of ``repeats`` timed repeats of ``call``, and the calls planned
    for each.

    The warm-up runs calls until ``warmup`` seconds have passed (at least one); the last one's
    duration sets the calls planned per repeat (``seconds / repeats`` of them, at least one).
    A repeat ends early, after at least one call, once it has run :data:`REPEAT_OVERRUN` times
    its planned time: the calls' rate fell after the warm-up (other work took the cores), and
    the planned calls could take any time.  So a measurement's work is bounded by its planned
    calls and its time by about ``warmup + REPEAT_OVERRUN x seconds`` plus a few calls, whatever
    the load; a repeat cut short is timed over the calls it ran.
    """

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    sync()
    start = last = _clock()
    while True:
        call()
        sync()
        now = _clock()
        per_call, last = now - last, now
        if now - start >= warmup:
            break
    iters = max(1, round(seconds / repeats / per_call)) if per_call > 0 else 1
    budget = REPEAT_OVERRUN * max(seconds / repeats, iters * per_call)
    timed = []
    for _ in range(repeats):
        sync()
        t0 = _clock()
        done = 0
        while True:
            call()
            done += 1
            if done == iters or _clock() - t0 >= budget:
                break
        sync()
        timed.append((_clock() - t0, done))
    return timed, iters


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


def _setup(kernel: kernels.Kernel, dev: torch.device, dtype: torch.dtype) -> kernels.Call:
    """``kernel``'s call with its inputs allocated; OutOfMemory (one line) where they do not fit."""
    try:
        return kernel.setup(dev, dtype)
    except (RuntimeError, MemoryError) as exc:  # torch.OutOfMemoryError is a RuntimeError
        raise OutOfMemory(
            f"the inputs of {kernel.name} in {dtype} could not be allocated on {dev} "
            f"({type(exc).__name__})"
        ) from None


@contextlib.contextmanager
def _cudnn_autotuning(dev: torch.device) -> Iterator[None]:
    """cuDNN's autotuner on inside the block on a GPU (as the trainer runs), then restored."""
    if dev.type != "cuda":
        yield
        return
    previous = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = previous


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
