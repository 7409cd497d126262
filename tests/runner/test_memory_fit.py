"""The master and its workers' memory (:mod:`aihpc.runner.search.memory`): a trial that cannot fit
is never sent, recorded as failed with both figures, and the search goes on; a trial whose worker
its nanny killed for memory twice in a row fails with that cause.  The in-process executor and
the scripted trainer of tests/runner/test_master.py; each worker's record as the run measures it
(:func:`aihpc.launch.memory.worker_memory`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from runner_helpers import (
    DIGITS,
    InProcessExecutor,
    StepClock,
    image_master,
    scripted_epoch,
)

from aihpc.base.config import RunConfig
from aihpc.base.errors import ConfigError
from aihpc.launch.memory import memory_kill
from aihpc.records.store import RunStore
from aihpc.records.trial import Hyperparameters
from aihpc.runner.search.memory import MemoryWatch
from aihpc.tasks import read_config, task_of
from aihpc.train.weights import cache_bytes

HELD = 300 * 2**20  # what the worker holds before a trial (its resident memory, as measured)
LINE = re.compile(
    r"not sent: it needs an estimated (\d+\.\d\d) GiB of host memory; worker w0 has "
    r"(\d+\.\d\d) GiB for it \(its (\d+\.\d\d) GiB limit: (\d+\.\d\d) GiB before its nanny "
    r"restarts it, less (\d+\.\d\d) GiB it holds\)"
)


def _config(**changes) -> RunConfig:
    return read_config(
        dict(
            dataset="digits",
            report_seconds=600,
            optimizer="sgd",
            inherit_hparams=False,  # TPE draws each trial's batch size, so both sizes come
            **{"minutes": 1.0, "epochs_min": 1, "epochs_max": 1, **changes},
        )
    )


def _watch(config: RunConfig, limit: int, killed=lambda exc: None) -> MemoryWatch:
    watch = MemoryWatch(task_of("image"), config, "cpu", killed)
    record = {"worker": "w0", "host": "h", "node_bytes": 8 * limit, "node_confined": False}
    watch.add([{**record, "limit_bytes": limit, "rss_bytes": HELD}])
    return watch


def _seed_need(config: RunConfig, batch: int) -> int:
    watch = _watch(config, 2**40)
    seed = task_of("image").seed_arch(DIGITS)
    return watch.need(seed, Hyperparameters(lr=0.1, batch_size=batch), None, 1)


def _limit_between(config: RunConfig, small: int, large: int) -> int:
    """A limit whose room (95 % of it, less what the worker holds) lies halfway between the seed's
    needs at the two batch sizes (the cache's share, a quarter, is below its 2 GiB cap here)."""
    middle = (_seed_need(config, small) + _seed_need(config, large)) // 2
    return int((middle + HELD) / (0.95 - 0.25))


def _run(tmp_path: Path, config: RunConfig, watch: MemoryWatch, lost=lambda task: False):
    store = RunStore(tmp_path / "run")
    clock = StepClock(10.0)
    executor = InProcessExecutor(
        clock, slots=1, script=scripted_epoch(lambda t, e: 0.5 + 0.01 * t, lost)
    )
    master = image_master(config, store, executor, clock, memory=watch)
    master.run()
    return store, executor


def test_a_trial_that_cannot_fit_is_never_sent_but_failed_with_both_figures(
    tmp_path: Path,
) -> None:
    config = _config(batch_sizes=(16, 8192))
    limit = _limit_between(config, 16, 8192)
    assert cache_bytes(limit) == limit // 4
    store, executor = _run(tmp_path, config, _watch(config, limit))
    trials = store.trials()
    refused = [t for t in trials if t.hparams.batch_size == 8192]
    sent = [t for t in trials if t.hparams.batch_size == 16]
    assert refused and sent, [(t.id, t.hparams.batch_size, t.status) for t in trials]
    assert max(t.id for t in sent) > min(t.id for t in refused)  # the search went on
    sent_ids = {int(re.match(r"trial(\d+)-", key).group(1)) for key in executor.keys}
    assert sent_ids == {t.id for t in sent}  # a refused trial is never sent
    for t in refused:
        assert t.status == "failed" and t.attempts == 0 and store.epochs(t.id) == []
        figures = LINE.fullmatch(t.reason or "")
        assert figures is not None, t.reason
        need, room, limit_gib, usable, held = (float(g) for g in figures.groups())
        assert need > room and limit_gib == round(limit / 2**30, 2)
        assert usable == round(0.95 * limit / 2**30, 2)
        assert held == round((HELD + limit // 4) / 2**30, 2)
    assert all(t.status == "completed" for t in sent)
    assert store.losses() == []


def test_a_run_whose_seed_cannot_fit_at_its_smallest_batch_is_refused_before_it_starts() -> None:
    config = _config(batch_sizes=(16, 8192))
    limit = int((_seed_need(config, 16) // 2 + HELD) / 0.7)
    with pytest.raises(ConfigError) as refused:
        _watch(config, limit).check_seed(DIGITS)
    message = str(refused.value)
    assert message.startswith("the seed network at batch size 16 cannot be trained: not sent: ")
    assert message.endswith("; give --worker-memory more, or fewer workers")
    _watch(_config(batch_sizes=(16, 8192)), _limit_between(config, 16, 8192)).check_seed(DIGITS)


KILL = memory_kill(
    [(0.0, {"worker": "tcp://10.0.0.5:4000", "rss": 7_900_000_000})],
    "tcp://10.0.0.5:4000",
    8 * 2**30,
)


def _kills(exc: BaseException) -> str | None:
    """The cause of a loss whose message says its worker was killed for memory (the scripted
    trainer's), from the nanny's event as the scheduler keeps it."""
    return KILL if "for memory" in str(exc) else None


@pytest.mark.parametrize(
    ("why", "attempts", "reason"),
    [
        ("for memory", 2, f"2 attempts failed; last: {KILL}"),
        (
            "a node lost",
            3,
            "3 attempts failed; last: RuntimeError: worker lost trial 1 epoch 1 (a node lost)",
        ),
    ],
)
def test_a_trial_lost_twice_in_a_row_for_memory_fails_with_the_cause(
    tmp_path: Path, why: str, attempts: int, reason: str
) -> None:
    """Killed for memory twice in a row, a trial fails at once with the cause (a third attempt
    would be killed again); any other loss is sent again up to max_attempts."""
    config = _config(batch_sizes=(32,), max_attempts=3)

    def lost(task) -> bool:
        if task.trial_id == 1:
            raise RuntimeError(f"worker lost trial 1 epoch 1 ({why})")
        return False

    store, executor = _run(tmp_path, config, _watch(config, 2**36, _kills), lost)
    trial = {t.id: t for t in store.trials()}[1]
    assert trial.status == "failed" and trial.attempts == attempts
    assert trial.reason == reason
    losses = store.losses()
    assert [(loss.attempt, loss.requeued) for loss in losses] == [
        (n, n < attempts) for n in range(1, attempts + 1)
    ]
    if why == "for memory":
        assert {loss.reason for loss in losses} == {KILL}
        assert KILL == (
            "its nanny killed it for memory: 7.36 GiB resident, against its limit of 8.00 GiB "
            "(restarted past 95 %, 7.60 GiB)"
        )


def test_a_state_larger_than_the_weight_cache_is_counted_as_held_beyond_it() -> None:
    """A worker keeps the last state it wrote whatever its size, so a trial whose state is larger
    than the cache's cap needs the difference too; one under the cap needs nothing more."""
    from aihpc.runner.search.memory import Room
    from aihpc.train.memory import trial_memory

    config = _config()
    watch = _watch(config, 2**30)
    seed = task_of("image").seed_arch(DIGITS)
    hp = Hyperparameters(lr=0.1, batch_size=32)
    snapshot = trial_memory(task_of("image"), seed, hp, "cpu", None).snapshot
    roomy = Room("w0", 64 * 2**30, HELD)  # a cache of 2 GiB, far above the seed's state
    assert watch.kept_beyond_cache(seed, hp, roomy) == 0
    tight = Room("w0", 2 * snapshot, HELD)  # a cache of half the seed's state
    assert watch.kept_beyond_cache(seed, hp, tight) == snapshot - cache_bytes(2 * snapshot) > 0
