"""aihpc.base.checks: the one check of a numeric setting (an integer or a number in bounds, no
bool)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from aihpc.base import checks
from aihpc.base.errors import ConfigError, DataError, MorphError


@pytest.mark.parametrize("value", [True, False, 1.0, "3", None, [1]])
def test_integer_refuses_what_is_not_an_int(value):
    with pytest.raises(ConfigError) as info:
        checks.integer("batch", value)
    assert str(info.value) == f"batch must be an integer >= 1, got {value!r}"


def test_integer_bounds_and_value():
    assert checks.integer("seed", 0, 0) == 0
    assert checks.integer("batch", 7) == 7
    with pytest.raises(ConfigError, match=r"^batch must be an integer >= 2, got 1$"):
        checks.integer("batch", 1, 2)
    assert checks.integer("block", 3, 0, 3) == 3
    with pytest.raises(ConfigError, match=r"^block must be an integer in 0\.\.3, got 4$"):
        checks.integer("block", 4, 0, 3)


def test_integer_error_class_what_and_terse():
    with pytest.raises(DataError, match=r"^count must be an integer >= 1, got 0$"):
        checks.integer("count", 0, error=DataError)
    with pytest.raises(MorphError, match=r"^w must be > the width 4, got 4$"):
        checks.integer("w", 4, 5, error=MorphError, what="> the width 4")
    with pytest.raises(ConfigError, match=r"^n must be >= 2, got 1$"):
        checks.integer("n", 1, 2, terse=True)
    with pytest.raises(ConfigError, match=r"^n must be an integer >= 2, got 1\.5$"):
        checks.integer("n", 1.5, 2, terse=True)  # a wrong kind is named even when terse


def test_integer_numpy_only_when_asked():
    assert checks.integer("n", np.int64(3), numpy=True) == 3
    assert type(checks.integer("n", np.int64(3), numpy=True)) is int
    with pytest.raises(ConfigError):
        checks.integer("n", np.int64(3))
    with pytest.raises(ConfigError):
        checks.integer("n", np.bool_(True), numpy=True)


def test_optional_integer():
    assert checks.optional_integer("cores", None) is None
    assert checks.optional_integer("cores", 4, error=DataError) == 4
    with pytest.raises(DataError, match=r"^cores must be an integer >= 1 or None, got True$"):
        checks.optional_integer("cores", True, error=DataError)


def test_is_integer():
    assert checks.is_integer(0) and checks.is_integer(5, 1)
    assert not checks.is_integer(True) and not checks.is_integer(2.0)
    assert not checks.is_integer(0, 1)


@pytest.mark.parametrize("value", [True, "1", None, math.nan, math.inf, -math.inf])
def test_number_refuses_bool_nan_and_infinity(value):
    with pytest.raises(ConfigError) as info:
        checks.number("seconds", value, 0, low_open=True)
    assert str(info.value) == f"seconds must be a finite number > 0, got {value!r}"


def test_number_bounds_and_messages():
    assert checks.number("x", 2) == 2.0 and isinstance(checks.number("x", 2), float)
    assert checks.number("x", 0, 0) == 0.0
    with pytest.raises(ConfigError, match=r"^x must be a finite number > 0, got 0$"):
        checks.number("x", 0, 0, low_open=True)
    with pytest.raises(ConfigError, match=r"^p must be a number in \[0, 1\), got 1$"):
        checks.number("p", 1, 0, 1, high_open=True, finite=False)
    with pytest.raises(ConfigError, match=r"^x must be a finite number <= 1, got 2$"):
        checks.number("x", 2, high=1)
    with pytest.raises(ConfigError, match=r"^x must be a finite number, got 'a'$"):
        checks.number("x", "a")


def test_number_infinity_where_allowed_and_nan_never():
    assert checks.number("rate", math.inf, 0, finite=False) == math.inf
    with pytest.raises(DataError, match=r"^rate must be a number >= 0, got nan$"):
        checks.number("rate", math.nan, 0, finite=False, error=DataError)


def test_number_terse_names_only_the_bounds_that_failed():
    args = dict(low_open=True, high_open=True, finite=False, terse=True)
    with pytest.raises(ConfigError, match=r"^f must be in \(0, 1\), got 1$"):
        checks.number("f", 1, 0, 1, **args)
    with pytest.raises(ConfigError, match=r"^f must be in \(0, 1\), got nan$"):
        checks.number("f", math.nan, 0, 1, **args)
    with pytest.raises(ConfigError, match=r"^f must be a number in \(0, 1\), got True$"):
        checks.number("f", True, 0, 1, **args)
    with pytest.raises(ConfigError, match=r"^f must be in \[0\.0001, 10000\], got 0$"):
        checks.number("f", 0, 1e-4, 1e4, finite=False, terse=True)


def test_errors_are_the_callers_class_with_its_exit_code():
    with pytest.raises(MorphError) as info:
        checks.number("x", -1, 0, error=MorphError)
    assert info.value.exit_code == 2
