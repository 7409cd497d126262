"""The convention every benchmark script here follows for bad input, as aihpc's commands do.

``@script`` wraps a script's ``main(argv) -> int``: an :class:`aihpc.base.errors.AihpcError`
(a missing file, a setting aihpc refuses) becomes one line on stderr naming the script, and
the error's exit code (2: the user's mistake); a bug keeps its traceback.  Tests call ``main``
in their own process, as ``python benchmarks/NAME.py`` does.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path


def script(main: Callable[[list[str] | None], int]) -> Callable[[list[str] | None], int]:
    name = Path(sys.modules[main.__module__].__file__ or main.__module__).stem

    @functools.wraps(main)
    def wrapped(argv: list[str] | None = None) -> int:
        from aihpc.base.errors import AihpcError

        try:
            return main(argv)
        except AihpcError as exc:
            print(f"{name}: error: {exc}", file=sys.stderr)
            return exc.exit_code

    return wrapped
