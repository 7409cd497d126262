"""The peak records (aihpc.scoring.peak): results.json's ``peak`` read back as it was written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aihpc.base.errors import DataError
from aihpc.scoring.peak import KernelRate, NominalPeak, PeakDrift, PeakResult, RunPeak, WorkerPeak

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "run" / "results.json"


def _part(rate: float, nominal: float | None = None) -> PeakResult:
    known = (
        None if nominal is None else NominalPeak("float32", nominal, f"{nominal:g} by hand", None)
    )
    return PeakResult(
        device="cpu",
        dtype="float32",
        kernel="conv3x3 64ch 8x8 batch 32",
        flops_per_s=rate,
        min_flops_per_s=rate,
        max_flops_per_s=rate,
        spread=0.0,
        repeats=(rate,),
        calls_per_repeat=2,
        flops_per_call=2 * 64**3,
        threads=1,
        note=None,
        warning=None,
        candidates=(
            KernelRate("matmul 1024x1024", rate / 2),
            KernelRate("conv3x3 64ch 8x8 batch 32", rate),
        ),
        nominal=known,
    )


def test_a_run_peak_reads_back_its_own_json() -> None:
    workers = [
        WorkerPeak.of("w0", [_part(1e9), _part(2e9)]),
        WorkerPeak.of("w1", [_part(3e9), _part(4e9)]),
    ]
    peak = RunPeak.of(workers, procs_per_worker=2)
    assert peak.total_flops_per_s == 10e9 and peak.workers == 2 and workers[0].flops_per_s == 3e9
    data = json.loads(json.dumps(peak.to_dict()))
    assert set(data) == {
        "device",
        "dtype",
        "per_worker",
        "workers",
        "procs_per_worker",
        "total_flops_per_s",
        "spread",
        "kernels",
        "nominal",
        "above_nominal",
    }
    assert set(data["per_worker"][0]) == {
        "worker",
        "device",
        "dtype",
        "flops_per_s",
        "spread",
        "parts",
        "nominal",
    }
    assert data["kernels"] == ["conv3x3 64ch 8x8 batch 32"] and data["nominal"] is None
    assert RunPeak.from_dict(data) == peak
    after = RunPeak.of([WorkerPeak.of("w0", [_part(9e9)])], 1)
    drifted = RunPeak(**{**peak.__dict__, "drift": PeakDrift(after, -0.1, None)})
    back = RunPeak.from_dict(json.loads(json.dumps(drifted.to_dict())))
    assert (
        back == drifted
        and back.to_dict()["after"]["workers"] == 1
        and back.to_dict()["drift_warning"] is None
    )
    lost = RunPeak(**{**peak.__dict__, "drift": PeakDrift(None, None, "not measured again")})
    assert RunPeak.from_dict(lost.to_dict()) == lost
    # the drift over the workers measured both times; a record without them reads as None
    compared = RunPeak(**{**peak.__dict__, "drift": PeakDrift(after, -0.1, None, ("w0",))})
    data = json.loads(json.dumps(compared.to_dict()))
    assert data["drift_workers"] == ["w0"] and RunPeak.from_dict(data) == compared
    del data["drift_workers"]
    assert RunPeak.from_dict(data).drift == PeakDrift(compared.drift.after, -0.1, None)


def test_a_matmul_peak_from_before_the_kernel_search_reads_as_that_matmul() -> None:
    part = json.loads(FIXTURE.read_text())["peak"]["per_worker"][0]
    assert "kernel" not in part and part["size"] == 1024
    peak = PeakResult.from_dict(part)
    assert peak.kernel == "matmul 1024x1024" and peak.flops_per_s == part["flops_per_s"]
    assert peak.calls_per_repeat == part["matmuls_per_repeat"]
    assert (
        peak.flops_per_call == part["flops_per_matmul"]
        and peak.candidates == ()
        and peak.nominal is None
    )
    run = RunPeak.of([WorkerPeak.of("w0", [peak])], 1)
    assert (
        run.nominal is None and run.above_nominal is None and run.kernels == ("matmul 1024x1024",)
    )


def test_the_nominal_peaks_add_up_and_a_measured_peak_above_them_is_flagged() -> None:
    workers = [WorkerPeak.of("w0", [_part(1e9, 2e9)]), WorkerPeak.of("w1", [_part(1e9, 2e9)])]
    peak = RunPeak.of(workers, 1)
    nominal = peak.nominal
    assert nominal is not None and nominal.flops_per_s == 4e9 and peak.above_nominal is None
    fast = RunPeak.of(
        [WorkerPeak.of("w0", [_part(3e9, 2e9)]), WorkerPeak.of("w1", [_part(3e9, 2e9)])], 1
    )
    assert fast.above_nominal is not None and "1.50 times the nominal peak" in fast.above_nominal
    assert fast.to_dict()["above_nominal"] == fast.above_nominal
    unknown = NominalPeak.unknown("float32", "no clock")
    part = PeakResult(**{**_part(1e9).__dict__, "nominal": unknown})
    mixed = RunPeak.of([WorkerPeak.of("w0", [part]), workers[0]], 1)
    assert (
        mixed.nominal == NominalPeak.unknown("float32", "no clock") and mixed.above_nominal is None
    )
    with pytest.raises(DataError, match="must say why"):
        NominalPeak("float32", None, None, None)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"spread": float("nan")}, "spread must be a number >= 0, got nan"),
        ({"calls_per_repeat": 0}, "calls_per_repeat must be an integer >= 1, got 0"),
        ({"repeats": ()}, "a peak needs at least one timed repeat, got none"),
    ],
)
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
