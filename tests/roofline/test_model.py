"""Tests for aihpc.roofline.model: the roofline worked by hand, points, saved rooflines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aihpc.base.errors import ConfigError, DataError
from aihpc.records.codec import decode, encode
from aihpc.records.kinds_bench import RooflineRecord
from aihpc.roofline.model import Roofline, RooflinePoint, load_or_measure, measure_roofline
from kind_files import roofline_file

# 100 GFLOP/s float32, 400 GFLOP/s bfloat16, 20 GB/s: ridges at 5 and 20 FLOP/byte.
ROOF = Roofline(device="cpu", peaks={"float32": 100e9, "bfloat16": 400e9}, bandwidth=20e9)


@pytest.mark.parametrize(
    "intensity, dtype, expected",
    [
        (0.25, "float32", 5e9),  # memory bound: 0.25 FLOP/byte x 20e9 byte/s
        (2.0, "float32", 40e9),  # memory bound
        (5.0, "float32", 100e9),  # exactly the ridge
        (50.0, "float32", 100e9),  # compute bound
        (10.0, "bfloat16", 200e9),  # memory bound below bfloat16's ridge of 20
        (1000.0, "bfloat16", 400e9),  # compute bound
    ],
)
def test_attainable_is_min_of_peak_and_intensity_times_bandwidth(
    intensity: float, dtype: str, expected: float
) -> None:
    assert ROOF.attainable(intensity, dtype) == pytest.approx(expected)


def test_unknown_dtype_has_no_roof() -> None:
    assert ROOF.attainable(10.0, "float16") is None
    assert ROOF.share(1e9, 10.0, "float16") is None
    assert ROOF.ridge("float16") is None


def test_share_and_ridge() -> None:
    assert ROOF.share(30e9, 2.0, "float32") == pytest.approx(0.75)  # 30 of an attainable 40 GFLOP/s
    assert ROOF.share(50e9, 50.0, "float32") == pytest.approx(0.5)
    assert ROOF.ridge("float32") == pytest.approx(5.0)
    assert ROOF.ridge("bfloat16") == pytest.approx(20.0)


def test_without_bandwidth_only_the_compute_roof_bounds() -> None:
    roof = Roofline(device="cpu", peaks={"float32": 100e9})
    assert roof.attainable(0.01, "float32") == 100e9
    assert roof.ridge("float32") is None


def test_to_record_from_record_round_trip_through_json() -> None:
    record = decode(encode(ROOF.to_record()), RooflineRecord, "a roofline")
    assert record.to_dict() == {
        "device": "cpu",
        "peaks": {"float32": 100e9, "bfloat16": 400e9},
        "bandwidth": 20e9,
    }
    assert Roofline.from_record(record) == ROOF
    no_bw = Roofline(device="cuda:0", peaks={"tf32": 3e14})
    assert Roofline.from_record(no_bw.to_record()) == no_bw


@pytest.mark.parametrize(
    "bad, match",
    [
        (
            RooflineRecord(device="cpu", peaks={"float32": 0}, bandwidth=None),
            "peak of float32 must be a finite number > 0, got 0",
        ),
        (
            RooflineRecord(device="cpu", peaks={}, bandwidth=-1.0),
            "bandwidth must be a finite number >= 0, got -1.0",
        ),
    ],
)
def test_from_record_rejects_roofs_not_above_zero(bad: RooflineRecord, match: str) -> None:
    with pytest.raises(DataError, match=match):
        Roofline.from_record(bad)


def test_a_point_placed_under_the_roofs() -> None:
    p = RooflinePoint("relu", "float32", 0.125, 1e9, "bench-operators")
    placed = p.placed(ROOF)
    assert placed.attainable_flops_per_s == pytest.approx(2.5e9)  # 0.125 x 20e9
    assert placed.share == pytest.approx(0.4)
    assert (placed.label, placed.source) == ("relu", "bench-operators")
    unknown = RooflinePoint("ln", "float16", 1.0, 1e9).placed(ROOF)
    assert unknown.attainable_flops_per_s is None and unknown.share is None


def _saved(tmp_path: Path, roof: Roofline) -> Path:
    return roofline_file(tmp_path / "roofline.json", roof)


def test_load_or_measure_reads_a_saved_roofline(tmp_path: Path) -> None:
    assert load_or_measure(_saved(tmp_path, ROOF), "cpu", ("float32", "float16")) == ROOF


def test_load_or_measure_refuses_another_device(tmp_path: Path) -> None:
    path = _saved(tmp_path, Roofline(device="cuda:0", peaks={"float32": 5e13}, bandwidth=3e12))
    with pytest.raises(ConfigError) as info:
        load_or_measure(path, "cpu", ("float32",))
    assert str(info.value) == f"{path} holds the roofline of cuda:0, not of cpu"


def test_load_or_measure_refuses_a_broken_saved_roofline(tmp_path: Path) -> None:
    path = _saved(tmp_path, Roofline(device="cpu", peaks={"float32": 0.0}))
    with pytest.raises(DataError, match="roofline.json: peak of float32 must be a finite number"):
        load_or_measure(path, "cpu", ("float32",))
    document = json.loads(path.read_text())
    del document["data"]["roofline"]
    path.write_text(json.dumps(document))
    with pytest.raises(DataError) as info:
        load_or_measure(path, "cpu", ("float32",))
    assert str(info.value) == (f"result file {path}: data: object missing required field roofline")


def test_measure_roofline_small() -> None:
    roof = measure_roofline("cpu", ("float32",), seconds=0.1, elements=2**16)
    assert roof.device == "cpu" and set(roof.peaks) == {"float32"}
    assert roof.peaks["float32"] > 1e8 and roof.bandwidth is not None and roof.bandwidth > 1e6
