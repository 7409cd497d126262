"""Derived figures from a results.json: where the workers' time went, and what became of the trials.

*Useful work* is the time inside training steps (data, forward, backward,
optimizer) and evaluation passes.  *Harness overhead* is the rest of the
workers' wall time: building models and loading weights, counting,
serialisation, task transfer, the master's proposals, and idle slots.

Imported by the scripts beside it; ``read_run`` reads a run's results as
every aihpc command does (a run directory or the file; an older schema upgraded).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from aihpc.records.messages import WORK_PHASES


def read_run(path: Path) -> dict[str, Any]:
    """The results of the run at ``path``: a run directory (its results.json, or results.json.gz)
    or a results file; checked and upgraded to the current schema by aihpc's own reader (a
    DataError, one line, for a missing or malformed file)."""
    from aihpc.results.read import read_results_document, results_file

    path = Path(path)
    return read_results_document(results_file(path) if path.is_dir() else path)


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


def trial_tally(results: dict[str, Any]) -> dict[str, Any]:
    """The run's trials: how many, by status, how many trained (at least one evaluated epoch),
    their epochs; and what was lost: the epochs lost with their worker (results.json's
    ``losses``: a killed or vanished worker), on how many trials, with the reasons, and the
    failed trials' reasons."""
    trials = results["trials"]
    losses = results.get("losses") or []
    return {
        "trials": len(trials),
        "by_status": dict(sorted(Counter(t["status"] for t in trials).items())),
        "trained": sum(1 for t in trials if any(e["status"] == "ok" for e in t["epochs"])),
        "epochs": sum(len(t["epochs"]) for t in trials),
        "epochs_ok": sum(1 for t in trials for e in t["epochs"] if e["status"] == "ok"),
        "lost_epochs": len(losses),
        "lost_trials": len({loss["trial_id"] for loss in losses}),
        "lost_reasons": sorted({loss["reason"] for loss in losses}),
        "failed_reasons": [t.get("reason") or "no reason" for t in trials if t["status"] == "failed"],
    }


def tally_text(tally: dict[str, Any]) -> str:
    """One line of :func:`trial_tally`: ``3 trials (completed 2, deadline 1), 2 trained, 7 epochs;
    lost: 2 epochs of 1 trial with their worker (REASON)``."""
    statuses = ", ".join(f"{k} {v}" for k, v in tally["by_status"].items())
    text = (f"{_count(tally['trials'], 'trial')} ({statuses or 'none'}), {tally['trained']} trained, "
            f"{_count(tally['epochs'], 'epoch')} ({tally['epochs_ok']} evaluated); lost: ")
    if tally["lost_epochs"]:
        text += (f"{_count(tally['lost_epochs'], 'epoch')} of {_count(tally['lost_trials'], 'trial')} with their "
                 f"worker ({'; '.join(tally['lost_reasons'])})")
    else:
        text += "none with a worker"
    if tally["failed_reasons"]:
        text += f"; {len(tally['failed_reasons'])} failed (the first: {tally['failed_reasons'][0]})"
    return text


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def worker_busy(results: dict[str, Any]) -> float | None:
    """The workers' mean busy fraction as the run measured it (a task in hand), or None."""
    fractions = [w["busy_fraction"] for w in results["workers"] if w.get("busy_fraction") is not None]
    return sum(fractions) / len(fractions) if fractions else None


def best_accuracy_at(results: dict[str, Any], seconds: float) -> float | None:
    """The best validation accuracy of any epoch that ended within ``seconds`` of the run's start."""
    accs = [e["val_accuracy"] for t in results["trials"] for e in t["epochs"]
            if e["status"] == "ok" and e["val_accuracy"] is not None and e["t_end"] <= seconds]
    return max(accs, default=None)


def quality_text(score: dict[str, Any]) -> str:
    """The run's best quality: its loss (language) or accuracy (image), or that none was measured."""
    if score.get("best_val_loss") is not None:
        floor = score.get("loss_floor")
        return f"best loss {score['best_val_loss']:.4f} (floor {'-' if floor is None else f'{floor:.4f}'})"
    if score.get("best_accuracy") is not None:
        return f"best accuracy {100 * score['best_accuracy']:.2f} %"
    return "no trial finished an evaluation"


def percent(fraction: float | None, digits: int = 1) -> str:
    """``12.3 %``, or ``-`` where there is no figure."""
    return "-" if fraction is None else f"{100 * fraction:.{digits}f} %"


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
