"""Level 1's checks before a network is timed: its compute dtype, the reported modules,
whether a step fits in memory, and one line when an allocation fails anyway.

:mod:`aihpc.bench.model` runs them (and re-exports them for the CLI).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from aihpc.base.errors import ConfigError, ModelError, OutOfMemory
from aihpc.bench import model_trace as trace
from aihpc.bench.model_trace import MODEL

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def check_dtype(name: str, device: torch.device) -> torch.dtype:
    """The compute dtype ``name`` (float32, or autocast to bfloat16 / float16) if ``device`` runs
    it."""
    if name not in DTYPES:
        raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, got {name!r}")
    if name == "bfloat16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"dtype bfloat16 is not supported by GPU {device}, got {name!r}")
    if name != "float32" and not torch.amp.is_autocast_available(device.type):
        raise ConfigError(f"dtype {name} needs autocast, which {device.type} does not offer")
    return DTYPES[name]


def allocation_failed(exc: BaseException) -> bool:
    """Whether ``exc`` says an allocation failed (CPU allocator, CUDA caching allocator, Python)."""
    text = str(exc)
    return (
        isinstance(exc, (MemoryError, torch.OutOfMemoryError))
        or "can't allocate memory" in text
        or "out of memory" in text.lower()
    )


@contextlib.contextmanager
def memory_guard(what: str, device: torch.device) -> Iterator[None]:
    """Turn an allocation failure inside the block (also one ``count_ops`` wrapped in a
    ModelError) into one OutOfMemory line naming ``what``."""
    try:
        yield
    except (RuntimeError, MemoryError, ModelError) as exc:
        if not allocation_failed(exc):
            raise
        if device.type == "cuda":
            torch.cuda.empty_cache()
        raise OutOfMemory(
            f"{what} does not fit in the memory of {device} (an allocation failed)"
        ) from None


def reported_modules(model: nn.Module, depth: int | None) -> dict[str, nn.Module]:
    """The reported modules, in model order: ``"(model)"`` and every module at most ``depth``
    levels down."""
    if depth is not None and depth < 0:
        raise ConfigError(f"depth must be >= 0, got {depth}")
    return {
        name or MODEL: m
        for name, m in model.named_modules()
        if depth is None or (name.count(".") + 1 if name else 0) <= depth
    }


def check_fits(
    model: nn.Module,
    example: torch.Tensor,
    modes: tuple[str, ...],
    device: torch.device,
    dtype: str = "float32",
    measured: Any = None,
) -> None:
    """OutOfMemory unless a step fits in the free memory of ``device``, estimated on the meta
    device (``example`` may be a meta tensor; ``measured``: a ``network_trace.traffic`` of it):
    the input plus twice the largest op output for inference; the input, every forward op
    output (what backward may keep), the gradients and the largest output for training.  An
    upper bound: an allocation the OS grants but cannot back ends the process without a word
    (Linux's OOM killer), so refusing is the safe side."""
    import psutil

    if measured is None:
        measured = trace.traffic(
            model, example, reported_modules(model, None), check_dtype(dtype, device)
        )
    data = example.numel() * example.element_size()
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    need = data + 2 * measured.largest
    if "training" in modes:
        need = max(need, data + measured.outputs + params + measured.largest)
    free = (
        torch.cuda.mem_get_info(device)[0]
        if device.type == "cuda"
        else psutil.virtual_memory().available
    )
    if need > free:
        shape = "x".join(map(str, example.shape))
        raise OutOfMemory(
            f"batch {shape} needs about {need / 2**30:.1f} GiB, more than the "
            f"{free / 2**30:.1f} GiB free on {device}"
        )
