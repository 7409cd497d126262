"""Tests for aihpc.roofline.model: the roofline worked by hand, points, saved rooflines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aihpc.base.errors import ConfigError, DataError
from aihpc.records.files import result_document, write_result
from aihpc.roofline.model import Roofline, RooflinePoint, load_or_measure, measure_roofline
from fixture_run import ENVIRONMENT

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


def test_to_dict_from_dict_round_trip_through_json() -> None:
    d = json.loads(json.dumps(ROOF.to_dict()))
    assert d == {"device": "cpu", "peaks": {"float32": 100e9, "bfloat16": 400e9}, "bandwidth": 20e9}
    assert Roofline.from_dict(d) == ROOF
    no_bw = Roofline(device="cuda:0", peaks={"tf32": 3e14})
    assert Roofline.from_dict(json.loads(json.dumps(no_bw.to_dict()))) == no_bw


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"peaks": {}}, "malformed roofline"),
        ({"device": "cpu", "peaks": []}, "malformed roofline"),
        (
            {"device": "cpu", "peaks": {"float32": "fast"}},
            "peak of float32 must be a finite number >= 0, got 'fast'",
        ),
        (
            {"device": "cpu", "peaks": {"float32": 0}},
            "peak of float32 must be a finite number > 0, got 0",
        ),
        (
            {"device": "cpu", "peaks": {}, "bandwidth": -1.0},
            "bandwidth must be a finite number >= 0, got -1.0",
        ),
        ("roofline", "malformed roofline"),
    ],
)
def test_from_dict_rejects_malformed(bad: object, match: str) -> None:
    with pytest.raises(DataError, match=match):
        Roofline.from_dict(bad)


def test_point_from_dict_and_placement() -> None:
    p = RooflinePoint.from_dict(
        {"label": "relu", "dtype": "float32", "intensity": 0.125, "flops_per_s": 1e9},
        "ops.json: points[0]",
        "bench-operators",
    )
    assert p == RooflinePoint("relu", "float32", 0.125, 1e9, "bench-operators")
    d = p.to_dict(ROOF)
    assert d["attainable_flops_per_s"] == pytest.approx(2.5e9)  # 0.125 x 20e9
    assert d["share"] == pytest.approx(0.4)
    unknown = RooflinePoint("ln", "float16", 1.0, 1e9).to_dict(ROOF)
    assert unknown["attainable_flops_per_s"] is None and unknown["share"] is None


@pytest.mark.parametrize(
    "bad, match",
    [
        ([1, 2], r"ops.json: points\[3\] must be an object"),
        (
            {"label": 3, "dtype": "float32", "intensity": 1, "flops_per_s": 1},
            r"points\[3\].label must be a string",
        ),
        (
            {"label": "x", "dtype": "float32", "intensity": -1, "flops_per_s": 1},
            r"points\[3\].intensity must be a finite number >= 0, got -1",
        ),
        (
            {"label": "x", "dtype": "float32", "intensity": 1, "flops_per_s": float("nan")},
            r"points\[3\].flops_per_s must be a finite number >= 0, got nan",
        ),
    ],
)
def test_point_from_dict_names_the_bad_field(bad: object, match: str) -> None:
    with pytest.raises(DataError, match=match):
        RooflinePoint.from_dict(bad, "ops.json: points[3]")


def _saved(tmp_path: Path, roof: Roofline) -> Path:
    path = tmp_path / "roofline.json"
    write_result(
        path, result_document("roofline", {"roofline": roof.to_dict()}, environment=ENVIRONMENT)
    )
    return path


def test_load_or_measure_reads_a_saved_roofline(tmp_path: Path) -> None:
    assert load_or_measure(_saved(tmp_path, ROOF), "cpu", ("float32", "float16")) == ROOF


def test_load_or_measure_refuses_another_device(tmp_path: Path) -> None:
    path = _saved(tmp_path, Roofline(device="cuda:0", peaks={"float32": 5e13}, bandwidth=3e12))
    with pytest.raises(ConfigError) as info:
        load_or_measure(path, "cpu", ("float32",))
    assert str(info.value) == f"{path} holds the roofline of cuda:0, not of cpu"


def test_load_or_measure_refuses_a_broken_saved_roofline(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    write_result(
        path, result_document("roofline", {"roofline": {"device": "cpu"}}, environment=ENVIRONMENT)
    )
    with pytest.raises(DataError, match="broken.json: malformed roofline"):
        load_or_measure(path, "cpu", ("float32",))
    write_result(path, result_document("roofline", {"peaks": {}}, environment=ENVIRONMENT))
    with pytest.raises(DataError, match="broken.json holds no roofline"):
        load_or_measure(path, "cpu", ("float32",))


def test_measure_roofline_small() -> None:
    roof = measure_roofline("cpu", ("float32",), seconds=0.1, elements=2**16)
    assert roof.device == "cpu" and set(roof.peaks) == {"float32"}
    assert roof.peaks["float32"] > 1e8 and roof.bandwidth is not None and roof.bandwidth > 1e6
