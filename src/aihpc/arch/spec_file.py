"""An architecture spec file of any task, read: the task it belongs to and its architecture.

What ``aihpc count --spec`` and ``aihpc export --spec`` take: a spec as a search
wrote it (results.json's ``arch`` of a trial, or a trial's architecture rebuilt
from its ``arch_diff``), whichever task it came from.  Its ``"kind"`` names the
task (:func:`aihpc.tasks.arch_task`; a CNN spec has none: the image task's),
which builds the network and says what it reads
(:meth:`aihpc.tasks.base.Task.model_input`).
"""

from __future__ import annotations

import json
from pathlib import Path

from aihpc.base.errors import ConfigError, SpecError
from aihpc.tasks import Arch, Task, arch_task


def load_spec(path: str | Path) -> tuple[Task, Arch]:
    """The task and the architecture in the JSON file ``path``; SpecError naming the file if it
    is missing or invalid, or names no registered task."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SpecError(f"cannot read spec file {str(path)!r}: {reason}") from None
    except ValueError as exc:
        raise SpecError(f"spec file {str(path)!r} is not JSON: {exc}") from None
    try:
        task = arch_task(data)
        return task, task.arch(data)
    except (SpecError, ConfigError) as exc:
        raise SpecError(f"spec file {str(path)!r}: {exc}") from None
