"""Measured memory bandwidth: STREAM's copy and triad on one device.

STREAM (McCalpin) defines, for arrays a, b, c of N float64 elements and a
scalar s::

    copy:   c = a           2 x 8 N bytes moved (one read, one write)
    triad:  a = b + s * c   3 x 8 N bytes moved (two reads, one write)

Write-allocate traffic is not counted (STREAM's convention), so these are the
bytes a program asks for (:func:`bytes_per_call`); rates are in bytes per
second, decimal (1 GB/s = 1e9 bytes/s, as STREAM's MB/s are 1e6).  On CUDA the
arrays live in device memory, so the figure is the GPU's memory bandwidth.

STREAM's size rule: each array at least 4x the last-level cache, so the
timed traffic really goes to memory.  :func:`default_elements` starts at
:data:`MIN_ELEMENTS` (2**25 = 256 MiB per array on CPU, 2**28 = 2 GiB on
CUDA) and doubles up to that rule, at most :data:`MAX_ELEMENTS`; this
machine's 105 MiB L3 gives 2**26 (512 MiB per array).  An explicit smaller
``elements`` is allowed (tests, a quick look) and then carries a warning.

Timing is :func:`aihpc.roofline.peak.time_calls`'s: a warm-up call apart (first touch
of the pages), one call to plan the calls per repeat, the device synchronised around each
repeat, a repeat ended early when other work slows the calls past 4x their plan, the median of
the repeats reported with the spread IQR / median (:mod:`aihpc.base.spread`).  After timing, the
target array is checked against the value STREAM expects, as STREAM does.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from aihpc.base.checks import integer, number
from aihpc.base.errors import ConfigError, OutOfMemory
from aihpc.base.spread import STATISTIC
from aihpc.machine.devices import resolve_device
from aihpc.records.kinds_measure import BandwidthRecord
from aihpc.roofline.peak import summarise, time_calls

KERNELS: dict[str, int] = {"copy": 2, "triad": 3}
"""STREAM kernel -> arrays moved per element (reads + writes)."""

ELEMENT_BYTES = 8
"""Bytes per element: STREAM's arrays are float64."""

MIN_ELEMENTS: dict[str, int] = {"cpu": 2**25, "cuda": 2**28}
"""Smallest default array length per device type (256 MiB and 2 GiB per array)."""

MAX_ELEMENTS: dict[str, int] = {"cpu": 2**28, "cuda": 2**28}
"""Largest default array length (2 GiB per array, 6 GiB for three)."""

SCALAR = 3.0
"""STREAM's scalar ``s`` in ``a = b + s * c``."""

# Initial values of a, b, c (exact in float64, so the check below is exact):
# copy leaves c = 1.0, triad leaves a = 2.0 + 3.0 * 0.5 = 3.5.
_INITIAL = (1.0, 2.0, 0.5)
_EXPECTED = {"copy": 1.0, "triad": _INITIAL[1] + SCALAR * _INITIAL[2]}


def bytes_per_call(kernel: str, elements: int) -> int:
    """Bytes one call of STREAM ``kernel`` moves over ``elements`` float64: 16 N (copy), 24 N
    (triad)."""
    _check_kernel(kernel)
    integer("elements", elements)
    return KERNELS[kernel] * ELEMENT_BYTES * elements


def stream_step(
    kernel: str, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor
) -> Callable[[], None]:
    """One call of STREAM ``kernel`` on the arrays: copy ``c = a``, triad ``a = b + SCALAR * c``.

    Both write in place into preallocated arrays (no temporaries), one pass each.
    """
    _check_kernel(kernel)

    def copy() -> None:
        c.copy_(a)

    def triad() -> None:
        torch.add(b, c, alpha=SCALAR, out=a)

    return copy if kernel == "copy" else triad


def _check_kernel(kernel: str) -> None:
    if kernel not in KERNELS:
        raise ConfigError(f"bandwidth kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")


