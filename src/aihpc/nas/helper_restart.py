"""The run's helper processes as records: a hyperparameter search process started again.

The master's hyperparameter search runs in child processes
(:mod:`aihpc.nas.hpo_process`); one found dead or silent is replaced by a new
one told the finished trials it needs, and each replacement is a
:class:`HelperRestart` (:attr:`aihpc.nas.hpo.HyperparameterSearch.restarts`).
Frozen, checked on construction (a :class:`DataError` naming the rule and the
value); ``from_dict`` reads back ``to_dict``'s dict.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from aihpc.base.checks import integer, number
from aihpc.base.errors import DataError


@dataclass(frozen=True)
class HelperRestart:
    """A hyperparameter search process that died or stopped answering, and was started again.

    ``t`` is when the master noticed (seconds since the epoch, as every store
    time); ``stream`` the search process's index (its place among
    ``RunConfig.hpo_processes``); ``pid`` the dead process's; ``how`` how it
    ended, as the error would have said it: ``"was killed by signal 9"``,
    ``"exited with code 1"``, ``"closed its end of the pipe"``, or ``"sent
    nothing for 60 s and was killed"``; ``history`` how many finished trials
    the new process was told.
    """

    t: float
    stream: int
    pid: int
    how: str
    history: int

    def __post_init__(self) -> None:
        number("a helper restart's time", self.t, 0, finite=False, error=DataError)
        for name, low in (("stream", 0), ("pid", 1), ("history", 0)):
            value = getattr(self, name)
            integer(f"a helper restart's {name}", value, low, error=DataError)
        if not isinstance(self.how, str) or not self.how.strip() or "\n" in self.how:
            raise DataError(f"a helper restart's how must be one line of text, got {self.how!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HelperRestart:
        """The record of :meth:`to_dict`'s dict; DataError naming a field it lacks or does not
        know."""
        if not isinstance(data, dict):
            raise DataError(f"a helper restart must be an object, got {data!r}")
        names = [f.name for f in fields(cls)]
        missing = [name for name in names if name not in data]
        unknown = sorted(set(data) - set(names))
        problems = [f"lacks {', '.join(missing)}"] if missing else []
        problems += [f"has unknown fields {', '.join(unknown)}"] if unknown else []
        if problems:
            raise DataError(f"a helper restart {' and '.join(problems)}: {data!r}")
        return cls(**data)
