"""Number formatting below everything that formats: SI prefixes, durations, shares, plain tables.

Every formatter accepts ``None`` (or a non-finite / non-numeric value) and then
returns ``"n/a"``, because optional fields of ``results.json`` may be absent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

NA = "n/a"

_PREFIXES = ("", "k", "M", "G", "T", "P", "E", "Z", "Y")


def as_number(value: Any) -> float | None:
    """``value`` as a finite float, or ``None`` (bools and strings are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def format_si(value: Any, unit: str = "", digits: int = 3, *, count: bool = False) -> str:
    """Format with ``digits`` significant figures and an SI prefix.

    ``format_si(4.12e10, "OPS") == "41.2 GOPS"``; ``format_si(512, "OPS") ==
    "512 OPS"``; ``format_si(2.1e11) == "210 G"``.  Values below 1 in magnitude
    keep no prefix (``"0.500 OPS"``).  ``count=True`` is for counts: a value
    without a prefix drops its trailing zeros (``"5 OPs"``, ``"1.5"``, not
    ``"5.00 OPs"``, ``"1.50"``), as operation and parameter counts print.
    """
    number = as_number(value)
    if number is None:
        return NA
    if number == 0:
        return f"0 {unit}".strip()
    magnitude = abs(number)
    k = 0
    if magnitude >= 1:
        k = min(int(math.floor(math.log10(magnitude) / 3)), len(_PREFIXES) - 1)
    mantissa = number / 1000**k
    # Rounding can carry into the next prefix: 999.96 G -> 1.00 T.
    if abs(float(f"{mantissa:.{digits}g}")) >= 1000 and k < len(_PREFIXES) - 1:
        k += 1
        mantissa = number / 1000**k
    text = _significant(mantissa, digits)
    if count and k == 0 and "." in text:
        text = text.rstrip("0").rstrip(".")
    return f"{text} {_PREFIXES[k]}{unit}".strip()


def _significant(value: float, digits: int) -> str:
    """Fixed-point text of ``value`` with ``digits`` significant figures."""
    if value == 0:
        return "0"
    rounded = float(f"{value:.{digits}g}")
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(rounded)))))
    return f"{rounded:.{decimals}f}"


def format_seconds(value: Any) -> str:
    """A duration in seconds as ``"42.3 s"``, ``"5 min 00 s"`` or ``"1 h 02 min 03 s"``."""
    seconds = as_number(value)
    if seconds is None:
        return NA
    if seconds < 60:
        return f"{seconds:.1f} s"
    total = int(round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min {secs:02d} s"
    return f"{minutes} min {secs:02d} s"


def format_fraction(value: Any, decimals: int = 1) -> str:
    """A fraction in [0, 1] as a percentage: ``format_fraction(0.342) == "34.2%"``."""
    number = as_number(value)
    if number is None:
        return NA
    return f"{100 * number:.{decimals}f}%"


def format_percent(value: Any, decimals: int = 2) -> str:
    """A value already in percent: ``format_percent(3.0) == "3.00%"``."""
    number = as_number(value)
    if number is None:
        return NA
    return f"{number:.{decimals}f}%"


def format_value(value: Any) -> str:
    """Plain text for a configuration / environment value (not yet HTML-escaped)."""
    if value is None:
        return NA
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(format_value(v) for v in value) if value else "none"
    if isinstance(value, dict):
        return ", ".join(f"{k}={format_value(v)}" for k, v in sorted(value.items()))
    return str(value)


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table: columns left-aligned to their widest cell, two spaces apart."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    out += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    return "\n".join(out)
