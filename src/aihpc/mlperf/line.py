"""One line of an MLPerf log, as mlperf-logging's ``mllog`` lays it out and encodes it.

:class:`aihpc.mlperf.log.MLPerfLog` makes its lines here; a test holds them
equal, byte for byte, to ``mllog``'s own encoding.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from mlperf_logging.mllog import constants

LINE_PREFIX = ":::MLLOG "  # mllog's LOG_TEMPLATE, ':::MLLOG {log_json}'
EVENT_TYPES = {
    "start": constants.INTERVAL_START,
    "end": constants.INTERVAL_END,
    "event": constants.POINT_IN_TIME,
}


def mllog_line(
    namespace: str, time_ms: int, kind: str, key: str, value: Any, metadata: dict[str, Any]
) -> str:
    """The line (with its newline) of one event; ``kind`` is "start", "end" or "event"."""
    event = {
        "namespace": namespace,
        "time_ms": time_ms,
        "event_type": EVENT_TYPES[kind],
        "key": key,
        "value": value,
        "metadata": metadata,
    }
    return LINE_PREFIX + json.dumps(event) + "\n"


def plain_json(value: Any, where: str) -> Any:
    """``value`` as plain JSON data (numpy/torch via ``.tolist()``); TypeError otherwise.

    mllog would otherwise swallow an unencodable value and write an error line
    instead of the event.
    """
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where} must be finite, got {value!r}")
        return value
    if isinstance(value, Mapping):
        return {str(k): plain_json(v, where) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_json(v, where) for v in value]
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return plain_json(tolist(), where)
    raise TypeError(f"{where} must be JSON data, got {type(value).__name__}: {value!r}")
