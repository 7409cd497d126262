"""``aihpc compare`` and ``aihpc rank`` on results.json files written here, through the CLI where it
matters."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from aihpc.base.errors import ConfigError
from aihpc.ranking.compare import (
    Entry,
    check_like_for_like,
    group_repeats,
    load_entry,
    welch_p_value,
)
from aihpc.ranking.rank import build_ranking, valid_flops
from fixture_run import ENVIRONMENT, FIXTURES, aihpc

# Wikipedia, "Welch's t-test", Examples 1 and 2 (published: t = -2.46, df = 24.99, p = 0.021;
# t = -1.57, df = 9.90, p = 0.149).
WELCH_1 = (
    [27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4],
    [27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4],
)
WELCH_2 = (
    [17.2, 20.9, 22.6, 18.1, 21.7, 21.4, 23.5, 24.2, 14.7, 21.8],
    [
        21.5,
        22.8,
        21.0,
        23.0,
        21.6,
        23.6,
        22.5,
        20.7,
        23.4,
        21.8,
        20.7,
        21.7,
        21.5,
        22.5,
        23.6,
        21.5,
        22.5,
        23.5,
        21.5,
        21.8,
    ],
)

ENV = {**ENVIRONMENT, "cpu_model": "Test CPU", "cpu_logical_cores": 8}
#: the fixture run's results.json, whose sections results_doc changes
RUN = json.loads((FIXTURES / "run" / "results.json").read_text())


def results_doc(
    score: float,
    *,
    workers: int = 2,
    minutes: float = 1.0,
    dataset: str = "digits",
    seed: int = 0,
    best: float = 0.9,
    min_accuracy: float = 0.5,
    version: int = 2,
    aihpc_version: str = "0.1.0",
    environment: dict | None = None,
    energy: dict | None = None,
) -> dict:
    """A results.json of ``aihpc run``: the fixture run's with the fields compare and rank read
    changed (``energy`` only where given)."""
    return (
        RUN
        | ({"energy": energy} if energy is not None else {})
        | {
            "schema_version": version,
            "aihpc_version": aihpc_version,
            "run_id": f"run-{seed}",
            "config": {
                "dataset": dataset,
                "data_options": {},
                "minutes": minutes,
                "workers": workers,
                "strategy": "evolution",
                "seed": seed,
                "min_accuracy": min_accuracy,
            },
            "data": {**RUN["data"], "name": dataset},
            "environment": environment or ENV,
            "layout": {"workers": workers},
            "score": RUN["score"]
            | {
                "ops_per_second": score,
                "error_percent": 100 * (1 - best),
                "best_accuracy": best,
                "regulated_score": score * abs(math.log(1 - best)),
                "peak_fraction": score / 1e11,
                "min_accuracy": min_accuracy,
                "valid": best >= min_accuracy,
            },
            "trials": [],
        }
    )


def write(path: Path, doc: dict) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "results.json").write_text(json.dumps(doc, sort_keys=True))
    return path


def test_welch_p_value_matches_the_published_examples() -> None:
    assert welch_p_value(*WELCH_1) == pytest.approx(0.021, abs=5e-4)
    assert welch_p_value(*WELCH_2) == pytest.approx(0.149, abs=5e-4)
    assert welch_p_value((1.0, 1.0), (2.0, 2.0)) is None  # no spread: no test


def test_repeats_are_grouped_and_marked(tmp_path: Path) -> None:
    a = [
        load_entry(write(tmp_path / f"a{i}", results_doc(v * 1e9, seed=i)))
        for i, v in enumerate(WELCH_1[0][:5])
    ]
    b = [
        load_entry(write(tmp_path / f"b{i}", results_doc(v * 1e9, workers=4, seed=i)))
        for i, v in enumerate(WELCH_1[1][:5])
    ]
    single = load_entry(write(tmp_path / "c", results_doc(3e10, workers=8)))
    groups = group_repeats(a + b + [single])
    assert [g.members for g in groups] == [(1, 2, 3, 4, 5), (6, 7, 8, 9, 10), (11,)]
    assert groups[0].mean == pytest.approx(sum(WELCH_1[0][:5]) / 5 * 1e9)
    assert groups[1].p_value == pytest.approx(welch_p_value(WELCH_1[0][:5], WELCH_1[1][:5]))
    assert groups[1].marker == ("*" if groups[1].p_value < 0.05 else "n.s.")
    assert groups[2].p_value is None and groups[2].marker == ""  # one run: nothing to test


def test_compare_cli_side_by_side_with_significance(tmp_path: Path) -> None:
    dirs = [
        write(tmp_path / f"a{i}", results_doc(v * 1e9, seed=i)) for i, v in enumerate(WELCH_2[0])
    ]
    dirs += [
        write(tmp_path / f"b{i}", results_doc(v * 1e9, workers=4, seed=i))
        for i, v in enumerate(WELCH_2[1])
    ]
    proc = aihpc("compare", *map(str, dirs))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:3] == ["#", "result", "machine"]
    assert "17.2 GOPS" in lines[1] and "node1: Test CPU, 8 cores" in lines[1]
    (b_line,) = [line for line in lines if line.strip().startswith("B  #11")]
    assert "n=20" in b_line and "p = 0.149 n.s." in b_line
    assert any(line.startswith("significance: Welch's t-test") for line in lines)
    assert not any(line.startswith("not like for like") for line in lines)


def test_compare_flags_what_is_not_like_for_like(tmp_path: Path) -> None:
    one = write(tmp_path / "one", results_doc(1e9))
    other = write(
        tmp_path / "other",
        results_doc(2e9, dataset="synthetic", minutes=2.0, aihpc_version="0.2.0"),
    )
    proc = aihpc("compare", str(one), str(other))
    assert proc.returncode == 0, proc.stderr
    assert "not like for like: different data sets: digits (#1); synthetic (#2)" in proc.stdout
    assert "not like for like: different budgets: 1.0 min (#1); 2.0 min (#2)" in proc.stdout
    assert "not like for like: different aihpc versions: 0.1.0 (#1); 0.2.0 (#2)" in proc.stdout
    strict = aihpc("compare", "--strict", str(one), str(other))
    assert strict.returncode == 2 and strict.stderr.count("\n") == 1
    assert "different data sets" in strict.stderr


@pytest.mark.parametrize(
    "second, message",
    [
        ({"version": 1}, "cannot compare results of different schema versions: 2 (#1); 1 (#2)"),
    ],
)
def test_compare_refuses_different_schema_versions(
    tmp_path: Path, second: dict, message: str
) -> None:
    one = write(tmp_path / "one", results_doc(1e9))
    two = write(tmp_path / "two", results_doc(1e9, **second))
    proc = aihpc("compare", str(one), str(two))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"aihpc compare: error: {message}\n"


def test_compare_refuses_a_kind_without_a_score_and_different_workloads(tmp_path: Path) -> None:
    from kind_files import real_file

    roofline = real_file("roofline")  # a real roofline result
    one = write(tmp_path / "one", results_doc(1e9))
    proc = aihpc("compare", str(one), str(roofline))
    assert proc.returncode == 2
    assert proc.stderr == (
        f"aihpc compare: error: cannot compare {roofline}: result kind 'roofline' carries no "
        "score (comparable kinds: run, infer)\n"
    )
    entry = load_entry(one)
    other = Entry(**{**entry.__dict__, "workload": "cosmoflow"})
    with pytest.raises(ConfigError, match="different workloads: aihpc_automl"):
        check_like_for_like([entry, other])
    bad = aihpc("compare", str(one))
    assert bad.returncode == 2 and "at least two results" in bad.stderr


def test_valid_flops_by_hand() -> None:
    # HPC AI500: FLOPS x (achieved / target)^5 below the target; (0.8 / 0.9)^5 = 32768 / 59049
    assert valid_flops(1e12, 0.8, 0.9) == pytest.approx(1e12 * 32768 / 59049, rel=1e-12)
    assert valid_flops(1e12, 0.95, 0.9) == 1e12
    assert valid_flops(1e12, 0.9, 0.9) == 1e12
    assert valid_flops(1e12, None, 0.9) == 0.0
    assert valid_flops(None, 0.8, 0.9) is None


def test_rank_orders_by_score_with_valid_flops(tmp_path: Path) -> None:
    write(tmp_path / "slow", results_doc(1e9, workers=1, best=0.95))
    write(tmp_path / "fast-but-poor", results_doc(4e9, workers=4, best=0.4, min_accuracy=0.5))
    write(
        tmp_path / "middle",
        results_doc(2e9, workers=2, best=0.9, environment={**ENV, "hostname": "node2"}),
    )
    (tmp_path / "notes.json").write_text("{}")  # not a result: skipped
    rows, skipped = build_ranking(tmp_path, verify=False)
    assert [r.entry.score for r in rows] == [4e9, 2e9, 1e9]
    assert rows[0].valid_flops == pytest.approx(4e9 * (0.4 / 0.5) ** 5)
    assert rows[1].valid_flops == 2e9 and rows[1].entry.machine == "node2: Test CPU, 8 cores"
    assert skipped == [tmp_path / "notes.json"]
    rows, _ = build_ranking(tmp_path, verify=False, target=0.95)
    assert rows[1].valid_flops == pytest.approx(2e9 * (0.9 / 0.95) ** 5)
    html = tmp_path / "rank.html"
    proc = aihpc("rank", str(tmp_path), "--html", str(html))
    assert proc.returncode == 0, proc.stderr
    table = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert table[0].startswith("| rank | result | machine | config |")
    assert table[1].startswith("| 1 | fast-but-poor | node1: Test CPU, 8 cores | 4 workers")
    assert "| 1.31 GOPS |" in table[1]
    assert all(
        line.endswith("| unchecked | not measured | not measured | n/a |") for line in table[1:]
    )
    page = html.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count("<tr>") == 4 and "http" not in page


def test_rank_bad_input_is_one_line(tmp_path: Path) -> None:
    write(tmp_path / "one", results_doc(1e9))
    write(tmp_path / "two", results_doc(1e9, version=1))
    proc = aihpc("rank", str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "different schema versions" in proc.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = aihpc("rank", str(empty))
    assert (
        proc.returncode == 2
        and proc.stderr
        == f"aihpc rank: error: no results under {empty} "
        "(no results.json, no result file with a score)\n"
    )


# 2 packages and DRAM of one host, metered for 60 s: 6 kJ + 3 kJ + 0.6 kJ
METERED = {
    "complete": True,
    "reason": None,
    "interval_s": 0.5,
    "devices": [
        {
            "device": "package-0",
            "host": "node1",
            "source": "rapl",
            "joules": 6000.0,
            "seconds": 60.0,
            "watts": 100.0,
            "samples": 121,
            "max_interval_s": 0.51,
            "wraps": 1,
            "resets": 0,
            "reason": None,
        },
        {
            "device": "package-0/dram",
            "host": "node1",
            "source": "rapl",
            "joules": 600.0,
            "seconds": 60.0,
            "watts": 10.0,
            "samples": 121,
            "max_interval_s": 0.51,
            "wraps": 0,
            "resets": 0,
            "reason": None,
        },
        {
            "device": "package-1",
            "host": "node1",
            "source": "rapl",
            "joules": 3000.0,
            "seconds": 60.0,
            "watts": 50.0,
            "samples": 121,
            "max_interval_s": 0.51,
            "wraps": 0,
            "resets": 0,
            "reason": None,
        },
    ],
}
NO_RAPL = (
    "no RAPL: /sys/class/powercap does not exist"
    " (no powercap in this kernel, or not exposed to this host)"
)


def test_compare_and_rank_show_energy_or_why_not(tmp_path: Path) -> None:
    from aihpc.energy.run import unmeasured_block
    from aihpc.records.energy import energy_results

    # 1.2e9 OPS for 60 s = 7.2e10 operations over 9.6 kJ: 7.5e6 operations per joule, 0.0075 GOPS/W
    metered = energy_results(METERED, ops=7.2e10)
    assert metered["total"]["joules"] == 9600.0 and metered["total"]["watts"] == 160.0
    assert metered["total"]["ops_per_joule"] == pytest.approx(7.5e6)
    a = write(tmp_path / "a", results_doc(1.2e9, energy=metered))
    b = write(
        tmp_path / "b",
        results_doc(1.0e9, seed=1, energy=energy_results(unmeasured_block(NO_RAPL), 6e10)),
    )
    c = write(tmp_path / "c", results_doc(0.5e9, seed=2))  # written before energy was measured
    proc = aihpc("compare", str(a), str(b), str(c))
    assert proc.returncode == 0, proc.stderr
    rows = proc.stdout.splitlines()
    assert rows[0].endswith("valid  energy        power         GOPS/W")
    assert rows[1].split()[-5:] == ["9.60", "kJ", "160", "W", "0.0075"]
    assert rows[2].endswith("not measured  not measured  n/a")
    assert f"energy of #2: not measured: {NO_RAPL}" in rows
    assert "energy of #3: not measured: results written before aihpc measured energy" in rows
    ranked = aihpc("rank", str(tmp_path), "--no-verify")
    assert ranked.returncode == 0, ranked.stderr
    table = [line for line in ranked.stdout.splitlines() if line.startswith("| ")]
    assert table[1].startswith("| 1 | a |") and table[1].endswith("| 9.60 kJ | 160 W | 0.0075 |")
    assert f"- energy of rank 2: not measured: {NO_RAPL}" in ranked.stdout


def test_compare_and_rank_give_the_share_of_the_measured_and_the_nominal_peak(
    tmp_path: Path,
) -> None:
    a = results_doc(2e10, seed=0)  # 20 % of the measured 1e11 FLOP/s
    a["score"].update(nominal_peak_flops_per_s=4e11, nominal_peak_fraction=0.05, peak_warning=None)
    b = results_doc(1.04e11, seed=1)  # above the measured peak: flagged
    b["score"].update(
        nominal_peak_flops_per_s=4e11,
        nominal_peak_fraction=0.26,
        peak_warning="the score is 104.0 % of the measured peak: ... unreliable",
    )
    c = results_doc(1e10, seed=2)  # written before the nominal peak was recorded
    dirs = [write(tmp_path / name, doc) for name, doc in (("a", a), ("b", b), ("c", c))]
    proc = aihpc("compare", *map(str, dirs))
    assert proc.returncode == 0, proc.stderr
    rows = proc.stdout.splitlines()
    assert "share of peak" in rows[0] and "of nominal" in rows[0]
    assert "20.0%" in rows[1] and "5.0%" in rows[1]
    assert "104.0% (unreliable peak)" in rows[2] and "26.0%" in rows[2]
    assert "10.0%" in rows[3] and " n/a " in rows[3]
    ranked = aihpc("rank", str(tmp_path), "--no-verify")
    assert ranked.returncode == 0, ranked.stderr
    table = [line for line in ranked.stdout.splitlines() if line.startswith("| ")]
    assert "| share of peak | of nominal |" in table[0]
    assert "| 104.0% (unreliable peak) | 26.0% |" in table[1] and "| 20.0% | 5.0% |" in table[2]
    assert "| 10.0% | n/a |" in table[3]
