"""One torch thread for these tests, as ``aihpc recommend`` uses (cli/recommend.py THREADS)."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
