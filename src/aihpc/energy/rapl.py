"""CPU package and DRAM energy from Linux powercap's RAPL zones.

The powercap class lists each CPU package as ``intel-rapl:N`` (``name``
``package-N``; AMD's driver uses the same names) with sub-zones
``intel-rapl:N:M`` named ``core``, ``uncore`` or ``dram``.  Each zone has
``energy_uj`` (microjoules, cumulative, wrapping at ``max_energy_range_uj``;
readable by root only on most kernels since CVE-2020-8694).

What is counted: every ``package-*`` zone, and every ``dram`` zone (top
level or sub-zone).  ``core`` and ``uncore`` are parts of their package's
energy and are not counted again; ``psys`` (the whole platform, laptops)
overlaps the packages and is not counted either.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from pathlib import Path

POWERCAP_ROOT = Path("/sys/class/powercap")
_ZONE = re.compile(r"^intel-rapl:(\d+)(?::(\d+))?$")


@dataclass(frozen=True)
class RaplZone:
    """One counted zone: its directory, a name such as ``package-0`` or ``package-0/dram``, its wrap
    range in µJ."""

    path: Path
    name: str
    max_energy_range_uj: int


class RaplCounter:
    """A zone's ``energy_uj`` as an :class:`aihpc.energy.meter.EnergyCounter` (joules)."""

    source = "rapl"

    def __init__(self, zone: RaplZone, host: str) -> None:
        self.zone = zone
        self.device = zone.name
        self.host = host
        self.wrap_j = zone.max_energy_range_uj / 1e6

    def read(self) -> float:
        return int((self.zone.path / "energy_uj").read_text()) / 1e6


def find_zones(root: Path = POWERCAP_ROOT) -> tuple[list[RaplZone], str | None]:
    """The counted zones under ``root``, each checked readable; or ``([], reason)`` when none can be
    read.

    Zones that exist but cannot be read make the whole reading fail with
    their reason: measuring some packages of a node and not others would
    give a total that is neither the node's nor a package's.
    """
    if not root.is_dir():
        return (
            [],
            f"no RAPL: {root} does not exist (no powercap in this kernel, or not exposed to this "
            "host)",
        )
    zones = []
    for path in sorted(root.iterdir(), key=lambda p: _zone_order(p.name)):
        match = _ZONE.match(path.name)
        if not match:
            continue
        try:
            zone = _counted_zone(root, path, match)
            if zone is not None:
                int((path / "energy_uj").read_text())
                zones.append(zone)
        except PermissionError:
            return (
                [],
                f"RAPL {path / 'energy_uj'} is not readable: permission denied (root only on this "
                "kernel)",
            )
        except (OSError, ValueError) as exc:
            return [], f"RAPL zone {path} cannot be read: {getattr(exc, 'strerror', None) or exc}"
    if not zones:
        return [], f"no RAPL package or DRAM zones under {root}"
    return zones, None


def _zone_order(name: str) -> tuple[int, int]:
    match = _ZONE.match(name)
    if not match:
        return (1 << 30, 0)
    return (int(match.group(1)), int(match.group(2) or -1))


def _counted_zone(root: Path, path: Path, match: re.Match[str]) -> RaplZone | None:
    """The zone at ``path`` if it is counted (a package or DRAM), named after its package."""
    name = (path / "name").read_text().strip()
    if match.group(2) is None:
        counted = name.startswith("package") or name == "dram"
    else:
        counted = name == "dram"
        parent = (root / f"intel-rapl:{match.group(1)}" / "name").read_text().strip()
        name = f"{parent}/{name}"
    if not counted:
        return None
    return RaplZone(path, name, int((path / "max_energy_range_uj").read_text()))


def rapl_counters(
    root: Path = POWERCAP_ROOT, host: str | None = None
) -> tuple[list[RaplCounter], str | None]:
    """One counter per counted zone of this host, or ``([], reason)``."""
    zones, reason = find_zones(root)
    host = host or socket.gethostname()
    return [RaplCounter(z, host) for z in zones], reason
