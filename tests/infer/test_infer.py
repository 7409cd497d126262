"""``aihpc infer``'s parts under the real LoadGen: the batching system, the scenarios, the CLI.

The model served is the zoo's digits CNN (0.3 ms a sample here), so a LoadGen
test of half a second serves hundreds of queries.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from aihpc.base.errors import ConfigError
from aihpc.infer import scenarios
from aihpc.infer.command import InferOptions, generation
from aihpc.infer.loadgen import Settings, check_scenario, read_results, why_invalid
from aihpc.infer.record import histogram
from aihpc.infer.scenarios import Bounds, Calibration, ScenarioBench, best_valid, calibrate
from aihpc.infer.source import from_zoo
from aihpc.infer.systems import Classify
from fixture_run import aihpc, aihpc_main

SECONDS = 0.5
TIMEOUT = 300  # seconds for one aihpc command here (the shared helper allows 240)


@pytest.fixture(scope="module")
def step() -> Classify:
    source = from_zoo("digits_cnn", None, 256)
    return Classify(source.model, source.inputs, torch.device("cpu"), "float32")


def test_calibration_times_each_batch_size_and_the_largest_is_the_fastest_per_sample(step):
    calibration = calibrate(step, 256, 64)
    assert sorted(calibration.seconds) == [1, 2, 4, 8, 16, 32, 64]
    assert calibration.rate(calibration.best_batch()) >= calibration.rate(1)
    assert calibration.largest_within(0.0) is None
    assert calibration.largest_within(1e9) == 64


def test_offline_serves_every_sample_in_full_batches_and_loadgen_logs_agree(step, tmp_path):
    tester = ScenarioBench([step], 256, tmp_path, SECONDS)
    run = tester.offline(calibrate(step, 256, 32))
    assert run.loadgen.valid, why_invalid(run.loadgen.results)
    # LoadGen's one offline query holds (expected rate x duration x 1.1) samples, all served
    served = len(run.latencies)
    assert served >= 0.5 * SECONDS * run.loadgen.settings.target_qps
    assert run.batches == -(-served // run.max_batch)  # full batches, one partial at most
    assert run.loadgen.log_dir == f"{tmp_path.name}/01-offline"  # relative to the result's folder
    logs = tmp_path.parent / run.loadgen.log_dir
    assert read_results(logs / "mlperf_log_detail.txt") == run.loadgen.results
    assert (logs / "mlperf_log_summary.txt").is_file()
    assert run.loadgen.version is not None and run.loadgen.version.startswith(("5.", "6.", "7."))
    assert run.loadgen.results["query_count"] == 1


def test_an_offline_test_served_before_the_minimum_duration_runs_again_at_the_rate_reached(
    step, tmp_path
):
    """A calibration far slower than the system (as one made while other processes had the cores):
    LoadGen's one query is served before the minimum duration, and the test runs again at twice
    the rate it reached until the duration is met."""
    slow = Calibration({1: 0.5, 2: 1.0})  # 2 samples a second, where the CNN serves thousands
    tester = ScenarioBench([step], 256, tmp_path, SECONDS)
    run = tester.offline(slow)
    assert run.loadgen.valid, why_invalid(run.loadgen.results)
    assert tester.tests >= 2
    first = read_results(tmp_path / "01-offline" / "mlperf_log_detail.txt")
    assert first["min_duration_met"] is False and first["validity"] == "INVALID"
    assert run.loadgen.settings.target_qps > 100 * slow.rate(2)


def test_single_stream_serves_one_sample_at_a_time(step, tmp_path):
    run = ScenarioBench([step], 256, tmp_path, SECONDS).single_stream(
        calibrate(step, 256, 1), False
    )
    assert run.loadgen.valid, why_invalid(run.loadgen.results)
    assert run.batches == len(run.latencies) >= 256  # one batch per query, at least the minimum
    assert run.loadgen.latency(90.0) >= run.loadgen.latency(50.0) > 0


def test_the_server_batches_under_load_and_its_search_brackets_the_highest_valid_rate(
    step, tmp_path
):
    # a 250 ms bound: at half the calibrated rate, a loaded machine's scheduling delays (tens of
    # ms, with 4 test processes on 2 cores) must not make the first test invalid
    bound = 0.25
    calibration = calibrate(step, 256, 64)
    tester = ScenarioBench([step], 256, tmp_path, SECONDS)
    runs = tester.server(calibration, Bounds(bound), calibration.rate(calibration.best_batch()), 4)
    assert len(runs) == 4 and runs[0].loadgen.valid
    rates = [r.loadgen.settings.target_qps for r in runs]
    assert rates[0] == pytest.approx(0.5 * calibration.rate(1))
    best = best_valid(runs)
    assert best is not None and best.loadgen.settings.target_qps == max(
        r.loadgen.settings.target_qps for r in runs if r.loadgen.valid
    )
    # at the highest rate tried, samples arrive faster than one at a time is served: batches form
    fastest = max(runs, key=lambda r: r.loadgen.settings.target_qps)
    assert fastest.batches < len(fastest.latencies)
    for r in runs:  # LoadGen's verdict follows its p99 against the bound (or its early stopping)
        if r.loadgen.latency(99.0) > bound:
            assert not r.loadgen.valid


def test_a_bound_missed_at_every_rate_is_an_invalid_server_result_after_three_tests(
    step, tmp_path, monkeypatch
):
    """The search gives up after two quarterings.  The bound (1 us) is missed at any rate, so the
    calibration only sets the rates tried (500, 125 and 31 queries/s, not a busy machine's
    measured ones, which made this test's last rate 0.4/s), and each test is held to 64 queries,
    not LoadGen's 640, which a bound missed at any count does not need."""
    monkeypatch.setattr(scenarios, "SERVER_MIN_QUERIES", 64)
    calibration = Calibration({1: 0.001, 2: 0.0015, 4: 0.0025, 8: 0.0045})
    runs = ScenarioBench([step], 256, tmp_path, SECONDS).server(calibration, Bounds(1e-6), 1e4, 6)
    rates = [r.loadgen.settings.target_qps for r in runs]
    assert len(runs) == 3 and rates[1] == rates[0] / 4 and rates[2] == rates[1] / 4
    assert rates[0] == 0.5 * calibration.rate(1)
    assert best_valid(runs) is None


def test_histogram_counts_every_value_once_in_log_bins():
    values = [0.001, 0.002, 0.004, 0.008, 0.016, 0.016]
    h = histogram(values, bins=4)
    assert sum(h["counts"]) == len(values) and len(h["edges_s"]) == 5
    assert h["edges_s"][0] == 0.001 and h["edges_s"][-1] >= 0.016
    assert h["counts"][0] >= 1 and h["counts"][-1] >= 2
    assert histogram([]) == {"edges_s": [], "counts": []}


def test_why_invalid_names_each_unmet_condition():
    assert why_invalid({"min_duration_met": False, "early_stopping_met": False}) == (
        "the minimum duration was not reached; "
        "too few queries for early stopping's confidence in the percentile"
    )
    assert why_invalid({"invalid_reason": "x", "perf_constraints_met": False}).startswith("x; ")


def test_scenario_names_and_a_prompt_longer_than_the_context_are_refused():
    with pytest.raises(ConfigError, match="multistream"):
        check_scenario("multistream")
    assert Settings("server", 1.0, 1).to_dict()["scenario"] == "server"
    zoo = from_zoo("digits_cnn", None, 4)
    assert generation(zoo, InferOptions()) is None  # an image model is one forward pass a query


def test_cli_serves_a_zoo_model_and_records_every_scenario(tmp_path):
    out = tmp_path / "digits"
    proc = aihpc(
        "infer",
        "--model",
        "digits_cnn",
        "--samples",
        "128",
        "--seconds",
        str(SECONDS),
        "--server-steps",
        "3",
        "--latency-ms",
        "50",
        "--peak-seconds",
        "0.2",
        "--out",
        str(out),
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr
    assert "VALID" in proc.stdout and "queries/s within the bound" in proc.stdout
    doc = json.loads((out / "infer.json").read_text())
    assert doc["kind"] == "infer" and doc["schema_version"] == 1
    data = doc["data"]
    assert (
        data["valid"]
        and data["quality"]["measure"] == "agreement"
        and data["quality"]["kept"] == 1.0
    )
    assert sorted(data["scenarios"]) == ["offline", "server", "single-stream"]
    offline = data["scenarios"]["offline"]
    assert offline["ops_per_second"] == pytest.approx(
        offline["samples_per_second"] * data["ops_per_query"]
    )
    assert 0 < offline["peak_fraction"] < 2 and data["peak"]["seconds"] == 0.2
    server = data["scenarios"]["server"]
    assert len(server["curve"]) == len(server["tests"]) == 3
    assert server["max_qps"] == max(p["target_qps"] for p in server["curve"] if p["valid"])
    assert all(
        p["samples_per_second"] > 0 for p in server["curve"]
    )  # the rate LoadGen saw completed
    assert data["source"]["input_shape"] == [1, 8, 8] and data["loadgen_version"]
    assert {t["log_dir"] for s in data["scenarios"].values() for t in s["tests"]} == {
        f"loadgen/{p.name}" for p in (out / "loadgen").iterdir()
    }
    assert len(list((out / "loadgen").iterdir())) == 5
    assert not (tmp_path / "digits.partial").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "digits_cnn", "--scenario", "multistream"], "invalid choice: 'multistream'"),
        (["--model", "nope"], "nope"),
        (
            ["--samples", "0", "--model", "digits_cnn"],
            "--samples must be an integer of at least 1, got 0",
        ),
        (
            ["--seconds", "-1", "--model", "digits_cnn"],
            "--seconds must be a positive number, got -1.0",
        ),
        (
            ["--peak-seconds", "0", "--model", "digits_cnn"],
            "--peak-seconds must be a positive number, got 0.0",
        ),
        ([], "give a run directory or --model NAME"),
        (
            ["--model", "digits_cnn", "--latency-ms", "0.0001", "--scenario", "server"],
            "a latency bound of 0.0001 ms cannot be met",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    tmp_path, args, message, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    code, _, stderr = aihpc_main(capsys, "infer", *args, "--out", str(tmp_path / "out"))
    assert code == 2, stderr
    assert len(stderr.strip().splitlines()) == 1 and message in stderr, stderr
    assert "Traceback" not in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_run_without_weights_is_refused(tmp_path, capsys):
    from fixture_run import FIXTURES  # its weights are left out

    code, _, stderr = aihpc_main(
        capsys, "infer", str(FIXTURES / "run"), "--out", str(tmp_path / "out")
    )
    assert code == 2 and "weights cannot be served" in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_without_loadgen_the_command_says_how_to_install_it(tmp_path):
    code = (
        "import sys; sys.modules['mlperf_loadgen'] = None\n"
        "from aihpc.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "infer",
            "--model",
            "digits_cnn",
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith("pip install mlcommons-loadgen"), proc.stderr
    assert not (tmp_path / "o").exists()
