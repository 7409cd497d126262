"""GPU energy from NVML's total energy counter (nvidia-ml-py, imported lazily).

``nvmlDeviceGetTotalEnergyConsumption`` gives the millijoules the GPU used
since the driver was loaded (Volta and newer); it does not wrap in practice
(an unsigned 64-bit count of mJ) but restarts from zero if the driver is
reloaded, which the meter counts as a reset.

Which NVML device is the worker's: NVML numbers every GPU of the node, torch
only those in ``CUDA_VISIBLE_DEVICES``, so the two indices differ; the GPU
is found by its PCI address, which both report.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


class NvmlCounter:
    """One GPU's total energy as an :class:`aihpc.energy.meter.EnergyCounter` (joules)."""

    source = "nvml"
    wrap_j: float | None = None

    def __init__(self, nvml: Any, handle: Any, device: str, host: str) -> None:
        self._nvml = nvml
        self._handle = handle
        self.device = device
        self.host = host

    def read(self) -> float:
        millijoules: int = self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
        return millijoules / 1e3

    def close(self) -> None:
        """NVML counts its inits: each counter shuts down the one it made."""
        self._nvml.nvmlShutdown()


def pci_bus_id(torch_device: torch.device) -> str:
    """The PCI address of a CUDA device, as NVML reads it: ``DDDDDDDD:BB:DD.0`` (hex)."""
    import torch

    p: Any = torch.cuda.get_device_properties(torch_device)  # the PCI fields: newer torch only
    return f"{p.pci_domain_id:08X}:{p.pci_bus_id:02X}:{p.pci_device_id:02X}.0"


def gpu_counter(
    torch_device: torch.device, host: str | None = None
) -> tuple[NvmlCounter | None, str | None]:
    """The energy counter of the GPU ``torch_device`` (a CUDA torch.device); or ``(None, reason)``.

    Nothing here raises: no nvidia-ml-py, no libnvidia-ml, a GPU without
    the counter (before Volta) or no permission each give their reason.
    """
    host = host or socket.gethostname()
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py (pynvml) is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return None, f"NVML cannot start: {exc} (no NVIDIA driver's libnvidia-ml on this host)"
    try:
        bus_id = pci_bus_id(torch_device)
        handle = pynvml.nvmlDeviceGetHandleByPciBusId(bus_id)
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        name = pynvml.nvmlDeviceGetName(handle)
    except pynvml.NVMLError_NotSupported:
        pynvml.nvmlShutdown()
        return None, f"GPU {torch_device} has no NVML energy counter (Volta and newer have one)"
    except (pynvml.NVMLError, RuntimeError, AttributeError) as exc:
        pynvml.nvmlShutdown()
        return None, f"NVML cannot read GPU {torch_device}'s energy: {exc}"
    name = name.decode() if isinstance(name, bytes) else str(name)
    return NvmlCounter(pynvml, handle, f"GPU {bus_id} ({name})", host), None
