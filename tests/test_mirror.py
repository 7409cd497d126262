"""The tests mirror ``src/aihpc`` package by package: the tests of ``src/aihpc/<package>/`` are in
``tests/<package>/`` (a subpackage's in its folder below, where it has its own), those of the
``benchmarks/`` scripts in ``tests/benchmarks/``; at the top only what reads the whole project."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "aihpc"
TESTS = ROOT / "tests"
#: test folders of what is not a package of src/aihpc: the benchmarks/ scripts
OTHER = {"benchmarks"}
#: tests of the whole project: the docs, the layer table, this mirror, an install from wheels
WHOLE_PROJECT = {"test_docs.py", "test_layers.py", "test_mirror.py", "test_offline_install.py"}


def _packages() -> set[str]:
    """Every package of src/aihpc, as a path below it ("base", "tasks/image"...)."""
    return {str(p.parent.relative_to(SRC)) for p in SRC.rglob("__init__.py") if p.parent != SRC}


def test_every_folder_of_tests_is_a_package_s() -> None:
    folders = {str(p.parent.relative_to(TESTS)) for p in TESTS.rglob("test_*.py")} - {"."}
    assert sorted(folders - _packages() - OTHER) == []


def test_every_package_has_its_folder_of_tests() -> None:
    top = {p for p in _packages() if "/" not in p}
    assert sorted(p for p in top if not any((TESTS / p).glob("test_*.py"))) == []


def test_at_the_top_only_what_reads_the_whole_project() -> None:
    assert sorted(p.name for p in TESTS.glob("test_*.py")) == sorted(WHOLE_PROJECT)
