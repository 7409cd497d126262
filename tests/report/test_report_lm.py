"""The report of a language-model run: its quality is the validation loss (nats per token, lower is
better), read, ranked, written and drawn through aihpc.report.quality.

The fixture results_lm.json is a real one-minute run (`aihpc run --task lm --minutes 1`, 7 trials
on 2 CPU workers); to regenerate it, run that and copy the run's results.json here.  Its trials:
0 seed 4.8659; 1 from 0 (widen mlp) 2.4139; 2 from 0 (add block) 2.3762; 3 from 1 (add block)
2.3618; 4 from 2 (widen mlp) 2.2784, the best; 5 from 3 and 6 from 4 cut by the deadline.
"""

from __future__ import annotations

import copy
import io
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from aihpc.report import write_report
from aihpc.report.digest import LISTED, SHOWN, ReportRun, read_for_report
from aihpc.report.lineage import lineage_html, morph_kind
from aihpc.report.lineage_plot import plot_lineage
from aihpc.report.plots import plot_timeline
from aihpc.results.read import decode_results
from aihpc.tasks.language.quality import LOSS, loss_floor
from aihpc.tasks.quality import ACCURACY
from fixture_run import write_results_document

FIXTURES = Path(__file__).parent / "fixtures"
LM = FIXTURES / "results_lm.json"
IMAGE = FIXTURES / "results_v1.json"
IMG_RE = re.compile(r"data:image/png;base64,[A-Za-z0-9+/=]+")


def _lm() -> dict[str, Any]:
    return json.loads(LM.read_text())


def _report_run(doc: dict[str, Any]) -> ReportRun:
    """The run of the results.json document ``doc``, as the report reads it."""
    results = decode_results(json.dumps(doc).encode(), "a test's results")
    return ReportRun.of(results.head(), results.trials)


def _page(tmp_path: Path, results: dict[str, Any]) -> str:
    run = tmp_path / "run"
    run.mkdir(parents=True)
    (run / "results.json").write_text(json.dumps(results))
    return write_report(run).read_text()


def _between(page: str, start: str, end: str) -> str:
    return page[page.index(start) : page.index(end, page.index(start))]


