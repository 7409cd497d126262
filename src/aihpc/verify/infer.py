"""``aihpc verify DIR`` of an inference result: ``DIR/infer.json`` (``aihpc infer``) checked
against LoadGen's logs beside it, against its own tests, and against the model it served.

Four checks, each naming every mismatch by scenario and test:

loadgen
    Every test recorded under ``scenarios.*.tests`` has its log folder under DIR
    (``log_dir``: a path relative to DIR; a path outside DIR, as records written in the
    partial folder hold, is found by its name under ``DIR/loadgen``) with LoadGen's detail
    and summary logs.  The ``result_*`` values re-read from the detail log
    (:func:`aihpc.infer.loadgen.read_results`) equal the recorded ones; the settings LoadGen
    logged (scenario, minimum duration and queries, the target rate, the server's bound)
    are the recorded ones; the summary's verdict is the detail's; and every folder under
    ``DIR/loadgen`` is a recorded test (none was dropped from the record).
figures
    The headline figures follow from the tests: offline samples per second (and the
    operations per second and shares of the peak they give), single-stream's 50th and 90th
    percentile latency, the server's ``max_qps`` (the target rate of its highest valid
    test), the point shown and the throughput-latency curve; each histogram counts the
    samples its test served; ``valid`` is the quality's and every scenario's.  A server
    test is valid when LoadGen's verdict is and, in a record that states the rule
    (``kept_up_shortfall``, which must be aihpc's), the system kept up with its arrivals
    (:func:`aihpc.infer.loadgen.kept_up` on the logged rates); records made before the rule
    are judged by LoadGen's verdict alone.  Each test's batches are of the sizes warmed up
    and hold the samples it served; its timing split's slowest 1 % adds up; a server that
    ran no test says why (its best rate below the least a test of its seconds fills).
operations, quality
    The model recounted and re-measured (:mod:`aihpc.verify.infer_model`).

Verification reads DIR (and, for quality, the run or zoo model it names) and writes
nothing.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import msgspec

from aihpc.base.errors import DataError
from aihpc.infer.accuracy import KEEP
from aihpc.infer.loadgen import (
    DETAIL_LOG,
    KEPT_UP_SHORTFALL,
    SCENARIOS,
    SUMMARY_LOG,
    kept_up,
    read_detail,
    read_results,
)
from aihpc.infer.record import RECORD_FILE
from aihpc.records.files import InferFile, read_result_file
from aihpc.records.inference import InferData
from aihpc.records.inference_scenarios import (
    InferTest,
    LoadGenSettings,
    ScenarioPoint,
    ServerScenario,
    StreamScenario,
    loadgen_number,
    loadgen_rate,
    loadgen_seconds,
    loadgen_valid,
)
from aihpc.results.read import results_file
from aihpc.verify.checks import Check, Found, Mismatch, Verification, diffs, same

MAX_DIFFS = 5  # differing result keys named per test before "and N more"
LOGS = "loadgen"


def infer_folder(path: Path) -> Path | None:
    """The folder of an inference result that ``path`` names (the folder holding infer.json
    and no run's results.json, or infer.json itself); None if it names none."""
    path = Path(path)
    if path.is_file() and path.name == RECORD_FILE:
        return path.parent
    if path.is_dir() and (path / RECORD_FILE).is_file() and not results_file(path).exists():
        return path
    return None


def checked_files(folder: Path) -> list[Path]:
    """What verifying ``folder`` reads there: infer.json and LoadGen's detail and summary logs
    (for :func:`aihpc.verify.verdicts.fingerprint`)."""
    logs = sorted(p for p in (folder / LOGS).glob("*/*") if p.name in (DETAIL_LOG, SUMMARY_LOG))
    return [folder / RECORD_FILE, *logs]


def verify_infer(folder: Path) -> Verification:
    """Every check on the inference result in ``folder`` (the module docstring); DataError
    (one line) where infer.json is not an inference record."""
    from aihpc.verify.infer_model import model_checks

    path = Path(folder) / RECORD_FILE
    document = read_result_file(path, "infer")
    assert isinstance(document, InferFile)  # read_result_file checked its kind
    data = document.data
    try:
        outcomes = [
            check_loadgen(Path(folder), data),
            check_figures(data),
            *model_checks(Path(folder), data),
        ]
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise DataError(f"{path} is not a complete inference record: {exc!r}") from None
    checks = tuple(check for check, _ in outcomes)
    mismatches = tuple(m for _, found in outcomes for m in found)
    return Verification(str(folder), checks, mismatches)


def _tests(data: InferData) -> list[tuple[str, InferTest]]:
    """(where, test) of every recorded test, in the record's order."""
    return [
        (f"{name} test {i}", test)
        for name, s in data.scenarios.items()
        for i, test in enumerate(s.tests, start=1)
    ]


def log_folder(folder: Path, log_dir: str) -> Path | None:
    """The folder under ``folder`` holding a test's logs (the module docstring); None where
    the record points outside ``folder`` to a folder not named as LoadGen's are here."""
    if not log_dir:
        return None
    path = Path(log_dir)
    if not path.is_absolute() and (folder / path).is_dir():
        return folder / path
    if path.parent.name == LOGS:
        return folder / LOGS / path.name
    return None


# -- loadgen -----------------------------------------------------------------------------
def check_loadgen(folder: Path, data: InferData) -> tuple[Check, list[Mismatch]]:
    """Each test's logs re-read and compared with its record."""
    found = Found("loadgen")
    seen: set[str] = set()
    tests = _tests(data)
    for where, test in tests:
        logs = log_folder(folder, test.log_dir)
        if logs is None or not (logs / DETAIL_LOG).is_file():
            found.add(f"{where}: no LoadGen detail log for its log_dir {test.log_dir!r}")
            continue
        seen.add(logs.name)
        if logs.name.partition("-")[2] != test.settings.scenario:
            found.add(f"{where}: its logs {logs.name} are of another scenario")
        _check_logs(where, logs, test, data, found)
    if (folder / LOGS).is_dir():
        for extra in sorted(p.name for p in (folder / LOGS).iterdir() if p.name not in seen):
            found.add(f"{LOGS}/{extra} holds the logs of no recorded test")
    return found.outcome(
        f"{len(tests)} tests' result_* values, settings and verdicts re-read from LoadGen's logs"
    ), found.items


def _check_logs(where: str, logs: Path, test: InferTest, data: InferData, found: Found) -> None:
    detail = read_detail(logs / DETAIL_LOG)
    logged = read_results(logs / DETAIL_LOG)
    changed = list(diffs(test.results, logged, "results"))
    for path, recorded, read in changed[:MAX_DIFFS]:
        found.add(
            f"{where}: recorded {path} is {_short(recorded)}; LoadGen's log has {_short(read)}"
        )
    if len(changed) > MAX_DIFFS:
        found.add(f"{where}: and {len(changed) - MAX_DIFFS} more result values differ")
    for key, recorded, rel in _logged_settings(test.settings):
        if not same(_number(detail.get(key)), recorded, rel):
            found.add(
                f"{where}: the settings say {key} {recorded!r}; LoadGen logged "
                f"{_short(detail.get(key))}"
            )
    version = data.loadgen_version
    if version is not None and detail.get("loadgen_version") != version:
        found.add(f"{where}: LoadGen {detail.get('loadgen_version')!r} wrote it, not {version!r}")
    summary = logs / SUMMARY_LOG
    verdict = re.search(r"^Result is : (\w+)", _text(summary), re.MULTILINE)
    if verdict is None:
        found.add(f"{where}: no verdict in LoadGen's summary {summary.name}")
    elif verdict.group(1) != logged.get("validity"):
        found.add(
            f"{where}: LoadGen's summary says {verdict.group(1)}, its detail log "
            f"{logged.get('validity')!r}"
        )


def _logged_settings(s: LoadGenSettings) -> list[tuple[str, Any, float]]:
    """(detail log key, the value the recorded settings ask, relative tolerance): LoadGen
    logs rates to 6 significant digits."""
    keys: list[tuple[str, Any, float]] = [
        ("effective_scenario", SCENARIOS.get(s.scenario), 0.0),
        ("effective_min_duration_ms", float(int(s.seconds * 1000)), 0.0),
        ("effective_min_query_count", float(s.min_queries), 0.0),
    ]
    rate = s.target_qps
    if s.scenario == "server":
        keys.append(("requested_server_target_qps", rate, 1e-5))
        if s.latency is not None:
            keys.append(("requested_server_target_latency_ns", float(int(s.latency * 1e9)), 0))
    elif s.scenario == "offline" and rate:
        keys.append(("requested_offline_expected_qps", rate, 1e-5))
    elif s.scenario == "single-stream" and rate:
        keys.append(("requested_single_stream_expected_latency_ns", float(int(1e9 / rate)), 1e-5))
    return keys


def _number(value: Any) -> Any:
    """Numbers as floats (the log writes 1000 and 1000.0 alike), anything else as it is."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return value


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


# -- figures -----------------------------------------------------------------------------
def point(test: InferTest, judged: bool) -> ScenarioPoint:
    """A test's figures as the record shows them (a point of the throughput-latency curve);
    ``judged``: the record holds whether its system kept up (the module docstring)."""
    r = test.results
    verdict = loadgen_valid(r)
    figures = ScenarioPoint(
        target_qps=test.settings.target_qps,
        samples_per_second=loadgen_rate(r),
        p99_latency_s=loadgen_seconds(r, "99.00_percentile_latency_ns"),
        p99_first_token_s=loadgen_seconds(r, "first_token_99.00_percentile_latency_ns"),
        p99_time_per_output_token_s=loadgen_seconds(r, "time_per_output_token_99.00_percentile_ns"),
        valid=verdict,
    )
    if not judged:
        return figures
    kept = kept_up(r)
    return msgspec.structs.replace(
        figures,
        scheduled_qps=loadgen_number(r, "scheduled_samples_per_sec"),
        loadgen_valid=verdict,
        kept_up=kept,
        valid=verdict and kept is not False,
    )


def _joules_per_query(test: InferTest) -> float | None:
    joules = [d.joules for d in test.energy]
    if not joules or None in joules:
        return None
    return sum(j or 0.0 for j in joules) / max(test.samples_served, 1)


def _one_test_figures(name: str, test: InferTest, data: InferData) -> dict[str, Any]:
    r = test.results
    want = {
        **point(test, _judged(data)).to_dict(),
        "p90_latency_s": loadgen_seconds(r, "90.00_percentile_latency_ns"),
        "p50_latency_s": loadgen_seconds(r, "50.00_percentile_latency_ns"),
        "joules_per_query": _joules_per_query(test),
    }
    rate = loadgen_rate(r)
    if name == "offline" and rate is not None:
        ops = rate * data.ops_per_query
        peak = data.peak
        measured = peak.flops_per_s if peak else None
        nominal = peak.nominal.flops_per_s if peak and peak.nominal else None
        want["ops_per_second"] = ops
        want["peak_fraction"] = ops / measured if measured else None
        want["nominal_peak_fraction"] = ops / nominal if nominal else None
    return want


def _judged(data: InferData) -> bool:
    """Whether the record holds whether each server test kept up (the module docstring)."""
    return data.kept_up_shortfall is not None


def _server_figures(tests: tuple[InferTest, ...], judged: bool) -> tuple[dict[str, Any], InferTest]:
    """The server's figures from its tests, and the test its point and histogram show."""
    valid = [t for t in tests if point(t, judged).valid]
    best = max(valid, key=lambda t: t.settings.target_qps or 0.0, default=None)
    shown = best or tests[-1]
    curve = sorted((point(t, judged) for t in tests), key=lambda p: p.target_qps or 0.0)
    want = {
        "max_qps": None if best is None else best.settings.target_qps,
        **point(shown, judged).to_dict(),
        "curve": [p.to_dict() for p in curve],
        "valid": best is not None,
    }
    return want, shown


def check_figures(data: InferData) -> tuple[Check, list[Mismatch]]:
    """Each scenario's figures recomputed from its tests; the histograms' counts; the batches
    and timing splits; validity."""
    found = Found("figures")
    scenarios = data.scenarios
    judged = _judged(data)
    if judged and data.kept_up_shortfall != KEPT_UP_SHORTFALL:
        found.add(
            f"kept_up_shortfall is {_short(data.kept_up_shortfall)}; aihpc's rule is "
            f"{KEPT_UP_SHORTFALL}"
        )
    for name, s in scenarios.items():
        tests = s.tests
        if isinstance(s, ServerScenario) and not tests and judged:
            _check_untried(s, found)
            continue
        if not tests or (name != "server" and len(tests) != 1):
            found.add(f"{name}: {len(tests)} tests recorded")
            continue
        if name == "server":
            want, shown = _server_figures(tests, judged)
        else:
            want, shown = _one_test_figures(name, tests[0], data), tests[0]
        recorded = s.to_dict()
        for key, value in want.items():
            if not same(recorded.get(key), value, rel=1e-9):
                found.add(
                    f"scenarios.{name}.{key} is {_short(recorded.get(key))}; its tests give "
                    f"{value!r}"
                )
        _check_histograms(name, s, shown, found)
        if judged:
            _check_batches(name, tests, data, found)
            if s.timing != shown.timing:
                found.add(f"scenarios.{name}.timing is not the timing of the test it shows")
    _check_validity(data, found)
    return found.outcome(
        f"the figures of {len(scenarios.items())} scenarios recomputed from their tests"
    ), found.items


def _check_untried(s: ServerScenario, found: Found) -> None:
    """A server that ran no test: its best rate was below the least a test fills."""
    search = s.search
    if search is None or not search.top_qps < search.floor_qps:
        shown = None if search is None else search.to_dict()
        found.add(f"server: no test recorded, yet its search {_short(shown)} says one could run")
    if s.valid is not False or s.max_qps is not None:
        found.add("server: no test recorded, yet a valid result or a rate")


def _check_batches(name: str, tests: tuple[InferTest, ...], data: InferData, found: Found) -> None:
    """Each test's batches are of the sizes warmed up and hold what it served; its slowest
    1 %'s queueing and compute add up to its latency."""
    sizes = {str(size) for size in data.batch_sizes or ()}
    for i, test in enumerate(tests, start=1):
        where = f"{name} test {i}"
        served = test.batch_sizes or {}
        if not set(served) <= sizes:
            found.add(f"{where}: batches of {sorted(set(served) - sizes)}, not sizes warmed up")
        held = sum(int(size) * n for size, n in served.items())
        padding = test.padded_samples or 0
        if held != test.samples_served + padding:
            found.add(
                f"{where}: its batches hold {held} samples, not the {test.samples_served} "
                f"served and {test.padded_samples} padding"
            )
        tail = test.timing.tail if test.timing is not None else None
        if not (
            tail is None
            or tail.latency_s is None
            or (
                tail.queueing_s is not None
                and tail.compute_s is not None
                and math.isclose(
                    tail.queueing_s + tail.compute_s, tail.latency_s, rel_tol=1e-6, abs_tol=1e-9
                )
            )
        ):
            found.add(f"{where}: its slowest 1 %'s queueing and compute do not add up")


def _check_histograms(
    name: str, s: StreamScenario | ServerScenario, shown: InferTest, found: Found
) -> None:
    served = shown.samples_served
    for key, h in (("histogram", s.histogram), ("first_token_histogram", s.first_token_histogram)):
        counts, edges = (h.counts, h.edges_s) if h is not None else ((), ())
        if counts and len(edges) != len(counts) + 1:
            found.add(f"scenarios.{name}.{key} has {len(edges)} edges for {len(counts)} bins")
        if (counts or key == "histogram") and sum(counts) != served:
            found.add(
                f"scenarios.{name}.{key} counts {sum(counts)} samples; its test served {served}"
            )


def _check_validity(data: InferData, found: Found) -> None:
    q = data.quality
    kept = q.kept is not None and q.kept >= KEEP
    if q.valid is not kept:
        found.add(f"quality.valid is {q.valid!r} for {q.kept!r} kept (at least {KEEP})")
    if q.samples != data.samples:
        found.add(f"the quality was measured on {q.samples} samples, not {data.samples}")
    valid = q.valid and all(s.valid is True for _, s in data.scenarios.items())
    if data.valid is not valid:
        found.add(f"valid is {data.valid!r}; the quality and the scenarios say {valid}")
    if bool(data.invalid_reasons) is valid:
        found.add(f"invalid_reasons {_short(list(data.invalid_reasons))} for a valid={valid}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
