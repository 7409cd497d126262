"""Real result files of the bench, profile, roofline and recommend kinds (tests/fixtures/kinds),
and files made from them for tests."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import msgspec

from aihpc.records.files import read_result_file, result_document, write_result
from aihpc.roofline.model import Roofline
from fixture_run import ENVIRONMENT

KIND_FIXTURES = Path(__file__).parent / "fixtures" / "kinds"


def real_file(kind: str) -> Path:
    """A result file of ``kind`` that its command wrote (tests/fixtures/kinds/README.md)."""
    if kind == "recommend-calibration":
        return Path(str(resources.files("aihpc.recommend").joinpath("data", "calibration.json")))
    return KIND_FIXTURES / f"{kind}.json"


def real_data(kind: str) -> Any:
    """The data record of :func:`real_file`."""
    return read_result_file(real_file(kind), kind).data


def roofline_file(path: Path, roofline: Roofline) -> Path:
    """A roofline result at ``path`` whose roofs are ``roofline`` (the rest of the real file's)."""
    data = msgspec.structs.replace(real_data("roofline"), roofline=roofline.to_record())
    return write_result(path, result_document("roofline", data, environment=ENVIRONMENT))
