"""The MLPerf compliance checker run on a log (aihpc.mlperf.log writes the logs).

Our rules (package data in ``rules/``) extend the checker's HPC 3.0.0
rules with aihpc's benchmarks and events.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aihpc.base.errors import ConfigError, DataError, StorageError
from aihpc.mlperf.line import LINE_PREFIX

RULES_DIR = Path(__file__).resolve().parent / "rules"
"""Folder of our compliance-checker rules (shipped as package data)."""

RULES_FILE = RULES_DIR / "aihpc_automl.yaml"
"""Entry point of our rules, passed to the checker's ``--config``."""

CHECKER_USAGE = "hpc"
CHECKER_RULESET = "3.0.0"


def check_compliance(
    log_path: str | os.PathLike[str],
    *,
    rules: str | os.PathLike[str] | None = None,
    werror: bool = False,
    timeout_s: float = 120.0,
) -> tuple[bool, str]:
    """Run the MLPerf compliance checker on ``log_path``; return ``(ok, output)``.

    Runs ``python -m mlperf_logging.compliance_checker --usage hpc --ruleset
    3.0.0 --config RULES LOG`` in a subprocess (``RULES`` defaults to
    :data:`RULES_FILE`, made absolute) with its own log file in a temporary
    directory.  ``ok`` is True only when the checker exits 0 and reports
    SUCCESS; ``output`` is its combined stdout and stderr.  ``werror`` turns
    the checker's warnings (e.g. a once-only key repeated with equal values)
    into failures.  Raises :class:`DataError` if the log is missing (an
    input), :class:`ConfigError` if the rules file is (the checker's
    configuration).
    """
    log = Path(log_path).resolve()
    rules_path = Path(RULES_FILE if rules is None else rules).resolve()
    if not log.is_file():
        raise DataError(f"MLPerf log file must exist, got {str(log_path)!r}")
    if not rules_path.is_file():
        raise ConfigError(f"compliance rules file must exist, got {str(rules)!r}")
    with tempfile.TemporaryDirectory(prefix="aihpc-mlperf-check-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "mlperf_logging.compliance_checker",
            "--usage",
            CHECKER_USAGE,
            "--ruleset",
            CHECKER_RULESET,
            "--config",
            str(rules_path),
            "--log_output",
            str(Path(tmp) / "compliance_checker.log"),
            *(["--werror"] if werror else []),
            str(log),
        ]
        try:
            proc = subprocess.run(
                cmd, cwd=tmp, capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            return False, f"compliance checker timed out after {timeout_s} s: {' '.join(cmd)}"
    output = proc.stdout + proc.stderr
    ok = proc.returncode == 0 and "SUCCESS" in output
    return ok, output


def iter_events(
    path: Path, mentioning: str | None = None
) -> Iterator[tuple[int, dict[str, Any] | None]]:
    """Each non-blank line's number and its MLLOG event (None for a line that is not one), a line
    at a time: memory does not grow with the log.  With ``mentioning``, only the lines that
    contain that text are parsed and given.  StorageError if it cannot be read."""
    try:
        with open(path, encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):
                if not line.strip() or (mentioning is not None and mentioning not in line):
                    continue
                try:
                    event = (
                        json.loads(line[len(LINE_PREFIX) :])
                        if line.startswith(LINE_PREFIX)
                        else None
                    )
                except json.JSONDecodeError:
                    event = None
                yield number, event if isinstance(event, dict) else None
    except (OSError, UnicodeDecodeError) as exc:
        raise StorageError(f"cannot read MLPerf log {path}: {exc}") from None
