"""The benchmark scripts that run ``aihpc run``, on runs already made: their reports on kept runs
(``--report``), and every run they plan checked as ``aihpc run`` checks it, before any starts.

The runs read are real ones, shared with the rest of the suite or kept from a GPU:
``fixtures/run`` (the suite's fixture run: digits, on this CPU) and ``fixtures/h200-lm``: the
results.json of a language run (``gpu_check.sh lm``, 16 M synthetic tokens, 1.5 minutes) on one
NVIDIA H200 (2026-11-28), and the log that gpu_fill.py printed there from it (the figures below
are checked against that log's lines, computed on the GPU node by the code of that day).
One whole run through a script is in test_small_settings.py.
"""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

import pytest

from fixture_run import FIXTURES

H200_LM = FIXTURES / "h200-lm"
RUN = FIXTURES / "run"
RUN_TOML = str(FIXTURES / "run.toml")


def _h200_log_line(label: str) -> str:
    """The line of gpu_fill's output on the H200 that starts with ``label`` (and the next, where it
    continues)."""
    lines = (H200_LM / "gpu-check.log").read_text().splitlines()
    start = lines.index("== lm  18:57:36")  # gpu_fill's own lines follow the run's summary
    at = next(i for i in range(start, len(lines)) if lines[i].startswith(label))
    return lines[at]


def test_gpu_fill_reports_the_h200_language_run_without_a_gpu(call):
    code, out, err = call("gpu_fill", "--report", str(H200_LM))
    assert code == 0 and err == ""
    lines = out.splitlines()
    # the figures gpu_fill printed on the GPU node from the same run, line for line
    for label in ("share of peak", "model FLOPs", "busy fraction", "energy", "data staging"):
        assert _h200_log_line(label) in lines, label
    assert lines[0].startswith(
        "score             224 TOPS over 95.3 s, best loss 2.2329 (floor 2.1075)"
    )
    # 1 trial, stopped by the deadline in its second epoch; no worker lost
    assert "trials            1 trial (deadline 1), 1 trained, 2 epochs (1 evaluated); " in out
    assert "lost: none with a worker" in out
    per_epoch = next(line for line in lines if line.startswith("per epoch"))
    # the trial's phases over its 2 epochs: forward 26.10 s, backward 45.44 s
    assert "forward 13.049 s" in per_epoch and "backward 22.718 s" in per_epoch


def test_gpu_fill_reports_the_lost_epochs_and_failed_trials(call, tmp_path):
    """The issue's failure: the child's worker died twice, the trial failed; the report says so."""
    results = json.loads((H200_LM / "results.json").read_text())
    child = {**results["trials"][0], "id": 1, "status": "failed"}
    results["trials"].append({**child, "reason": "lost with its worker twice"})
    killed = "worker killed: memory 8.1 GiB against its limit 8.0 GiB"
    loss = {"t": 61.0, "trial_id": 1, "epoch": 1, "worker": "0", "address": "vm", "reason": killed}
    results["losses"] = [{**loss, "attempt": a, "requeued": a == 1} for a in (1, 2)]
    (tmp_path / "results.json").write_text(json.dumps(results))
    code, out, _ = call("gpu_fill", "--report", str(tmp_path / "results.json"))
    assert code == 0
    assert "2 trials (deadline 1, failed 1), 2 trained" in out
    assert "lost: 2 epochs of 1 trial with their worker (worker killed: memory 8.1 GiB" in out
    assert "1 failed (the first: lost with its worker twice)" in out


def test_gpu_fill_report_of_a_missing_run_is_one_line(call, tmp_path):
    code, out, err = call("gpu_fill", "--report", str(tmp_path / "nothing"))
    assert code == 2 and out == ""
    assert err == f"gpu_fill: error: results file not found: {tmp_path / 'nothing'}\n"


def test_automl_run_reports_the_fixture_run(call):
    results = json.loads((RUN / "results.json").read_text())
    code, out, _ = call("automl_run", "--report", str(RUN))
    assert code == 0
    work = sum(t["phase_seconds"].get(p, 0.0) for t in results["trials"]
               for p in ("data", "forward", "backward", "optimizer", "eval"))  # fmt: skip
    overhead = 1 - work / results["score"]["wall_seconds"]  # one worker
    assert f"harness overhead  {100 * overhead:.2f} % of 1 workers' wall time" in out
    assert "quality           best accuracy 98.89 %" in out
    share = 100 * results["score"]["peak_fraction"]
    assert f"share of peak     {share:.1f} % of the measured" in out


def _kept(root: Path, names: dict[str, Path]) -> Path:
    """Run directories as --keep leaves them: ``root/NAME/results.json`` for each name."""
    for name, run in names.items():
        (root / name).mkdir(parents=True)
        shutil.copy(run / "results.json", root / name / "results.json")
    return root


