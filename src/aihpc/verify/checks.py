"""What ``aihpc verify``'s checks report: mismatches, each check's outcome, the verdict."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Mismatch:
    """One thing that does not agree: which check found it, where, and what."""

    check: str
    what: str
    trial: int | None = None
    epoch: int | None = None

    def line(self) -> str:
        where = (
            ""
            if self.trial is None
            else f"trial {self.trial}" + (f" epoch {self.epoch}" if self.epoch else "")
        )
        return f"{self.check}: {where + ': ' if where else ''}{self.what}"


@dataclass(frozen=True)
class Check:
    """One check's outcome: ``ok``, ``failed`` or ``unchecked``, with what it covered."""

    name: str
    status: str
    detail: str


@dataclass(frozen=True)
class Verification:
    """The outcome of `aihpc verify` on one run: each check's and every mismatch found."""

    run_dir: str
    checks: tuple[Check, ...]
    mismatches: tuple[Mismatch, ...]

    @property
    def status(self) -> str:
        """'yes' (every check passed), 'no' (a mismatch), 'unchecked' (no mismatch, but a check
        could not run)."""
        if self.mismatches or any(c.status == "failed" for c in self.checks):
            return "no"
        return "unchecked" if any(c.status == "unchecked" for c in self.checks) else "yes"

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_dir": self.run_dir,
            "status": self.status,
            "checks": [c.__dict__ for c in self.checks],
            "mismatches": [{**m.__dict__, "line": m.line()} for m in self.mismatches],
        }

    def render(self) -> str:
        """The verdict, one line per check, then every mismatch: what ``aihpc verify`` prints."""
        verdict = {
            "yes": "VERIFIED",
            "no": f"NOT VERIFIED ({len(self.mismatches)} mismatches)",
            "unchecked": "VERIFIED, "
            + ", ".join(c.name for c in self.checks if c.status == "unchecked")
            + " unchecked",
        }[self.status]
        lines = [f"aihpc verify {self.run_dir}: {verdict}"]
        width = max(len(c.name) for c in self.checks)
        for check in self.checks:
            lines.append(f"  {check.name:<{width}}  {check.status:<9}  {check.detail}")
        if self.mismatches:
            lines.append("mismatches:")
            lines.extend(f"  {m.line()}" for m in self.mismatches)
        return "\n".join(lines)


class Found:
    """The mismatches of one check, and its outcome."""

    def __init__(self, check: str) -> None:
        self.check = check
        self.items: list[Mismatch] = []

    def add(self, what: str, trial: int | None = None, epoch: int | None = None) -> None:
        self.items.append(Mismatch(self.check, what, trial, epoch))

    def outcome(self, detail: str) -> Check:
        return Check(self.check, "failed" if self.items else "ok", detail)


def same(a: Any, b: Any, rel: float = 1e-12) -> bool:
    """Equal JSON values; floats to ``rel`` (results.json round-trips floats exactly, so this is
    strict)."""
    if isinstance(a, float) or isinstance(b, float):
        numbers = [isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b)]
        if not all(numbers):
            return False
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=rel, abs_tol=0.0)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], rel) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y, rel) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def diffs(a: Any, b: Any, path: str) -> Iterator[tuple[str, Any, Any]]:
    """Yield (path, a's value, b's value) for each leaf where two JSON values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(a.keys() | b.keys(), key=str):
            yield from diffs(a.get(key, "<absent>"), b.get(key, "<absent>"), f"{path}.{key}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from diffs(x, y, f"{path}[{i}]")
    elif not same(a, b):
        yield path, a, b
