"""Every benchmark script that measures on this machine, run at its smallest settings in this
process (``main(argv)``, as ``python benchmarks/NAME.py ARGS`` runs it): each must run to its end,
and its figures must be the ones it says (checked against what they count, where the script's
own check is not already there).  The scripts that run ``aihpc run`` are in test_run_reports.py,
on kept runs; one of them runs a whole run here."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fixture_run import aihpc_main

ROOT = Path(__file__).resolve().parents[2]


def test_count_speed_counts_children_both_ways(call):
    code, out, _ = call("count_speed", "--workload", "cpu", "--children", "2", "--more", "1")
    # the script stops (exit 1) on the first architecture the two counts disagree on
    assert code == 0 and "first 2 architectures, counted both ways (all equal)" in out
    assert "next 1 architectures, layer by layer only" in out


def test_lm_count_speed_counts_children_both_ways(call):
    code, out, _ = call("lm_count_speed", "--workload", "cpu", "--children", "2")
    assert code == 0 and "workload cpu: 2 architectures" in out and "every count equal" in out


def test_tpe_ask_drives_both_backends(call):
    code, out, _ = call(
        "tpe_ask", "--trials", "12", "--in-flight", "4", "--paced-asks", "3", "--processes", "1"
    )
    assert code == 0
    assert out.count("sustained: ") == 2 and "over 12 trials" in out
    assert "process paced at 100 asks/s (3 asks)" in out


def test_master_capacity_runs_a_virtual_run(call):
    code, out, _ = call(
        "master_capacity", "--slots", "2", "--minutes", "0.3", "--epoch-seconds", "1",
        "--warmup", "2", "--hpo-processes", "1",
    )  # fmt: skip
    assert code == 0
    epochs, trials = map(int, re.search(r"\((\d+) epochs of (\d+) trials", out).groups())
    # 2 slots x 18 s / 1-s epochs: 36 epoch results in the virtual run, less the 2 warm-up
    # trials'; a trial trains at least 4 epochs (the plateau rule), so several trials start
    assert 0 < trials <= epochs <= 36


def test_master_capacity_says_when_no_trial_started_after_the_warmup(call):
    """A run too short for a trial after the warm-up ones is one line, not a division by zero."""
    code, _, err = call(
        "master_capacity", "--slots", "1", "--minutes", "0.05", "--epoch-seconds", "1",
        "--warmup", "1", "--hpo-processes", "1",
    )  # fmt: skip
    assert code == 1 and err.startswith("no trial started after the --warmup (1) trials"), err


@pytest.mark.parametrize("tier", ["device", "stream"])
def test_staging_stages_the_gpu_default_data_on_the_cpu(call, tier):
    code, out, _ = call("staging", "--samples", "200", "--device", "cpu", "--tier", tier)
    assert code == 0
    assert "synthetic: 100 classes, 3x128x128, 160 train / 40 val" in out
    staged = 200 * 3 * 128 * 128 * 2 + 200 * 8  # bfloat16 images, int64 labels
    assert f"staged            {staged / 2**30:.2f} GiB" in out
    assert "resident during staging" in out  # its peak reset before staging


def test_staging_refuses_too_few_samples_in_one_line(call):
    code, out, err = call("staging", "--samples", "100", "--device", "cpu")
    assert code == 2 and err.startswith("staging: error: num_samples=100 ") and err.count("\n") == 1


@pytest.mark.slow
def test_weight_writer_writes_both_ways(call):
    code, out, _ = call("weight_writer", "--repeats", "1", "--samples", "256")
    assert code == 0
    assert "synchronous write  epoch" in out and "background writer  epoch" in out
    # the ResNet-50 seed at 3x128x128, 100 classes, and its momentum: 2 x 23,712,932 float32
    assert "GPU default state ResNet-50 seed + momentum, 181 MiB" in out


def test_epoch_phases_times_each_phase(call):
    argv = ("--repeats", "1", "--samples", "256", "--batch", "64", "--width", "4")
    code, out, _ = call("epoch_phases", *argv)
    assert code == 0
    # 256 samples, 20 % for validation: 204 training samples, 3 whole batches of 64; the seed
    # network at base width 4 (the CPU's is 8: 70,106 parameters)
    assert out.startswith(
        "1 epochs, 192 training samples, batch 64, device cpu, a seed network of 18,214 parameters"
    )
    phases = {line.split()[0] for line in out.splitlines()[1:]}
    assert {"forward", "backward", "optimizer", "eval", "epoch"} <= phases


@pytest.mark.slow
def test_lm_growth_trains_the_three_schedules(call, tmp_path):
    code, out, _ = call(
        "lm_growth", "--seeds", "0", "--steps", "1", "--epochs", "1", "--threads", "1",
        "--epoch-tokens", "4096", "--train-tokens", "8192", "--out", str(tmp_path / "g.json"),
    )  # fmt: skip
    assert code == 0 and "mean grown: " in out
    (row,) = json.loads((tmp_path / "g.json").read_text())["rows"]
    # the seed and the final network trained from scratch until the lineage's operations
    assert row["seed_only"]["ops"] >= row["grown"]["ops"] * 0.5
    assert row["final_from_scratch"]["params"] == row["grown"]["params"]


def test_seams_counts_at_head(call):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("seams.py reads git revisions: no git checkout here")
    code, out, _ = call("seams")
    assert code == 0
    readme = subprocess.run(
        ["git", "show", "HEAD:README.md"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert f"| readme lines | {len(readme.splitlines())} |" in out
    assert "| literal get calls |" in out and "| lookups and gets by reader | results " in out


def test_test_groups_sums_a_junit_report(call, tmp_path):
    junit = tmp_path / "suite.xml"
    junit.write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="3" '
        'time="9.5"><testcase classname="tests.a.test_x" name="test_1@runs" time="4.0"/>'
        '<testcase classname="tests.a.test_x" name="test_2@runs" time="2.5"/>'
        '<testcase classname="tests.b.test_y" name="test_3" time="1.25"/></testsuite></testsuites>'
    )
    code, out, _ = call("test_groups", str(junit))
    assert code == 0 and out.startswith("wall 10 s, 3 tests")  # 9.5 s, rounded to even
    assert "| runs | 6 |" in out and "| (no group) | 1 |" in out and "| all | 8 |" in out
    assert "    6.5  tests/a/test_x.py" in out


def test_the_kept_recommender_validation_is_judged_again_to_the_same_figures(capsys, tmp_path):
    """benchmarks/recommend/validation.json (`aihpc recommend validate`'s result, README's table)
    judged again from its held-out observations: the same figures."""
    saved = ROOT / "benchmarks" / "recommend" / "validation.json"
    again = tmp_path / "again.json"
    code, out, err = aihpc_main(
        capsys, "recommend", "validate", "--observations", str(saved), "--out", str(again)
    )
    assert code == 0, err
    assert (
        json.loads(again.read_text())["data"]["validation"]
        == json.loads(saved.read_text())["data"]["validation"]
    )


@pytest.mark.slow
def test_automl_run_runs_a_whole_run_at_its_smallest(call, tmp_path):
    """The one script run here with a real `aihpc run` (the others share its run_aihpc and are
    reported on kept runs): the fixture run's settings for 0.05 minutes."""
    run, config = tmp_path / "run", tmp_path / "run.toml"
    # the fixture run's data and worker, one hyperparameter search process (each imports Optuna)
    # and a short peak search
    config.write_text(
        'dataset = "digits"\nworkers = 1\nthreads_per_worker = 1\nepochs_min = 1\n'
        "batch_sizes = [128]\nhpo_processes = 1\npeak_seconds = 0.2\n"
    )
    code, out, err = call(
        "automl_run", "--minutes", "0.03", "--keep", str(run), "--", "--config", str(config)
    )
    assert code == 0, err
    results = json.loads((run / "results.json").read_text())
    assert f"trials            {len(results['trials'])}" in out
    assert out.startswith("score             ") and "harness overhead" in out


