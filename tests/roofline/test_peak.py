"""Tests for aihpc.roofline.peak (CPU only)."""

from __future__ import annotations

import itertools
import json
import time
from collections import Counter

import pytest
import torch

from aihpc.base.errors import ConfigError
from aihpc.base.spread import SPREAD_WARNING, spread
from aihpc.machine.processor import Processor
from aihpc.roofline import peak
from aihpc.roofline.kernels import Kernel, candidate_kernels, conv_flops, conv_kernel, matmul_kernel
from aihpc.roofline.peak import (
    PeakResult,
    matmul_flops,
    measure_kernel,
    measure_peak,
    search_peak,
    summarise,
)


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
    assert r.device == "cpu" and r.dtype == "float32" and r.kernel == "matmul 256x256"
    assert len(r.repeats) == 4
    assert all(x > 1e8 for x in r.repeats)
    assert r.min_flops_per_s <= r.flops_per_s <= r.max_flops_per_s
    assert r.flops_per_call == 2 * 256**3
    assert r.calls_per_repeat >= 1
    assert r.threads == torch.get_num_threads()
    assert r.spread == pytest.approx(spread(r.repeats))
    assert (r.warning is None) == (r.spread <= SPREAD_WARNING)
    d = r.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["repeats"] == list(r.repeats)


def test_default_cpu_measurement_is_short() -> None:
    t0 = time.perf_counter()
    r = measure_peak()
    elapsed = time.perf_counter() - t0
    assert r.kernel == f"matmul {peak.DEFAULT_SIZE['cpu']}x{peak.DEFAULT_SIZE['cpu']}"
    assert len(r.repeats) == 5
    assert r.flops_per_s > 1e8
    # 1.25 s planned (a warm-up of 1/4 s, 5 repeats of 1/5 s), at most REPEAT_OVERRUN times as
    # long where other work slows the calls, and a few calls more (setup and overrun)
    slowest_call = r.flops_per_call / r.min_flops_per_s
    assert elapsed < 0.25 + peak.REPEAT_OVERRUN + 8 * slowest_call + 1.0, elapsed


