"""The peak records (aihpc.records.peak): results.json's ``peak`` read back as it was written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aihpc.errors import DataError
from aihpc.records.peak import PeakDrift, PeakResult, RunPeak, WorkerPeak

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "run" / "results.json"


def _part(rate: float) -> PeakResult:
    return PeakResult(device="cpu", dtype="float32", size=64, flops_per_s=rate, min_flops_per_s=rate,
                      max_flops_per_s=rate, spread=0.0, repeats=(rate,), matmuls_per_repeat=2,
                      flops_per_matmul=2 * 64**3, threads=1, note=None, warning=None)  # fmt: skip


def test_a_run_peak_reads_back_its_own_json() -> None:
    workers = [WorkerPeak.of("w0", [_part(1e9), _part(2e9)]), WorkerPeak.of("w1", [_part(3e9), _part(4e9)])]
    peak = RunPeak.of(workers, procs_per_worker=2)
    assert peak.total_flops_per_s == 10e9 and peak.workers == 2 and workers[0].flops_per_s == 3e9
    data = json.loads(json.dumps(peak.to_dict()))
    assert set(data) == {"device", "dtype", "per_worker", "workers", "procs_per_worker", "total_flops_per_s", "spread"}
    assert set(data["per_worker"][0]) == {"worker", "device", "dtype", "flops_per_s", "spread", "parts"}
    assert RunPeak.from_dict(data) == peak
    after = RunPeak.of([WorkerPeak.of("w0", [_part(9e9)])], 1)
    drifted = RunPeak(**{**peak.__dict__, "drift": PeakDrift(after, -0.1, None)})
    back = RunPeak.from_dict(json.loads(json.dumps(drifted.to_dict())))
    assert back == drifted and back.to_dict()["after"]["workers"] == 1 and back.to_dict()["drift_warning"] is None
    lost = RunPeak(**{**peak.__dict__, "drift": PeakDrift(None, None, "not measured again")})
    assert RunPeak.from_dict(lost.to_dict()) == lost


def test_a_run_fixture_peak_result_reads_back_unchanged() -> None:
    part = json.loads(FIXTURE.read_text())["peak"]["per_worker"][0]
    assert PeakResult.from_dict(part).to_dict() == part


@pytest.mark.parametrize("change, message", [
    ({"spread": float("nan")}, "spread must be a number >= 0, got nan"),
    ({"size": 0}, "size must be an integer >= 1, got 0"),
    ({"repeats": ()}, "a peak needs at least one timed repeat, got none"),
])  # fmt: skip
def test_a_peak_that_breaks_a_rule_is_one_line(change: dict, message: str) -> None:
    with pytest.raises(DataError, match=message):
        PeakResult(**{**_part(1e9).__dict__, **change})


def test_a_broken_run_peak_names_what_is_wrong() -> None:
    data = RunPeak.of([WorkerPeak.of("w0", [_part(1e9)])], 1).to_dict()
    with pytest.raises(DataError, match="the run's peak counts 2 workers but holds 1"):
        RunPeak.from_dict({**data, "workers": 2})
    with pytest.raises(DataError, match="the run's peak lacks procs_per_worker"):
        RunPeak.from_dict({k: v for k, v in data.items() if k != "procs_per_worker"})
    with pytest.raises(DataError, match="worker w0's peak has no measured process"):
        WorkerPeak.of("w0", [])
