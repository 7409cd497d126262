"""``aihpc roofline`` as a user types it: result file, --json, --plot, --points, bad input.

Every run is a real subprocess (``python -m aihpc roofline``) measuring this
machine with ``--seconds 0.01`` (each kernel still runs its 5 timed repeats)
and small STREAM arrays (``--elements``), so the numbers checked are relations
the command must keep (bytes per call, ridge = peak / triad bandwidth,
attainable = min(peak, I x bandwidth)), not this machine's speed.  The bad
inputs, which fail before measuring, share one interpreter: each goes through
``aihpc.cli.main`` as ``python -m aihpc`` does, its stdout and stderr captured
apart.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from aihpc.machine.processor import describe_processor, emulation
from aihpc.records.files import result_document, write_result
from aihpc.records.kinds_bench import NetworkPointRecord, OperatorPointRecord
from aihpc.roofline.kernels import candidate_kernels
from aihpc.roofline.machine import left_out_dtypes, machine_dtypes
from fixture_run import ENVIRONMENT, aihpc_cases
from kind_files import real_data

# one process runs the module under pytest-xdist: its fixture (the --json run) is made once
pytestmark = pytest.mark.xdist_group("roofline-cli")

ELEMENTS = 65536
SECONDS = 0.01  # timing the kernels longer proves nothing here
QUICK = ["--seconds", str(SECONDS), "--elements", str(ELEMENTS)]
OPS_POINTS = [
    {"label": "relu", "dtype": "float32", "intensity": 0.125, "flops_per_s": 1.5e9},
    {"label": "matmul 512", "dtype": "float32", "intensity": 85.3, "flops_per_s": 4.0e10},
    {"label": "layer_norm", "dtype": "float16", "intensity": 1.2, "flops_per_s": 2.0e9},
]
NET_POINTS = [
    {"label": "resnet basic block", "dtype": "float32", "intensity": 12.0, "flops_per_s": 2.0e10}
]


def _aihpc(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aihpc", "roofline", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def _points(kind: str, points: list[dict[str, Any]]) -> tuple[Any, ...]:
    """``points`` as a ``kind`` file's records (an operator's name is its label, a forward)."""
    if kind == "bench-network":
        return tuple(NetworkPointRecord(**p) for p in points)
    return tuple(OperatorPointRecord(**p, name=p["label"], pass_="fwd") for p in points)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real bench files (tests/fixtures/kinds) holding the points above, and a profile."""
    d = tmp_path_factory.mktemp("inputs")
    docs = {
        "ops": ("bench-operators", {"device": "cpu", "points": _points("ops", OPS_POINTS)}),
        "net": ("bench-network", {"points": _points("bench-network", NET_POINTS)}),
        "profile": ("profile", {}),
        "gpu_ops": ("bench-operators", {"device": "cuda:0", "points": _points("ops", OPS_POINTS)}),
    }
    paths = {name: d / f"{name}.json" for name in [*docs, "bad_point"]}
    for name, (kind, changes) in docs.items():
        data = msgspec.structs.replace(real_data(kind), **changes)
        write_result(paths[name], result_document(kind, data, environment=ENVIRONMENT))
    bad = json.loads(paths["ops"].read_text())
    bad["data"]["points"][0]["intensity"] = "high"
    paths["bad_point"].write_text(json.dumps(bad))
    return paths


