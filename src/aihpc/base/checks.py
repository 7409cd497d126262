"""One check for a numeric setting: an integer or a number within bounds, never a bool.

Each raises the error class its caller names (:class:`~aihpc.base.errors.ConfigError`
unless told), in one form: ``"{name} must be {what}, got {value!r}"``, where
``what`` is, by default, the kind and its bounds (``"an integer >= 1"``,
``"a finite number > 0"``, ``"a number in [0, 1)"``).  A caller whose message
says it otherwise passes ``what``; ``terse=True`` leaves the kind out where
only the bounds failed (``"must be >= 2"``, ``"must be in (0, 1)"``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any, TypeGuard

from aihpc.base.errors import ConfigError


def is_integer(value: object, minimum: int | None = None) -> TypeGuard[int]:
    """True for an int that is not a bool (and is >= ``minimum`` where given)."""
    if not isinstance(value, int) or isinstance(value, bool):
        return False
    return minimum is None or value >= minimum


def integer(
    name: str,
    value: object,
    minimum: int = 1,
    maximum: int | None = None,
    *,
    error: type[Exception] = ConfigError,
    what: str | None = None,
    terse: bool = False,
    numpy: bool = False,
) -> int:
    """``value`` as int if it is an integer in ``minimum..maximum`` (no bool), else ``error``.

    ``numpy`` accepts NumPy's integers too (any :class:`numbers.Integral`).
    """
    kind = numbers.Integral if numpy else int
    rule = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
    if isinstance(value, bool) or not isinstance(value, kind):
        raise error(f"{name} must be {what or 'an integer ' + rule}, got {value!r}")
    number = int(value)
    if number < minimum or (maximum is not None and number > maximum):
        body = what or (rule if terse else f"an integer {rule}")
        raise error(f"{name} must be {body}, got {value!r}")
    return number


def optional_integer(
    name: str, value: object, minimum: int = 1, *, error: type[Exception] = ConfigError
) -> int | None:
    """None, or :func:`integer` (its message saying ``"... or None"``)."""
    if value is None:
        return None
    return integer(name, value, minimum, error=error, what=f"an integer >= {minimum} or None")


def number(
    name: str,
    value: object,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    finite: bool = True,
    error: type[Exception] = ConfigError,
    what: str | None = None,
    terse: bool = False,
) -> float:
    """``value`` as float if it is a number within the bounds, else ``error``.

    An int or float, not a bool, never NaN; infinite only where ``finite`` is
    False (and the bounds allow).  ``low_open``/``high_open`` exclude the bound.
    """
    kind = "a finite number" if finite else "a number"
    rule = _bounds(low, high, low_open, high_open)
    full = what or (f"{kind} {rule}" if rule else kind)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise error(f"{name} must be {full}, got {value!r}")
    x = float(value)
    inside = not math.isnan(x) and (math.isfinite(x) or not finite)
    inside = inside and (low is None or (x > low if low_open else x >= low))
    inside = inside and (high is None or (x < high if high_open else x <= high))
    if not inside:
        body = rule if terse and rule and not what else full
        raise error(f"{name} must be {body}, got {value!r}")
    return x


def _bounds(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    """The rule in words: ``">= 0"``, ``"> 0"``, ``"<= 1"``, ``"in [0, 1)"``, or ``""``."""
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    if low is not None:
        return f"{'>' if low_open else '>='} {low:g}"
    if high is not None:
        return f"{'<' if high_open else '<='} {high:g}"
    return ""


def check_fraction(val_fraction: float) -> float:
    """Return ``val_fraction`` as float, or raise ConfigError unless 0 < f < 1."""
    return number(
        "val_fraction", val_fraction, 0, 1, low_open=True, high_open=True, finite=False, terse=True
    )


def check_options(dataset: str, options: Mapping[str, Any], allowed: Iterable[str]) -> None:
    """Raise ConfigError naming any option of data set ``dataset`` not in ``allowed``."""
    names = sorted(allowed)
    unknown = sorted(set(options) - set(names))
    if unknown:
        raise ConfigError(
            f"unknown option(s) for data set {dataset!r}: {', '.join(unknown)}; "
            f"valid: {', '.join(names) or '(none)'}"
        )
