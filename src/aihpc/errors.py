"""One exception hierarchy for everything a user can get wrong.

The CLI turns any :class:`AihpcError` into a single line on stderr and exit
code 2; anything else is a bug and keeps its traceback.  Messages name the
rule and the offending value, e.g. ``"batch must be >= 1, got 0"``.
"""

from __future__ import annotations


class AihpcError(Exception):
    """Base class: a problem with the user's input or environment."""


class ConfigError(AihpcError, ValueError):
    """A configuration value or command-line argument is invalid."""


class ModelError(AihpcError, ValueError):
    """An unknown model name or invalid model arguments."""


class SpecError(AihpcError, ValueError):
    """An architecture spec is malformed or its shapes do not fit."""


class MorphError(AihpcError, ValueError):
    """A morphism was asked for that cannot be applied."""


class DataError(AihpcError):
    """A data set is missing, empty or corrupt."""


class StorageError(AihpcError):
    """The run directory or its store cannot be written or read."""