def _pixels_near(png: bytes, hex_color: str, tolerance: int = 6) -> int:
    image = Image.open(io.BytesIO(png)).convert("RGB")
    target = tuple(int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return sum(
        count
        for count, rgb in image.getcolors(maxcolors=1 << 24)
        if all(abs(a - b) <= tolerance for a, b in zip(rgb, target, strict=True))
    )


# --------------------------------------------------------------------------- the quality


def test_the_quality_is_the_run_s_task_s() -> None:
    assert read_for_report(LM).quality is LOSS and read_for_report(LM).lineage.quality is LOSS
    # a configuration that names no task (every file from before there were tasks): the image
    # task's
    assert "task" not in json.loads(IMAGE.read_text())["config"]
    assert read_for_report(IMAGE).quality is ACCURACY
    assert (LOSS.trial_key, LOSS.epoch_key, LOSS.best_key) == (
        "best_val_loss",
        "val_loss",
        "best_val_loss",
    )
    assert (ACCURACY.trial_key, ACCURACY.epoch_key, ACCURACY.best_key) == (
        "best_val_accuracy",
        "val_accuracy",
        "best_accuracy",
    )


def test_values_are_written_and_compared_each_its_way() -> None:
    assert LOSS.text(2.278416390081214) == "2.2784 nats/token" and LOSS.cell(2.278416) == "2.2784"
    assert LOSS.change(2.2784, 2.3762) == "-0.0978 nats/token" and LOSS.text(None) == "n/a"
    assert ACCURACY.text(0.9722) == "97.22%" and ACCURACY.change(0.9722, 0.938) == "+3.42 points"
    assert LOSS.plotted(2.5) == 2.5 and ACCURACY.plotted(0.5) == pytest.approx(50.0)
    rows = [{"id": 0, "v": 3.0}, {"id": 1, "v": None}, {"id": 2, "v": 2.0}, {"id": 3, "v": 2.0}]
    assert LOSS.best(rows, lambda r: r["v"])["id"] == 2  # the lowest, the first on ties
    assert ACCURACY.best(rows, lambda r: r["v"])["id"] == 0
    assert LOSS.best([], lambda r: r) is None


def test_the_floor_is_the_scores_else_the_datas() -> None:
    doc = _lm()
    run = _report_run(doc)
    assert loss_floor(run.head.score, run.data) == pytest.approx(2.1289849848727536)
    doc["score"]["loss_floor"], doc["data"]["floor"] = None, 1.5
    run = _report_run(doc)
    assert loss_floor(run.head.score, run.data) == 1.5
    assert loss_floor(run.head.score, None) is None


# --------------------------------------------------------------------------- the page


def test_the_cards_show_the_best_loss_beside_the_floor(tmp_path: Path) -> None:
    page = _page(tmp_path, _lm())
    header = _between(page, '<div class="cards">', "<h2>Environment</h2>")
    assert (
        '<div class="label">Best validation loss</div><div class="value ">2.2784 nats/token</div>'
        '<div class="note">floor 2.1290 · gap 0.1494 · maximum 2.4791 · unigram 4.2850</div>'
    ) in header
    assert ">Error<" not in header and "Best accuracy" not in header
    assert "OPS × ln((unigram − floor) / (loss − floor))" in header and ">valid<" in header
    # bits per byte where the text is byte-level; a user corpus has no known floor
    results = _lm()
    results["score"].update(bits_per_byte=3.287, loss_floor=None, gap_to_floor=None)
    results["data"]["floor"] = None
    header = _between(_page(tmp_path / "b", results), '<div class="cards">', "<h2>Environment</h2>")
    assert (
        '<div class="note">floor unknown · 3.287 bits/byte · maximum 2.4791 · unigram 4.2850</div>'
        in header
    )


def test_nothing_says_accuracy_but_the_next_token_accuracy(tmp_path: Path) -> None:
    page = IMG_RE.sub("data:image/png;base64,", _page(tmp_path, _lm()))
    # The one setting of the image task in the configuration says that the run did not use it.
    unused = (
        "<tr><th>min_accuracy</th><td>0.5 (unused: the quality is the validation loss)</td></tr>"
    )
    assert unused in page
    assert "accura" not in page.replace(unused, "").lower()
    assert "<th>next-token acc</th>" in page
    assert "<tr><th>max_val_loss</th><td>2.47913 (resolved at run time)</td></tr>" in page
    for title in (
        "<h2>Score and validation loss over time</h2>",
        "the best validation loss reached",
    ):
        assert title in page


def test_the_best_trial_is_the_lowest_loss(tmp_path: Path) -> None:
    results = _lm()
    assert _report_run(results).best_trial().id == 4
    best = _between(_page(tmp_path, results), "<h2>Best trial</h2>", '<h2 id="lineage">')
    for row in (
        "<th>trial</th><td>4</td>",
        "<th>best val loss</th><td>2.2784 nats/token</td>",
        "<th>next-token acc</th><td>36.7%</td>",
        "<th>blocks</th><td>3</td>",
        "<th>width</th><td>64</td>",
        "<th>context</th><td>128 tokens</td>",
        "<th>heads per block</th><td>4, 4, 4 (head dim 16)</td>",
        "<th>MLP widths</th><td>256, 320, 256</td>",
        "<th>parameters</th><td>189 k (188992)</td>",
        "<th>lineage (seed → best)</th><td>0 → 2 → 4</td>",
        "<th>arch.kind</th><td>lm</td>",
    ):
        assert row in best, row
    # A lower loss elsewhere makes that trial the best; a higher one never does.
    results["trials"][3]["best_val_loss"] = 2.1
    results["trials"][0]["best_val_loss"] = 9.9
    run = _report_run(results)
    assert run.best_trial().id == 3 and run.lineage.ancestry == (0, 1, 3)


def test_the_trials_table_shows_losses_and_next_token_accuracy(tmp_path: Path) -> None:
    table = _page(tmp_path, _lm()).split("<h2>Trials</h2>")[1]
    head = re.findall(r"<th>([^<]*)</th>", table)
    assert head[5:7] == ["best val loss", "next-token acc"]
    rows = re.findall(r'<tr><td class="num">(\d+)</td>.*?</tr>', table)
    assert rows == ["0", "1", "2", "3", "4", "5", "6"]  # by id, as an image run's
    losses = re.findall(
        r'</span></td><td class="num">([^<]*)</td><td class="num">([^<]*)</td>', table
    )
    assert losses == [
        ("4.8659", "29.6%"),
        ("2.4139", "35.6%"),
        ("2.3762", "36.0%"),
        ("2.3618", "36.2%"),
        ("2.2784", "36.7%"),
        ("n/a", "n/a"),
        ("n/a", "n/a"),
    ]


def test_the_lineage_shows_the_change_in_loss_per_step() -> None:
    lineage = read_for_report(LM).lineage
    assert lineage.quality is LOSS and lineage.ancestry == (0, 2, 4)
    assert {i: n.kind for i, n in lineage.nodes.items()} == {
        0: "seed",
        1: "mlp",
        2: "block",
        3: "block",
        4: "mlp",
        5: "mlp",
        6: "stream",
    }
    page = lineage_html(lineage)
    table = page[: page.index("<h3>Search tree</h3>")]
    assert "<th>best val loss</th><th>change (lower is better)</th>" in table
    assert re.findall(r"<td>([+-]\d+\.\d{4}) nats/token</td>", table) == ["-2.4897", "-0.0978"]
    assert (
        "<td>#4</td><td>#2</td><td>widen mlp of block 1 to 320</td><td>completed</td>"
        "<td>2.2784</td>" in table
    )
    tree = page[page.index("<h3>Search tree</h3>") :]
    assert "best validation loss" in tree and "accuracy" not in tree
    assert "<summary>branch from #2: 3 trials, best 2.2784 (#4)</summary>" in tree
    assert "<summary>branch from #1: 3 trials, best 2.3618 (#3)</summary>" in tree


@pytest.mark.parametrize(
    ("morph", "kind"),
    [
        ("add block 2 (4 heads, mlp 128)", "block"),
        ("widen mlp of block 1 to 512", "mlp"),
        ("add 2 heads to block 1 (6 in all)", "heads"),
        ("widen stream to 128", "stream"),
        ("grow context to 256", "context"),
        ("widen mlp of block 0 to 512; add block 1 (4 heads, mlp 64)", "mlp+block"),
    ],
)
def test_a_language_model_s_growth_steps_have_their_kinds(morph: str, kind: str) -> None:
    assert morph_kind(morph) == kind


def test_the_lineage_plot_puts_unevaluated_trials_above_the_worst_loss() -> None:
    png = plot_lineage(read_for_report(LM).lineage)
    assert png is not None
    for color in (
        "#212121",
        "#43a047",
        "#1e88e5",
        "#00897b",
        "#fdd835",
    ):  # seed, mlp, block, stream, star
        assert _pixels_near(png, color) > 20, color


def test_the_timeline_draws_the_best_loss_and_the_floor() -> None:
    results = _lm()
    drawn = plot_timeline(_report_run(results))
    assert drawn is not None
    assert _pixels_near(drawn, "#2e7d32") > 100  # the best-so-far loss
    assert _pixels_near(drawn, "#c62828") > 100  # the maximum of a valid run
    # Without best_val_loss in the timeline the quality panel has no line (the score's stays).
    for point in results["timeline"]:
        point["best_accuracy"] = 0.9  # an image run's key is not read for a loss
        del point["best_val_loss"]
    assert _pixels_near(plot_timeline(_report_run(results)), "#2e7d32") == 0
    # Without a floor, its dotted line is gone.
    without = _lm()
    without["score"]["loss_floor"] = None
    without["data"]["floor"] = None
    assert _pixels_near(plot_timeline(_report_run(without)), "#616161", 2) < _pixels_near(
        drawn, "#616161", 2
    )


# --------------------------------------------------------------------------- a large run


def _large_lm(n: int, seed: int = 0) -> dict[str, Any]:
    """The fixture's run with ``n`` trials made from its trial 1: random parents and losses."""
    doc = _lm()
    template = doc["trials"][1]
    rng = random.Random(seed)
    trials = []
    for i in range(n):
        t = copy.deepcopy(template)
        loss = None if i % 13 == 7 else round(rng.uniform(2.2, 5.0), 6)
        morph = (
            "seed"
            if i == 0
            else rng.choice(("add block 1 (4 heads, mlp 64)", "widen stream to 96"))
        )
        t.update(
            id=i,
            parent=None if i == 0 else rng.randrange(i),
            best_val_loss=loss,
            morph=morph,
            status="failed" if loss is None else "completed",
        )
        if i == 0:
            t["arch"] = doc["trials"][0]["arch"]
            t.pop("arch_diff")
        trials.append(t)
    return {**doc, "trials": trials}


def test_a_large_run_keeps_and_lists_its_lowest_losses(tmp_path: Path) -> None:
    n = 2 * LISTED + 50
    doc = _large_lm(n)
    run = tmp_path / "run"
    run.mkdir()
    write_results_document(run, doc)
    read = read_for_report(run / "results.json")
    assert read.digest is not None and read.digest.quality is LOSS
    scored = sorted(
        (t for t in doc["trials"] if t["best_val_loss"] is not None),
        key=lambda t: (t["best_val_loss"], t["id"]),
    )
    kept = {t.id for t in read.trials}
    assert {t["id"] for t in scored[:SHOWN]} <= kept
    assert scored[0]["id"] == read.lineage.ancestry[-1]
    page = IMG_RE.sub("", write_report(run).read_text())
    table = page.split("<h2>Trials</h2>")[1]
    assert "(the lowest loss and the best trial's ancestry), lowest loss first" in table
    assert re.search(r"<th>best val loss</th><td>min 2\.\d{3} · p10 ", table)
    listed = [float(v) for v in re.findall(r'</span></td><td class="num">(\d\.\d{4})</td>', table)]
    assert listed == sorted(listed) and listed[0] == pytest.approx(
        scored[0]["best_val_loss"], abs=1e-4
    )
    assert (
        "accura"
        not in page.replace("<th>min_accuracy</th>", "")
        .replace("<td>0.5 (unused: the quality is the validation loss)</td>", "")
        .lower()
    )
