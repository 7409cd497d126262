"""Tests for aihpc.roofline.nominal: the products of four processors, the GPU table, a worker's
share of the cores, and this machine's nominal peak."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from aihpc.base.errors import ConfigError
from aihpc.machine.processor import Processor, describe_processor, emulation
from aihpc.roofline.nominal import (
    cpu_nominal_peak,
    gpu_nominal_peak,
    nominal_peak,
    vector_width,
    worker_cores,
)
from aihpc.scoring.peak import NominalPeak
from machine.processor_fixtures import fixture_processor

GHZ = 1e9


@pytest.fixture(scope="module")
def machines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Processor]:
    root = tmp_path_factory.mktemp("machines")
    names = ("intel_guest", "amd_zen5", "intel_spr", "arm_grace")
    return {name: fixture_processor(root, name) for name in names}


def test_intel_guest_avx512_and_the_hidden_boost_clock(machines: dict[str, Processor]) -> None:
    p = machines["intel_guest"]
    fp32 = cpu_nominal_peak(p, "float32")
    assert fp32.flops_per_s == pytest.approx(2 * 16 * 2 * 2 * 2.3 * GHZ)
    assert fp32.derivation == (
        "2 cores x 16 float32 lanes (AVX-512) x 2 FMA units x 2 FLOP x 2.30 GHz = 294 GFLOP/s"
    )
    assert fp32.note is not None and "hypervisor" in fp32.note and "boost clock" in fp32.note
    assert cpu_nominal_peak(p, "float64").flops_per_s == pytest.approx(2 * 8 * 2 * 2 * 2.3 * GHZ)
    for dtype, ext in (("bfloat16", "AVX512_BF16"), ("float16", "AVX512_FP16")):
        half = cpu_nominal_peak(p, dtype)  # twice float32's lanes
        assert half.flops_per_s == pytest.approx(2 * 32 * 2 * 2 * 2.3 * GHZ)
        assert half.derivation is not None and ext in half.derivation


def test_amd_zen5_full_width_avx512_bf16_but_no_fp16(machines: dict[str, Processor]) -> None:
    p = machines["amd_zen5"]
    fp32 = cpu_nominal_peak(p, "float32")
    assert fp32.flops_per_s == pytest.approx(2 * 16 * 2 * 2 * 2.7 * GHZ)
    bf16 = cpu_nominal_peak(p, "bfloat16")
    assert bf16.flops_per_s == pytest.approx(2 * fp32.flops_per_s)
    fp16 = cpu_nominal_peak(p, "float16")
    assert fp16.flops_per_s == fp32.flops_per_s
    assert fp16.note is not None and "no float16 arithmetic" in fp16.note
    assert "float32's rate" in fp16.note


def test_intel_sapphire_rapids_amx_and_cpufreq(machines: dict[str, Processor]) -> None:
    p = machines["intel_spr"]
    fp32 = cpu_nominal_peak(p, "float32")
    assert fp32.flops_per_s == pytest.approx(2 * 16 * 2 * 2 * 3.8 * GHZ)  # max clock, not 2.0
    assert fp32.note is not None and "upper bound" in fp32.note
    bf16 = cpu_nominal_peak(p, "bfloat16")
    assert bf16.flops_per_s == pytest.approx(2 * 1024 * 3.8 * GHZ)
    assert bf16.derivation == (
        "2 cores x 1024 bfloat16 FLOP per cycle (AMX) x 3.80 GHz = 7.78 TFLOP/s"
    )
    assert cpu_nominal_peak(p, "float16").flops_per_s == pytest.approx(2 * 32 * 2 * 2 * 3.8 * GHZ)


def test_arm_neoverse_v2_four_128_bit_units(machines: dict[str, Processor]) -> None:
    p = machines["arm_grace"]
    fp32 = cpu_nominal_peak(p, "float32")
    assert fp32.flops_per_s == pytest.approx(4 * 4 * 4 * 2 * 3.1 * GHZ)
    assert fp32.derivation == (
        "4 cores x 4 float32 lanes (SVE 128-bit) x 4 FMA units x 2 FLOP x 3.10 GHz = 397 GFLOP/s"
    )
    assert cpu_nominal_peak(p, "bfloat16").flops_per_s == pytest.approx(2 * fp32.flops_per_s)
    assert cpu_nominal_peak(p, "float16").flops_per_s == pytest.approx(2 * fp32.flops_per_s)
    assert cpu_nominal_peak(p, "float64").flops_per_s == pytest.approx(fp32.flops_per_s / 2)


def test_unknown_microarchitecture_and_missing_factors() -> None:
    cpu = Processor(vendor="GenuineIntel", family=6, model=999, extensions=("avx2", "fma"))
    guess = cpu_nominal_peak(cpu, "float32", cores=4)
    assert guess.flops_per_s is None and guess.note == "the processor's clock is not known"
    clocked = Processor(**{**cpu.__dict__, "clock_mhz": 3000.0, "cores": 4})
    assumed = cpu_nominal_peak(clocked, "float32")
    assert assumed.flops_per_s == pytest.approx(4 * 8 * 2 * 2 * 3.0 * GHZ)
    assert assumed.note is not None and "2 FMA units of 256 bits assumed" in assumed.note
    assert "model 999" in assumed.note
    no_cores = cpu_nominal_peak(Processor(clock_mhz=3000.0, extensions=("fma",)), "float32")
    assert no_cores.flops_per_s is None and "physical cores" in str(no_cores.note)
    no_vectors = cpu_nominal_peak(Processor(cores=1, clock_mhz=1000.0), "float32")
    assert no_vectors.flops_per_s is None and "no FMA vector extension" in str(no_vectors.note)
    tf32 = cpu_nominal_peak(clocked, "tf32")
    assert tf32.flops_per_s is None and "not 'tf32'" in str(tf32.note)
    with pytest.raises(ConfigError, match="cores must be > 0, got 0"):
        cpu_nominal_peak(clocked, "float32", cores=0)


def test_zen4_runs_avx512_on_256_bit_units() -> None:
    zen4 = Processor(
        vendor="AuthenticAMD",
        family=25,
        model=17,
        cores=1,
        clock_mhz=1000.0,
        extensions=("avx2", "avx512_bf16", "avx512f", "fma"),
    )
    peak = cpu_nominal_peak(zen4, "float32")
    assert peak.flops_per_s == pytest.approx(32 * GHZ)  # 32 float32 FLOP per cycle
    assert "8 float32 lanes (AVX-512)" in str(peak.derivation)
    assert "two 256-bit halves" in str(peak.note)


def test_a_workers_share_of_the_cores(machines: dict[str, Processor]) -> None:
    spr = machines["intel_spr"]  # 2 cores, 4 logical CPUs
    assert worker_cores(spr, None) is None
    assert worker_cores(spr, 4) == 2 and worker_cores(spr, 2) == 1
    assert worker_cores(spr, 1) == 0.5 and worker_cores(spr, 16) == 2
    half = cpu_nominal_peak(spr, "float32", worker_cores(spr, 1))
    assert half.flops_per_s == pytest.approx(cpu_nominal_peak(spr, "float32").flops_per_s / 4)
    assert str(half.derivation).startswith("0.5 cores x 16 float32 lanes")
    one = cpu_nominal_peak(spr, "float32", worker_cores(spr, 2))
    assert str(one.derivation).startswith("1 core x ")
    with pytest.raises(ConfigError, match="threads must be >= 1, got 0"):
        worker_cores(spr, 0)


@pytest.mark.parametrize(
    ("name", "dtype", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", "bfloat16", 989),
        ("NVIDIA H100 80GB HBM3", "float16", 989),
        ("NVIDIA H100 80GB HBM3", "float32", 67),
        ("NVIDIA H200", "bfloat16", 989),
        ("NVIDIA H200 NVL", "bfloat16", 835.5),
        ("NVIDIA GH200 480GB", "bfloat16", 990),
        ("NVIDIA H100 PCIe", "bfloat16", 756.5),
        ("NVIDIA H100 NVL", "bfloat16", 835.5),
        ("NVIDIA A100-SXM4-80GB", "bfloat16", 312),
        ("NVIDIA A100-PCIE-40GB", "bfloat16", 312),
        ("NVIDIA A100 80GB PCIe", "tf32", 156),
        ("NVIDIA A10", "bfloat16", 125),
        ("NVIDIA L40S", "bfloat16", 362.05),
        ("NVIDIA L4", "bfloat16", 121),
        ("Tesla V100-SXM2-32GB", "float16", 125),
        ("Tesla T4", "float16", 65),
        ("NVIDIA B200", "bfloat16", 2250),
        ("AMD Instinct MI300X", "bfloat16", 1307.4),
    ],
)
def test_gpu_table(name: str, dtype: str, tflops: float) -> None:
    peak = gpu_nominal_peak(name, dtype)
    assert peak.flops_per_s == pytest.approx(tflops * 1e12, rel=1e-3)
    assert peak.dtype == dtype and "data sheet" in str(peak.derivation)


def test_gpu_table_refuses_what_it_does_not_know() -> None:
    sxm = gpu_nominal_peak("NVIDIA H100 80GB HBM3", "bfloat16").flops_per_s
    assert gpu_nominal_peak("NVIDIA H100 PCIe", "bfloat16").flops_per_s != sxm
    unknown = gpu_nominal_peak("NVIDIA GeForce RTX 4090", "bfloat16")
    assert unknown.flops_per_s is None
    assert "'NVIDIA GeForce RTX 4090'" in str(unknown.note) and "_GPU_ROWS" in str(unknown.note)
    volta = gpu_nominal_peak("Tesla V100-SXM2-32GB", "bfloat16")
    assert volta.flops_per_s is None and "no bfloat16" in str(volta.note)
    a10_fp64 = gpu_nominal_peak("NVIDIA A10", "float64")
    assert a10_fp64.flops_per_s is None and "add it from the NVIDIA A10 data sheet" in str(
        a10_fp64.note
    )
    assert gpu_nominal_peak("NVIDIA A10", "int8").flops_per_s is None
    eight = gpu_nominal_peak("NVIDIA H200", "bfloat16", count=8)
    assert eight.flops_per_s == pytest.approx(8 * 989.5e12)
    assert str(eight.derivation).startswith("8 x ")
    with pytest.raises(ConfigError, match="count must be an integer >= 1, got 0"):
        gpu_nominal_peak("NVIDIA H200", "bfloat16", count=0)


def test_the_record_reads_back() -> None:
    peak = gpu_nominal_peak("NVIDIA A100-SXM4-80GB", "bfloat16")
    assert NominalPeak.from_dict(peak.to_dict()) == peak
    assert nominal_peak("tpu", "float32").flops_per_s is None


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="no /proc/cpuinfo")
def test_this_machine() -> None:
    """This machine's nominal peaks are the product of its own features, whatever machine
    runs the suite: float32 lanes within its widest extension's, twice them (or AMX) in a half
    precision it computes, float32's rate in one it does not."""
    p = describe_processor()
    fp32 = nominal_peak("cpu", "float32")
    if fp32.flops_per_s is None:  # a factor this machine does not tell (no clock, no cores)
        assert fp32.note
        return
    product = re.fullmatch(
        r"(\d+) cores? x (\d+) float32 lanes \(.+?\) x (\d+) FMA units x 2 FLOP x "
        r"([\d.]+) GHz = .+",
        str(fp32.derivation),
    )
    assert product is not None, fp32.derivation
    cores, lanes, units = (int(product.group(i)) for i in (1, 2, 3))
    mhz = p.max_clock_mhz or p.clock_mhz
    width = vector_width(p)
    assert mhz is not None and width is not None
    assert cores == p.cores and lanes <= width[0] // 32 and f"{mhz / 1000:.2f}" == product[4]
    assert fp32.flops_per_s == pytest.approx(cores * lanes * units * 2 * mhz * 1e6)
    assert bool(p.hypervisor and p.max_clock_mhz is None) == ("hypervisor" in str(fp32.note))
    for dtype in ("bfloat16", "float16"):
        half = nominal_peak("cpu", dtype)
        if emulation(p, dtype) is None:
            assert half.flops_per_s is not None and half.flops_per_s >= 2 * fp32.flops_per_s
        else:
            assert half.flops_per_s == fp32.flops_per_s
            assert f"no {dtype} arithmetic" in str(half.note)
    if p.logical_cpus:
        one_thread = nominal_peak("cpu", "float32", threads=1)
        assert one_thread.flops_per_s == pytest.approx(fp32.flops_per_s / p.logical_cpus)