@pytest.mark.slow
def test_rank_epochs_trains_consecutive_epochs(call):
    """In this process (``--procs 1``): a rank pool's start, two processes importing torch, costs
    some 8 core-s; the pool's epochs are tested in tests/train/test_rank_pool.py."""
    code, out, err = call("rank_epochs", "digits", "--epochs", "2", "--procs", "1")
    assert code == 0, err
    first, second = (json.loads(line) for line in out.splitlines())
    assert first["status"] == second["status"] == "ok"
    assert first["digest"] != second["digest"]  # the second trained on from the first's weights
    assert second["val_loss"] < first["val_loss"]


@pytest.mark.slow
def test_compile_regions_runs_its_baseline_case(call, tmp_path):
    """The eager case alone (a compiled case adds some 9 core-s of Dynamo's tracing in a process of
    its own; the regional compilation it times is tested in
    tests/tasks/image/test_image_regions.py)."""
    code, out, err = call(
        "compile_regions", "--cases", "eager", "--batch", "4", "--steps", "2",
        "--out", str(tmp_path / "c.json"),
    )  # fmt: skip
    assert code == 0, err
    done = json.loads((tmp_path / "c.json").read_text())
    assert list(done["cases"]) == ["eager"] and done["settings"]["cases"] == "eager"
    steady = done["cases"]["eager"]["archs"]["parent"]["steady"]
    assert 0 < steady["train_step_s"]["min"] <= steady["train_step_s"]["median"]
    # the default epoch extrapolated from the medians: 10,800 / 4 steps and 1,200 / 4 eval batches
    assert "(epoch extrapolated: 2700 training steps + 300 eval batches, not run)" in out


