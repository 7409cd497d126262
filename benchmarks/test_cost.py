"""What each test costs in CPU: the busy core-seconds of the machine while it runs, serially.

    python benchmarks/test_cost.py DIR [--page PAGE] [--top 30] [-- PYTEST_ARGS ...]
    python benchmarks/test_cost.py DIR --report        # the table of DIR/test-cost.tsv again

The suite under ``make test`` is CPU-bound (every core busy from its first test to its last), so
its time is its CPU time over the cores; what to cut is what costs the most CPU.  A test's
own process time misses most of it: a whole run's Dask workers, rank processes and SLURM jobs
are not children the test waits for.  So the suite runs in one process (no xdist), and each test
is charged the machine's busy core-seconds (``/proc/stat``, all processes) from its start to its
end, with its wall seconds.  Run it on a quiet machine: other work is charged to the tests.  The
test processes keep torch to one thread, as under ``make test`` (``tests/conftest.py``, four
processes on two cores).

This file is also the pytest plugin the run loads (``-p test_cost``): it appends one line per
test to ``$TEST_COST_OUT``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench_main import script
from machine_cpu import machine_busy_seconds

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# a test that costs this many core-seconds or more is listed apart
COSTLY = 5.0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """The plugin: one line per test, ``nodeid<TAB>wall seconds<TAB>busy core-seconds``."""
    busy, start = machine_busy_seconds(), time.monotonic()
    yield
    line = f"{item.nodeid}\t{time.monotonic() - start:.2f}\t{machine_busy_seconds() - busy:.2f}\n"
    with open(os.environ["TEST_COST_OUT"], "a") as f:
        f.write(line)


def run_suite(out: Path, pytest_args: list[str]) -> int:
    """The suite (or ``pytest_args``' part of it) in one process, each test charged to ``out``."""
    out.unlink(missing_ok=True)
    env = {
        **os.environ,
        "TEST_COST_OUT": str(out),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
        "PYTEST_XDIST_WORKER_COUNT": "4",  # one torch thread per test process, as make test
    }
    command = [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "test_cost", "-q"]
    return subprocess.run([*command, *pytest_args], cwd=ROOT, env=env).returncode


def report(rows: list[tuple[str, float, float]], top: int) -> str:
    """The tests' CPU by file, the costliest tests, and how much the costly ones take."""
    total = sum(c for _, _, c in rows)
    wall = sum(w for _, w, _ in rows)
    costly = [cost for *_, cost in rows if cost >= COSTLY]
    by_file: dict[str, float] = defaultdict(float)
    for name, _, cost in rows:
        by_file[name.split("::")[0]] += cost
    lines = [
        f"{len(rows)} tests, {total:.0f} core-s busy in {wall:.0f} s run one at a time; "
        f"{len(costly)} tests of {COSTLY:g} core-s or more take {sum(costly):.0f} "
        f"core-s ({100 * sum(costly) / max(total, 1e-9):.0f} %)",
        "",
        "| file | core-s | share |",
        "| --- | ---: | ---: |",
    ]
    for file, cost in sorted(by_file.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"| `{file}` | {cost:.1f} | {100 * cost / max(total, 1e-9):.1f} % |")
    lines += ["", "| test | core-s | wall s |", "| --- | ---: | ---: |"]
    for name, seconds, cost in sorted(rows, key=lambda r: -r[2])[:top]:
        lines.append(f"| `{name}` | {cost:.1f} | {seconds:.1f} |")
    return "\n".join(lines) + "\n"


def read_rows(path: Path) -> list[tuple[str, float, float]]:
    rows = []
    for line in path.read_text().splitlines():
        name, seconds, cost = line.split("\t")
        rows.append((name, float(seconds), float(cost)))
    return rows


@script
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    pytest_args: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, pytest_args = argv[:split], argv[split + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, help="where test-cost.tsv and test-cost.md are kept")
    parser.add_argument("--report", action="store_true", help="only report DIR/test-cost.tsv")
    parser.add_argument("--page", type=Path, help="also write the report here (a dated page)")
    parser.add_argument("--top", type=int, default=30, help="files and tests listed (30)")
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    tsv = args.dir / "test-cost.tsv"
    code = 0
    if not args.report:
        code = run_suite(tsv, pytest_args)
    if not tsv.exists():
        print(f"test_cost: no test ran: {tsv} was not written", file=sys.stderr)
        return code or 1
    text = report(read_rows(tsv), args.top)
    (args.dir / "test-cost.md").write_text(text)
    if args.page:
        args.page.write_text(text)
    print(text, end="")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
