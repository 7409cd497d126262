"""Tests for aihpc.machine.processor: cpuinfo and sysfs of four processors, torch's libraries,
the record's round trip, and this machine's description."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from aihpc.base.errors import ConfigError, DataError
from aihpc.machine import cpu_libraries as libs
from aihpc.machine import processor as proc
from aihpc.machine.processor import Cache, Processor, describe_processor, emulation
from machine.processor_fixtures import ARM_GRACE, INTEL_GUEST, fixture_processor

HYPERVISOR_CLOCK = re.compile(r"hypervisor.*boost clock is hidden")


def test_intel_kvm_guest(tmp_path: Path) -> None:
    p = fixture_processor(tmp_path, "intel_guest")
    assert (p.vendor, p.family, p.model, p.stepping) == ("GenuineIntel", 6, 207, 2)
    assert p.model_name == "Intel(R) Xeon(R) Processor" and p.architecture == "x86_64"
    assert p.extensions == (
        "avx2",
        "avx512_bf16",
        "avx512_fp16",
        "avx512_vnni",
        "avx512f",
        "avx_vnni",
        "f16c",
        "fma",
    )
    assert (p.sockets, p.cores, p.threads_per_core, p.logical_cpus) == (1, 2, 1, 2)
    assert p.caches == (
        Cache(1, "data", 48 * 1024, 1),
        Cache(1, "instruction", 32 * 1024, 1),
        Cache(2, "unified", 2048 * 1024, 1),
        Cache(3, "unified", 266240 * 1024, 2),
    )
    assert (p.clock_mhz, p.max_clock_mhz, p.hypervisor) == (2300.0, None, True)
    assert p.clock_source is not None and HYPERVISOR_CLOCK.search(p.clock_source)
    assert p.sve_vector_bits is None


def test_amd_zen5_guest(tmp_path: Path) -> None:
    p = fixture_processor(tmp_path, "amd_zen5")
    assert (p.vendor, p.family, p.model, p.stepping) == ("AuthenticAMD", 26, 2, 1)
    assert {"avx512f", "avx512_bf16", "avx2", "fma"} <= set(p.extensions)
    assert not any(e.startswith("amx") for e in p.extensions)
    assert "avx512_fp16" not in p.extensions
    assert (p.cores, p.logical_cpus, p.clock_mhz, p.hypervisor) == (2, 2, 2700.0, True)


def test_intel_sapphire_rapids_bare_metal(tmp_path: Path) -> None:
    p = fixture_processor(tmp_path, "intel_spr")
    assert (p.vendor, p.family, p.model, p.stepping) == ("GenuineIntel", 6, 143, 8)
    assert {"amx_bf16", "amx_tile", "amx_int8", "avx512_fp16"} <= set(p.extensions)
    assert (p.sockets, p.cores, p.threads_per_core, p.logical_cpus) == (1, 2, 2, 4)
    assert [(c.level, c.shared_by) for c in p.caches] == [(1, 2), (1, 2), (2, 2), (3, 4)]
    assert (p.clock_mhz, p.max_clock_mhz, p.hypervisor) == (2000.0, 3800.0, False)
    assert p.clock_source is not None and "cpuinfo_max_freq" in p.clock_source
    assert "upper bound" in p.clock_source


def test_arm_neoverse_v2(tmp_path: Path) -> None:
    p = fixture_processor(tmp_path, "arm_grace")
    # ARM: the implementer's name; "CPU architecture", "CPU part", "CPU revision"
    assert (p.vendor, p.family, p.model, p.stepping) == ("ARM", 8, 0xD4F, 0)
    assert p.model_name == "Neoverse V2 r0p0" and p.architecture == "aarch64"
    assert p.extensions == ("asimdhp", "bf16", "i8mm", "neon", "sve", "sve2")
    assert p.sve_vector_bits == 128
    # topology from sysfs: cpuinfo has no "physical id" / "core id" on ARM
    assert (p.sockets, p.cores, p.threads_per_core, p.logical_cpus) == (1, 4, 1, 4)
    assert (p.clock_mhz, p.max_clock_mhz, p.hypervisor) == (None, 3100.0, None)
    assert p.caches[-1] == Cache(3, "unified", 114688 * 1024, 4)


def test_missing_files_give_none_not_errors(tmp_path: Path) -> None:
    p = describe_processor(tmp_path / "no-cpuinfo", tmp_path / "no-sys")
    assert (p.vendor, p.family, p.model, p.model_name) == (None, None, None, None)
    assert p.extensions == () and p.caches == ()
    assert (p.clock_mhz, p.max_clock_mhz, p.clock_source, p.hypervisor) == (None, None, None, None)
    assert p.cores is None or p.cores >= 1  # psutil's count, where psutil knows it
    assert json.loads(json.dumps(p.to_dict())) == p.to_dict()


def test_the_extensions_decide_which_dtypes_are_computed_natively(tmp_path: Path) -> None:
    native = {name: fixture_processor(tmp_path, name) for name in ("intel_guest", "intel_spr")}
    native["arm_grace"] = fixture_processor(tmp_path, "arm_grace")  # ARM's BF16 and FP16
    for name, p in native.items():
        assert [emulation(p, d) for d in ("float64", "float32", "bfloat16", "float16")] == [
            None
        ] * 4, name
    zen5 = fixture_processor(tmp_path, "amd_zen5")  # AVX512_BF16; float16 converted by F16C only
    assert emulation(zen5, "bfloat16") is None
    assert emulation(zen5, "float16") == (
        "this processor has no float16 arithmetic (none of avx512_fp16, amx_fp16, asimdhp; its "
        "f16c only converts): torch computes float16 through float32 conversions, many times "
        "slower"
    )
    # Zen 3 and Ice Lake: AVX2, or AVX-512 without its half-precision extensions
    for extensions in (("avx2", "f16c", "fma"), ("avx2", "avx512_vnni", "avx512f", "fma")):
        p = Processor(extensions=extensions)
        assert "no bfloat16 arithmetic (none of avx512_bf16, amx_bf16, bf16)" in str(
            emulation(p, "bfloat16")
        )
        assert ("f16c only converts" in str(emulation(p, "float16"))) == ("f16c" in extensions)
    # the features decide, not the name or vendor
    named = Processor(vendor="GenuineIntel", model=143, model_name="Intel Xeon Platinum 8480+")
    assert "could not be read" in str(emulation(named, "float16"))
    assert emulation(Processor(vendor="AuthenticAMD", extensions=("amx_fp16",)), "float16") is None
    assert emulation(Processor(), "float32") is None
    with pytest.raises(ConfigError, match="dtype must be one of .* got 'tf32'"):
        emulation(zen5, "tf32")


def test_parsers_of_fixture_text() -> None:
    blocks = proc.parse_cpuinfo(INTEL_GUEST)
    assert len(blocks) == 2 and blocks[1]["core id"] == "1"
    assert proc.cpu_identity(proc.parse_cpuinfo(ARM_GRACE))["model"] == 3407
    assert proc.vector_extensions(["asimd", "sve", "fphp", "avx512f", "sse2"]) == (
        "avx512f",
        "neon",
        "sve",
    )
    named = [{"processor": "0", "model name": "Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz"}]
    assert proc.base_clock(named) == (2400.0, "model name")
    assert proc.base_clock([{"processor": "0"}]) == (None, None)
    assert [proc.parse_size(s) for s in ("48K", "2048K", "32M", "1G", "12", "x", None)] == [
        48 * 2**10,
        2048 * 2**10,
        32 * 2**20,
        2**30,
        12,
        None,
        None,
    ]
    assert [proc.cpu_list_count(s) for s in ("0", "0-1,4", "0-3,8-11\n", "", "a-b")] == [
        1,
        3,
        8,
        None,
        None,
    ]
    odd = proc.parse_cpuinfo("processor : 0\ncpu MHz : 0\nstepping : unknown\n")
    assert proc.base_clock(odd) == (None, None)
    assert proc.cpu_identity(odd)["stepping"] is None


CONFIG_MKL = """PyTorch built with:
  - Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build 20240605 for Intel(R) 64
  - Intel(R) MKL-DNN v3.12.0 (Git Hash 80afa71049cd69a3df32adcccb623b12cd7baa22)
  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release, LAPACK_INFO=mkl, USE_MKL=ON,
