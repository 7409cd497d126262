"""Options several commands declare alike: one builder each, so their wording stays one.

``--device`` (where to measure), ``--dtype`` (one precision, or several with
``add_dtypes``) and ``--roofline`` (the peaks of an earlier ``aihpc roofline``
result).  A command whose option means something else (``aihpc run``'s
``--device``, a RunConfig field with its own choices) declares its own.
Standard library only, as every ``cli`` module at top level.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

DEVICE_HELP = "cpu, cuda, cuda:N or auto (default)"
ROOFLINE_HELP = "the peaks of `aihpc roofline` to use instead of measuring them now"


def add_device(parser: argparse.ArgumentParser, help: str = DEVICE_HELP) -> None:
    """``--device``, default "auto" (resolved by :mod:`aihpc.machine.devices`)."""
    parser.add_argument("--device", default="auto", help=help)


def add_dtype(
    parser: argparse.ArgumentParser,
    help: str,
    default: str | None = None,
    choices: Sequence[str] | None = None,
) -> None:
    """``--dtype``, one precision: ``default`` None where the command picks it later."""
    parser.add_argument("--dtype", default=default, choices=choices, help=help)


def add_dtypes(parser: argparse.ArgumentParser, help: str) -> None:
    """``--dtype DTYPE``, repeatable: a list, None where none was given (the command's default)."""
    parser.add_argument("--dtype", action="append", metavar="DTYPE", help=help)


def add_roofline(parser: argparse.ArgumentParser, help: str = ROOFLINE_HELP) -> None:
    """``--roofline FILE``: an ``aihpc roofline`` result whose peaks are used (None: measure)."""
    parser.add_argument("--roofline", metavar="FILE", type=Path, default=None, help=help)
