"""The serving thread's queue: a batch's wait for one more sample ends, on a loaded core too."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from types import SimpleNamespace

import pytest

from aihpc.infer.systems import BatchingSystem

ROUNDS = 50_000  # a sample issued and taken alone, then the batch's wait for one more


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity")
def test_a_batch_s_wait_for_one_more_sample_ends_on_a_core_shared_with_a_busy_process() -> None:
    """CPython 3.11's SimpleQueue.get(timeout) waited forever when its lock was free on an empty
    queue (a put's release, the item then taken without it) and the deadline passed before it
    looped: a 1 us wait that the OS preempted.  Offline's batches wait 0 s (1 us) for more; under
    load, one never ended, so its samples never completed and LoadGen waited for them (seen in
    the suite and with `aihpc infer` beside busy loops).  A busy process on this thread's core
    preempts it as a loaded machine does: with the old queue this hung after 17,928 rounds."""
    system = BatchingSystem(steps=[], max_batch=8, max_wait=0.0)
    cpu = min(os.sched_getaffinity(0))
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    batches: list[int] = []

    def serve() -> None:
        # this thread only (0 is the calling thread), on the busy process's core
        os.sched_setaffinity(0, {cpu})
        for i in range(ROUNDS):
            system.issue([SimpleNamespace(id=i, index=i)])
            batches.append(len(system._next_batch() or []))

    try:
        os.sched_setaffinity(busy.pid, {cpu})
        server = threading.Thread(target=serve, daemon=True)
        server.start()
        server.join(timeout=60)
    finally:
        busy.kill()
        busy.wait()
    assert not server.is_alive(), f"a batch's wait did not end, after {len(batches)} batches"
    assert batches == [1] * ROUNDS
