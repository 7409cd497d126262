"""Tests for aihpc.roofline.plot: roofs only where measured, points by dtype, PNG output."""

from __future__ import annotations

import struct
from pathlib import Path

import msgspec
import pytest

from aihpc.base.errors import StorageError
from aihpc.records.kinds_measure import RooflineData
from aihpc.roofline.model import Roofline, RooflinePoint
from aihpc.roofline.plot import DTYPE_COLORS, plot_roofline, roofline_figure, roofline_png
from kind_files import real_data

ROOF = Roofline(device="cpu", peaks={"float32": 100e9, "bfloat16": 400e9}, bandwidth=20e9)
POINTS = [
    RooflinePoint("relu", "float32", 0.25, 2.5e9, "bench-operators"),
    RooflinePoint("block", "float32", 12.0, 4e10, "bench-network"),
    RooflinePoint("layer_norm", "float16", 1.0, 1e9, "bench-operators"),
    RooflinePoint("empty", "float32", 0.0, 0.0, "bench-operators"),
]


def _data(roof: Roofline = ROOF, points: list[RooflinePoint] = POINTS) -> RooflineData:
    placed = tuple(p.placed(roof) for p in points)
    return msgspec.structs.replace(real_data("roofline"), roofline=roof.to_record(), points=placed)


def _lines(data: RooflineData) -> dict[str, list]:
    ax = roofline_figure(data).axes[0]
    return {
        line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")
    }


def test_one_roof_per_measured_dtype_and_the_triad_roof() -> None:
    lines = _lines(_data())
    assert sorted(lines) == [
        "bfloat16 peak 400 GFLOP/s",
        "float32 peak 100 GFLOP/s",
        "memory (STREAM triad) 20.0 GB/s",
    ]
    f32 = lines["float32 peak 100 GFLOP/s"]
    assert list(f32.get_xdata())[0] == pytest.approx(5.0)  # flat from the ridge, 100e9 / 20e9
    assert set(f32.get_ydata()) == {100e9}
    memory = lines["memory (STREAM triad) 20.0 GB/s"]
    x, y = memory.get_xdata(), memory.get_ydata()
    assert y[-1] == pytest.approx(400e9) and x[-1] == pytest.approx(20.0)  # up to the highest roof
    assert y[0] == pytest.approx(20e9 * x[0])


def test_no_measured_peak_draws_no_roof() -> None:
    ax = roofline_figure(_data()).axes[0]
    assert not any(line.get_label().startswith("float16") for line in ax.get_lines())
    labels = [c.get_label() for c in ax.collections]
    assert labels == [
        "float32 Level-0 operators",
        "float32 Level-1 layers",
        "float16 Level-0 operators (no measured peak)",
    ]
    f16 = ax.collections[2]
    assert [tuple(xy) for xy in f16.get_offsets()] == [(1.0, 1e9)]
    assert tuple(f16.get_facecolors()[0][:3]) == pytest.approx(
        tuple(int(DTYPE_COLORS["float16"][i : i + 2], 16) / 255 for i in (1, 3, 5))
    )
    # The zero-intensity kernel cannot sit on log axes: two float32 operator points are one.
    assert len(ax.collections[0].get_offsets()) == 1


def test_axes_are_log_log_and_span_the_ridges_and_points() -> None:
    ax = roofline_figure(_data()).axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert ax.get_xlim() == pytest.approx((1e-2, 1e3))  # 0.25 .. 20, one spare decade each side
    assert ax.get_xlabel() == "arithmetic intensity (FLOP/byte)" and ax.get_ylabel() == "FLOP/s"


def test_without_bandwidth_or_peaks() -> None:
    lines = _lines(_data(Roofline(device="cpu", peaks={"float32": 1e11}), []))
    assert list(lines) == ["float32 peak 100 GFLOP/s"]
    assert not _lines(_data(Roofline(device="cpu"), []))


def test_png_and_atomic_file(tmp_path: Path) -> None:
    png = roofline_png(_data())
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (850, 550)
    path = plot_roofline(_data(), tmp_path / "r.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(StorageError, match="cannot write"):
        plot_roofline(_data(), tmp_path / "missing" / "r.png")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.png"]
