"""The published JSON Schemas of the result documents (docs/reference/schema/): the committed
files are the records' schemas, and an independent validator (jsonschema) takes real files by
them and refuses a broken one."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from aihpc.base.errors import ConfigError
from aihpc.records.codec import Record, record_schema
from aihpc.results.schema import DOCUMENTS, schema_of, schema_text
from fixture_run import FIXTURES

PUBLISHED = Path(__file__).parents[2] / "docs" / "reference" / "schema"
REPORT = Path(__file__).parents[1] / "report" / "fixtures"
SRC = Path(__file__).parents[2] / "src"


@pytest.mark.parametrize("name", list(DOCUMENTS))
def test_the_committed_schema_is_the_records(name: str) -> None:
    path = PUBLISHED / f"{name}.json"
    assert path.read_text() == schema_text(name), (
        f"{path} is not the record's schema: python -m aihpc.results.schema {PUBLISHED}"
    )


class _Indented(Record, frozen=True):
    """First line.

    An indented second paragraph,
        and a line indented further."""

    value: int


def test_a_description_is_the_docstring_cleaned_whatever_msgspec_did_with_it() -> None:
    # msgspec 0.22 keeps a docstring's indentation and 0.23 takes it away: the schema is the same
    description = record_schema(_Indented)["$defs"]["_Indented"]["description"]
    assert description == (
        "First line.\n\nAn indented second paragraph,\n    and a line indented further."
    )


def test_nothing_else_is_published() -> None:
    assert sorted(p.stem for p in PUBLISHED.glob("*.json")) == sorted(DOCUMENTS)


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("results-image", FIXTURES / "run" / "results.json"),
        ("results-lm", FIXTURES / "h200-lm" / "results.json"),
        ("results-lm", REPORT / "results_lm.json"),
        ("infer", FIXTURES / "gpu-check" / "infer-lm-cpu.json"),
        ("infer", FIXTURES / "gpu-check" / "infer-resnet50-cpu.json"),
        *(
            (kind, FIXTURES / "kinds" / f"{kind}.json")
            for kind in (
                "roofline",
                "bench-operators",
                "bench-network",
                "profile",
                "recommend",
                "recommend-validation",
            )
        ),
        ("recommend-calibration", SRC / "aihpc" / "recommend" / "data" / "calibration.json"),
    ],
)
def test_real_documents_are_valid_by_their_schema(name: str, path: Path) -> None:
    document = json.loads(path.read_text())
    jsonschema.validate(document, schema_of(name))
    broken = {**document, "schema_version": "3"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema_of(name))


def test_an_unknown_document_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no result document 'results'; known: results-image"):
        schema_of("results")
