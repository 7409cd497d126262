"""Derived figures from a results.json: where the workers' time went.

*Useful work* is the time inside training steps (data, forward, backward,
optimizer) and evaluation passes.  *Harness overhead* is the rest of the
workers' wall time: building models and loading weights, counting,
serialisation, task transfer, the master's proposals, and idle slots.
"""

from __future__ import annotations

from typing import Any

WORK_PHASES = ("data", "forward", "backward", "optimizer", "eval")


def utilisation(results: dict[str, Any]) -> dict[str, Any]:
    """Share of the workers' wall time spent in useful work, and the overhead."""
    wall = results["score"]["wall_seconds"]
    workers = max(len(results["workers"]), 1)
    layout = results.get("layout") or {}
    slots = max(int(layout.get("workers") or workers), workers)
    work = sum(t["phase_seconds"].get(p, 0.0) for t in results["trials"] for p in WORK_PHASES)
    other = sum(t["phase_seconds"].get("other", 0.0) for t in results["trials"])
    busy = sum(w["busy_seconds"] for w in results["workers"])
    capacity = slots * wall
    return {
        "worker_slots": slots,
        "wall_seconds": wall,
        "work_seconds": work,
        "task_other_seconds": other,
        "busy_seconds": busy,
        "work_fraction": work / capacity if capacity else 0.0,
        "overhead_fraction": 1.0 - work / capacity if capacity else 1.0,
        "idle_fraction": 1.0 - busy / capacity if capacity else 1.0,
    }


def best_accuracy_at(results: dict[str, Any], seconds: float) -> float | None:
    """The best validation accuracy of any epoch that ended within ``seconds`` of the run's start."""
    accs = [e["val_accuracy"] for t in results["trials"] for e in t["epochs"]
            if e["status"] == "ok" and e["val_accuracy"] is not None and e["t_end"] <= seconds]
    return max(accs, default=None)


def peak_text(results: dict[str, Any]) -> list[str]:
    """The score's share of the measured peak (with the kernel that set it) and of the nominal
    peak, as the benchmarks print them; nothing where no peak was measured."""
    s, peak = results["score"], results.get("peak") or {}
    if s.get("peak_fraction") is None:
        return []
    kernels = ", ".join(peak.get("kernels") or ["matmul"])
    lines = [f"share of peak     {100 * s['peak_fraction']:.1f} % of the measured "
             f"{s['peak_flops_per_s'] / 1e9:.1f} GFLOP/s ({peak.get('dtype')} {kernels}, all workers)"]
    if s.get("nominal_peak_fraction") is not None:
        nominal = peak.get("nominal") or {}
        lines.append(f"                  {100 * s['nominal_peak_fraction']:.1f} % of the nominal "
                     f"{s['nominal_peak_flops_per_s'] / 1e9:.1f} GFLOP/s ({nominal.get('derivation')})")
    lines += [f"warning           {w}" for w in (s.get("peak_warning"), peak.get("above_nominal")) if w]
    return lines