"""
CONFIG_OPENBLAS = """PyTorch built with:
  - Build settings: BLAS_INFO=open, BUILD_TYPE=Release, LAPACK_INFO=open, USE_MKLDNN=ON,
  - oneDNN v3.7.1 (Git Hash 8d263e693366ef8db40acc569cc7d8edf644556d)
"""
VERBOSE = """onednn_verbose,v1,info,oneDNN v3.12.0 (commit 80afa71049cd69a3df32adcccb623b12cd7baa22)
onednn_verbose,v1,info,cpu,runtime:OpenMP,nthr:2
onednn_verbose,v1,info,cpu,isa:Intel AVX 10.1
onednn_verbose,v1,info,gpu,runtime:none
onednn_verbose,v1,primitive,exec,cpu,reorder,jit:uni,undef,src:f32::blocked:abcd::f0 dst:f32
onednn_verbose,v1,primitive,exec,cpu,convolution,jit:avx512_core,forward_training,src:f32:a
"""


def test_libraries_of_torch_config_and_onednn_verbose() -> None:
    assert libs.blas_of(CONFIG_MKL) == "mkl 2024.2"
    assert libs.blas_of(CONFIG_OPENBLAS) == "openblas"
    assert libs.blas_of("") is None
    assert libs.onednn_version_of(CONFIG_MKL) == "3.12.0"
    assert libs.onednn_version_of(CONFIG_OPENBLAS) == "3.7.1"
    assert libs.onednn_isa_of(VERBOSE) == "Intel AVX 10.1 (convolution: jit:avx512_core)"
    info_only = "onednn_verbose,info,cpu,isa:Intel AVX-512 with AVX512BW, AVX512VL, AVX512DQ\n"
    assert libs.onednn_isa_of(info_only) == "Intel AVX-512 with AVX512BW, AVX512VL, AVX512DQ"
    exec_only = VERBOSE.splitlines()[-1]
    assert libs.onednn_isa_of(exec_only) == "convolution: jit:avx512_core"
    assert libs.onednn_isa_of("nothing here") is None


def test_stdout_is_restored_even_on_error(capfd: pytest.CaptureFixture[str]) -> None:
    assert libs._stdout_of(lambda: os.write(1, b"from C\n") and None) == "from C\n"

    def fails() -> None:
        os.write(1, b"swallowed\n")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        libs._stdout_of(fails)
    print("after", flush=True)
    sys.stdout.flush()
    out = capfd.readouterr().out
    assert "after" in out and "swallowed" not in out


def test_record_round_trip_and_older_files(tmp_path: Path) -> None:
    p = fixture_processor(tmp_path, "intel_spr")
    data = json.loads(json.dumps(p.to_dict()))
    assert list(data) == sorted(data) and Processor.from_dict(data) == p
    assert data["caches"][0] == {"kind": "data", "level": 1, "shared_by": 2, "size_bytes": 49152}
    old = Processor.from_dict(
        {"vendor": "GenuineIntel", "model": 85, "caches": [{"level": 2, "kind": "unified"}]}
    )
    assert old.family is None and old.extensions == () and old.onednn_isa is None
    assert old.caches == (Cache(2, "unified", None, None),)


def test_invalid_records_say_the_rule() -> None:
    with pytest.raises(DataError, match="the processor's cores must be an integer >= 1 or None"):
        Processor(cores=0)
    with pytest.raises(DataError, match="clock_mhz must be > 0 or None, got -1"):
        Processor(clock_mhz=-1)
    with pytest.raises(DataError, match="a cache's kind must be one of"):
        Cache(1, "L1", 1, 1)
    with pytest.raises(DataError, match="a cache's level must be an integer >= 1, got 0"):
        Cache(0, "data", 1, 1)
    with pytest.raises(DataError, match="lacks its level or kind"):
        Processor.from_dict({"caches": [{"size_bytes": 1}]})


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="no /proc/cpuinfo")
def test_this_machine() -> None:
    p = describe_processor()
    for name in ("vendor", "model_name", "architecture", "cores", "logical_cpus", "blas"):
        assert getattr(p, name) is not None, name
    assert p.extensions and p.torch_cpu_capability and p.onednn_version
    assert p.cores is not None and p.logical_cpus is not None and p.cores <= p.logical_cpus
    if p.vendor in ("GenuineIntel", "AuthenticAMD"):
        assert None not in (p.family, p.model, p.stepping, p.clock_mhz, p.hypervisor)
    if Path("/sys/devices/system/cpu/cpu0/cache").is_dir():
        assert p.caches and all(c.size_bytes for c in p.caches)
    if "avx512f" in p.extensions:  # oneDNN runs its AVX-512 kernels (AVX10.1 is AVX-512's)
        assert p.onednn_isa is not None
        assert re.search(r"avx.?512|avx ?10", p.onednn_isa, re.IGNORECASE), p.onednn_isa
    assert describe_processor().onednn_isa == p.onednn_isa  # cached once per process
