"""No benchmark script can break unseen (issue 41, item 3): every script under benchmarks/ (a file
run as ``python benchmarks/NAME.py`` or ``benchmarks/NAME.sh``) is run by some test of the suite,
which names it; every module there that is not a script is imported by one that is."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


def _is_script(path: Path) -> bool:
    return path.suffix == ".sh" or 'if __name__ == "__main__":' in path.read_text()


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_every_benchmark_script_is_named_by_a_test() -> None:
    tests = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("*.py"))
    scripts = [p for p in sorted(BENCHMARKS.iterdir()) if p.suffix in (".py", ".sh")]
    unnamed = [p.name for p in scripts if _is_script(p) and not re.search(rf"\b{p.stem}\b", tests)]
    assert not unnamed, f"benchmark scripts no test runs: {unnamed}"


def test_every_benchmark_module_is_imported_by_a_script() -> None:
    modules = [p for p in sorted(BENCHMARKS.glob("*.py")) if not _is_script(p)]
    imported = set().union(*(_imports(p) for p in BENCHMARKS.glob("*.py") if _is_script(p)))
    # a module may be imported by another module that a script imports
    imported |= set().union(*(_imports(p) for p in modules if p.stem in imported))
    assert not [p.name for p in modules if p.stem not in imported]
