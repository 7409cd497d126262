"""Environment metadata for a results file: which machine and software ran it.

:func:`collect` returns an :class:`Environment`, a frozen record validated on
construction whose :meth:`Environment.to_dict` is the flat, JSON-serialisable
dict with sorted keys that results files hold; every field is filled on a
best-effort basis and is ``None`` where the information is unavailable (no
GPU, no git, no ``nvidia-smi``...).  :meth:`Environment.from_dict` reads that
dict back; a key an older file lacks reads as ``None``.  It never raises for a
missing tool; the ``git`` commands share a 2 s budget and ``nvidia-smi`` has
2 s of its own.

Fields (units in the name where there is one):

``aihpc_version``        str, ``aihpc.__version__``
``cpu``                  dict | None, the processor in detail
                         (:class:`aihpc.machine.processor.Processor`: vendor, family/model/stepping,
                         vector extensions, topology, caches, clock and its source, BLAS and
                         oneDNN); None in older files
``cpu_logical_cores``    int | None, logical CPUs (psutil)
``cpu_model``            str | None, "model name" of /proc/cpuinfo, else platform.processor()
``cpu_physical_cores``   int | None, physical cores (psutil; None where unknown)
``cuda_version``         str | None, CUDA version torch was built with (None on CPU builds)
``cudnn_version``        int | None, cuDNN version torch uses (None when unavailable)
``git_commit``           str | None, HEAD of the aihpc source checkout (40 hex digits)
``git_dirty``            bool | None, uncommitted changes or untracked files in that checkout
``gpus``                 list of {index, name, memory_bytes, compute_capability "M.m",
                         multiprocessors}, empty without CUDA
``hostname``             str
``machine``              str, e.g. "x86_64"
``memory_total_bytes``   int, physical memory
``numpy_version``        str
``nvidia_driver_version`` str | None, from ``nvidia-smi``
``os``                   str, ``platform.platform()``
``python_implementation`` str, e.g. "CPython"
``python_version``       str, e.g. "3.11.9"
``torch_num_interop_threads`` int
``torch_num_threads``    int, intra-op threads torch uses
``torch_version``        str
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import subprocess
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from aihpc.base.errors import DataError
from aihpc.machine.processor import Processor, describe_processor

GIT_TIMEOUT_S = 2.0
"""Total wall-clock budget, in seconds, for the git commands of one :func:`collect`."""

NVIDIA_SMI_TIMEOUT_S = 2.0
"""Wall-clock budget, in seconds, for the ``nvidia-smi`` query."""


@dataclass(frozen=True)
class Gpu:
    """One visible CUDA device."""

    index: int
    name: str
    memory_bytes: int
    compute_capability: str  # "M.m"
    multiprocessors: int

    def __post_init__(self) -> None:
        if self.index < 0:
            raise DataError(f"a GPU's index must be >= 0, got {self.index}")
        if not re.fullmatch(r"\d+\.\d+", self.compute_capability):
            raise DataError(f"compute_capability must be 'M.m', got {self.compute_capability!r}")

    def to_dict(self) -> dict[str, Any]:
        return dict(sorted(asdict(self).items()))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Gpu:
        missing = [f.name for f in fields(cls) if f.name not in data]
        if missing:
            raise DataError(f"a GPU of the environment lacks {', '.join(missing)}: {data!r}")
        return cls(**{f.name: data[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class Environment:
    """The machine and software that made a result (the fields of the module docstring)."""

    aihpc_version: str | None
    cpu: Processor | None
    cpu_logical_cores: int | None
    cpu_model: str | None
    cpu_physical_cores: int | None
    cuda_version: str | None
    cudnn_version: int | None
    git_commit: str | None
    git_dirty: bool | None
    gpus: tuple[Gpu, ...]
    hostname: str | None
    machine: str | None
    memory_total_bytes: int | None
    numpy_version: str | None
    nvidia_driver_version: str | None
    os: str | None
    python_implementation: str | None
    python_version: str | None
    torch_num_interop_threads: int | None
    torch_num_threads: int | None
    torch_version: str | None

    def __post_init__(self) -> None:
        for name in ("cpu_logical_cores", "cpu_physical_cores", "torch_num_threads"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise DataError(f"{name} must be >= 1 or None, got {value}")
        if self.memory_total_bytes is not None and self.memory_total_bytes < 0:
            raise DataError(f"memory_total_bytes must be >= 0, got {self.memory_total_bytes}")
        if self.git_commit is not None and not re.fullmatch(r"[0-9a-f]{40}", self.git_commit):
            raise DataError(f"git_commit must be 40 hex digits, got {self.git_commit!r}")

    def to_dict(self) -> dict[str, Any]:
        """The JSON-serialisable dict, keys sorted, as results files hold it."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["gpus"] = [gpu.to_dict() for gpu in self.gpus]
        values["cpu"] = None if self.cpu is None else self.cpu.to_dict()
        return dict(sorted(values.items()))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Environment:
        """The record of a results file's ``environment``; keys it lacks (older files) are None."""
        values: dict[str, Any] = {f.name: data.get(f.name) for f in fields(cls)}
        values["gpus"] = tuple(Gpu.from_dict(g) for g in data.get("gpus") or ())
        cpu = data.get("cpu")
        values["cpu"] = Processor.from_dict(cpu) if isinstance(cpu, dict) else None
        return cls(**values)

    def machine_name(self) -> str:
        """The machine in a few words: GPUs if any, else the CPU model and cores; then the host."""
        if self.gpus:
            what = f"{len(self.gpus)}x {self.gpus[0].name}"
        else:
            what = f"{self.cpu_model or 'unknown CPU'}, {self.cpu_logical_cores or '?'} cores"
        return f"{self.hostname or '?'}: {what}"


