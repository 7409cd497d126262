"""The search's lineage: which trial came from which, by which morphism, with what quality.

:func:`build_lineage` turns the trials of results.json (each with its
``parent``, ``morph`` and best value of the run's quality: ``best_val_accuracy``
or ``best_val_loss``, its task's ReportQuality) into a :class:`Lineage` of
frozen :class:`LineageNode`; :func:`aihpc.report.lineage_plot.plot_lineage`
draws it (trial id across, the quality up, a line from each parent to its child, the best
trial's ancestry in bold) and :func:`lineage_html` writes the ancestry of the best trial in
full and the rest of the tree as collapsed ``<details>`` branches, so a run of
a few hundred trials stays readable.  A chain of only children is listed flat;
the tree nests only where a trial has several children.

Parents that are unknown (not among the trials) or part of a cycle make their trial a
root, so a damaged file still renders.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aihpc.base.fmt import NA
from aihpc.records.rows import SUCCEEDED
from aihpc.results.trial import TrialRecord
from aihpc.tasks.quality import ReportQuality

#: The morphism kinds the search makes, with their plot colours: a CNN's
#: (aihpc.tasks.image.morphism), then a language model's growth steps
#: (aihpc.tasks.language.morphism), each like its CNN analogue.
MORPH_COLORS = {
    "seed": "#212121",
    "deepen": "#1e88e5",
    "widen": "#43a047",
    "skip": "#fb8c00",
    "block": "#1e88e5",
    "mlp": "#43a047",
    "heads": "#fb8c00",
    "stream": "#00897b",
    "context": "#d81b60",
}
_OTHER_MORPH_COLOR = "#8e24aa"
#: A language model's growth steps by how their descriptions begin, and their kinds.
_LM_MORPHS = (
    (re.compile(r"add block\b"), "block"),
    (re.compile(r"widen mlp\b"), "mlp"),
    (re.compile(r"add \d+ heads?\b"), "heads"),
    (re.compile(r"widen stream\b"), "stream"),
    (re.compile(r"grow context\b"), "context"),
)
#: Nesting deeper than this shows a note instead (the trials table lists every trial).
MAX_NESTING = 40


@dataclass(frozen=True)
class LineageNode:
    """One trial in the search tree."""

    id: int
    parent: int | None  # None for a root
    morph: str
    kind: str  # "seed", "deepen", "widen", "skip", ... ("widen+deepen" for several morphisms)
    value: float | None  # the trial's best value of the run's quality (Lineage.quality)
    status: str
    children: tuple[int, ...]


@dataclass(frozen=True)
class Lineage:
    """The search tree: nodes by trial id, the roots, the best trial's ancestry (root first), and
    the quality the nodes' values are of."""

    nodes: dict[int, LineageNode]
    roots: tuple[int, ...]
    ancestry: tuple[int, ...]
    quality: ReportQuality


def morph_kind(morph: str | None) -> str:
    """The kind of a morphism description: ``"widen conv1 16->32"`` -> ``"widen"``,
    ``"add block 2 (4 heads, mlp 128)"`` -> ``"block"``; several morphisms joined by ``"; "``
    give ``"widen+deepen"``; an empty one ``"?"``."""
    kinds = []
    for part in str(morph or "").split(";"):
        words = part.split()
        grown = next((kind for rule, kind in _LM_MORPHS if rule.match(part.strip())), None)
        if grown is not None:
            kinds.append(grown)
        elif words:
            kinds.append(next((w for w in words if w in MORPH_COLORS), words[0]))
    return "+".join(kinds) or "?"


def morph_color(kind: str) -> str:
    """Plot colour of a morphism kind (the first one of a combined kind)."""
    return MORPH_COLORS.get(kind.split("+")[0], _OTHER_MORPH_COLOR)


def build_lineage(trials: Sequence[TrialRecord], quality: ReportQuality) -> Lineage:
    """The search tree of ``trials``; the best trial has the best value of the run's ``quality``
    (the lowest id on ties)."""
    by_id = {t.id: t for t in trials}
    ids = sorted(by_id)
    parent_of: dict[int, int | None] = {}
    for i in ids:
        parent = by_id[i].parent
        parent_of[i] = parent if parent in by_id and parent != i else None
    _break_cycles(ids, parent_of)
    children: dict[int, list[int]] = {i: [] for i in ids}
    for i in ids:
        parent = parent_of[i]
        if parent is not None:
            children[parent].append(i)
    nodes = {}
    for i in ids:
        t = by_id[i]
        nodes[i] = LineageNode(
            id=i,
            parent=parent_of[i],
            morph=t.morph,
            kind=morph_kind(t.morph),
            value=t.best(quality.trial_key),
            status=str(t.status),
            children=tuple(children[i]),
        )
    ancestry: list[int] = []
    current = quality.best(ids, lambda i: nodes[i].value)
    while current is not None:
        ancestry.append(current)
        current = parent_of[current]
    return Lineage(
        nodes=nodes,
        roots=tuple(i for i in ids if parent_of[i] is None),
        ancestry=tuple(ancestry[::-1]),
        quality=quality,
    )


def _break_cycles(ids: list[int], parent_of: dict[int, int | None]) -> None:
    """Make the lowest id of each parent cycle a root, so that every trial hangs from one."""
    settled: set[int] = set()
    for start in ids:
        path: list[int] = []
        on_path: set[int] = set()
        current: int | None
        current = start
        while current is not None and current not in settled and current not in on_path:
            path.append(current)
            on_path.add(current)
            current = parent_of[current]
        if current is not None and current in on_path:  # a cycle: cut it at its lowest id
            cycle = path[path.index(current) :]
            parent_of[min(cycle)] = None
        settled.update(path)