@pytest.fixture(scope="module")
def json_run(files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One float32 run with --json, --plot and both kinds of --points."""
    d = tmp_path_factory.mktemp("json_run")
    proc = _aihpc(
        *QUICK,
        "--dtype",
        "float32",
        "--points",
        str(files["ops"]),
        "--points",
        str(files["net"]),
        "--plot",
        str(d / "roofline.png"),
        "--json",
        "--out",
        str(d / "roofline.json"),
    )
    assert proc.returncode == 0, proc.stderr
    return {"proc": proc, "dir": d, "doc": json.loads((d / "roofline.json").read_text())}


def test_writes_a_versioned_document_with_environment(json_run: dict[str, Any]) -> None:
    doc = json_run["doc"]
    assert doc["kind"] == "roofline" and doc["schema_version"] == 1
    assert isinstance(doc["environment"]["hostname"], str) and doc["environment"]["torch_version"]
    data = doc["data"]
    assert data["device"] == "cpu" and data["seconds"] == SECONDS
    assert set(data) == {
        "device",
        "seconds",
        "peaks",
        "left_out",
        "bandwidth",
        "roofline",
        "ridge",
        "points",
        "warnings",
    }
    peak = data["peaks"]["float32"]
    assert list(data["peaks"]) == ["float32"] and peak["flops_per_s"] > 1e8
    assert peak["kernel"] == max(peak["candidates"], key=lambda c: c["flops_per_s"])["kernel"]
    assert peak["nominal"]["dtype"] == "float32"
    assert peak["min_flops_per_s"] <= peak["flops_per_s"] <= peak["max_flops_per_s"]
    copy, triad = data["bandwidth"]["copy"], data["bandwidth"]["triad"]
    assert (copy["elements"], copy["bytes_per_call"]) == (ELEMENTS, 16 * ELEMENTS)
    assert (triad["elements"], triad["bytes_per_call"]) == (ELEMENTS, 24 * ELEMENTS)
    assert data["roofline"] == {
        "device": "cpu",
        "peaks": {"float32": peak["flops_per_s"]},
        "bandwidth": triad["bytes_per_s"],
    }
    assert data["ridge"]["float32"] == pytest.approx(peak["flops_per_s"] / triad["bytes_per_s"])


def test_json_prints_the_document_and_progress_goes_to_stderr(json_run: dict[str, Any]) -> None:
    proc = json_run["proc"]
    assert json.loads(proc.stdout) == json_run["doc"]
    assert "[1/3] float32 peak on cpu (the fastest of matmuls and convolutions)" in proc.stderr
    assert (
        "[2/3] STREAM copy bandwidth on cpu" in proc.stderr
        and "[3/3] STREAM triad bandwidth" in proc.stderr
    )
    assert "Traceback" not in proc.stderr


def test_points_are_placed_under_the_roofs(json_run: dict[str, Any]) -> None:
    data = json_run["doc"]["data"]
    points = data["points"]
    assert [(p["label"], p["source"]) for p in points] == [
        ("relu", "bench-operators"),
        ("matmul 512", "bench-operators"),
        ("layer_norm", "bench-operators"),
        ("resnet basic block", "bench-network"),
    ]
    peak, bandwidth = data["roofline"]["peaks"]["float32"], data["roofline"]["bandwidth"]
    relu = points[0]
    assert (relu["intensity"], relu["flops_per_s"]) == (0.125, 1.5e9)
    assert relu["attainable_flops_per_s"] == pytest.approx(min(peak, 0.125 * bandwidth))
    assert relu["share"] == pytest.approx(1.5e9 / min(peak, 0.125 * bandwidth))
    # float16 was not measured: no roof, no share, and a warning saying so.
    assert points[2]["attainable_flops_per_s"] is None and points[2]["share"] is None
    assert any("no float16 peak was measured" in w for w in data["warnings"])


def test_plot_is_a_png(json_run: dict[str, Any]) -> None:
    png = (json_run["dir"] / "roofline.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])  # IHDR
    assert (width, height) == (850, 550)  # 8.5 x 5.5 in at 100 dpi
    assert sorted(p.name for p in json_run["dir"].iterdir()) == ["roofline.json", "roofline.png"]


def test_table_with_the_default_dtypes(tmp_path: Path) -> None:
    proc = _aihpc(*QUICK, cwd=tmp_path)  # --out defaults to roofline.json in the working directory
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "roofline.json").read_text())["data"]
    # float32, and bfloat16 and float16 where this processor computes them natively
    dtypes, left_out = machine_dtypes("cpu"), left_out_dtypes("cpu")
    assert dtypes[0] == "float32" and set(data["peaks"]) == set(dtypes)
    assert data["left_out"] == left_out and set(dtypes) | set(left_out) >= {"bfloat16", "float16"}
    for dtype, why in left_out.items():
        assert f"{dtype} left out of the defaults: {why} (measure it with --dtype {dtype})" in (
            proc.stderr
        )
        assert f"  {dtype:<10} {why}" in proc.stdout
    out = proc.stdout
    roofs = [line.split()[:2] for line in out.splitlines()[3 : 5 + len(dtypes)]]
    assert roofs == [*(["peak", d] for d in dtypes), ["STREAM", "copy"], ["STREAM", "triad"]]
    assert "nominal peaks (the hardware's figures):" in out
    ridges = out.split("ridge (triad memory roof meets the compute roof):\n")[1].splitlines()[
        : len(dtypes)
    ]
    for line, dtype in zip(ridges, dtypes, strict=True):
        assert line.split()[0] == dtype and line.split()[1] == f"{data['ridge'][dtype]:.3g}"
    assert out.rstrip().endswith("results: roofline.json")


def test_float16_asked_of_a_processor_without_it_is_one_kernel(tmp_path: Path) -> None:
    """Where this processor emulates float16 the command measures the candidate of the fewest
    FLOP alone (a bounded work: each call of the largest would take seconds); where it computes
    float16, the whole search, as for any dtype."""
    proc = _aihpc(*QUICK, "--dtype", "float16", "--out", str(tmp_path / "r.json"))
    assert proc.returncode == 0, proc.stderr
    peak = json.loads((tmp_path / "r.json").read_text())["data"]["peaks"]["float16"]
    why = emulation(describe_processor(), "float16")
    pool = candidate_kernels("cpu")
    if why is None:
        assert len(peak["candidates"]) == len(pool) and peak["note"] is None
        return
    smallest = min(pool, key=lambda k: k.flops).name
    assert [c["kernel"] for c in peak["candidates"]] == [smallest] == [peak["kernel"]]
    assert peak["note"] == f"{why}; no search: {smallest} alone was measured"
    assert "[1/3] float16 peak on cpu (one kernel: not computed natively)" in proc.stderr
    assert f"  float16    {peak['note']}" in proc.stdout


BAD = [
    (["--device", "cuda"], "device 'cuda' requested but CUDA is not available"),
    (
        ["--dtype", "int8"],
        "dtype must be one of ['float64', 'float32', 'bfloat16', 'float16'] on cpu, got 'int8'",
    ),
    (["--seconds", "0"], "seconds must be a finite number > 0, got 0.0"),
    (["--elements", "0"], "elements must be an integer >= 1, got 0"),
    (["--points", "{tmp}/missing.json"], "result file not found: {tmp}/missing.json"),
    (
        ["--points", "{profile}"],
        "{profile} holds profile results, not bench-operators or bench-network",
    ),
    (["--points", "{gpu_ops}"], "{gpu_ops} holds kernels measured on cuda:0, not on cpu"),
    (
        ["--points", "{bad_point}"],
        "result file {bad_point}: data.points[0].intensity: expected float, got str",
    ),
    (
        ["--out", "{tmp}/no/r.json"],
        "cannot write --out {tmp}/no/r.json: directory {tmp}/no does not exist",
    ),
    (
        ["--plot", "{tmp}/no/r.png"],
        "cannot write --plot {tmp}/no/r.png: directory {tmp}/no does not exist",
    ),
    (["--out", "{tmp}"], "cannot write --out {tmp}: it is a directory"),
]


def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    files: dict[str, Path], tmp_path: Path
) -> None:
    """Every case fails before measuring; one interpreter runs them all, then each is checked."""
    names = {name: str(path) for name, path in files.items()}
    cases = []
    for i, (args, message) in enumerate(BAD):
        d = tmp_path / f"case{i}"
        d.mkdir()
        argv = [a.format(tmp=d, **names) for a in args]
        cmd = ["roofline", *QUICK, "--out", str(d / "r.json"), "--plot", str(d / "r.png"), *argv]
        cases.append((cmd, d, message.format(tmp=d, **names)))
    answers = aihpc_cases([(cmd, None) for cmd, _, _ in cases])
    for (code, stdout, stderr), (_, d, message) in zip(answers, cases, strict=True):
        assert code == 2, (message, stderr)
        assert stderr == f"aihpc roofline: error: {message}\n"
        assert stdout == "" and "Traceback" not in stderr
        assert list(d.iterdir()) == [], message  # no result, no plot, no temporary file
