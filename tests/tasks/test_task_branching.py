"""No module outside ``tasks/`` branches on which task a run is: what differs is the Task's to say.

Every module of ``src/aihpc`` outside ``src/aihpc/tasks/`` is read as source (its docstrings
left out) and refused where it:

* compares something named ``task`` (``config.run.task``, ``source.task``, ``task.name``,
  ``config.get("task")``...) with a string (``== "image"``, ``in ("lm", ...)``);
* names the language task in a string at all (``"lm"`` means nothing else in aihpc);
* asks the registry for a task by a name written in the code (``task_of("lm")``);
* tests a value against a class or constant of a task's package (``isinstance(x, LMSpec)``,
  ``quality is LOSS``), or calls one of the functions that tell a task from its data
  (``is_lm_arch``, ``quality_of``).

A task's own modules (``tasks/image/``, ``tasks/language/``) and the registry may name tasks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from aihpc.tasks import names

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "aihpc"
TASKS = SRC / "tasks"
#: functions that tell a task from its data rather than asking the run's task
SNIFFERS = {"is_lm_arch", "quality_of"}


def task_package_names() -> set[str]:
    """The classes and module-level constants the task packages define (``ArchSpec``,
    ``LMSpec``, ``SpecNet``, ``LOSS``...): a test against one is a test of the task."""
    found: set[str] = set()
    for path in TASKS.rglob("*.py"):
        if path.parent == TASKS:  # the interface and the registry: every task's
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                found.add(node.name)
            elif isinstance(node, ast.Assign):
                found.update(
                    t.id for t in node.targets if isinstance(t, ast.Name) and t.id.isupper()
                )
    return found


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are docstrings (or bare string statements)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }


def branches(source: str, package_names: set[str]) -> list[str]:
    """Where ``source`` branches on the task: ``line: what`` for each place."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_names_task(o) for o in operands) and any(_strings(o) for o in operands):
                found.append(f"{line}: compares the task with a string: {ast.unparse(node)}")
            elif any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops) and any(
                _names(o) & package_names for o in operands
            ):
                found.append(f"{line}: compares with a task package's name: {ast.unparse(node)}")
        elif isinstance(node, ast.Call):
            called = ast.unparse(node.func).rpartition(".")[2]
            if called in ("isinstance", "issubclass") and len(node.args) == 2:
                if _names(node.args[1]) & package_names:
                    found.append(f"{line}: tests a task package's class: {ast.unparse(node)}")
            elif called in SNIFFERS:
                found.append(f"{line}: tells the task from its data: {ast.unparse(node)}")
            elif called == "task_of" and any(isinstance(a, ast.Constant) for a in node.args):
                found.append(f"{line}: names a task in the code: {ast.unparse(node)}")
        elif isinstance(node, ast.Constant) and node.value == "lm" and id(node) not in docs:
            found.append(f"{line}: names the language task: 'lm'")
    return found


def _names(node: ast.AST) -> set[str]:
    """Every identifier in an expression (names and attribute names)."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
    return out


def _strings(node: ast.AST) -> list[str]:
    """The string constants an operand is or holds (a tuple, list or set of them)."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [e.value for e in items if isinstance(e, ast.Constant) and isinstance(e.value, str)]


def _names_task(node: ast.AST) -> bool:
    """Whether an operand is the task or its name: ``task``, ``config.run.task``, ``task.name``,
    ``config.get("task")``..."""
    inner = [n.value for n in ast.walk(node) if isinstance(n, ast.Constant)]
    return "task" in _names(node) or "task" in inner


def scan() -> dict[str, list[str]]:
    """Each module outside ``tasks/`` that branches on the task, with where."""
    package_names = task_package_names()
    out: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        if TASKS in path.parents:
            continue
        found = branches(path.read_text(), package_names)
        if found:
            out[str(path.relative_to(ROOT))] = found
    return out


def test_no_module_outside_tasks_branches_on_the_task() -> None:
    assert scan() == {}


def test_the_scan_reads_the_whole_tree_and_knows_the_task_packages() -> None:
    outside = [p for p in SRC.rglob("*.py") if TASKS not in p.parents]
    assert len(outside) > 150
    assert {"ArchSpec", "LMSpec", "SpecNet", "LMNet"} <= task_package_names()
    assert {"image", "lm"} <= set(names())


@pytest.mark.parametrize(
    "source",
    [
        "if config.run.task == 'image':\n    pass",
        "x = 1 if source.task != 'lm' else 2",
        "workload = 'a' if task in ('image', 'other') else 'b'",
        "ok = config.get('task') == 'whatever'",
        "spec = task_of('lm').arch(d)",
        "def f(a):\n    return isinstance(a, LMSpec)",
        "def f(a):\n    return isinstance(a, (int, spec.ArchSpec))",
        "flag = quality is LOSS",
        "flag = is_lm_arch(arch)",
        "names = {'lm': 1}",
    ],
)
def test_the_scan_finds_each_way_of_branching(source: str) -> None:
    assert branches(source, {"ArchSpec", "LMSpec", "LOSS"})


@pytest.mark.parametrize(
    "source",
    [
        '"""The lm task is a docstring\'s business."""',
        "task = task_of(config.run.task)",
        "if info.input_kind == 'image':\n    pass",
        "mode = 'image' if x else 'y'",
        "ok = count == 3",
    ],
)
def test_the_scan_lets_what_is_not_branching_pass(source: str) -> None:
    assert branches(source, {"ArchSpec", "LMSpec", "LOSS"}) == []
