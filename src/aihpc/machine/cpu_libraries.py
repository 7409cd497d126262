"""The math libraries of this process's torch: its BLAS, oneDNN's version and the ISA it
dispatches to, and torch's own CPU kernels' capability (the environment's ``cpu`` fields
``blas``, ``onednn_version``, ``onednn_isa``, ``torch_cpu_capability``).

Why they are recorded: on an AMD processor with AVX-512, MKL's sgemm takes its AVX2 path
while oneDNN's convolutions use AVX-512, so which library a kernel goes to decides its rate.
The parsers take text (``torch.__config__.show()``, oneDNN's verbose output), so tests feed
them fixture text; nothing here raises: what cannot be read is None.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import tempfile
from collections.abc import Callable


def torch_libraries() -> dict[str, str | None]:
    """blas, onednn_version, onednn_isa and torch_cpu_capability of this process's torch
    (each None where it cannot be read)."""
    try:
        import torch

        config = str(torch.__config__.show())
    except Exception:  # noqa: BLE001 - metadata is best effort
        config = ""
    try:
        capability: str | None = str(torch.backends.cpu.get_cpu_capability())
    except Exception:  # noqa: BLE001
        capability = None
    return {
        "blas": blas_of(config),
        "onednn_version": onednn_version_of(config),
        "onednn_isa": onednn_isa(),
        "torch_cpu_capability": capability,
    }


def blas_of(config: str) -> str | None:
    """torch's BLAS in ``torch.__config__.show()``: "mkl 2024.2", "openblas"...; None if unsaid."""
    match = re.search(r"BLAS_INFO=([^,\s]+)", config)
    name = {"open": "openblas"}.get(match.group(1), match.group(1)) if match else None
    version = re.search(r"Math Kernel Library Version (\d+(?:\.\d+)*)", config)
    if version and name in (None, "mkl"):
        return f"mkl {version.group(1)}"
    return name


def onednn_version_of(config: str) -> str | None:
    """oneDNN's version from ``torch.__config__.show()`` ("MKL-DNN v3.12.0" -> "3.12.0")."""
    match = re.search(r"(?:MKL-DNN|oneDNN|DNNL) v(\d+(?:\.\d+)+)", config)
    return match.group(1) if match else None


def onednn_isa_of(verbose: str) -> str | None:
    """The ISA of oneDNN's verbose output: its "info,cpu,isa:" line, with the implementation of
    the first convolution it ran (e.g. "Intel AVX 10.1 (convolution: jit:avx512_core)")."""
    isa = re.search(r"(?:onednn|dnnl)_verbose,(?:v\d+,)?info,cpu,isa:([^\r\n]+)", verbose)
    conv = re.search(r"_verbose,(?:v\d+,)?(?:primitive,)?exec,cpu,convolution,([^,]+),", verbose)
    kernel = f"convolution: {conv.group(1)}" if conv else None
    if isa is None:
        return kernel
    return f"{isa.group(1).strip()} ({kernel})" if kernel else isa.group(1).strip()


@functools.lru_cache(maxsize=1)
def onednn_isa() -> str | None:
    """The ISA oneDNN dispatches to in this process, from its verbose output around one tiny
    convolution (cached: oneDNN prints its "isa:" line once a process); None where that fails.

    oneDNN prints to the process's standard output (file descriptor 1): it is sent to a
    temporary file for the call and restored afterwards, even on error.  Output another
    thread writes to fd 1 meanwhile (a few milliseconds) goes to that file too.
    """
    try:
        import torch

        if not torch.backends.mkldnn.is_available():  # type: ignore[no-untyped-call]
            return None
        x, w = torch.ones(1, 8, 8, 8), torch.ones(8, 8, 3, 3)

        def convolve() -> None:
            verbose = torch.backends.mkldnn.verbose  # torch leaves it unannotated
            with verbose(torch.backends.mkldnn.VERBOSE_ON):  # type: ignore[no-untyped-call]
                torch.ops.aten.mkldnn_convolution(x, w, None, [0, 0], [1, 1], [1, 1], 1)

        return onednn_isa_of(_stdout_of(convolve))
    except Exception:  # noqa: BLE001 - metadata is best effort
        return None


def _stdout_of(call: Callable[[], None]) -> str:
    """What ``call()`` writes to file descriptor 1 (C and Python), read back from a temporary
    file; fd 1 is restored afterwards, even on error."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile() as sink:
        try:
            os.dup2(sink.fileno(), 1)
            call()
        finally:
            _flush_c_stdout()
            os.dup2(saved, 1)
            os.close(saved)
        sink.seek(0)
        return sink.read().decode("utf-8", errors="replace")


def _flush_c_stdout() -> None:
    """Flush the C library's stdout buffer (a redirected stdout is block-buffered)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).fflush(None)
