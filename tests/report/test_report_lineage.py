"""Tests of the search lineage in the report (aihpc.report.lineage and its plot)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
from PIL import Image

from aihpc.base.errors import DataError
from aihpc.records.rows import TrialStatus
from aihpc.report.digest import ReportRun, read_for_report
from aihpc.report.html import _lineage_section
from aihpc.report.lineage import MAX_NESTING, build_lineage, lineage_html, morph_kind, subtree_stats
from aihpc.report.lineage_plot import plot_lineage
from aihpc.results.read import decode_results
from aihpc.results.trial import TrialRecord
from aihpc.tasks.quality import ACCURACY

FIXTURE = Path(__file__).parent / "fixtures" / "results_v1.json"


def _fixture() -> ReportRun:
    return read_for_report(FIXTURE)


def _trial(
    i: int,
    parent: int | None,
    acc: float | None,
    morph: str = "widen a 8->16",
    status: str = "completed",
) -> TrialRecord:
    """The fixture's trial 1 as trial ``i`` of ``parent``, made by ``morph``, its best accuracy
    ``acc``."""
    return msgspec.structs.replace(
        _fixture().trials[1],
        id=i,
        parent=parent,
        morph=morph,
        best_val_accuracy=acc,
        status=TrialStatus(status),
    )


@pytest.mark.parametrize(
    ("morph", "kind"),
    [
        ("seed", "seed"),
        ("widen conv1 16->32", "widen"),
        ("deepen after relu1 (conv3x3-bn-relu)", "deepen"),
        ("skip layer2_0_add -> layer2_2_bn2 (zero conv1x1 stride 1)", "skip"),
        ("add skip relu2->relu3", "skip"),
        ("widen a 8->16; deepen after b (conv1x1-bn-relu)", "widen+deepen"),
        ("prune x", "prune"),
        (None, "?"),
        ("", "?"),
    ],
)
def test_morph_kind(morph: Any, kind: str) -> None:
    assert morph_kind(morph) == kind


def test_fixture_tree_by_hand() -> None:
    # The fixture: 0 -> {1, 2}; 1 -> {3, 6}; 2 -> {4, 5}; 3 -> {7}.  Best: 7 (0.9722).
    lineage = _fixture().lineage
    assert lineage.roots == (0,)
    assert lineage.ancestry == (0, 1, 3, 7)
    assert {i: n.children for i, n in lineage.nodes.items()} == {
        0: (1, 2),
        1: (3, 6),
        2: (4, 5),
        3: (7,),
        4: (),
        5: (),
        6: (),
        7: (),
    }
    assert lineage.nodes[4].kind == "skip" and lineage.nodes[6].value is None
    assert subtree_stats(lineage, 1) == (4, 7)  # {1, 3, 6, 7}
    assert subtree_stats(lineage, 2) == (3, 4)  # {2, 4, 5}: 4 has 0.967
    assert subtree_stats(lineage, 0) == (8, 7)


def test_fixture_lineage_html() -> None:
    page = lineage_html(_fixture().lineage)
    table = page[: page.index("<h3>Search tree</h3>")]
    # Changes along the ancestry: 0.944 - 0.912, 0.938 - 0.944, 0.9722 - 0.938.
    assert re.findall(r"<td>([+-]\d+\.\d\d) points</td>", table) == ["+3.20", "-0.60", "+3.42"]
    assert (
        "<td>#3</td><td>#1</td><td>widen conv2 32-&gt;64</td><td>early_stopped</td><td>93.80%</td>"
        in table
    )
    tree = page[page.index("<h3>Search tree</h3>") :]
    # The branch towards the best trial is open, the other folded with its size and best trial.
    assert "<details open><summary>branch from #1: 4 trials, best 97.22% (#7)</summary>" in tree
    assert "<details><summary>branch from #2: 3 trials, best 96.70% (#4)</summary>" in tree
    assert "<details open><summary>branch from #3: 2 trials, best 97.22% (#7)</summary>" in tree
    assert "#7 ★" in tree and tree.count("★") == 2  # the label and the explanation
    assert "from #3" in tree and "(failed)" in tree  # trial 6 failed
    assert tree.count("<li>") == 8


def test_only_children_are_listed_flat() -> None:
    chain = [_trial(0, None, 0.5, "seed")] + [_trial(i, i - 1, 0.5 + i / 100) for i in range(1, 6)]
    page = lineage_html(build_lineage(chain, ACCURACY))
    tree = page[page.index("<h3>Search tree</h3>") :]
    assert (
        tree.count('<ul class="tree">') == 1 and tree.count("<li>") == 6 and "<details" not in tree
    )


def test_unknown_parents_and_cycles_become_roots() -> None:
    trials = [
        _trial(0, None, 0.3, "seed"),
        _trial(1, 99, 0.4),
        _trial(2, 3, 0.5),
        _trial(3, 2, 0.6),
        _trial(4, 4, 0.2),
    ]
    lineage = build_lineage(trials, ACCURACY)
    assert lineage.roots == (0, 1, 2, 4)  # 99 unknown; 2 <-> 3 cut at 2; 4 its own parent
    assert lineage.nodes[3].parent == 2 and lineage.ancestry == (2, 3)
    assert "<li>" in lineage_html(lineage)
    # Ids and parents of the wrong JSON type (a damaged file) are refused as the file is read.
    doc = json.loads(FIXTURE.read_text())
    doc["trials"][2]["parent"] = [0]
    with pytest.raises(DataError, match=r"trials\[2\]\.parent: expected int \| null, got array"):
        decode_results(json.dumps(doc).encode(), "a damaged file")


def test_many_roots_fold_and_deep_trees_stop() -> None:
    roots = [_trial(i, None, 0.1 + i / 100, "seed") for i in range(15)]
    page = lineage_html(build_lineage(roots, ACCURACY))
    assert "<details><summary>5 more trials without a parent</summary>" in page
    assert page.count("<li>") == 15
    # A comb: each spine trial has a leaf and the next spine trial as children, deeper than
    # MAX_NESTING.
    trials, spine = [_trial(0, None, 0.1, "seed")], 0
    for n in range(MAX_NESTING + 5):
        trials.append(_trial(len(trials), spine, 0.2))
        trials.append(_trial(len(trials), spine, 0.3 + n / 1000))
        spine = len(trials) - 1
    page = lineage_html(build_lineage(trials, ACCURACY))
    assert re.search(r"\d+ more trials below \(see the trials table\)", page)
    assert page.count("<details open>") == MAX_NESTING  # the best is the spine's end, below the cut


def test_no_trials() -> None:
    assert "no trials ran" in lineage_html(build_lineage([], ACCURACY))
    assert plot_lineage(build_lineage([], ACCURACY)) is None
    assert "no trial reached" in lineage_html(
        build_lineage([_trial(0, None, None, "seed", "failed")], ACCURACY)
    )


def _pixels_near(image: Image.Image, hex_color: str, tolerance: int = 6) -> int:
    target = tuple(int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return sum(
        count
        for count, rgb in image.getcolors(maxcolors=1 << 24)
        if all(abs(a - b) <= tolerance for a, b in zip(rgb, target, strict=True))
    )


def test_lineage_plot_draws_each_morphism_and_the_best() -> None:
    run = _fixture()
    png = plot_lineage(run.lineage)
    image = Image.open(io.BytesIO(png)).convert("RGB")
    assert image.size == (900, 480)
    # The kinds present (seed, widen, deepen, skip) and the best trial's gold star are drawn.
    for color in ("#212121", "#43a047", "#1e88e5", "#fb8c00", "#fdd835"):
        assert _pixels_near(image, color) > 20, color
    # Without the skip trials (4: "add skip", and its sibling 5 re-made as deepen) no orange is
    # drawn.
    trials = [
        msgspec.structs.replace(t, morph="deepen after x") if "skip" in t.morph else t
        for t in run.trials
    ]
    image = Image.open(io.BytesIO(plot_lineage(build_lineage(trials, ACCURACY)))).convert("RGB")
    assert _pixels_near(image, "#fb8c00") == 0


def test_lineage_section_embeds_the_plot() -> None:
    run = _fixture()
    lineage = run.lineage
    section = _lineage_section(run, plot_lineage(lineage))
    assert section.startswith('<figure><img src="data:image/png;base64,')
    assert section.endswith(lineage_html(lineage))
