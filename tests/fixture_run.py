"""A real run of ``aihpc run`` for the verify, compare and rank tests, which tamper with copies.

``fixtures/run`` is a run directory that ``aihpc run`` wrote (its weights
left out: nothing checks them), kept so that the tests do not depend on how
many epochs a busy machine fits into a budget.  Regenerate it (after a change
to the store, results.json, the MLPerf log or operation counting) with::

    aihpc run --minutes 1 --config tests/fixtures/run.toml --seed 3 --no-live --out /tmp/run
    rm -rf tests/fixtures/run && mkdir tests/fixtures/run
    cp /tmp/run/{aihpc.sqlite,results.json,mlperf.log} tests/fixtures/run/
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures"


def aihpc(*args: str, timeout: float = 240, **kw: Any) -> subprocess.CompletedProcess:
    """``python -m aihpc *args``, its output captured as text; ``kw`` goes to subprocess.run."""
    return subprocess.run(
        [sys.executable, "-m", "aihpc", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        **kw,
    )
