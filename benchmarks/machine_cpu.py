"""The machine's busy CPU time, for the scripts beside it that charge work by it
(``search_value.py``'s foreign CPU, ``test_cost.py``'s each test)."""

from __future__ import annotations

import os
from pathlib import Path


def machine_busy_seconds() -> float:
    """CPU seconds every process of this machine has used since boot (``/proc/stat``)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
