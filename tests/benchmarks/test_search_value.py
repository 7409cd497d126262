"""benchmarks/search_value.py: its plan, a run's figures read from a real results.json, the
statistics against scipy and a direct computation, the report and plot of a kept state, its
refusals of bad settings, and how it tells a run's CPU from the rest of the machine's."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time

import pytest

from fixture_run import FIXTURES


def test_the_plan_interleaves_seeds_and_sizes_each_stage(bench):
    sv = bench("search_value")
    args = sv.parse(["out", "--tasks", "lm", "--seeds", "2", "--ablation-seeds", "1",
                     "--long-seeds", "1", "--long-minutes", "7"])  # fmt: skip
    runs = sv.plan(args)
    short = [r for r in runs if r.stage == "short"]
    assert [(r.config, r.seed) for r in short] == [
        (c, s) for s in (0, 1) for c in ("default", "hpo", "seed", "random")
    ]
    assert {r.config for r in runs if r.stage == "ablations"} == {f"no-{m}" for m in sv.MECHANISMS}
    assert {(r.config, r.minutes) for r in runs if r.stage == "long"} == {
        ("default", 7.0), ("hpo", 7.0), ("seed", 7.0),
    }  # fmt: skip
    one = next(r for r in runs if r.stage == "workers")
    assert one.arguments(["--x"]) == [
        "--task", "lm", "--seed", "0", "--workers", "1", "--threads-per-worker", "1", "--x",
    ]  # fmt: skip
    assert len({r.key for r in runs}) == len(runs)
    image = sv.plan(sv.parse(["out", "--tasks", "image", "--stages", "ablations"]))
    assert {r.config for r in image} == {*(f"no-{m}" for m in sv.MECHANISMS), "no-shift"}
    shifted = next(r for r in image if r.config == "no-shift")
    assert shifted.arguments([]) == ["--task", "image", "--seed", "0", "--shift", "0"]
    extra = sv.parse(["out", "--seeds", "1", "--", "--seed-width", "16"]).extra
    assert extra == ["--seed-width", "16"] and sv.parse(["out"]).extra == []


def test_a_runs_figures_follow_its_epochs_in_the_order_they_ended(bench):
    sv = bench("search_value")
    results = bench("analysis").read_run(FIXTURES / "run")  # upgraded to today's schema
    fig = sv.figures(results)
    epochs = sorted((e for t in results["trials"] for e in t["epochs"]), key=lambda e: e["t_end"])
    accs = [e["val_accuracy"] for e in epochs if e["status"] == "ok"]
    assert fig["best"] == max(accs) == results["score"]["best_accuracy"]
    assert not fig["lower_is_better"]
    assert fig["trajectory"][-1] == [
        sum(e["ops"] for e in epochs if e["t_end"] <= _ended(epochs, max(accs))),
        max(accs),
    ]
    values = [b for _, b in fig["trajectory"]]
    assert values == sorted(values) and len(set(values)) == len(values)  # each a new best
    lm = sv.figures(bench("analysis").read_run(FIXTURES / "h200-lm"))
    assert lm["lower_is_better"] and lm["best"] == pytest.approx(2.2329119592905045)


def _ended(epochs, value):
    return next(e["t_end"] for e in epochs if e["status"] == "ok" and e["val_accuracy"] == value)


def test_the_comparison_is_welchs(bench):
    from scipy.stats import ttest_ind

    sv = bench("search_value")
    ref, other = [0.90, 0.91, 0.89, 0.92], [0.93, 0.95, 0.94]
    c = sv.compare(ref, other)
    se = math.sqrt(statistics.variance(ref) / 4 + statistics.variance(other) / 3)
    assert c["diff"] == pytest.approx(statistics.fmean(other) - statistics.fmean(ref))
    assert c["se"] == pytest.approx(se)
    assert c["p"] == pytest.approx(ttest_ind(other, ref, equal_var=False).pvalue)
    assert sv.compare([0.9], [0.8])["p"] is None  # one run: no spread to compare with


def test_the_paired_comparison_takes_the_seeds_both_have(bench):
    from scipy.stats import ttest_rel

    sv = bench("search_value")
    ref = {0: 0.90, 1: 0.80, 2: 0.85, 3: 0.70}  # seed 3: (a) only
    other = {0: 0.92, 1: 0.81, 2: 0.88, 4: 0.99}  # seed 4: the other only
    diffs = [0.02, 0.01, 0.03]
    c = sv.paired(ref, other)
    assert c["diff"] == pytest.approx(statistics.fmean(diffs))
    assert c["se"] == pytest.approx(statistics.stdev(diffs) / math.sqrt(3))
    assert c["p"] == pytest.approx(ttest_rel([0.92, 0.81, 0.88], [0.90, 0.80, 0.85]).pvalue)
    assert sv.paired({0: 0.9}, {0: 0.8}) == {"diff": pytest.approx(-0.1), "se": None, "p": None}


def test_the_operations_to_reach_a_target(bench):
    sv = bench("search_value")
    trajectory = [[10, 3.0], [25, 2.5], [40, 2.2]]
    assert sv.ops_to_reach(trajectory, 2.5, lower=True) == 25
    assert sv.ops_to_reach(trajectory, 2.0, lower=True) is None
    assert sv._at(trajectory, 30) == 2.5 and sv._at(trajectory, 5) == 3.0


def test_a_kept_state_is_reported_and_plotted(call, bench, tmp_path):
    """The report of a state.json made of real runs' figures: the fixture run's figures under
    four seeds of (a) and of (c), (c)'s best lowered by a known amount."""
    sv = bench("search_value")
    fig = sv.figures(bench("analysis").read_run(FIXTURES / "run"))
    state, shift = {}, [0.01, 0.02, 0.03, 0.04]
    for seed in range(4):
        state[f"image/short/default/{seed}/3"] = {**fig, "best": fig["best"] + 0.01 * seed}
        state[f"image/short/seed/{seed}/3"] = {**fig, "best": fig["best"] - shift[seed]}
    (tmp_path / "state.json").write_text(json.dumps(state))
    page = tmp_path / "p.md"
    code, out, err = call("search_value", str(tmp_path), "--report", "--page", str(page))
    assert code == 0, err
    a = [fig["best"] + 0.01 * s for s in range(4)]
    c = [fig["best"] - d for d in shift]
    m, sd = statistics.fmean(c), statistics.stdev(c)
    diff = statistics.fmean(c) - statistics.fmean(a)
    row = next(line for line in out.splitlines() if line.startswith("| seed |"))
    assert f"| {100 * m:.2f} % ± {100 * sd:.2f} % | {100 * diff:+.2f} pt |" in row
    assert page.read_text() == out == (tmp_path / "search-value.md").read_text()
    assert (tmp_path / "search-value-image-short-3.png").stat().st_size > 0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--tasks", "speech"], "a task is one of image, lm, got 'speech'"),
        (["--stages", "short,medium"], "a stage is one of short, ablations, long, workers"),
        (["--seeds", "0"], "--seeds must be at least 1, got 0"),
        (["--long-minutes", "0"], "--long-minutes must be > 0, got 0.0"),
    ],
)
def test_bad_settings_are_refused_in_one_line(call, tmp_path, argv, message):
    code, _, err = call("search_value", str(tmp_path), *argv)
    assert code == 2 and message in err and "Traceback" not in err


