"""The dense kernels a workload calls, whose best measured rate is the machine's peak.

A machine's peak is not one library's matmul: on an AMD processor with
AVX-512, torch's float32 matmul is MKL's sgemm on its AVX2 path while oneDNN's
3x3 convolutions use AVX-512, so a peak from matmul alone can be less than half
of what the processor does, and a share of it can pass 100 %
(docs/measurements/2026-11-29-figures-from-code-comments.md).  The peak is
therefore the best of the kernels the image workload itself calls, over
several shapes because their rates differ by shape (one shape can be slow in
one process and fast in the next):

- ``matmul``: square ``n x n @ n x n`` (BLAS on the CPU, cuBLAS on a GPU),
  ``2 n^3`` FLOP;
- ``conv``: a ``k x k`` convolution, stride 1, "same" padding, ``c`` channels in
  and out on ``h x h`` inputs, batch ``b``, forward (oneDNN on the CPU, cuDNN
  on a GPU, channels-last there as the trainer runs it), ``2 b c^2 h^2 k^2``
  FLOP: every output position counted with all ``k^2 c`` taps, the counter's
  convention (:mod:`aihpc.counting.formulas_nn`).

:func:`candidate_kernels` lists the shapes searched per device type; each is
sized so that one call takes milliseconds to tens of milliseconds on one core.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

#: A kernel's call with its inputs bound: run it once.
Call = Callable[[], Any]


@dataclass(frozen=True)
class Kernel:
    """One dense kernel of one shape: its name, its FLOP per call, and how to set it up.

    ``setup(device, dtype)`` allocates the inputs (random normal values) and
    returns the call; everything it allocates is freed when the call is dropped.
    """

    name: str
    flops: int
    setup: Callable[[torch.device, torch.dtype], Call]
    kind: str = "matmul"  # one of KINDS

    def __post_init__(self) -> None:
        if self.flops < 1:
            raise ValueError(f"a kernel's flops must be >= 1, got {self.flops}")


def matmul_flops(n: int) -> int:
    """FLOP of one ``n x n @ n x n`` matmul: ``n^2`` outputs of ``n`` multiplies and ``n`` adds."""
    return 2 * n**3


def conv_flops(channels: int, size: int, batch: int, k: int) -> int:
    """FLOP of one ``k x k`` same-padded convolution, ``channels`` in and out, ``size^2`` inputs."""
    return 2 * batch * channels * channels * size * size * k * k


def matmul_kernel(n: int) -> Kernel:
    """The square matmul of side ``n`` (written into a preallocated output)."""

    def setup(device: torch.device, dtype: torch.dtype) -> Call:
        a = torch.randn(n, n, dtype=dtype, device=device)
        b = torch.randn(n, n, dtype=dtype, device=device)
        out = torch.empty(n, n, dtype=dtype, device=device)
        return lambda: torch.matmul(a, b, out=out)

    return Kernel(f"matmul {n}x{n}", matmul_flops(n), setup)


def conv_kernel(
    channels: int, size: int, batch: int, k: int, channels_last: bool = False
) -> Kernel:
    """A forward ``k x k`` convolution: ``channels`` in and out, ``size x size``, ``batch``."""

    def setup(device: torch.device, dtype: torch.dtype) -> Call:
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        x = torch.randn(batch, channels, size, size, dtype=dtype, device=device)
        w = torch.randn(channels, channels, k, k, dtype=dtype, device=device) / (channels * k * k)
        x, w = x.contiguous(memory_format=fmt), w.contiguous(memory_format=fmt)

        def call() -> torch.Tensor:
            with torch.no_grad():
                return torch.nn.functional.conv2d(x, w, padding=k // 2)

        return call

    layout = " channels-last" if channels_last else ""
    name = f"conv{k}x{k} {channels}ch {size}x{size} batch {batch}{layout}"
    return Kernel(name, conv_flops(channels, size, batch, k), setup, kind="conv")


#: The kinds of dense kernel a search may try: a task names those its networks call.
KINDS = ("matmul", "conv")


def candidate_kernels(device_type: str, kinds: tuple[str, ...] = KINDS) -> tuple[Kernel, ...]:
    """The kernels of ``kinds`` whose best rate is the peak on ``device_type`` ("cpu" or "cuda").

    CPU (NCHW, as the CPU trainer runs): matmuls of 512, 1024 and 2048; 3x3
    convolutions of 64-256 channels on 8x8 and 16x16 (batch 32, or 8 for the
    largest, to keep one call under about 0.1 s on a core); 1x1 convolutions
    of 256 and 512 channels.  GPU (channels-last, cuDNN): matmuls of 4096 and
    8192; 3x3 convolutions of 128-512 channels and 1x1 of 1024-2048 channels
    on ResNet-50's feature-map sizes at batch 256.
    """
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise ValueError(f"kernel kinds must be among {KINDS}, got {unknown}")
    return tuple(k for k in _candidates(device_type) if k.kind in kinds)


def _candidates(device_type: str) -> tuple[Kernel, ...]:
    if device_type == "cuda":
        return (
            matmul_kernel(4096),
            matmul_kernel(8192),
            conv_kernel(128, 28, 256, 3, channels_last=True),
            conv_kernel(256, 14, 256, 3, channels_last=True),
            conv_kernel(512, 7, 256, 3, channels_last=True),
            conv_kernel(1024, 14, 256, 1, channels_last=True),
            conv_kernel(2048, 7, 256, 1, channels_last=True),
        )
    return (
        matmul_kernel(512),
        matmul_kernel(1024),
        matmul_kernel(2048),
        conv_kernel(64, 8, 32, 3),
        conv_kernel(64, 16, 32, 3),
        conv_kernel(128, 8, 32, 3),
        conv_kernel(128, 16, 32, 3),
        conv_kernel(256, 8, 32, 3),
        conv_kernel(256, 16, 8, 3),
        conv_kernel(256, 16, 32, 1),
        conv_kernel(512, 8, 32, 1),
    )
