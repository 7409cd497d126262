"""results.json's ``energy``: the block the master stored, with its total and operations per joule.

The meters themselves are :mod:`aihpc.energy`; this is the record they leave,
rebuilt by ``aihpc verify`` from the store like the rest of results.json.
"""

from __future__ import annotations

from typing import Any

from aihpc.records.codec import UNSET, Record, UnsetType

GIGA = 1e9


class DeviceEnergyRecord(Record, frozen=True):
    """The energy one device used over the run, or why it was not measured
    (:class:`aihpc.energy.meter.DeviceEnergy`)."""

    device: str
    host: str
    source: str
    joules: float | None
    seconds: float | None
    watts: float | None
    samples: int
    reason: str | None
    max_interval_s: float | None | UnsetType = UNSET
    wraps: int | None = None
    resets: int | None = None


class EnergyTotalRecord(Record, frozen=True):
    """The run's energy over its devices, and operations per joule where every device was
    metered."""

    joules: float | None
    watts: float | None
    seconds: float | None
    sources: tuple[str, ...]
    ops_per_joule: float | None
    gops_per_watt: float | None


class EnergyRecord(Record, frozen=True):
    """results.json's ``energy`` (:func:`energy_results`): each device's, whether every device was
    metered (``complete``; ``reason`` says why not), the sampling interval, the total."""

    devices: tuple[DeviceEnergyRecord, ...]
    complete: bool
    reason: str | None
    total: EnergyTotalRecord
    interval_s: float | None = None
    notes: tuple[str, ...] | None = None


def energy_results(block: dict[str, Any] | None, ops: float) -> dict[str, Any] | None:
    """results.json's ``energy``: the stored block with its total and operations per joule; None if
    absent."""
    if block is None:
        return None
    measured = [d for d in block["devices"] if d.get("joules") is not None]
    joules = sum(d["joules"] for d in measured) if measured else None
    watts = sum(d["watts"] for d in measured if d.get("watts") is not None) if measured else None
    per_joule = ops / joules if joules and block["complete"] else None
    total = {
        "joules": joules,
        "watts": watts,
        "seconds": max((d["seconds"] for d in measured), default=None),
        "sources": sorted({d["source"] for d in measured}),
        "ops_per_joule": per_joule,
        "gops_per_watt": per_joule / GIGA if per_joule is not None else None,
    }
    return {**block, "total": total}


def energy_text(energy: EnergyRecord | None) -> str:
    """One line: ``12.3 kJ, 41.0 W (rapl), 0.52 GOPS/W`` and what was not measured; or
    ``not measured: REASON``."""
    from aihpc.base.fmt import format_si

    if energy is None:
        return "not measured: this run's aihpc did not measure energy"
    total = energy.total
    if total.joules is None:
        return f"not measured: {energy.reason or 'no reason recorded'}"
    text = (
        f"{format_si(total.joules, 'J')}, {format_si(total.watts, 'W')} average "
        f"({', '.join(total.sources)})"
    )
    gops = total.gops_per_watt
    text += f", {gops:.3g} GOPS/W" if gops is not None else ", GOPS/W not given"
    if energy.reason:
        text += f"; not measured: {energy.reason}"
    return text
