"""How typed the seams between aihpc's modules are, at one or more git revisions.

    python benchmarks/seams.py [REV ...]        (default: HEAD)

For each revision, read from git (the working tree is not touched), over
``src/aihpc``: literal-key look-ups (``x["key"]``) and ``.get("key")`` calls
(in all, and in the packages that read result documents), public functions
whose signature mentions ``Any``, those taking or returning ``dict[str, Any]``
and those returning it,
parameters without an annotation (``self`` and ``cls`` left out), modules in
the package root, the packages mypy checks strictly (pyproject.toml's
overrides), and the lines of README.md and ARCHITECTURE.md.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

from bench_main import script

ROOT = Path(__file__).resolve().parents[1]


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout


def read_files(rev: str, paths: list[str]) -> dict[str, str | None]:
    """The text of each of ``paths`` at ``rev`` (None where it is not there), read by one
    ``git cat-file --batch`` (its answer: a header ``OID TYPE SIZE`` or ``NAME missing``, then
    the object and a newline)."""
    request = "".join(f"{rev}:{path}\n" for path in paths).encode()
    data = subprocess.run(
        ["git", "cat-file", "--batch"], cwd=ROOT, input=request, capture_output=True, check=True
    ).stdout
    texts: dict[str, str | None] = {}
    at = 0
    for path in paths:
        end = data.index(b"\n", at)
        header, at = data[at:end].split(), end + 1
        if header[-1] == b"missing":
            texts[path] = None
            continue
        size = int(header[2])
        texts[path] = data[at : at + size].decode()
        at += size + 1
    return texts


#: the packages that read result documents, whose look-ups are counted apart
READERS = ("results", "records", "report", "verify", "ranking", "infer")


@dataclass
class Counts:
    literal_key_lookups: int = 0
    literal_get_calls: int = 0
    lookups_and_gets_by_reader: str = ""
    public_signatures_with_dict_str_any: int = 0
    public_functions_with_any: int = 0
    public_functions_returning_dict_str_any: int = 0
    unannotated_parameters: int = 0
    modules_in_package_root: int = 0
    strict_mypy_packages: str = ""
    readme_lines: int = 0
    architecture_lines: int = 0


def _signature_text(node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, str]:
    args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
    args += [a for a in (node.args.vararg, node.args.kwarg) if a is not None]
    text = " ".join(ast.unparse(a.annotation) for a in args if a.annotation is not None)
    returns = ast.unparse(node.returns) if node.returns is not None else ""
    return text, returns


def _unannotated(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
    args += [a for a in (node.args.vararg, node.args.kwarg) if a is not None]
    return sum(1 for a in args if a.annotation is None and a.arg not in {"self", "cls"})


def _is_literal_get(node: ast.AST) -> bool:
    """``x.get("key", ...)``: a look-up by a literal key through ``get``."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    )


def count_module(source: str, counts: Counts) -> int:
    """Add the module's figures to ``counts``; its literal look-ups and gets."""
    lookups = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            literal = isinstance(node.slice.value, str)
            counts.literal_key_lookups += literal
            lookups += literal
        if _is_literal_get(node):
            counts.literal_get_calls += 1
            lookups += 1
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            counts.unannotated_parameters += _unannotated(node)
            if node.name.startswith("_"):
                continue
            params, returns = _signature_text(node)
            counts.public_functions_with_any += "Any" in params or "Any" in returns
            counts.public_functions_returning_dict_str_any += "dict[str, Any]" in returns
            counts.public_signatures_with_dict_str_any += "dict[str, Any]" in f"{params} {returns}"
    return lookups


#: the per-module flags that mypy's --strict turns on (pyproject.toml spells them out)
STRICT_FLAGS = (
    "disallow_any_generics",
    "disallow_subclassing_any",
    "disallow_untyped_calls",
    "disallow_untyped_defs",
    "disallow_incomplete_defs",
    "check_untyped_defs",
    "disallow_untyped_decorators",
    "warn_return_any",
    "no_implicit_reexport",
    "strict_equality",
    "extra_checks",
)


def strict_packages(pyproject: str) -> str:
    """The modules of the mypy overrides that set ``strict`` or every flag it stands for."""
    overrides = tomllib.loads(pyproject).get("tool", {}).get("mypy", {}).get("overrides", [])
    names = []
    for block in overrides:
        if block.get("strict") or all(block.get(flag) for flag in STRICT_FLAGS):
            module = block["module"]
            names += [module] if isinstance(module, str) else module
    return ", ".join(sorted(names)) or "none"


def counts_at(rev: str) -> Counts:
    counts = Counts()
    sources = [
        p
        for p in git("ls-tree", "-r", "--name-only", rev, "src/aihpc").split()
        if p.endswith(".py")
    ]
    texts = read_files(rev, [*sources, "pyproject.toml", "README.md", "ARCHITECTURE.md"])
    by_reader = dict.fromkeys(READERS, 0)
    for path in sources:
        lookups = count_module(texts[path] or "", counts)
        package = path.split("/")[2]
        if package in by_reader:
            by_reader[package] += lookups
        counts.modules_in_package_root += path.count("/") == 2 and not path.endswith(
            ("/__init__.py", "/__main__.py")
        )
    counts.lookups_and_gets_by_reader = ", ".join(f"{k} {v}" for k, v in by_reader.items())
    counts.strict_mypy_packages = strict_packages(texts["pyproject.toml"] or "")
    counts.readme_lines = len((texts["README.md"] or "").splitlines())
    counts.architecture_lines = len((texts["ARCHITECTURE.md"] or "").splitlines())
    return counts


@script
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revs", nargs="*", default=["HEAD"])
    args = parser.parse_args(argv)
    table = {rev: counts_at(rev) for rev in args.revs}
    print("| measure | " + " | ".join(args.revs) + " |")
    print("| --- |" + " ---: |" * len(args.revs))
    for field in fields(Counts):
        row = [str(getattr(table[rev], field.name)) for rev in args.revs]
        print(f"| {field.name.replace('_', ' ')} | " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