def test_a_report_of_nothing_says_so(call, tmp_path):
    code, _, err = call("search_value", str(tmp_path), "--report")
    assert code == 1 and "no runs kept yet" in err


def test_a_runs_processes_are_told_from_the_others_by_their_session(bench):
    """What a run and the rest of the machine used: the CPU seconds of a busy process in a
    session of its own are its session's alone, and the machine's count holds them too."""
    sv = bench("search_value")
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1: pass\n"
    busy = [sys.executable, "-c", spin + "time.sleep(60)"]
    machine = sv.machine_busy_seconds()
    with subprocess.Popen(busy, start_new_session=True) as proc:
        try:
            seen: dict[int, float] = {}
            deadline = time.monotonic() + 30
            while seen.get(proc.pid, 0) < 1 and time.monotonic() < deadline:
                seen = sv.session_cpu_seconds(proc.pid)
                time.sleep(0.1)
            assert set(seen) == {proc.pid} and 1 <= seen[proc.pid] < 3
            assert sv.session_cpu_seconds(os.getsid(0)).get(os.getpid(), 0) > 0
            assert sv.machine_busy_seconds() - machine >= 1
        finally:
            proc.kill()


def test_a_run_over_the_foreign_share_or_without_a_reading_is_made_again(bench):
    sv = bench("search_value")
    state = {
        "quiet": {"best": 0.9, "foreign_cpu": 0.01},
        "at the limit": {"best": 0.9, "foreign_cpu": 0.05},
        "disturbed": {"best": 0.8, "foreign_cpu": 0.09},
        "unread": {"best": 0.85},
    }
    assert sv.disturbed_runs(state, 0.05) == ["disturbed", "unread"]
    assert sv.disturbed_runs(state, 0.1) == ["unread"]
