"""The layout's one rule: a module imports only from lower layers (or its own package).

Every ``import`` in ``src/aihpc`` is read from the source, the ones inside
functions too (heavy libraries are imported lazily, and so are some of
aihpc's own modules), and resolved to the module it names.  The layers are
the table in ARCHITECTURE.md, read from it here: a new package gets its line
there.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "aihpc"
MAP = ROOT / "ARCHITECTURE.md"


def read_layers(markdown: str) -> dict[str, int]:
    """Top-level module or package -> layer, from the map's table: rows ``| N | `pkg/`, ... |``."""
    layers: dict[str, int] = {}
    for line in markdown.splitlines():
        row = re.match(r"\|\s*(\d+)\s*\|([^|]*)\|", line)
        if row:
            for name in re.findall(r"`([\w_]+)/?`", row.group(2)):
                assert name not in layers, f"{name} is in two rows of {MAP.name}'s table"
                layers[name] = int(row.group(1))
    return layers


# top-level module or package -> layer; lower layers never import higher ones
LAYERS = read_layers(MAP.read_text())


def module_name(path: Path) -> str:
    parts = ["aihpc", *path.relative_to(SRC).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def imported(name: str) -> set[str]:
    """The aihpc modules that module ``name`` imports."""
    path = MODULES[name]
    return imports_of(path.read_text(), name, is_package=path.name == "__init__.py")


def imports_of(source: str, name: str, is_package: bool = False) -> set[str]:
    """The aihpc modules that ``source`` (module ``name``) imports, resolved to the module, not the
    package, where one is named."""
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def top(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


GRAPH = {name: imported(name) for name in MODULES}


def test_every_package_has_a_layer():
    assert sorted({top(m) for m in MODULES} - set(LAYERS)) == []


def test_no_import_runs_up_or_across_a_layer():
    wrong = [
        f"{a} (layer {LAYERS[top(a)]}) imports {b} (layer {LAYERS[top(b)]})"
        for a, targets in GRAPH.items()
        for b in sorted(targets)
        if top(a) != top(b) and LAYERS[top(b)] >= LAYERS[top(a)]
    ]
    assert wrong == []


def test_no_two_modules_import_each_other():
    pairs = sorted(
        {tuple(sorted((a, b))) for a, targets in GRAPH.items() for b in targets if a in GRAPH[b]}
    )
    assert pairs == []


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from aihpc.records.store import RunStore", {"aihpc.records.store"}),
        ("from aihpc import models", {"aihpc.models"}),
        ("def f():\n    from aihpc.base.fmt import format_si", {"aihpc.base.fmt"}),
        ("from . import store", {"aihpc.records.store"}),
    ],
)
def test_imports_are_resolved_to_the_module_named(source, expected):
    """The reader itself: lazy, relative and package-attribute imports are each seen."""
    assert imports_of(source, "aihpc.records.probe") == expected


def test_the_map_has_every_package_and_no_other():
    """The table names what exists: a package moved or removed leaves no stale row."""
    assert sorted(set(LAYERS) - {top(m) for m in MODULES}) == []


def test_the_package_root_holds_no_modules_but_its_own():
    """Every module lives in a package of its layer; the root keeps the version and ``-m``."""
    assert sorted(p.name for p in SRC.glob("*.py")) == ["__init__.py", "__main__.py"]