def test_compile_regions_refuses_a_case_without_its_cache(call):
    code, _, err = call("compile_regions", "--cases", "whole-warm")
    assert code == 2 and "whole-warm reads the cache of whole-cold: add it" in err


@pytest.mark.slow
def test_lm_step_times_every_variant_at_its_smallest(tmp_path):
    """In a process of its own (it points inductor's cache at a folder of its own): every variant,
    each compiled one with its two children; a variant that fails would be a row with an error and
    exit 1.  The eager variants train the same network alike: their first losses agree to the
    bfloat16 weights' rounding."""
    import sys

    out = tmp_path / "step.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "lm_step.py"), "--smallest", "--device", "cpu",
         "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {r["variant"]: r for r in json.loads(out.read_text())["variants"]}
    assert list(rows) == ["eager", "eager-bf16", "compiled", "compiled-bf16"]
    assert all(r["step_s"] > 0 and r["model_tflops"] > 0 for r in rows.values())
    for name in ("compiled", "compiled-bf16"):
        regions, children = rows[name]["regions"], rows[name]["children"]
        assert regions == {"compiled": 1, "needed": 2}  # two equal blocks: one compiled region
        assert children["add_block"]["regions_compiled"] == 0  # a block of the seed's shape
        assert children["widen_mlp"]["regions_compiled"] == 1  # one block of a new shape
    assert rows["eager"]["regions"] == {"compiled": 0, "needed": 0}


def test_lm_step_refuses_an_unknown_variant_in_one_line(call):
    code, _, err = call("lm_step", "--smallest", "--variants", "eager,fastest")
    assert code == 2 and "fastest" in err and "Traceback" not in err


def test_roofline_dtypes_times_this_processors_defaults(call):
    """The features' case alone at the smallest sizes (the native-float16 case searches every
    float16 kernel: minutes where the processor emulates it, which is what it measures)."""
    code, out, err = call(
        "roofline_dtypes", "--only", "features", "--seconds", "0.001", "--elements", "4096"
    )
    assert code == 0, err
    assert "this processor's features: extensions " in out and "native" not in out.split("\n")[-2]
    assert re.search(r"peak float32 +[\d.]+ [GMT]?FLOP/s", out)
    assert re.search(r"^features: \d+\.\d s$", out.strip().splitlines()[-1])


def test_records_decode_decodes_the_fixture_run_and_shows_each_librarys_errors(call, tmp_path):
    libraries = "stdlib,msgspec-dataclass,msgspec"  # pydantic is not among aihpc's dependencies
    code, out, _ = call(
        "records_decode", "--copies", "2", "--repeats", "1", "--libraries", libraries,
        "--out", str(tmp_path),
    )  # fmt: skip
    assert code == 0
    report = json.loads((tmp_path / "records_decode.json").read_text())
    fixture = json.loads((ROOT / "tests" / "fixtures" / "run" / "results.json").read_text())
    assert report["document"]["trials"] == 2 * len(fixture["trials"])
    assert [row["library"] for row in report["decode"]] == libraries.split(",")
    assert all(row["seconds"] > 0 and row["memory"] >= 0 for row in report["decode"])
    # aihpc's reader names the field of each malformed document, on one line
    errors = report["errors"]
    assert errors["a fractional count"]["msgspec"] == (
        "DataError: results file: trials[0].ops.train: expected int, got float"
    )
    assert all("\n" not in errors[case]["msgspec"] for case in errors)
    assert errors["a string for an integer"]["stdlib"] == "(accepted: no error)"


def test_test_cost_charges_each_test_the_cpu_it_keeps_busy(call, tmp_path):
    """Two tests of a file of their own, run serially by the script: one whose child process
    computes for 1.5 CPU-seconds is charged at least that (whatever else the machine ran beside
    it: the script charges the whole machine's busy time); one that sleeps is listed too."""
    tests = tmp_path / "test_pair.py"
    tests.write_text(
        "import subprocess, sys, time\n"
        "def test_busy_child():\n"
        "    code = 'import time\\nend = time.process_time() + 1.5\\n"
        "while time.process_time() < end: pass'\n"
        "    assert subprocess.run([sys.executable, '-c', code]).returncode == 0\n"
        "def test_sleeps():\n"
        "    time.sleep(0.5)\n"
    )
    code, out, _ = call(
        "test_cost", str(tmp_path / "cost"), "--", str(tests), "-p", "no:cacheprovider"
    )
    assert code == 0, out
    rows = {}
    for line in (tmp_path / "cost" / "test-cost.tsv").read_text().splitlines():
        name, wall, cost = line.split("\t")
        rows[name.split("::")[1]] = (float(wall), float(cost))
    assert rows["test_busy_child"][1] >= 1.4  # the tick is 10 ms
    assert rows["test_sleeps"][0] >= 0.5
    assert out.startswith("2 tests, ") and "test_pair.py` |" in out  # pytest's rootdir decides
    assert (tmp_path / "cost" / "test-cost.md").read_text() == out
