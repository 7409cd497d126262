"""A worker's rank pool (data-parallel trials, gloo on CPU): ranks that live across epochs, and die
cleanly.

The digits epochs at procs=2 take about 1.5 s once the pool is up; starting
a pool (two processes importing torch, 7 core-s) takes 5-15 s on a busy
2-core machine.  So the tests that follow a pool's life start from none
(``fresh_pool``), and the last three, which need only a running pool, share
the one the first of them starts (each would start its own if run alone).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest
from test_trainer import HP, _task

from aihpc.records.messages import DataRef
from aihpc.tasks import task_of
from aihpc.tasks.image.data import load_dataset
from aihpc.train import ranks
from aihpc.train.ranks import close_pool, pool_ranks
from aihpc.train.worker import run_epoch

IMAGE = task_of("image")

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ranks")]


@pytest.fixture(scope="module", autouse=True)
def no_pool_left():
    yield
    close_pool()


@pytest.fixture
def fresh_pool():
    """No pool before the test, and none after it."""
    close_pool()
    yield
    close_pool()


def _gone(pids: list[int], timeout: float = 15.0) -> bool:
    """Whether every process in ``pids`` has ended (a zombie counts as ended) within ``timeout``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        alive = [
            p
            for p in pids
            if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
        ]
        if not alive:
            return True
        time.sleep(0.2)
    return False


def test_epochs_of_a_trial_run_in_the_same_ranks_from_the_kept_model_with_the_file_s_result(
    tmp_path, fresh_pool
):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    hp = {**HP, "dropout": 0.2}  # dropout draws too must not depend on whether the model was kept
    first = run_epoch(IMAGE, _task(tmp_path / "a", hparams=hp, procs=2))
    assert first.status == "ok", first.reason
    after_first = pool_ranks()
    second = run_epoch(
        IMAGE, _task(tmp_path / "a", hparams=hp, procs=2, epoch=2, start=first.weights)
    )
    assert second.status == "ok", second.reason
    after_second = pool_ranks()
    pids = [r["pid"] for r in after_first]
    assert len(pids) == 2 and [r["pid"] for r in after_second] == pids  # the same two processes
    assert [r["data_loads"] for r in after_first] == [1, 1]
    assert [r["data_loads"] for r in after_second] == [1, 1]  # the data set was not loaded again
    # the kept model: no model build, weight read or data load in the second epoch's "other" phase
    assert second.phase_seconds["other"] < first.phase_seconds["other"]
    data = load_dataset("digits")
    # full batches of 100 only: the last, partial one is left out
    assert (
        second.metrics["train_samples"] == data.num_train // 100 * 100
        and second.metrics["val_samples"] == data.num_val
    )
    assert second.ops == first.ops  # the same network and samples: the same count, made once
    # the same second epoch in a fresh pool, rebuilt from the first epoch's weight file (as on
    # another worker)
    close_pool()
    assert _gone(pids)
    shutil.copy(tmp_path / "a" / first.weights.name, tmp_path / "b")
    rebuilt = run_epoch(
        IMAGE, _task(tmp_path / "b", hparams=hp, procs=2, epoch=2, start=first.weights)
    )
    assert rebuilt.status == "ok", rebuilt.reason
    assert not set(r["pid"] for r in pool_ranks()) & set(pids)
    assert rebuilt.weights.digest == second.weights.digest  # bit for bit: weights and momentum
    assert rebuilt.metrics["val_loss"] == second.metrics["val_loss"]
    assert rebuilt.metrics["train_loss"] == second.metrics["train_loss"]


