"""Tests for aihpc.roofline.peak (CPU only)."""

from __future__ import annotations

import itertools
import json
import time

import pytest
import torch

from aihpc.errors import ConfigError
from aihpc.roofline import peak
from aihpc.roofline.peak import PeakResult, matmul_flops, measure_peak, measure_peaks, summarise


def _naive_matmul_op_count(n: int) -> int:
    """Count the multiplies and adds of a textbook triple-loop matmul (acc starts at 0)."""
    ops = 0
    for _i, _j in itertools.product(range(n), range(n)):
        for _k in range(n):
            ops += 2  # acc = acc + a[i, k] * b[k, j]
    return ops


@pytest.mark.parametrize("n", [1, 2, 3, 7, 16])
def test_matmul_flops_is_two_n_cubed(n: int) -> None:
    assert matmul_flops(n) == _naive_matmul_op_count(n)


@pytest.mark.parametrize("bad", [0, -3, 2.0, True, "8"])
def test_matmul_flops_rejects_bad_size(bad: object) -> None:
    with pytest.raises(ConfigError, match="size"):
        matmul_flops(bad)  # type: ignore[arg-type]


def test_measure_peak_cpu_plausible() -> None:
    r = measure_peak("cpu", torch.float32, size=256, seconds=0.3, repeats=4)
    assert isinstance(r, PeakResult)
    assert r.device == "cpu" and r.dtype == "float32" and r.size == 256
    assert len(r.repeats) == 4
    assert all(x > 1e8 for x in r.repeats)
    assert r.min_flops_per_s <= r.flops_per_s <= r.max_flops_per_s
    assert r.flops_per_matmul == 2 * 256**3
    assert r.matmuls_per_repeat >= 1
    assert r.threads == torch.get_num_threads()
    assert r.spread == pytest.approx((r.max_flops_per_s - r.min_flops_per_s) / r.flops_per_s)
    assert (r.warning is None) == (r.spread <= peak.RANGE_SPREAD_WARNING)
    d = r.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["repeats"] == list(r.repeats)


def test_default_cpu_measurement_is_short() -> None:
    t0 = time.perf_counter()
    r = measure_peak()
    elapsed = time.perf_counter() - t0
    assert r.size == peak.DEFAULT_SIZE["cpu"] and len(r.repeats) == 5
    assert r.flops_per_s > 1e8
    assert elapsed < 5.0, elapsed  # about 1.3 s on an idle machine


def test_flop_rate_from_deterministic_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every clock reading advances 1/16 s, so each matmul 'takes' 1/16 s to calibrate
    and each timed repeat spans exactly 1/16 s: rate = iters * 2 n^3 * 16."""
    counter = itertools.count()
    monkeypatch.setattr(peak, "_clock", lambda: next(counter) / 16)
    n = 32
    r = measure_peak("cpu", "float32", size=n, seconds=1.0, warmup=0.1, repeats=4)
    assert r.matmuls_per_repeat == 4  # (1.0 s / 4 repeats) / (1/16 s per matmul)
    expected = 4 * 2 * n**3 * 16.0
    assert r.repeats == (expected,) * 4
    assert r.flops_per_s == pytest.approx(expected)
    assert r.spread == 0.0 and r.warning is None


def test_summarise_median_spread_and_warning() -> None:
    median, lo, hi, spread, warning = summarise([10.0, 10.4, 10.2])
    assert (median, lo, hi) == (10.2, 10.0, 10.4)
    assert spread == pytest.approx(0.4 / 10.2)
    assert warning is None
    median, lo, hi, spread, warning = summarise([10.0, 12.0, 11.0, 11.0])
    assert median == 11.0 and spread == pytest.approx(2.0 / 11.0)
    assert warning is not None and "18%" in warning
    with pytest.raises(ConfigError):
        summarise([])


def test_measure_peaks_cpu_dtypes() -> None:
    assert peak.default_dtypes("cpu") == ("float32",)
    res = measure_peaks("cpu", ["float32", torch.bfloat16], size=128, seconds=0.1, repeats=2)
    assert list(res) == ["float32", "bfloat16"]
    assert res["bfloat16"].dtype == "bfloat16" and len(res["bfloat16"].repeats) == 2
    assert all(r.flops_per_s > 0 for r in res.values())


@pytest.mark.parametrize("dtype", [torch.int32, "int8", "tf32", "float8", 3])
def test_bad_dtype_names_value(dtype: object) -> None:
    with pytest.raises(ConfigError, match="dtype must be one of") as info:
        measure_peak("cpu", dtype, size=8, seconds=0.01)  # type: ignore[arg-type]
    assert repr(dtype) in str(info.value)


@pytest.mark.parametrize("device", ["tpu", "not a device", "meta"])
def test_bad_device_names_value(device: str) -> None:
    with pytest.raises(ConfigError, match="device") as info:
        measure_peak(device, size=8, seconds=0.01)
    assert repr(device) in str(info.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_cuda_unavailable_is_config_error() -> None:
    with pytest.raises(ConfigError, match="'cuda' requested but CUDA is not available"):
        measure_peak("cuda")
    with pytest.raises(ConfigError, match="CUDA is not available"):
        measure_peaks("cuda:0")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"size": 0}, "size must be an integer >= 1, got 0"),
        ({"seconds": 0}, "seconds must be a finite number > 0, got 0"),
        ({"seconds": float("nan")}, "seconds must be"),
        ({"warmup": -1.0}, "warmup must be a finite number >= 0, got -1.0"),
        ({"repeats": 0}, "repeats must be an integer >= 1, got 0"),
    ],
)
def test_bad_numbers(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        measure_peak("cpu", **kwargs)


def test_measure_peaks_rejects_empty_and_validates_first(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="at least one dtype"):
        measure_peaks("cpu", [])
    calls: list[str] = []
    monkeypatch.setattr(peak, "measure_peak", lambda *a, **k: calls.append("x"))
    with pytest.raises(ConfigError, match="int8"):
        measure_peaks("cpu", ["float32", "int8"])
    assert calls == []  # nothing measured before the bad dtype was found


def test_precision_restored_after_measurement() -> None:
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        measure_peak("cpu", "float32", size=16, seconds=0.01, repeats=1)
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision(before)
