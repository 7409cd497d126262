"""``aihpc infer``'s parts under the real LoadGen: the batching system, the scenarios, the CLI.

The model served is the zoo's digits CNN (0.3 ms a sample here), so a LoadGen
test of half a second serves hundreds of queries.  A test's verdict on this
loaded machine is asserted only where the work leaves a wide margin (a bound
of 250 ms where a sample takes a millisecond, a rate far beyond what the
system serves).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from aihpc.base.errors import ConfigError
from aihpc.infer import scenarios
from aihpc.infer.batches import batch_sizes
from aihpc.infer.command import InferOptions, generation
from aihpc.infer.loadgen import Settings, check_scenario, read_results, why_invalid
from aihpc.infer.record import histogram, server_reason, server_record
from aihpc.infer.scenarios import (
    Bounds,
    Calibration,
    ScenarioBench,
    ScenarioRun,
    best_valid,
    predicted_seconds,
    server_floor,
    warm_up,
)
from aihpc.infer.source import from_zoo
from aihpc.infer.steps import Classify
from fixture_run import aihpc, aihpc_main

SECONDS = 0.5
TIMEOUT = 300  # seconds for one aihpc command here (the shared helper allows 240)


@pytest.fixture(scope="module")
def step() -> Classify:
    source = from_zoo("digits_cnn", None, 256)
    sizes = batch_sizes(64, 256)
    return Classify(source.model, source.inputs, torch.device("cpu"), "float32", sizes)


@pytest.fixture(scope="module")
def calibration(step: Classify) -> Calibration:
    return warm_up([step])


def _check_split(run: ScenarioRun) -> None:
    """Each sample's queueing and compute add up to its latency; the batches served are of the
    warmed-up sizes and hold every sample served, with the padding."""
    assert len(run.latencies) == len(run.queueing) == len(run.compute) > 0
    for latency, queueing, compute in zip(run.latencies, run.queueing, run.compute, strict=True):
        assert queueing >= 0 and compute > 0
        assert queueing + compute == pytest.approx(latency, abs=1e-9)
    assert set(run.sizes) <= {1, 2, 4, 8, 16, 32, 64} and max(run.sizes) <= run.max_batch
    assert sum(size * n for size, n in run.sizes.items()) == len(run.latencies) + run.padding


def test_offline_serves_every_sample_in_full_batches_and_loadgen_logs_agree(
    step, calibration, tmp_path
):
    tester = ScenarioBench([step], 256, tmp_path, SECONDS)
    run = tester.offline(Calibration({32: calibration.seconds[32]}))  # batches of 32
    assert run.loadgen.valid, why_invalid(run.loadgen.results)
    # LoadGen's one offline query holds (expected rate x duration x 1.1) samples, all served
    served = len(run.latencies)
    assert served >= 0.5 * SECONDS * run.loadgen.settings.target_qps
    assert run.max_batch == 32 and run.batches == -(-served // 32)  # one partial batch at most
    assert run.sizes.get(32, 0) >= run.batches - 1
    _check_split(run)
    # relative to the result's folder; a calibration slower than the system runs the test again
    assert run.loadgen.log_dir == f"{tmp_path.name}/{tester.tests:02d}-offline"
    logs = tmp_path.parent / run.loadgen.log_dir
    assert read_results(logs / "mlperf_log_detail.txt") == run.loadgen.results
    assert (logs / "mlperf_log_summary.txt").is_file()
    assert run.loadgen.version is not None and run.loadgen.version.startswith(("5.", "6.", "7."))
    assert run.loadgen.results["query_count"] == 1


def test_an_offline_test_served_before_the_minimum_duration_runs_again_at_the_rate_reached(
    step, tmp_path
):
    """A calibration far slower than the system (as one made while other processes had the cores):
    LoadGen's one query is served before the minimum duration, and the test runs again at the
    headroom times the rate it reached until the duration is met."""
    slow = Calibration({1: 0.5, 2: 1.0})  # 2 samples a second, where the CNN serves thousands
    tester = ScenarioBench([step], 256, tmp_path, SECONDS)
    run = tester.offline(slow)
    assert run.loadgen.valid, why_invalid(run.loadgen.results)
    assert tester.tests >= 2
    first = read_results(tmp_path / "01-offline" / "mlperf_log_detail.txt")
    assert first["min_duration_met"] is False and first["validity"] == "INVALID"
    assert run.loadgen.settings.target_qps > 100 * slow.rate(2)


def test_single_stream_serves_one_sample_at_a_time(step, calibration, tmp_path):
    run = ScenarioBench([step], 256, tmp_path, SECONDS).single_stream(calibration, False)
    assert run.loadgen.valid, why_invalid(run.loadgen.results)
    assert run.batches == len(run.latencies) >= 256  # one batch per query, at least the minimum
    assert run.sizes == {1: run.batches} and run.padding == 0
    assert run.loadgen.latency(90.0) >= run.loadgen.latency(50.0) > 0
    _check_split(run)


@pytest.mark.slow
def test_single_stream_is_never_short_of_queries_whatever_the_calibration(step, tmp_path):
    """LoadGen pre-generates a single stream's queries from the expected latency: it is given a
    quarter of the calibrated latency, and a test that still ran out of queries (a calibration
    a thousand times too slow: LoadGen then makes its minimum 256 queries, served in well under
    the second asked) runs again from the latency it saw.  Ten tests of 0.2 s with the
    calibration as measured here (a system faster than its calibration made one of two INVALID
    before), then one with the wrong calibration: all valid."""
    calibration = warm_up([Classify(step.model, step.inputs, step.device, "float32", (1,))])
    for i in range(10):
        tester = ScenarioBench([step], 256, tmp_path / f"measured{i}", 0.2)
        run = tester.single_stream(calibration, False)
        assert run.loadgen.valid, why_invalid(run.loadgen.results)
    tester = ScenarioBench([step], 256, tmp_path / "wrong", 1.0)
    run = tester.single_stream(Calibration({1: 1000 * calibration.seconds[1]}), False)
    assert run.loadgen.valid and tester.tests == 2, why_invalid(run.loadgen.results)
    first = read_results(tmp_path / "wrong" / "01-single-stream" / "mlperf_log_detail.txt")
    assert first["min_duration_met"] is False and first["query_count"] == 256


#: What the digits CNN's batches take on a quiet core here (a loaded machine's calibration is
#: slower by as much as its load): the rates a search tries follow from it.
DIGITS = Calibration({1: 5e-4, 2: 6e-4, 4: 8e-4, 8: 1.2e-3, 16: 2e-3, 32: 3.5e-3, 64: 6.5e-3})


def test_the_server_batches_under_load_and_its_search_brackets_the_highest_valid_rate(
    step, tmp_path
):
    """Tests of 1 s and a 250-ms bound: at the first rate (1,000/s, half a single stream's; the
    floor is 640 queries in 1 s) a loaded machine's scheduling delays (tens of ms, with 4 test
    processes on 2 cores) must not make the test invalid.  The model meets only the sizes warmed
    up: every batch it ran is counted by a hook on it."""
    bound = 0.25
    shapes: list[int] = []
    hook = step.model.register_forward_pre_hook(lambda _, args: shapes.append(args[0].shape[0]))
    tester = ScenarioBench([step], 256, tmp_path, 1.0)
    try:
        search = tester.server(DIGITS, Bounds(bound), 2e4, 4)
    finally:
        hook.remove()
    runs = search.runs
    assert search.batch == 64 and search.floor == server_floor(1.0) == 160  # 640 in 4 s
    assert search.top == DIGITS.rate(64)  # what batches of 64 sustain, below the offline 20,000/s
    assert len(runs) == 4 and runs[0].valid
    rates = [r.loadgen.settings.target_qps for r in runs]
    assert rates[:2] == [1000, search.top]  # half of a single stream's 2,000/s; then the top
    assert min(rates) >= search.floor
    best = best_valid(runs)
    assert best is not None and best.loadgen.settings.target_qps == max(
        r.loadgen.settings.target_qps for r in runs if r.valid
    )
    # at the highest rate tried, samples arrive faster than one at a time is served: batches form
    fastest = max(runs, key=lambda r: r.loadgen.settings.target_qps)
    assert fastest.batches < len(fastest.latencies)
    assert set(shapes) <= set(step.sizes) and len(shapes) == sum(r.batches for r in runs)
    for r in runs:  # valid: LoadGen's p99 within the bound (or its early stopping), and kept up
        _check_split(r)
        if r.loadgen.latency(99.0) > bound or r.kept_up is False:
            assert not r.valid


def test_a_bound_missed_at_every_rate_is_an_invalid_server_result_after_three_tests(
    step, tmp_path, monkeypatch
):
    """The search gives up after two quarterings, never below the floor.  The bound (1 us) is
    missed at any rate, so the calibration only sets the rates tried (500, 125, then 32
    queries/s, the floor of 64 queries in four times 0.5 s, not a quarter's 31), and each test
    is held to 64 queries, not LoadGen's 640, which a bound missed at any count does not need."""
    monkeypatch.setattr(scenarios, "SERVER_MIN_QUERIES", 64)
    calibration = Calibration({1: 0.001, 2: 0.0015, 4: 0.0025, 8: 0.0045})
    tester = ScenarioBench([step], 256, tmp_path, SECONDS)
    search = tester.server(calibration, Bounds(1e-6), 1e4, 6)
    rates = [r.loadgen.settings.target_qps for r in search.runs]
    assert rates == [500, 125, 32]
    assert best_valid(search.runs) is None
    record = server_record(search)
    assert record.valid is False and record.max_qps is None
    reason = server_reason(record)
    assert reason.startswith(
        "server: no rate searched met the bound, down to 32 queries/s (the least at which "
        "LoadGen's 64 queries fit in a test of at most 2 s: a longer --seconds tries lower "
        "rates): "
    )
    assert "its slowest 1 % took" in reason and "queueing" in reason and "compute" in reason


def test_a_rate_the_test_s_time_cannot_fill_with_loadgen_s_queries_is_not_tried(step, tmp_path):
    """Batches that sustain 200 queries/s cannot reach 640 queries in a test of at most four
    times 0.5 s (320/s needed): no test runs, and the reason says how long a test would need to
    be."""
    calibration = Calibration({1: 0.01, 2: 0.015, 4: 0.02})
    tester = ScenarioBench([step], 256, tmp_path, SECONDS)
    search = tester.server(calibration, Bounds(0.1), 1e4, 6)
    assert search.runs == [] and tester.tests == 0 and search.top == 200
    record = server_record(search)
    assert record.valid is False and record.tests == () and record.curve == ()
    assert server_reason(record) == (
        "server: no rate tried: the 200 queries/s its batches of 4 sustain is below 320/s, "
        "the least at which a test of at most 4 x 0.5 s reaches LoadGen's 640 queries "
        "(--seconds 1 would)"
    )


def test_a_server_test_whose_queue_grows_is_not_a_valid_point_whatever_loadgen_says(step, tmp_path):
    """Arrivals at 10,000/s for 0.2 s to a system serving one sample at a time (a few thousand a
    second): with a bound of 30 s LoadGen calls the test VALID, but the system completed a
    fraction of the scheduled rate: its queue grew, and over 600 s it would miss any bound."""
    one = Classify(step.model, step.inputs, step.device, "float32", (1,))
    settings = Settings("server", 0.2, 64, target_qps=1e4, latency=30.0)
    run = ScenarioBench([one], 256, tmp_path, 0.2).test(settings, 1, 0.0)
    assert run.loadgen.valid, why_invalid(run.loadgen.results)
    assert run.kept_up is False and not run.valid
    results = run.loadgen.results
    assert results["completed_samples_per_sec"] < 0.9 * results["scheduled_samples_per_sec"]
    timing = run.record().timing
    # the slowest waited: queueing, not compute
    assert timing is not None and timing.tail.queueing_s > timing.tail.compute_s


def test_histogram_counts_every_value_once_in_log_bins():
    values = [0.001, 0.002, 0.004, 0.008, 0.016, 0.016]
    h = histogram(values, bins=4)
    assert sum(h.counts) == len(values) and len(h.edges_s) == 5
    assert h.edges_s[0] == 0.001 and h.edges_s[-1] >= 0.016
    assert h.counts[0] >= 1 and h.counts[-1] >= 2
    assert histogram([]).to_dict() == {"edges_s": [], "counts": []}


def test_why_invalid_names_each_unmet_condition():
    assert why_invalid({"min_duration_met": False, "early_stopping_met": False}) == (
        "the minimum duration was not reached; "
        "too few queries for early stopping's confidence in the percentile"
    )
    assert why_invalid({"invalid_reason": "x", "perf_constraints_met": False}).startswith("x; ")


def test_scenario_names_and_a_prompt_longer_than_the_context_are_refused():
    with pytest.raises(ConfigError, match="multistream"):
        check_scenario("multistream")
    assert Settings("server", 1.0, 1).record().scenario == "server"
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
    lines = proc.stdout.splitlines()
    plan = next(line for line in lines if "what follows should take about" in line)
    assert lines.index(plan) < lines.index(next(x for x in lines if "LoadGen test 1:" in x))
    assert (
        "  short test      0.5 s a test, MLPerf's are 600 s (--seconds 600 runs them so)" in lines
    )
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
    assert data["batch_sizes"] == [1, 2, 4, 8, 16, 32, 64, 128] and data["short_test"] is True
    assert sorted(map(int, data["warm_up"])) == data["batch_sizes"]
    assert all(p["kept_up"] in (True, False) for p in server["curve"])
    assert all(p["valid"] == (p["loadgen_valid"] and p["kept_up"]) for p in server["curve"])
    tail = server["timing"]["tail"]
    assert tail["queueing_s"] + tail["compute_s"] == pytest.approx(tail["latency_s"])
    duration = data["duration"]
    assert set(duration["predicted_s"]) == {"offline", "single-stream", "server", "peak"}
    calibration = Calibration({int(b): t for b, t in data["calibration_s"].items()})
    bounds = Bounds(**data["bounds"])
    expected = predicted_seconds(calibration, ("server",), SECONDS, (3, bounds, 1))["server"]
    assert duration["predicted_s"]["server"] == pytest.approx(expected)
    assert expected >= 3 * SECONDS
    assert duration["actual_s"]["server"] == pytest.approx(
        sum(t["wall_s"] for t in server["tests"])
    )
    assert duration["total_s"] >= duration["after_warm_up_actual_s"] > 0


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
