"""The serving tests' operator threads: as ``aihpc infer`` serves on the CPU, its cores less one
(the last left to LoadGen's and the serving threads: two operator threads beside them on 2
cores made a 1,000-queries/s test of a 0.3-ms model miss a 250-ms bound), and no more than the
test process has (tests/conftest.py shares the cores among xdist's processes)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def serving_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    torch.set_num_threads(max(1, min(before, (cores or 1) - 1)))
    yield
    torch.set_num_threads(before)