def test_flop_rate_from_deterministic_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every clock reading advances 1/16 s, and a repeat reads it after each call but its last
    and at its end, so each matmul 'takes' 1/16 s, to plan and when timed: rate = 2 n^3 * 16."""
    counter = itertools.count()
    monkeypatch.setattr(peak, "_clock", lambda: next(counter) / 16)
    n = 32
    r = measure_peak("cpu", "float32", size=n, seconds=1.0, warmup=0.1, repeats=4)
    assert r.calls_per_repeat == 4  # (1.0 s / 4 repeats) / (1/16 s per matmul)
    expected = 2 * n**3 * 16.0
    assert r.repeats == (expected,) * 4
    assert r.flops_per_s == pytest.approx(expected)
    assert r.spread == 0.0 and r.warning is None


@pytest.mark.parametrize("slow, calls", [(1.0, 1), (0.5, 2)])
def test_a_repeat_slowed_by_other_work_ends_early(
    monkeypatch: pytest.MonkeyPatch, slow: float, calls: int
) -> None:
    """The warm-up's calls take 1/16 s, so a repeat plans 4 of them (1/4 s); then each takes
    ``slow`` s (other work took the cores): a repeat ends at the call that passes 4 x 1/4 s,
    timed over the calls it ran, and the measurement runs 2 + 4 x ``calls`` calls, not 18."""
    now = [0.0]
    durations = itertools.chain([1 / 16] * 2, itertools.repeat(slow))
    ran: Counter[str] = Counter()

    def setup(dev: torch.device, dtype: torch.dtype):
        matmul = matmul_kernel(8).setup(dev, dtype)

        def call():
            now[0] += next(durations)
            ran["calls"] += 1
            return matmul()

        return call

    monkeypatch.setattr(peak, "_clock", lambda: now[0])
    r = measure_kernel(Kernel("slowing", 1000, setup), "cpu", "float32", 1.0, 0.1, repeats=4)
    assert r.calls_per_repeat == 4 and ran["calls"] == 2 + 4 * calls
    assert r.repeats == (calls * 1000 / (calls * slow),) * 4


def test_summarise_median_spread_and_warning() -> None:
    median, lo, hi, value, warning = summarise([10.0, 10.4, 10.2])
    assert (median, lo, hi) == (10.2, 10.0, 10.4)
    assert value == pytest.approx(0.2 / 10.2)  # quartiles 10.1 and 10.3
    assert warning is None
    median, lo, hi, value, warning = summarise([9.0, 12.0, 11.0, 11.0, 13.0])
    assert median == 11.0 and value == pytest.approx(1.0 / 11.0)  # 13 alone does not warn
    assert warning is None
    median, lo, hi, value, warning = summarise([9.0, 10.0, 11.0, 13.0, 13.0])
    assert median == 11.0 and value == pytest.approx(3.0 / 11.0)
    assert warning == (
        "peak: the 5 repeats' FLOP/s spread over 27% of the median (IQR / median > 10%): "
        "the machine was busy or its clocks changed; treat it as unreliable"
    )
    with pytest.raises(ConfigError):
        summarise([])


def test_default_dtypes() -> None:
    assert peak.default_dtypes("cpu") == ("float32",)


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
        search_peak("cuda:0")


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


def test_precision_restored_after_measurement() -> None:
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        measure_peak("cpu", "float32", size=16, seconds=0.01, repeats=1)
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision(before)


# -- the kernel search ---------------------------------------------------------------------
def _naive_conv_op_count(channels: int, size: int, batch: int, k: int) -> int:
    """Multiplies and adds of a textbook same-padded convolution, every tap counted (the
    counter's convention: padding is not skipped)."""
    return batch * channels * size * size * channels * k * k * 2


@pytest.mark.parametrize("channels, size, batch, k", [(2, 3, 1, 3), (4, 5, 2, 1), (3, 4, 2, 3)])
def test_conv_flops_counts_every_tap(channels: int, size: int, batch: int, k: int) -> None:
    assert conv_flops(channels, size, batch, k) == _naive_conv_op_count(channels, size, batch, k)
    assert conv_kernel(channels, size, batch, k).flops == conv_flops(channels, size, batch, k)


def test_conv_kernel_flops_agree_with_the_counter() -> None:
    from aihpc.counting import count_ops

    conv = torch.nn.Conv2d(16, 16, 3, padding=1, bias=False)
    counted = count_ops(conv, (torch.randn(4, 16, 8, 8),), train=False).total
    assert conv_kernel(16, 8, 4, 3).flops == counted


def test_the_candidates_are_matmuls_and_3x3_and_1x1_convolutions() -> None:
    for device in ("cpu", "cuda"):
        names = [k.name for k in candidate_kernels(device)]
        assert any(n.startswith("matmul") for n in names)
        assert sum(n.startswith("conv3x3") for n in names) >= 3
        assert sum(n.startswith("conv1x1") for n in names) >= 2
        assert len(set(names)) == len(names)
    assert all("channels-last" in k.name for k in candidate_kernels("cuda") if "conv" in k.name)


def _fake(name: str, flops: int) -> Kernel:
    """A kernel that claims ``flops`` per call and does a tiny matmul: faster than any real one."""
    return Kernel(name, flops, lambda dev, dtype: matmul_kernel(8).setup(dev, dtype))


def test_a_faster_kernel_than_matmul_wins_the_search() -> None:
    kernels = (matmul_kernel(256), _fake("fake", 10**15), conv_kernel(16, 8, 4, 3))
    r = search_peak("cpu", "float32", seconds=0.2, candidates=kernels)
    assert r.kernel == "fake"
    assert [c.kernel for c in r.candidates] == [
        "matmul 256x256",
        "fake",
        "conv3x3 16ch 8x8 batch 4",
    ]
    fake = r.candidates[1].flops_per_s
    assert fake == max(c.flops_per_s for c in r.candidates)
    assert r.flops_per_s > 100 * r.candidates[0].flops_per_s  # the matmul's rate is not the peak
    assert r.nominal is not None and r.nominal.dtype == "float32"
    assert PeakResult.from_dict(json.loads(json.dumps(r.to_dict()))) == r


def test_the_default_search_measures_the_fastest_candidate() -> None:
    r = search_peak("cpu", "float32", seconds=0.3)
    names = [k.name for k in candidate_kernels("cpu")]
    assert [c.kernel for c in r.candidates] == names
    fastest = max(r.candidates, key=lambda c: c.flops_per_s)
    assert r.kernel == fastest.kernel
    assert r.flops_per_s > 1e8 and len(r.repeats) == 5


def test_a_kernel_that_cannot_run_is_left_out_and_none_is_an_error() -> None:
    def broken(dev: torch.device, dtype: torch.dtype):
        raise RuntimeError("not implemented for this dtype")

    r = search_peak(
        "cpu", "float32", seconds=0.1, candidates=(Kernel("broken", 1, broken), matmul_kernel(64))
    )
    assert [c.kernel for c in r.candidates] == ["matmul 64x64"] and r.kernel == "matmul 64x64"
    with pytest.raises(
        ConfigError, match="none of the 1 kernels of the peak search runs in float32"
    ):
        search_peak("cpu", "float32", seconds=0.1, candidates=(Kernel("broken", 1, broken),))
    with pytest.raises(ConfigError, match="at least one kernel"):
        search_peak("cpu", "float32", seconds=0.1, candidates=())


# -- a dtype the processor does not compute natively -----------------------------------------
ZEN4 = Processor(
    vendor="AuthenticAMD",
    family=25,
    model=17,
    cores=2,
    logical_cpus=2,
    clock_mhz=2600.0,
    extensions=("avx2", "avx512_bf16", "avx512f", "f16c", "fma"),
)
"""The EPYC guest of issue 44: AVX-512 and AVX512_BF16, float16 only converted (F16C)."""

SAPPHIRE_RAPIDS = Processor(
    vendor="GenuineIntel",
    family=6,
    model=143,
    cores=2,
    logical_cpus=2,
    clock_mhz=2000.0,
    extensions=("amx_bf16", "amx_fp16", "avx2", "avx512_bf16", "avx512_fp16", "avx512f", "fma"),
)


def _counted(kernel: Kernel, calls: Counter[str]) -> Kernel:
    """``kernel`` itself, each of its calls counted in ``calls``."""

    def setup(dev: torch.device, dtype: torch.dtype):
        call = kernel.setup(dev, dtype)

        def counted():
            calls[kernel.name] += 1
            return call()

        return counted

    return Kernel(kernel.name, kernel.flops, setup, kernel.kind)


# With so few timed seconds every repeat holds one call: a search is then exactly two calls of
# each candidate (one untimed, one timed) and six of the fastest (a warm-up, five repeats).
NO_TIME = 1e-6


def test_an_emulated_dtype_runs_one_kernel_a_bounded_number_of_times() -> None:
    """float16 on a processor without float16 arithmetic: the default candidates are not
    searched; the one of the fewest FLOP runs eight times, whatever this machine computes."""
    calls: Counter[str] = Counter()
    pool = candidate_kernels("cpu")
    smallest = min(pool, key=lambda k: k.flops)
    r = search_peak(
        "cpu", "float16", NO_TIME, candidates=[_counted(k, calls) for k in pool], processor=ZEN4
    )
    assert calls == {smallest.name: 8}
    assert r.kernel == smallest.name and [c.kernel for c in r.candidates] == [smallest.name]
    assert r.calls_per_repeat == 1 and len(r.repeats) == 5 and r.flops_per_s > 0
    assert r.note is not None and r.note.startswith("this processor has no float16 arithmetic")
    assert "f16c only converts" in r.note and r.note.endswith(f"{smallest.name} alone was measured")
    assert r.nominal is not None and "float32's rate, at best" in str(r.nominal.note)


def test_a_native_dtype_searches_every_candidate() -> None:
    """The same search on a processor with AVX512-FP16 tries every kernel (small ones here:
    float16 may be emulated on this machine), and bfloat16 on the EPYC too."""
    pool = (matmul_kernel(64), conv_kernel(8, 8, 4, 3), matmul_kernel(96))
    for dtype, processor in (("float16", SAPPHIRE_RAPIDS), ("bfloat16", ZEN4)):
        calls: Counter[str] = Counter()
        r = search_peak(
            "cpu",
            dtype,
            NO_TIME,
            candidates=[_counted(k, calls) for k in pool],
            processor=processor,
        )
        assert sorted(calls.values()) == [2, 2, 8] and calls[r.kernel] == 8
        assert [c.kernel for c in r.candidates] == [k.name for k in pool]
        assert r.note is None
