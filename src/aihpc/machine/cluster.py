"""The cluster this process runs on: its network interfaces and its SLURM controller.

Checked before anything is started, by every command that places work on
other nodes (``aihpc run``, ``train-to-target`` and ``bench distributed``
with ``--slurm``): a wrong interface or partition is the user's mistake, one
line naming what exists; a controller that does not answer is the machine's.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from aihpc.base.errors import ConfigError, RunFailure


def check_interface(name: str) -> None:
    """ConfigError, naming the interfaces this host has, unless it has one called ``name``."""
    import psutil

    names = sorted(psutil.net_if_addrs())
    if name not in names:
        raise ConfigError(
            f"network interface must exist on this host, got {name!r} "
            f"(this host has: {', '.join(names)})"
        )


def interface_address(name: str) -> str:
    """The IPv4 address of this host's interface ``name`` (ConfigError if it has none)."""
    import socket

    import psutil

    check_interface(name)
    for address in psutil.net_if_addrs()[name]:
        if address.family == socket.AF_INET:
            return str(address.address)
    raise ConfigError(f"network interface must have an IPv4 address, got {name!r} without one")


def check_slurm(partition: str | None = None) -> None:
    """ConfigError unless SLURM's commands are on PATH and ``partition`` exists; RunFailure if
    the controller does not answer."""
    for tool in ("sbatch", "srun", "scancel", "squeue"):
        if shutil.which(tool) is None:
            raise ConfigError(
                f"SLURM's {tool} is not on PATH; is this a SLURM login node? "
                f"(PATH={os.environ.get('PATH', '')})"
            )
    command = ["scontrol", "show", "partition"] + ([partition] if partition else [])
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RunFailure(
            f"cannot query the SLURM controller with '{' '.join(command)}': {exc}"
        ) from None
    if result.returncode != 0:
        message = (result.stderr or result.stdout).strip().splitlines()
        first = message[0] if message else f"exit code {result.returncode}"
        if partition and "not found" in first:
            known = _partitions()
            raise ConfigError(
                f"SLURM partition must exist, got {partition!r} "
                f"(known: {', '.join(known) or 'none'})"
            )
        raise RunFailure(f"SLURM controller did not answer '{' '.join(command)}': {first}")


def _partitions() -> list[str]:
    result = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=30)
    return [p.rstrip("*") for p in result.stdout.split()] if result.returncode == 0 else []
