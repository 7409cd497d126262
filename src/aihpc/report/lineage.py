"""The search's lineage: which trial came from which, by which morphism, with what quality.

:func:`build_lineage` turns the ``trials`` of results.json (each with its
``parent``, ``morph`` and best value of the run's quality: ``best_val_accuracy``
or ``best_val_loss``, :mod:`aihpc.report.quality`) into a :class:`Lineage` of
frozen :class:`LineageNode`; :func:`aihpc.report.lineage_plot.plot_lineage`
draws it (trial id across, the quality up, a line from each parent to its child, the best
trial's ancestry in bold) and :func:`lineage_html` writes the ancestry of the best trial in
full and the rest of the tree as collapsed ``<details>`` branches, so a run of
a few hundred trials stays readable.  A chain of only children is listed flat;
the tree nests only where a trial has several children.

Parents that are missing, unknown or part of a cycle make their trial a root,
so a damaged file still renders.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Any

from aihpc.base.fmt import NA, as_number, format_value
from aihpc.records.rows import SUCCEEDED
from aihpc.report.quality import quality_for
from aihpc.scoring.quality import ReportQuality

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

    id: Any
    parent: Any  # None for a root
    morph: str
    kind: str  # "seed", "deepen", "widen", "skip", ... ("widen+deepen" for several morphisms)
    value: float | None  # the trial's best value of the run's quality (Lineage.quality)
    status: str
    children: tuple[Any, ...]

    @property
    def accuracy(self) -> float | None:
        """:attr:`value` by its name from before the language task (read it where the quality
        is an accuracy)."""
        return self.value


@dataclass(frozen=True)
class Lineage:
    """The search tree: nodes by trial id, the roots, the best trial's ancestry (root first), and
    the quality the nodes' values are of."""

    nodes: dict[Any, LineageNode]
    roots: tuple[Any, ...]
    ancestry: tuple[Any, ...]
    quality: ReportQuality


def morph_kind(morph: Any) -> str:
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


def _sort_key(trial_id: Any) -> tuple[bool, float, str]:
    number = as_number(trial_id)
    return (number is None, number or 0.0, str(trial_id))


def _is_id(value: Any) -> bool:
    """A trial id as results.json holds it: a number or a string (not a bool, list or object)."""
    return isinstance(value, (int, float, str)) and not isinstance(value, bool)


def build_lineage(results: dict[str, Any]) -> Lineage:
    """The search tree of ``results["trials"]``; the best trial has the best value of the run's
    quality (:func:`aihpc.report.quality.quality_for`; lowest id on ties)."""
    quality = quality_for(results)
    trials = {
        t["id"]: t
        for t in results.get("trials") or []
        if isinstance(t, dict) and _is_id(t.get("id"))
    }
    ids = sorted(trials, key=_sort_key)
    parent_of = {i: trials[i].get("parent") for i in ids}
    parent_of = {
        i: p if _is_id(p) and p in trials and p != i else None for i, p in parent_of.items()
    }
    _break_cycles(ids, parent_of)
    children: dict[Any, list[Any]] = {i: [] for i in ids}
    for i in ids:
        if parent_of[i] is not None:
            children[parent_of[i]].append(i)
    nodes = {}
    for i in ids:
        t = trials[i]
        nodes[i] = LineageNode(
            id=i,
            parent=parent_of[i],
            morph=format_value(t.get("morph")),
            kind=morph_kind(t.get("morph")),
            value=quality.value(t),
            status=str(t.get("status", NA)),
            children=tuple(children[i]),
        )
    ancestry: list[Any] = []
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


def _break_cycles(ids: list[Any], parent_of: dict[Any, Any]) -> None:
    """Make the lowest id of each parent cycle a root, so that every trial hangs from one."""
    settled: set[Any] = set()
    for start in ids:
        path: list[Any] = []
        on_path: set[Any] = set()
        current = start
        while current is not None and current not in settled and current not in on_path:
            path.append(current)
            on_path.add(current)
            current = parent_of[current]
        if current is not None and current in on_path:  # a cycle: cut it at its lowest id
            cycle = path[path.index(current) :]
            parent_of[min(cycle, key=_sort_key)] = None
        settled.update(path)


def subtree_stats(lineage: Lineage, root: Any) -> tuple[int, Any]:
    """(trials in the subtree of ``root``, the best of them or None; lowest id on ties)."""
    members, stack = [], [root]
    while stack:
        node = lineage.nodes[stack.pop()]
        members.append(node.id)
        stack.extend(node.children)
    best = lineage.quality.best(sorted(members, key=_sort_key), lambda i: lineage.nodes[i].value)
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


def _branch(lineage: Lineage, start: Any, depth: int) -> str:
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


def _fold(lineage: Lineage, start: Any, depth: int) -> str:
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