def collect(repo_dir: str | os.PathLike[str] | None = None) -> Environment:
    """This machine's environment.

    ``repo_dir`` is the directory whose git checkout identifies the source
    (default: the directory of the installed ``aihpc`` package).  The git
    fields are ``None`` when that directory is not inside a git work tree, is
    ignored by it (e.g. a virtualenv inside a checkout), git is missing, or
    git does not answer within :data:`GIT_TIMEOUT_S`.
    """
    import numpy
    import psutil
    import torch

    import aihpc

    if repo_dir is None:
        repo_dir = Path(aihpc.__file__).resolve().parent
    commit, dirty = git_state(repo_dir)
    return Environment(
        aihpc_version=aihpc.__version__,
        cpu=_processor(),
        cpu_logical_cores=psutil.cpu_count(logical=True),
        cpu_model=cpu_model(),
        cpu_physical_cores=psutil.cpu_count(logical=False),
        cuda_version=torch.version.cuda,
        cudnn_version=_cudnn_version(torch),
        git_commit=commit,
        git_dirty=dirty,
        gpus=_gpus(torch),
        hostname=socket.gethostname(),
        machine=platform.machine(),
        memory_total_bytes=int(psutil.virtual_memory().total),
        numpy_version=numpy.__version__,
        nvidia_driver_version=nvidia_driver_version(),
        os=platform.platform(),
        python_implementation=platform.python_implementation(),
        python_version=platform.python_version(),
        torch_num_interop_threads=int(torch.get_num_interop_threads()),
        torch_num_threads=int(torch.get_num_threads()),
        torch_version=str(torch.__version__),
    )


def cpu_model() -> str | None:
    """The CPU model name: /proc/cpuinfo "model name" on Linux, else platform.processor()."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def git_state(directory: str | os.PathLike[str]) -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the git work tree containing ``directory``.

    ``commit`` is the 40-hex HEAD; ``dirty`` is True when ``git status
    --porcelain`` lists anything (modified, staged or untracked files).
    Both are None when ``directory`` is not in a work tree, is git-ignored by
    it, git is missing, or the commands exceed :data:`GIT_TIMEOUT_S` in total.
    """
    directory = Path(directory)
    if not directory.is_dir() or shutil.which("git") is None:
        return None, None
    deadline = time.monotonic() + GIT_TIMEOUT_S
    head = _git(["rev-parse", "--verify", "HEAD"], directory, deadline)
    if head is None or head[0] != 0:
        return None, None
    commit = head[1].strip()
    ignored = _git(["check-ignore", "-q", "."], directory, deadline)
    if ignored is None or ignored[0] == 0:  # 0: the directory is ignored by the checkout
        return None, None
    status = _git(["status", "--porcelain"], directory, deadline)
    if status is None or status[0] != 0:
        return commit, None
    return commit, bool(status[1].strip())


def _git(args: list[str], cwd: Path, deadline: float) -> tuple[int, str] | None:
    """Run ``git args`` in ``cwd``; (returncode, stdout), or None on time-out/OS error."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return None
    env = dict(os.environ, GIT_OPTIONAL_LOCKS="0", LC_ALL="C")
    return _run(["git", *args], remaining, cwd=cwd, env=env)


def _run(cmd: list[str], timeout: float, **kwargs: Any) -> tuple[int, str] | None:
    """(returncode, stdout) of ``cmd``, or None when it cannot run or times out."""
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, check=False, **kwargs
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.returncode, proc.stdout


def nvidia_driver_version() -> str | None:
    """The NVIDIA driver version reported by ``nvidia-smi``, or None if unavailable."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    result = _run(
        [exe, "--query-gpu=driver_version", "--format=csv,noheader"], NVIDIA_SMI_TIMEOUT_S
    )
    if result is None:
        return None
    code, out = result
    lines = out.strip().splitlines()
    if code != 0 or not lines or not lines[0].strip():
        return None
    return lines[0].strip()


def _processor() -> Processor | None:
    """:func:`describe_processor`, or None should it fail (it is not meant to)."""
    try:
        return describe_processor()
    except Exception:  # noqa: BLE001 - metadata is best effort
        return None


def _cudnn_version(torch: Any) -> int | None:
    try:
        version = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001 - metadata is best effort
        return None
    return int(version) if version is not None else None


def _gpus(torch: Any) -> tuple[Gpu, ...]:
    """One record per visible CUDA device; () without CUDA."""
    try:
        if not torch.cuda.is_available():
            return ()
        gpus = []
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            gpus.append(
                Gpu(
                    index=index,
                    name=str(props.name),
                    memory_bytes=int(props.total_memory),
                    compute_capability=f"{props.major}.{props.minor}",
                    multiprocessors=int(props.multi_processor_count),
                )
            )
        return tuple(gpus)
    except Exception:  # noqa: BLE001 - a broken driver must not break a results file
        return ()
