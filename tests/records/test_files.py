"""Tests for aihpc.records.files: versioned result documents of bench, profile and roofline."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from aihpc.base.errors import DataError, StorageError
from aihpc.records.files import (
    DATA,
    KINDS,
    RESULT_FILE_SCHEMA_VERSION,
    ProfileFile,
    RooflineFile,
    read_result_file,
    result_document,
    write_result,
)
from kind_files import real_data, real_file

ENV = {
    "hostname": "node1",
    "torch_version": "2.x",
    "python_version": "3.11.7",
    "cpu_model": None,
    "git_commit": None,
    "git_dirty": None,
    "gpus": [],
}


def test_round_trip(tmp_path: Path) -> None:
    data = real_data("roofline")
    doc = result_document("roofline", data, environment=ENV)
    path = write_result(tmp_path / "r.json", doc)
    assert path == tmp_path / "r.json"
    back = read_result_file(path, "roofline")
    assert back == doc and isinstance(back, RooflineFile)
    assert back.to_dict()["kind"] == "roofline"
    assert back.schema_version == RESULT_FILE_SCHEMA_VERSION == 1
    assert back.data == data and back.data.peaks["float32"].flops_per_s > 0
    assert back.environment.to_dict() == ENV
    text = path.read_text()
    assert text.endswith("\n") and list(json.loads(text)) == sorted(json.loads(text))  # keys sorted


def test_default_environment_is_this_machine() -> None:
    doc = result_document("profile", real_data("profile"))
    assert isinstance(doc, ProfileFile)
    assert isinstance(doc.environment.hostname, str) and doc.environment.torch_version
    assert set(doc.to_dict()) == {"kind", "schema_version", "created_utc", "environment", "data"}


def test_unknown_kind_is_refused_when_writing() -> None:
    with pytest.raises(ValueError, match="unknown result kind 'bench'"):
        result_document("bench", real_data("roofline"), environment=ENV)
    assert "roofline" in KINDS and "bench-operators" in KINDS


def test_data_of_another_kind_is_refused_when_writing() -> None:
    with pytest.raises(TypeError, match="a profile result's data is a ProfileData, not"):
        result_document("profile", real_data("roofline"), environment=ENV)


def _write(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    "content, match",
    [
        (None, "result file not found: {path}"),
        (
            "{not json",
            "result file {path}: not valid JSON (line 1, column 2: JSON is malformed",
        ),
        ([1, 2], "result file {path}: expected object, got array"),
        ({"kind": "roofline", "schema_version": 1}, "not an aihpc result file (no 'data' object)"),
        (
            {"kind": "bench-magic", "schema_version": 1, "data": {}},
            "unknown result kind 'bench-magic' in {path}",
        ),
        (
            {"kind": "profile", "schema_version": 1, "data": {}},
            "{path} holds profile results, not roofline",
        ),
        (
            {"kind": "roofline", "schema_version": 99, "data": {}},
            "unsupported schema_version 99 in {path} (this aihpc reads 1)",
        ),
        ({"kind": "roofline", "data": {}}, "unsupported schema_version None in {path}"),
    ],
)
def test_bad_files_are_one_line_data_errors_naming_the_file(
    tmp_path: Path, content: object, match: str
) -> None:
    path = tmp_path / "result.json"
    if isinstance(content, str):
        path.write_text(content)
    elif content is not None:
        _write(path, content)
    with pytest.raises(DataError) as info:
        read_result_file(path, "roofline")
    message = str(info.value)
    assert message.startswith(match.format(path=path)) and "\n" not in message


def test_without_kind_any_known_kind_is_read(tmp_path: Path) -> None:
    doc = result_document("bench-network", real_data("bench-network"), environment=ENV)
    assert read_result_file(write_result(tmp_path / "n.json", doc)) == doc


def test_write_into_a_missing_directory_is_a_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "r.json"
    with pytest.raises(StorageError) as info:
        write_result(path, result_document("roofline", real_data("roofline"), environment=ENV))
    assert str(info.value) == f"cannot write {path}: directory {path.parent} does not exist"
    assert not path.parent.exists()


def test_non_finite_numbers_are_refused_and_nothing_is_written(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    data = msgspec.structs.replace(real_data("roofline"), seconds=float("nan"))
    with pytest.raises(DataError, match=r"^a roofline result: data\.seconds: not a finite number"):
        write_result(path, result_document("roofline", data, environment=ENV))
    assert list(tmp_path.iterdir()) == []


def test_a_field_of_the_wrong_type_is_one_line_naming_it(tmp_path: Path) -> None:
    doc = result_document("roofline", real_data("roofline"), environment=ENV).to_dict()
    path = _write(tmp_path / "r.json", {**doc, "environment": {**ENV, "gpus": [{"index": "0"}]}})
    with pytest.raises(DataError) as info:
        read_result_file(path)
    assert str(info.value) == (
        f"result file {path}: environment.gpus[0].index: expected int, got str"
    )


def test_a_record_that_would_drop_what_a_command_measured_is_refused() -> None:
    with pytest.raises(DataError, match=r"^a profile result: environment\.fan_rpm: the record"):
        result_document("profile", real_data("profile"), environment={**ENV, "fan_rpm": 1200})


@pytest.mark.parametrize("name", ["infer-lm-cpu.json", "infer-resnet50-cpu.json"])
def test_an_infer_result_of_a_real_run_reads_back_whole(name: str) -> None:
    from aihpc.records.files import InferFile

    path = Path(__file__).parents[1] / "fixtures" / "gpu-check" / name
    document = read_result_file(path, "infer")
    assert isinstance(document, InferFile) and document.data.valid in (True, False)
    assert document.to_dict() == json.loads(path.read_text())


#: Per kind, a field of its real file set to a value of the wrong type: (path, value, problem).
CORRUPTED = {
    "roofline": (["roofline", "device"], 3, "expected str, got int"),
    "bench-operators": (["rows", 1, "validation", "gradcheck"], "yes", "expected bool, got str"),
    "bench-network": (["points", 0, "intensity"], "high", "expected float, got str"),
    "profile": (["memory", "peak_bytes"], None, "expected int, got null"),
    "recommend": (["candidates", 2, "interval"], [0.5], "expected array of length 2"),
    "recommend-calibration": (
        ["matcher", "provenance", "rows"],
        "540",
        "expected int, got str",
    ),
    "recommend-validation": (["validation", "scores", 0, "tau"], "0.5", "expected float, got str"),
}


@pytest.mark.parametrize("kind", sorted(CORRUPTED))
def test_a_real_file_reads_whole_and_one_corrupted_field_is_named(
    tmp_path: Path, kind: str
) -> None:
    path = real_file(kind)
    document = read_result_file(path, kind)
    assert isinstance(document.data, DATA[kind])
    assert document.to_dict() == json.loads(path.read_text())  # every field kept, none added
    keys, value, problem = CORRUPTED[kind]
    content = json.loads(path.read_text())
    at = content["data"]
    for key in keys[:-1]:
        at = at[key]
    at[keys[-1]] = value
    bad = _write(tmp_path / f"{kind}.json", content)
    with pytest.raises(DataError) as info:
        read_result_file(bad, kind)
    field = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in keys)
    assert str(info.value) == f"result file {bad}: data{field}: {problem}"
