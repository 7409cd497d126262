"""The test suite's time by xdist group, from a JUnit XML file that pytest wrote.

    .venv/bin/python -m pytest -n auto --dist loadgroup --junitxml=/tmp/suite.xml
    python benchmarks/test_groups.py /tmp/suite.xml [--top 20]

Each test's seconds are summed by its xdist group (the tests of a group run
one after another in one process; ungrouped tests spread over every
process) and by file; a group's sum is the least wall time the suite can
take. The file's own total wall time is printed beside them (xdist names a
grouped test ``name@group``).
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

from bench_main import script


@script
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", type=Path)
    parser.add_argument("--top", type=int, default=20, help="files listed (default 20)")
    args = parser.parse_args(argv)
    suite = ET.parse(args.junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    assert suite is not None, f"no testsuite in {args.junit}"
    by_group: dict[str, float] = defaultdict(float)
    by_file: dict[str, float] = defaultdict(float)
    for case in suite.iter("testcase"):
        file = case.get("classname", "").replace(".", "/") + ".py"
        name = case.get("name", "")  # "test_x[param]@group" under --dist loadgroup
        seconds = float(case.get("time", 0))
        by_group[name.partition("@")[2] or "(no group)"] += seconds
        by_file[file] += seconds
    print(f"wall {float(suite.get('time', 0)):.0f} s, {suite.get('tests')} tests")
    print("| group | seconds |\n| --- | ---: |")
    for group, seconds in sorted(by_group.items(), key=lambda kv: -kv[1]):
        print(f"| {group} | {seconds:.0f} |")
    print(f"| all | {sum(by_group.values()):.0f} |\n")
    for file, seconds in sorted(by_file.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"{seconds:7.1f}  {file}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
