"""The benchmark scripts of benchmarks/, imported as ``python benchmarks/NAME.py`` imports them
(their folder on the path) and called in this process: ``main(argv)`` returns the exit code."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], ModuleType]:
    """``bench("gpu_fill")``: the script's module."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module


@pytest.fixture
def call(
    bench: Callable[[str], ModuleType], capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str, str]]:
    """``call("gpu_fill", "--report", RUN)``: the script's ``main(argv)`` in this process; its exit
    code (argparse's own exit included), stdout and stderr.  The torch threads of this process
    are as before afterwards (a script may set them for its work, as in a process of its own)."""

    def main(name: str, *argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        message, threads = "", torch.get_num_threads()
        try:
            code = bench(name).main(list(argv))
        except SystemExit as exc:  # argparse's (an int), or a script's message (exit 1, as Python)
            code, message = (exc.code, "") if isinstance(exc.code, int) else (1, f"{exc.code}\n")
        finally:
            torch.set_num_threads(threads)
        out, err = capsys.readouterr()
        return code, out, err + message

    return main
