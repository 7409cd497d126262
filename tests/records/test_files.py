"""Tests for aihpc.records.files: versioned result documents of bench, profile and roofline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aihpc.base.errors import DataError, StorageError
from aihpc.records.files import (
    KINDS,
    RESULT_FILE_SCHEMA_VERSION,
    read_result,
    result_document,
    write_result,
)

ENV = {"hostname": "node1", "torch_version": "2.x"}


def test_round_trip(tmp_path: Path) -> None:
    data = {"peaks": {"float32": 1.25e11}, "points": [{"label": "relu", "intensity": 0.125}]}
    doc = result_document("roofline", data, environment=ENV)
    path = write_result(tmp_path / "r.json", doc)
    assert path == tmp_path / "r.json"
    back = read_result(path, "roofline")
    assert back == doc
    assert back["kind"] == "roofline" and back["schema_version"] == RESULT_FILE_SCHEMA_VERSION == 1
    assert back["data"]["peaks"]["float32"] == 1.25e11
    text = path.read_text()
    assert text.endswith("\n") and list(json.loads(text)) == sorted(json.loads(text))  # keys sorted


def test_default_environment_is_this_machine() -> None:
    doc = result_document("profile", {})
    assert isinstance(doc["environment"]["hostname"], str) and doc["environment"]["torch_version"]
    assert set(doc) == {"kind", "schema_version", "created_utc", "environment", "data"}


def test_unknown_kind_is_refused_when_writing() -> None:
    with pytest.raises(ValueError, match="unknown result kind 'bench'"):
        result_document("bench", {}, environment=ENV)
    assert "roofline" in KINDS and "bench-operators" in KINDS


def _write(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    "content, match",
    [
        (None, "result file not found: {path}"),
        (
            "{not json",
            "result file is not valid JSON: {path} (line 1, column 2: Expecting property name",
        ),
        ([1, 2], "not an aihpc result file (no 'data' object): {path}"),
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
        read_result(path, "roofline")
    message = str(info.value)
    assert message.startswith(match.format(path=path)) and "\n" not in message


def test_without_kind_any_known_kind_is_read(tmp_path: Path) -> None:
    doc = result_document("bench-network", {"points": []}, environment=ENV)
    assert read_result(write_result(tmp_path / "n.json", doc))["kind"] == "bench-network"


def test_write_into_a_missing_directory_is_a_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "r.json"
    with pytest.raises(StorageError) as info:
        write_result(path, result_document("roofline", {}, environment=ENV))
    assert str(info.value) == f"cannot write {path}: directory {path.parent} does not exist"
    assert not path.parent.exists()


def test_non_finite_numbers_are_refused_and_nothing_is_written(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    with pytest.raises(ValueError, match="Out of range float"):
        write_result(path, result_document("roofline", {"peak": float("nan")}, environment=ENV))
    assert list(tmp_path.iterdir()) == []
