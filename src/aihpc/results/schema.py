"""The published JSON Schema of each result document aihpc writes, generated from its record.

Other tools read aihpc's results by these schemas (draft 2020-12), kept in
``docs/reference/schema/`` as ``NAME.json`` for each name of :data:`DOCUMENTS`:
results.json of an image run (``results-image``) and of a language model run
(``results-lm``), whose ``data`` differ, and each result file kind of
:mod:`aihpc.records.files` (``infer``, ``roofline``...).  They are made here,
from the records, and a test holds the committed files to them; after a change
to a record, write them again with::

    python -m aihpc.results.schema docs/reference/schema
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from aihpc.base.errors import ConfigError
from aihpc.records.codec import record_schema
from aihpc.records.files import FILES
from aihpc.results.model import RunResults
from aihpc.tasks import BUILT_IN, task_of

#: Each published document's record, by the name of its schema file.
DOCUMENTS: dict[str, Any] = {
    **{
        f"results-{name}": RunResults[task_of(name).data_record]  # type: ignore[misc]
        for name in BUILT_IN
    },
    **FILES,
}


def schema_of(name: str) -> dict[str, Any]:
    """The JSON Schema of the documents ``name`` (one of :data:`DOCUMENTS`); ConfigError for
    another name."""
    if name not in DOCUMENTS:
        raise ConfigError(f"no result document {name!r}; known: {', '.join(DOCUMENTS)}")
    return {"title": name, **record_schema(DOCUMENTS[name])}


def schema_text(name: str) -> str:
    """:func:`schema_of` as its file holds it (indented, keys sorted)."""
    return json.dumps(schema_of(name), indent=2, sort_keys=True) + "\n"


def write_schemas(folder: Path) -> list[Path]:
    """Write every document's schema into ``folder`` as ``NAME.json``; the files written."""
    paths = []
    for name in DOCUMENTS:
        path = Path(folder) / f"{name}.json"
        path.write_text(schema_text(name))
        paths.append(path)
    return paths


if __name__ == "__main__":  # python -m aihpc.results.schema FOLDER
    for written in write_schemas(Path(sys.argv[1])):
        print(written)