def subtree_stats(lineage: Lineage, root: int) -> tuple[int, int | None]:
    """(trials in the subtree of ``root``, the best of them or None; lowest id on ties)."""
    members, stack = [], [root]
    while stack:
        node = lineage.nodes[stack.pop()]
        members.append(node.id)
        stack.extend(node.children)
    best = lineage.quality.best(sorted(members), lambda i: lineage.nodes[i].value)
    return len(members), best


# --------------------------------------------------------------------------- HTML

#: Roots (trials without a parent) beyond this many are folded into one branch.
MAX_OPEN_ROOTS = 10


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _value(lineage: Lineage, node: LineageNode) -> str:
    return lineage.quality.cell(node.value)


def _label(lineage: Lineage, node: LineageNode) -> str:
    """``#7 widen 97.22% from #3`` (a loss: ``#7 mlp 2.2784 from #3``) with the full morphism as
    the tooltip; bold on the best's ancestry."""
    best = lineage.ancestry[-1] if lineage.ancestry else None
    star = " ★" if node.id == best else ""
    origin = f" <small>from #{_esc(node.parent)}</small>" if node.parent is not None else ""
    status = "" if node.status in SUCCEEDED else f" <small>({_esc(node.status)})</small>"
    css = ' class="onpath"' if node.id in lineage.ancestry else ""
    return (
        f'<span{css} title="{_esc(node.morph)}">#{_esc(node.id)}{star} '
        f'<span class="mk" style="color:{morph_color(node.kind)}">{_esc(node.kind)}</span> '
        f"{_esc(_value(lineage, node))}</span>{origin}{status}"
    )


def _branch(lineage: Lineage, start: int, depth: int) -> str:
    """A list of ``start`` and its only children in turn, with the branches below where it forks."""
    items = []
    node = lineage.nodes[start]
    while True:
        items.append(f"<li>{_label(lineage, node)}")
        if len(node.children) != 1:
            break
        items.append("</li>")
        node = lineage.nodes[node.children[0]]
    nested = ""
    if node.children and depth >= MAX_NESTING:
        count = sum(subtree_stats(lineage, c)[0] for c in node.children)
        nested = f'<p class="nodata">{count} more trials below (see the trials table)</p>'
    elif node.children:
        nested = "".join(_fold(lineage, c, depth + 1) for c in node.children)
    return f'<ul class="tree">{"".join(items)}{nested}</li></ul>'


def _fold(lineage: Lineage, start: int, depth: int) -> str:
    """The branch from ``start``: open on the best's ancestry, else folded under a one-line
    summary."""
    count, best = subtree_stats(lineage, start)
    if count == 1:
        return _branch(lineage, start, depth)
    best_text = (
        f", best {_esc(_value(lineage, lineage.nodes[best]))} (#{_esc(best)})"
        if best is not None
        else ""
    )
    opened = " open" if start in lineage.ancestry else ""
    return (
        f"<details{opened}><summary>branch from #{_esc(start)}: {count} trials{best_text}</summary>"
        f"{_branch(lineage, start, depth)}</details>"
    )


def ancestry_html(lineage: Lineage) -> str:
    """The best trial's ancestry, a row a step, with the change in quality each step made."""
    quality = lineage.quality
    if not lineage.ancestry:
        return f'<p class="nodata">no trial reached a {_esc(quality.val_label)}</p>'
    head = "".join(
        f"<th>{_esc(h)}</th>"
        for h in ("step", "trial", "from", "morphism", "status", quality.column)
        + (quality.change_heading,)
    )
    rows = []
    for step, trial_id in enumerate(lineage.ancestry):
        node = lineage.nodes[trial_id]
        parent = lineage.nodes[node.parent] if node.parent is not None else None
        change = NA
        if parent is not None and parent.value is not None and node.value is not None:
            change = quality.change(node.value, parent.value)
        cells = [
            str(step),
            f"#{node.id}",
            f"#{parent.id}" if parent else "—",
            node.morph,
            node.status,
            _value(lineage, node),
            change,
        ]
        rows.append("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in cells) + "</tr>")
    return f'<table class="ancestry"><tr>{head}</tr>{"".join(rows)}</table>'


def lineage_html(lineage: Lineage) -> str:
    """The ancestry of the best trial as a table, then the whole search tree, folded."""
    if not lineage.nodes:
        return '<p class="nodata">no trials ran</p>'
    roots = list(lineage.roots)
    shown = [r for r in roots if r in lineage.ancestry] + [
        r for r in roots if r not in lineage.ancestry
    ]
    rest = shown[MAX_OPEN_ROOTS:]
    tree = "".join(_branch(lineage, r, 0) for r in shown[:MAX_OPEN_ROOTS])
    if rest:
        inner = "".join(_fold(lineage, r, 1) for r in rest)
        tree += (
            f"<details><summary>{len(rest)} more trials without a parent</summary>{inner}</details>"
        )
    return (
        "<h3>Ancestry of the best trial</h3>"
        + ancestry_html(lineage)
        + '<h3>Search tree</h3><p class="sub">Each trial with its morphism and best '
        f"{_esc(lineage.quality.val_label)}; "
        "a trial's only child follows it in the same list, branches open where a trial has several "
        "children (folded unless they lead to the best trial ★).</p>"
        + f'<div class="lineage-tree">{tree}</div>'
    )