def measure_bandwidth(
    device: str | torch.device = "cpu",
    kernel: str = "triad",
    elements: int | None = None,
    seconds: float = 1.0,
    repeats: int = 5,
) -> BandwidthRecord:
    """Measure STREAM ``kernel`` ("copy" or "triad") in float64 on ``device``: the median of
    the repeats' rates (bytes/s of each, in order, in ``repeats``), their spread (IQR / median,
    :mod:`aihpc.base.spread`), the bytes one call moves (:func:`bytes_per_call`), the
    last-level cache the size rule was checked against (None where unknown) and the
    measurement's warnings ("; "-joined, None without).

    ``elements`` per array (default :func:`default_elements`); ``seconds`` of
    timed calls spread over ``repeats`` repeats (at least one call each).
    Raises :class:`ConfigError` for a bad kernel, device or number, or arrays
    that cannot be allocated.
    """
    _check_kernel(kernel)
    dev = resolve_device(device)
    n = default_elements(dev) if elements is None else elements
    moved = bytes_per_call(kernel, n)
    integer("repeats", repeats)
    number("seconds", seconds, 0, low_open=True)
    a, b, c = _allocate(kernel, n, dev)
    step = stream_step(kernel, a, b, c)
    step()  # warm-up: first touch of the pages, kernel choice
    timed, calls = time_calls(step, dev, seconds, 0.0, repeats)  # one call calibrates
    rates = [done * moved / max(t, 1e-12) for t, done in timed]
    _check_result(kernel, c if kernel == "copy" else a)
    median, lo, hi, spread, warning = summarise(rates, unit="bytes/s", subject="bandwidth")
    cache = last_level_cache_bytes(dev)
    warnings = [w for w in (warning, _size_warning(n, cache)) if w]
    return BandwidthRecord(
        device=str(dev),
        kernel=kernel,
        elements=n,
        bytes_per_call=moved,
        bytes_per_s=median,
        min_bytes_per_s=lo,
        max_bytes_per_s=hi,
        spread=spread,
        repeats=tuple(rates),
        calls_per_repeat=calls,
        threads=int(torch.get_num_threads()),
        cache_bytes=cache,
        warning="; ".join(warnings) or None,
        spread_statistic=STATISTIC,
    )


def default_elements(device: str | torch.device = "cpu") -> int:
    """Default array length on ``device``: :data:`MIN_ELEMENTS`, doubled until 4x the last-level
    cache.

    Never more than :data:`MAX_ELEMENTS`; the cache size comes from
    :func:`last_level_cache_bytes` (the minimum is used where it is unknown).
    """
    dev = resolve_device(device)
    n, cache = MIN_ELEMENTS[dev.type], last_level_cache_bytes(dev)
    while cache is not None and n * ELEMENT_BYTES < 4 * cache and n < MAX_ELEMENTS[dev.type]:
        n *= 2
    return n


def last_level_cache_bytes(device: str | torch.device = "cpu") -> int | None:
    """Bytes of last-level cache in front of ``device``'s memory; None where unknown.

    CPU: the sum over the distinct highest-level data caches in Linux sysfs
    (one per socket or cluster sharing it).  CUDA: the GPU's L2.
    """
    dev = resolve_device(device)
    if dev.type == "cuda":
        size = getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", None)
        return int(size) if size else None
    return cpu_last_level_cache_bytes()


def cpu_last_level_cache_bytes(root: Path = Path("/sys/devices/system/cpu")) -> int | None:
    """Sum of the distinct highest-level CPU caches listed under ``root`` (Linux sysfs); None if
    none."""
    found: dict[tuple[int, str], int] = {}  # (level, CPUs sharing it) -> bytes
    for index in root.glob("cpu[0-9]*/cache/index[0-9]*"):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            level = int((index / "level").read_text())
            size = _parse_cache_size((index / "size").read_text().strip())
            found[(level, (index / "shared_cpu_list").read_text().strip())] = size
        except (OSError, ValueError):
            continue
    if not found:
        return None
    top = max(level for level, _ in found)
    return sum(size for (level, _), size in found.items() if level == top)


def _parse_cache_size(text: str) -> int:
    """sysfs cache size ("107520K", "2M", "512") in bytes."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    if text and text[-1].upper() in units:
        return int(text[:-1]) * units[text[-1].upper()]
    return int(text)


def _allocate(
    kernel: str, n: int, dev: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """a, b, c filled with :data:`_INITIAL`; copy needs only a and c (b is an empty placeholder)."""
    need = (0, 2) if kernel == "copy" else (0, 1, 2)
    try:
        arrays = [
            torch.full((n,) if i in need else (0,), v, dtype=torch.float64, device=dev)
            for i, v in enumerate(_INITIAL)
        ]
    # CPU allocations raise RuntimeError; CUDA OutOfMemoryError
    except (
        RuntimeError,
        MemoryError,
    ) as exc:
        total = len(need) * n * ELEMENT_BYTES
        raise OutOfMemory(
            f"cannot allocate {len(need)} arrays of {n} float64 ({total / 2**30:.1f} GiB) "
            f"on {dev}: {str(exc).splitlines()[0]}"
        ) from None
    return arrays[0], arrays[1], arrays[2]


def _check_result(kernel: str, target: torch.Tensor) -> None:
    """STREAM's validation: every element of the written array holds the expected value."""
    if not bool((target == _EXPECTED[kernel]).all()):
        raise RuntimeError(
            f"STREAM {kernel} wrote wrong values (expected {_EXPECTED[kernel]} everywhere)"
        )


def _size_warning(n: int, cache: int | None) -> str | None:
    if cache is None or n * ELEMENT_BYTES >= 4 * cache:
        return None
    return (
        f"arrays of {n * ELEMENT_BYTES / 2**20:.3g} MiB are under 4x the {cache / 2**20:.3g} MiB "
        "last-level cache (STREAM's rule): the rate may include cache hits"
    )
