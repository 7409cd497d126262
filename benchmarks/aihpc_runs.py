"""What every benchmark script here does first: one ``aihpc run`` in a subprocess, its results.json back.

Imported by the scripts beside it (``python benchmarks/NAME.py`` puts this
folder on the import path).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def run_aihpc(out: Path, minutes: float, *args: str, show: bool = False) -> dict:
    """``aihpc run --minutes MINUTES --out OUT --no-live ARGS``; its results.json.  Fails loudly on error.

    ``show`` lets the run's own output (its summary) through; otherwise it is discarded."""
    cmd = [sys.executable, "-m", "aihpc", "run", "--minutes", str(minutes), "--out", str(out), "--no-live", *args]
    subprocess.run(cmd, check=True, stdout=None if show else subprocess.DEVNULL)
    return json.loads((Path(out) / "results.json").read_text())
