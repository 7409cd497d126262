"""Tests for aihpc.roofline.bandwidth: STREAM's byte accounting, kernels and checks (CPU only)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from aihpc.base.errors import ConfigError
from aihpc.base.spread import spread
from aihpc.records.kinds_measure import BandwidthRecord
from aihpc.roofline import bandwidth
from aihpc.roofline.bandwidth import (
    bytes_per_call,
    cpu_last_level_cache_bytes,
    default_elements,
    measure_bandwidth,
    stream_step,
)


@pytest.mark.parametrize("n", [1, 7, 1000, 2**25])
def test_bytes_per_call_follows_stream(n: int) -> None:
    # copy reads a and writes c: 2 arrays x 8 bytes; triad reads b, c and writes a: 3 x 8.
    assert bytes_per_call("copy", n) == 16 * n
    assert bytes_per_call("triad", n) == 24 * n


def test_triad_computes_b_plus_three_c() -> None:
    # Quarter-integers: every product and sum is exact in float64, so equality is exact.
    b = torch.arange(257, dtype=torch.float64)
    c = torch.arange(257, dtype=torch.float64) / 4 - 30
    a = torch.zeros(257, dtype=torch.float64)
    stream_step("triad", a, b, c)()
    assert torch.equal(a, b + 3.0 * c)
    assert a[0].item() == -90.0 and a[256].item() == 256 + 3 * (64 - 30)
    gen = torch.Generator().manual_seed(0)
    b, c = (
        torch.randn(300, dtype=torch.float64, generator=gen),
        torch.randn(300, dtype=torch.float64, generator=gen),
    )
    stream_step("triad", a := torch.empty(300, dtype=torch.float64), b, c)()
    torch.testing.assert_close(a, b + 3.0 * c)  # a fused multiply-add may round once less


def test_copy_copies_a_into_c() -> None:
    a = torch.arange(100, dtype=torch.float64)
    c = torch.zeros(100, dtype=torch.float64)
    stream_step("copy", a, torch.empty(0, dtype=torch.float64), c)()
    assert torch.equal(c, a) and c.data_ptr() != a.data_ptr()


@pytest.mark.parametrize("kernel", ["copy", "triad"])
def test_small_measurement_is_fast_and_consistent(kernel: str) -> None:
    t0 = time.perf_counter()
    r = measure_bandwidth("cpu", kernel, elements=4096, seconds=0.1, repeats=3)
    assert time.perf_counter() - t0 < 2.0
    assert isinstance(r, BandwidthRecord)
    assert (r.device, r.kernel, r.elements) == ("cpu", kernel, 4096)
    assert r.bytes_per_call == {"copy": 16, "triad": 24}[kernel] * 4096
    assert len(r.repeats) == 3 and r.calls_per_repeat >= 1
    assert r.min_bytes_per_s <= r.bytes_per_s <= r.max_bytes_per_s
    assert (
        r.bytes_per_s > 1e6
    )  # 1 MB/s: 2 threads on 2 oversubscribed cores once gave 0.13 GB/s here
    assert r.spread == pytest.approx(spread(r.repeats))
    d = r.to_dict()
    assert d["repeats"] == list(r.repeats) and d["spread_statistic"] == "iqr/median"


def test_arrays_under_the_cache_rule_carry_a_warning() -> None:
    r = measure_bandwidth("cpu", "triad", elements=1024, seconds=0.05, repeats=2)
    if r.cache_bytes is None:
        pytest.skip("no last-level cache size on this machine")
    assert r.warning is not None and "under 4x the" in r.warning and "0.00781 MiB" in r.warning


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"kernel": "scale"}, "bandwidth kernel must be one of copy, triad, got 'scale'"),
        ({"elements": 0}, "elements must be an integer >= 1, got 0"),
        ({"elements": 2.5}, "elements must be an integer >= 1, got 2.5"),
        ({"elements": True}, "elements must be an integer >= 1, got True"),
        ({"elements": 8, "seconds": 0}, "seconds must be a finite number > 0, got 0"),
        ({"elements": 8, "seconds": float("inf")}, "seconds must be a finite number > 0, got inf"),
        ({"elements": 8, "repeats": 0}, "repeats must be an integer >= 1, got 0"),
        ({"device": "tpu"}, "device must be cpu, cuda, cuda:N or auto, got 'tpu'"),
    ],
)
def test_bad_arguments_are_one_line_config_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError) as info:
        measure_bandwidth(**kwargs)
    assert str(info.value) == match


def test_bytes_per_call_rejects_bad_input() -> None:
    with pytest.raises(ConfigError, match="got 'add'"):
        bytes_per_call("add", 8)
    with pytest.raises(ConfigError, match="got -1"):
        bytes_per_call("copy", -1)


def test_cpu_cache_size_from_sysfs(tmp_path: Path) -> None:
    """Two sockets with a 32 MiB L3 each (shared by CPUs 0-1 and 2-3), private L2s: 64 MiB."""
    for cpu in range(4):
        shared = "0-1" if cpu < 2 else "2-3"
        for index, (level, kind, size, cpus) in enumerate(
            [
                (1, "Data", "48K", str(cpu)),
                (1, "Instruction", "32K", str(cpu)),
                (2, "Unified", "2048K", str(cpu)),
                (3, "Unified", "32768K", shared),
            ]
        ):
            d = tmp_path / f"cpu{cpu}" / "cache" / f"index{index}"
            d.mkdir(parents=True)
            for name, text in (
                ("level", level),
                ("type", kind),
                ("size", size),
                ("shared_cpu_list", cpus),
            ):
                (d / name).write_text(f"{text}\n")
    assert cpu_last_level_cache_bytes(tmp_path) == 2 * 32 * 2**20
    assert cpu_last_level_cache_bytes(tmp_path / "nowhere") is None


def test_default_elements_obey_the_four_times_cache_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bandwidth, "cpu_last_level_cache_bytes", lambda: 105 * 2**20)
    assert default_elements("cpu") == 2**26  # 256 MiB < 420 MiB <= 512 MiB per array
    monkeypatch.setattr(bandwidth, "cpu_last_level_cache_bytes", lambda: 8 * 2**20)
    assert default_elements("cpu") == 2**25  # the minimum already holds 4x 8 MiB
    monkeypatch.setattr(bandwidth, "cpu_last_level_cache_bytes", lambda: 2**40)
    assert default_elements("cpu") == bandwidth.MAX_ELEMENTS["cpu"]
    monkeypatch.setattr(bandwidth, "cpu_last_level_cache_bytes", lambda: None)
    assert default_elements("cpu") == bandwidth.MIN_ELEMENTS["cpu"]
