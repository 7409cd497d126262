"""Tests for aihpc.roofline.machine: the data dict, points files, placement and the table.

Peaks and bandwidths here are real :class:`PeakResult` / :class:`BandwidthRecord`
values with round numbers, so every derived figure can be worked by hand.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from aihpc.base.errors import ConfigError, DataError
from aihpc.base.spread import STATISTIC
from aihpc.machine.devices import resolve_device
from aihpc.machine.processor import Processor
from aihpc.records.files import result_document, write_result
from aihpc.records.kinds_measure import BandwidthRecord, RooflineData
from aihpc.roofline import machine
from aihpc.roofline.model import RooflinePoint
from aihpc.scoring.peak import NominalPeak, PeakResult
from fixture_run import ENVIRONMENT
from kind_files import real_data


def _peak(
    dtype: str, rate: float, warning: str | None = None, nominal: NominalPeak | None = None
) -> PeakResult:
    return PeakResult(
        device="cpu",
        dtype=dtype,
        kernel="conv3x3 128ch 8x8 batch 32",
        flops_per_s=rate,
        min_flops_per_s=0.95 * rate,
        max_flops_per_s=1.05 * rate,
        spread=0.1,
        repeats=(rate,),
        calls_per_repeat=4,
        flops_per_call=2 * 1024**3,
        threads=2,
        note=None,
        warning=warning,
        nominal=nominal,
    )


def _stream(kernel: str, rate: float) -> BandwidthRecord:
    n = 2**26
    return BandwidthRecord(
        device="cpu",
        kernel=kernel,
        elements=n,
        bytes_per_call={"copy": 16, "triad": 24}[kernel] * n,
        bytes_per_s=rate,
        min_bytes_per_s=rate,
        max_bytes_per_s=rate,
        spread=0.02,
        repeats=(rate,),
        calls_per_repeat=1,
        threads=2,
        cache_bytes=None,
        warning=None,
        spread_statistic=STATISTIC,
    )


@pytest.fixture
def data() -> RooflineData:
    """float32 at 100 GFLOP/s, bfloat16 at 400 GFLOP/s, copy 16 GB/s, triad 20 GB/s."""
    nominal = NominalPeak(
        "float32", 150e9, "2 cores x 16 float32 lanes x 2 FMA units x 2 FLOP x 1.17 GHz", None
    )
    return machine.machine_data(
        "cpu",
        2.0,
        {
            "float32": _peak("float32", 100e9, nominal=nominal),
            "bfloat16": _peak("bfloat16", 400e9, warning="busy"),
        },
        {"copy": _stream("copy", 16e9), "triad": _stream("triad", 20e9)},
    )


def test_machine_data(data: RooflineData) -> None:
    assert data.roofline.to_dict() == {
        "device": "cpu",
        "peaks": {"float32": 100e9, "bfloat16": 400e9},
        "bandwidth": 20e9,
    }
    assert data.ridge == {"float32": pytest.approx(5.0), "bfloat16": pytest.approx(20.0)}
    assert data.bandwidth["triad"].bytes_per_call == 24 * 2**26
    assert data.warnings == ("bfloat16 peak: busy",) and data.points == ()
    assert data.left_out == {}
    peak = data.peaks["float32"].peak_result()  # the measurement, read back whole
    assert peak.flops_per_s == 100e9 and peak.nominal is not None and peak.nominal.note is None


def test_without_triad_the_ridges_are_unknown() -> None:
    d = machine.machine_data("cpu", 1.0, {"float32": _peak("float32", 100e9)}, {})
    assert d.roofline.bandwidth is None and d.ridge == {"float32": None}
    assert "  float32    unknown" in machine.format_table(d)


def test_add_points_places_them_and_flags_dtypes_without_a_roof(data: RooflineData) -> None:
    data = machine.add_points(
        data,
        [
            RooflinePoint("relu", "float32", 0.25, 2.5e9, "bench-operators"),
            RooflinePoint("ln", "float16", 1.0, 1e9, "bench-network"),
        ],
    )
    relu, ln = data.points
    assert relu.attainable_flops_per_s == pytest.approx(5e9)  # 0.25 FLOP/byte x 20 GB/s
    assert relu.share == pytest.approx(0.5)
    assert ln.attainable_flops_per_s is None and ln.share is None
    assert (
        data.warnings[-1] == "no float16 peak was measured: float16 points have no roof (unknown)"
    )


def test_table(data: RooflineData) -> None:
    data = machine.add_points(
        data,
        [
            RooflinePoint("relu", "float32", 0.25, 2.5e9, "bench-operators"),
            RooflinePoint("layer_norm", "float16", 1.0, 1e9, "bench-network"),
        ],
    )
    assert machine.format_table(data).splitlines() == [
        "roofline of cpu",
        "",
        "roof                              rate   spread  detail",
        "peak float32               100 GFLOP/s    10.0%  conv3x3 128ch 8x8 batch 32, 2 threads",
        "peak bfloat16              400 GFLOP/s    10.0%  conv3x3 128ch 8x8 batch 32, 2 threads",
        "STREAM copy                  16.0 GB/s     2.0%  67108864 float64 per array, "
        "16 bytes per element",
        "STREAM triad                 20.0 GB/s     2.0%  67108864 float64 per array, "
        "24 bytes per element",
        "",
        "nominal peaks (the hardware's figures):",
        "  float32    150 GFLOP/s = 2 cores x 16 float32 lanes x 2 FMA units x 2 FLOP x 1.17 GHz",
        "",
        "ridge (triad memory roof meets the compute roof):",
        "  float32    5 FLOP/byte",
        "  bfloat16   20 FLOP/byte",
        "",
        "kernel      dtype      FLOP/byte        achieved      attainable    share  source",
        "relu        float32         0.25    2.50 GFLOP/s    5.00 GFLOP/s      50%  "
        "bench-operators",
        "layer_norm  float16            1    1.00 GFLOP/s         unknown  unknown  bench-network",
        "",
        "warnings:",
        "  - bfloat16 peak: busy",
        "  - no float16 peak was measured: float16 points have no roof (unknown)",
    ]


def _bench_file(path: Path, kind: str, **changes: object) -> Path:
    """The real file of ``kind`` with ``changes`` to its data, written at ``path``."""
    data = msgspec.structs.replace(real_data(kind), **changes)
    return write_result(path, result_document(kind, data, environment=ENVIRONMENT))


def test_read_points(tmp_path: Path) -> None:
    network = real_data("bench-network")
    point = msgspec.structs.replace(
        network.points[0], label="conv", dtype="bfloat16", intensity=30.0, flops_per_s=9e10
    )
    f = machine.read_points(_bench_file(tmp_path / "n.json", "bench-network", points=(point,)))
    assert f.kind == "bench-network" and f.device == "cpu"
    assert f.points == (RooflinePoint("conv", "bfloat16", 30.0, 9e10, "bench-network"),)
    f.check_device("cpu")
    with pytest.raises(ConfigError, match=r"n.json holds kernels measured on cpu, not on cuda:0$"):
        f.check_device("cuda:0")
    operators = machine.read_points(_bench_file(tmp_path / "o.json", "bench-operators"))
    assert [p.label for p in operators.points] == [
        p.label for p in real_data("bench-operators").points
    ]


def test_read_points_refuses_other_kinds_and_negative_points(tmp_path: Path) -> None:
    with pytest.raises(
        DataError, match="holds profile results, not bench-operators or bench-network"
    ):
        machine.read_points(_bench_file(tmp_path / "t.json", "profile"))
    point = msgspec.structs.replace(real_data("bench-network").points[0], intensity=-1.0)
    path = _bench_file(tmp_path / "n.json", "bench-network", points=(point,))
    with pytest.raises(DataError, match=r"n.json: points\[0\].intensity must be a finite number"):
        machine.read_points(path)


ZEN3 = Processor(extensions=("avx2", "f16c", "fma"))
ZEN4 = Processor(extensions=("avx2", "avx512_bf16", "avx512f", "f16c", "fma"))
SAPPHIRE_RAPIDS = Processor(extensions=("amx_bf16", "avx2", "avx512_bf16", "avx512_fp16", "fma"))
GRACE = Processor(extensions=("asimdhp", "bf16", "neon", "sve", "sve2"))


def test_the_defaults_leave_out_what_the_processor_does_not_compute() -> None:
    cases = {
        ZEN3: ("float32",),
        ZEN4: ("float32", "bfloat16"),
        SAPPHIRE_RAPIDS: ("float32", "bfloat16", "float16"),
        GRACE: ("float32", "bfloat16", "float16"),
    }
    for processor, dtypes in cases.items():
        assert machine.machine_dtypes("cpu", processor) == dtypes
        left_out = machine.left_out_dtypes("cpu", processor)
        assert list(left_out) == [d for d in ("bfloat16", "float16") if d not in dtypes]
    assert "no float16 arithmetic" in machine.left_out_dtypes("cpu", ZEN4)["float16"]
    assert "f16c only converts" in machine.left_out_dtypes("cpu", ZEN4)["float16"]
    assert "no bfloat16 arithmetic" in machine.left_out_dtypes("cpu", ZEN3)["bfloat16"]
    mine = machine.machine_dtypes("cpu")  # this machine's processor, read from /proc/cpuinfo
    assert mine[0] == "float32" and not set(mine) & set(machine.left_out_dtypes("cpu"))


def test_an_emulated_dtype_is_measured_on_one_kernel_and_said_so() -> None:
    lines: list[str] = []
    d = machine.measure_machine(
        "cpu", ["float16"], 0.01, elements=4096, progress=lines.append, processor=ZEN4
    )
    assert lines[0] == "[1/3] float16 peak on cpu (one kernel: not computed natively)"
    peak = d.peaks["float16"]
    assert peak.candidates is not None and peak.note is not None
    assert len(peak.candidates) == 1 and peak.note.endswith("alone was measured")
    d = msgspec.structs.replace(d, left_out=machine.left_out_dtypes("cpu", ZEN3))
    table = machine.format_table(d).splitlines()
    assert table[table.index("notes:") + 1] == f"  float16    {peak.note}"
    left = table.index("left out of the defaults (measure one with --dtype):")
    assert table[left + 1].startswith("  bfloat16   this processor has no bfloat16 arithmetic")
    assert table[left + 2].startswith("  float16    this processor has no float16 arithmetic")


def test_dtypes_and_device() -> None:
    assert str(resolve_device("cpu")) == "cpu"
    assert str(resolve_device("auto")) in {"cpu", "cuda:0"}
    assert machine.check_dtypes("cpu", ["bfloat16", "float32", "bfloat16"]) == (
        "bfloat16",
        "float32",
    )
    with pytest.raises(ConfigError, match="got 'fp8'"):
        machine.check_dtypes("cpu", ["float32", "fp8"])
    with pytest.raises(ConfigError, match="at least one dtype"):
        machine.check_dtypes("cpu", [])
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="seconds must be a finite number > 0"):
            machine.check_seconds(bad)


def test_measure_machine_reports_progress() -> None:
    lines: list[str] = []
    d = machine.measure_machine(
        "cpu", ["float32"], seconds=0.05, elements=4096, progress=lines.append
    )
    assert lines == [
        "[1/3] float32 peak on cpu (the fastest of matmuls and convolutions)",
        "[2/3] STREAM copy bandwidth on cpu (4096 float64 = 0.03125 MiB per array, 0.05 s)",
        "[3/3] STREAM triad bandwidth on cpu (4096 float64 = 0.03125 MiB per array, 0.05 s)",
    ]
    assert d.bandwidth["copy"].bytes_per_call == 16 * 4096
    assert d.roofline.bandwidth is not None
    assert d.ridge["float32"] == pytest.approx(
        d.peaks["float32"].flops_per_s / d.roofline.bandwidth
    )
