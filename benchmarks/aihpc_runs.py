"""What every benchmark script here that runs ``aihpc run`` shares: the runs' settings checked before
the first starts, and each run in a subprocess with its results back.

Imported by the scripts beside it (``python benchmarks/NAME.py`` puts this
folder on the import path).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from analysis import read_run


def run_argv(out: Path, minutes: float, *args: str) -> list[str]:
    """The arguments of ``aihpc`` for a run: ``run --minutes MINUTES --out OUT --no-live ARGS``."""
    return ["run", "--minutes", str(minutes), "--out", str(out), "--no-live", *args]


def run_aihpc(out: Path, minutes: float, *args: str, show: bool = False) -> dict[str, Any]:
    """``aihpc`` :func:`run_argv`, in a process of its own; its results.  Fails loudly on error.

    ``show`` lets the run's own output (its summary) through; otherwise it is discarded."""
    cmd = [sys.executable, "-m", "aihpc", *run_argv(out, minutes, *args)]
    subprocess.run(cmd, check=True, stdout=None if show else subprocess.DEVNULL)
    return read_run(out)


def check_runs(minutes: float, runs: list[tuple[str, list[str]]]) -> None:
    """Check every planned run's settings as ``aihpc run`` checks them before it starts (its
    parser, then the settings with any ``--config`` file), so that a bad setting of the last run
    stops the benchmark before the first: a ConfigError naming the first bad run (argparse's
    own exit 2, with its line, for an unknown flag)."""
    from aihpc.base.config import load_toml
    from aihpc.base.errors import ConfigError
    from aihpc.cli import build_parser
    from aihpc.cli.run import config_flags
    from aihpc.tasks import read_config

    parser = build_parser()
    for name, args in runs:
        ns = parser.parse_args(run_argv(Path(name), minutes, *args))  # the command run_aihpc runs
        try:
            values = load_toml(ns.config) if ns.config else {}
            read_config({**values, **config_flags(ns)}, source=ns.config or "config")
        except ConfigError as exc:
            raise ConfigError(f"run {name} ({' '.join(args) or 'no arguments'}): {exc}") from None