def test_score_repeatability_reports_kept_runs(call, tmp_path):
    kept = _kept(tmp_path, {"run-0": RUN, "run-1": H200_LM})
    code, out, _ = call("score_repeatability", "--report", str(kept), "--runs", "2")
    assert code == 0
    scores = [json.loads((p / "results.json").read_text())["score"] for p in (RUN, H200_LM)]
    ops = [s["ops_per_second"] for s in scores]
    cv = statistics.stdev(ops) / statistics.fmean(ops)
    assert f"CV {100 * cv:.2f} % over 2 runs" in out
    assert "  0     2.26" in out and "98.89 %" in out  # the digits run: its accuracy
    assert "  1 224342.32" in out and "2.2329" in out  # the language run: its loss
    lines = out.rstrip().splitlines()
    assert lines[-6].startswith("verdict: the score varies")
    assert lines[-5] == "where the spread comes from (score = slots x busy x machine x path):"
    assert [line.split()[0] for line in lines[-4:]] == ["slots", "busy", "machine", "path"]


def test_a_runs_score_is_the_product_of_its_four_factors(bench):
    """slots x busy x machine x path is the score itself, for an image and a language run."""
    import math

    sr, analysis = bench("score_repeatability"), bench("analysis")
    for path in (RUN, H200_LM):
        results = analysis.read_run(path)
        parts = sr.factors(results)
        assert parts is not None and set(parts) == set(sr.FACTORS)
        assert math.prod(parts.values()) == pytest.approx(results["score"]["ops_per_second"])
        assert 0 < parts["busy"] <= 1


def test_screening_reports_kept_runs_and_leaves_out_what_a_run_lacks(call, tmp_path):
    kept = _kept(tmp_path, {"seed3-screen0": RUN, "seed3-screen4": H200_LM})
    code, out, _ = call("screening", "--report", str(kept), "--seeds", "3", "--screen", "4")
    assert code == 0
    assert "   3      0   98.89" in out and "   3      4       -" in out
    assert "best accuracy: no seed has it with and without screening" in out
    assert "GOPS: off      2.262 ± 0          on  2.243e+05 ± 0" in out


def test_search_headroom_reports_kept_runs(call, tmp_path):
    kept = _kept(tmp_path, {"evolution-3": RUN, "none-3": H200_LM})
    code, out, _ = call(
        "search_headroom", "--report", str(kept), "--seeds", "3", "--strategies", "evolution,none"
    )
    assert code == 0
    results = json.loads((RUN / "results.json").read_text())
    first = next(t for t in results["trials"] if t["id"] == 0)["best_val_accuracy"]
    early = max(e["val_accuracy"] for t in results["trials"] for e in t["epochs"]
                if e["status"] == "ok" and e["t_end"] <= 60.0)  # fmt: skip
    assert f"evolution     3 {100 * first:8.2f} {100 * early:8.2f}    98.89" in out
    none = next(line for line in out.splitlines() if line.startswith("none "))
    # a language run has no accuracy: its first trial's and its best
    assert none.split()[:3] == ["none", "3", "-"] and none.split()[4] == "-"


def test_kept_runs_missing_one_is_one_line(call, tmp_path):
    kept = _kept(tmp_path, {"run-0": RUN})
    code, _, err = call("score_repeatability", "--report", str(kept), "--runs", "2")
    assert code == 2
    assert err == f"score_repeatability: error: results file not found: {kept / 'run-1'}\n"


@pytest.mark.parametrize(
    "script, argv",
    [
        ("automl_run", []),
        ("score_repeatability", ["--runs", "2"]),
        ("screening", ["--seeds", "0", "1"]),
        ("search_headroom", ["--seeds", "0,1"]),
    ],
)
def test_a_bad_run_setting_stops_the_benchmark_before_any_run(call, script, argv):
    """Every planned run is checked as `aihpc run` checks it; the first bad one is one line, and
    nothing has run (no run could have finished in this time: the check comes first)."""
    argv = [*argv, "--minutes", "0.05", "--"]
    code, out, err = call(script, *argv, "--config", RUN_TOML, "--seed", "x")
    assert code == 2 and err.count("\n") == 1 and "argument --seed: invalid int value: 'x'" in err
    assert "GOPS" not in out.partition("\n")[2]  # a header at most, no run's row
    code, _, err = call(script, *argv, "--workers", "0")
    assert code == 2 and err.startswith(f"{script}: error: run ") and "workers" in err
    assert err.count("\n") == 1


def test_every_planned_run_passes_aihpc_runs_own_check(bench):
    runs = bench("aihpc_runs")
    extra = ["--config", RUN_TOML]
    strategies = ["evolution", "random", "none"]
    plans = [
        *[(name, a) for _, _, name, a in bench("screening").plan([0, 1], 4, extra)],
        *[(name, a) for _, name, a in bench("search_headroom").plan(strategies, [0], extra)],
    ]
    assert [name for name, _ in plans] == [
        "seed0-screen0", "seed0-screen4", "seed1-screen0", "seed1-screen4",
        "evolution-0", "random-0", "none-0",
    ]  # fmt: skip
    runs.check_runs(0.05, plans)  # raises on the first it refuses


def test_weak_scaling_is_aihpc_scaling(call, tmp_path):
    code, out, err = call("weak_scaling", "--workers", "0,1", "--out", str(tmp_path / "s"))
    assert code == 2 and out == ""
    assert err.startswith("aihpc scaling: error: ") and err.count("\n") == 1