def test_a_rank_killed_mid_epoch_fails_that_epoch_and_the_next_gets_a_new_pool(
    tmp_path, fresh_pool
):
    warm = run_epoch(IMAGE, _task(tmp_path, procs=2))  # the pool is up
    assert warm.status == "ok", warm.reason
    pids = [r["pid"] for r in pool_ranks()]
    # a long epoch (24,000 synthetic 8x8 images in batches of 32: tens of seconds)
    options = {"num_samples": 30000, "num_classes": 10, "channels": 1, "image_size": 8}
    long = _task(
        tmp_path,
        procs=2,
        trial_id=1,
        data=DataRef("synthetic", options=tuple(sorted(options.items()))),
        hparams={**HP, "batch_size": 32},
    )
    killer = threading.Timer(2.0, os.kill, (pids[1], signal.SIGKILL))
    killer.start()
    t0 = time.monotonic()
    failed = run_epoch(IMAGE, long)
    killer.join()
    assert failed.status == "failed" and failed.reason == "rank 1 of 2 failed: killed by signal 9"
    assert time.monotonic() - t0 < 15  # failed when the rank died, not at the end of the epoch
    assert failed.weights is None
    assert _gone(pids)  # its peer was ended with it
    again = run_epoch(IMAGE, _task(tmp_path, procs=2, trial_id=2))
    assert again.status == "ok", again.reason
    new = [r["pid"] for r in pool_ranks()]
    assert len(new) == 2 and not set(new) & set(pids)


def test_ranks_end_with_their_worker(tmp_path):
    # a "worker" process that trains one epoch data-parallel, says its ranks' pids, and is then
    # killed
    script = textwrap.dedent(f"""
        import json, sys, time
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_trainer import _task
        from aihpc.train.ranks import pool_ranks
        from aihpc.tasks import task_of
        from aihpc.train.worker import run_epoch
        r = run_epoch(task_of("image"), _task({str(tmp_path)!r}, procs=2))
        pids = [x["pid"] for x in pool_ranks()]
        print(json.dumps({{"status": r.status, "pids": pids}}), flush=True)
        time.sleep(600)
    """)
    worker = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        said = json.loads(worker.stdout.readline())
        assert said["status"] == "ok" and len(said["pids"]) == 2
        assert not _gone(said["pids"], timeout=0.5)  # idle ranks wait for the next epoch
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        assert _gone(said["pids"])
    finally:
        worker.kill()
        worker.wait()


def test_every_rank_measures_its_peak_at_once():
    from aihpc.runner.measure import worker_peak

    peak = worker_peak("cpu", 1, 0.3, procs=2)
    assert len(peak["parts"]) == 2 and all(p["flops_per_s"] > 0 for p in peak["parts"])
    assert peak["flops_per_s"] == sum(p["flops_per_s"] for p in peak["parts"])
    assert peak["spread"] == max(p["spread"] for p in peak["parts"])
    assert [p["device"] for p in peak["parts"]] == ["cpu", "cpu"] and peak["dtype"] == "float32"
    assert len({r["pid"] for r in pool_ranks()}) == 2  # measured by the pool's two processes


def test_ranks_stage_the_data_before_the_first_epoch_which_then_loads_nothing(tmp_path):
    from aihpc.train.ranks import rank_stage

    if any(r["data_loads"] for r in pool_ranks()):
        close_pool()  # a pool that has loaded data already would prove nothing here
    data = load_dataset("digits")
    staged = rank_stage(IMAGE, DataRef("digits"), "cpu", 2)
    # float32 images of 8x8 and int64 labels, train and validation: the whole set on each rank
    assert [s["bytes"] for s in staged] == [(data.num_train + data.num_val) * (64 * 4 + 8)] * 2
    assert [r["data_loads"] for r in pool_ranks()] == [1, 1]
    r = run_epoch(IMAGE, _task(tmp_path, procs=2))
    assert r.status == "ok", r.reason
    assert [x["data_loads"] for x in pool_ranks()] == [1, 1]  # the staged copy was used


def test_an_error_in_the_ranks_fails_the_epoch_in_one_line(tmp_path):
    bad = _task(tmp_path).arch | {"num_classes": 10}
    bad["layers"] = [dict(layer) for layer in bad["layers"]]
    bad["layers"][0]["inputs"] = ["nowhere"]
    r = run_epoch(IMAGE, _task(tmp_path, arch=bad, procs=2))
    assert r.status == "failed" and r.reason.startswith("rank ") and " of 2 failed: " in r.reason
    assert "nowhere" in r.reason and "\n" not in r.reason and "Traceback" in r.traceback
    assert ranks._POOL is None  # closed; the next task starts a new one
