"""Weak scaling: the benchmark at several worker counts, threads per worker fixed.

Each size is a full ``aihpc run`` in its own run directory (a fresh cluster
each time), with the same settings but the number of workers.  Weak-scaling
efficiency at n workers = (score(n) / n) / (score(n0) / n0), n0 the smallest
size: 1.0 is perfectly linear.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from aihpc.base.errors import ConfigError, StorageError, kind_of_exit
from aihpc.results.read import read_run_head, results_file


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(
            f"workers must be a comma-separated list of integers, got {text!r}"
        ) from None
    if not sizes or any(n < 1 for n in sizes):
        raise ConfigError(f"workers must be integers >= 1, got {text!r}")
    return sorted(set(sizes))


def run_scaling(
    sizes: list[int], minutes: float, out: Path, extra: list[str], threads: int = 1
) -> dict[str, Any]:
    """Run the benchmark at each size; write ``scaling.json`` and ``scaling.png`` in ``out``."""
    if minutes <= 0:
        raise ConfigError(f"minutes must be > 0, got {minutes}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot create {out}: {exc.strerror or exc}") from None
    rows: list[dict[str, Any]] = []
    for n in sizes:
        run_dir = out / f"workers-{n}"
        cmd = [
            sys.executable,
            "-m",
            "aihpc",
            "run",
            "--no-live",
            "--minutes",
            str(minutes),
            "--workers",
            str(n),
            "--threads-per-worker",
            str(threads),
            "--out",
            str(run_dir),
            *extra,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise kind_of_exit(proc.returncode)(f"the run with {n} workers failed: {last}")
        score = read_run_head(results_file(run_dir)).score.score()
        rows.append(
            {
                "workers": n,
                "score": score.ops_per_second,
                "run_dir": str(run_dir),
                "best_accuracy": score.best_accuracy,
                **({"best_val_loss": score.best_val_loss} if score.is_loss else {}),
                "valid": score.valid,
            }
        )
    base = rows[0]["score"] / rows[0]["workers"]
    for r in rows:
        r["score_per_worker"] = r["score"] / r["workers"]
        r["efficiency"] = r["score_per_worker"] / base if base > 0 else 0.0
    result = {"minutes": minutes, "threads_per_worker": threads, "sizes": rows}
    (out / "scaling.json").write_text(json.dumps(result, sort_keys=True, indent=2) + "\n")
    plot_scaling(result, out / "scaling.png")
    return result


def format_scaling(result: dict[str, Any], out: Path) -> str:
    """The table of :func:`run_scaling`'s result, one row per size, and the files written."""
    lines = [f"{'workers':>7}  {'score':>12}  {'per worker':>12}  {'efficiency':>10}"]
    for r in result["sizes"]:
        lines.append(
            f"{r['workers']:>7}  {r['score'] / 1e9:>8.2f} GOPS  "
            f"{r['score_per_worker'] / 1e9:>8.2f} GOPS  {100 * r['efficiency']:>9.1f}%"
        )
    lines.append(f"written: {out / 'scaling.json'}, {out / 'scaling.png'}")
    return "\n".join(lines)


def plot_scaling(result: dict[str, Any], path: Path) -> None:
    from matplotlib.figure import Figure

    rows = result["sizes"]
    n = [r["workers"] for r in rows]
    fig = Figure(figsize=(8, 3.2), dpi=100)
    ax1, ax2 = fig.subplots(1, 2)
    ax1.plot(n, [r["score"] / 1e9 for r in rows], "o-", label="measured")
    ax1.plot(
        n,
        [rows[0]["score"] / rows[0]["workers"] * k / 1e9 for k in n],
        "--",
        color="grey",
        label="linear",
    )
    ax1.set_xlabel("workers")
    ax1.set_ylabel("score (GOPS)")
    ax1.legend()
    ax2.plot(n, [100 * r["efficiency"] for r in rows], "o-")
    ax2.axhline(90, color="grey", linestyle=":")
    ax2.set_ylim(0, 110)
    ax2.set_xlabel("workers")
    ax2.set_ylabel("weak-scaling efficiency (%)")
    for ax in (ax1, ax2):
        ax.set_xticks(n)
    fig.tight_layout()
    fig.savefig(path)
