"""Proxy screening in the search: the master screens K children, trains the best, records and counts
it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from runner_helpers import (
    InProcessExecutor,
    NullObserver,
    StepClock,
    image_master,
    scripted_epoch,
)

from aihpc.base.errors import ConfigError
from aihpc.recommend.proxies import proxy_ops
from aihpc.records.messages import DataRef, ScreenStatus, ScreenTask
from aihpc.records.rows import ScreeningRow
from aihpc.records.store import RunStore
from aihpc.tasks import read_config, task_of
from aihpc.tasks.image.build import SpecNet
from aihpc.tasks.image.spec import ArchSpec


class Recorder(NullObserver):
    def __init__(self) -> None:
        self.screenings: list[ScreeningRow] = []

    def screening(self, record: ScreeningRow) -> None:
        self.screenings.append(record)


def _screened_run(tmp_path: Path, screen: int, script=None):
    cfg = read_config(
        dict(
            dataset="digits",
            minutes=1.0,
            epochs_min=1,
            epochs_max=1,
            batch_sizes=(128,),
            report_seconds=600,
            screen=screen,
        )
    )
    store = RunStore(tmp_path / "run")
    clock = StepClock(10.0)
    executor = InProcessExecutor(
        clock, slots=1, script=script or scripted_epoch(lambda t, e: 0.5 + 0.01 * t)
    )
    observer = Recorder()
    master = image_master(cfg, store, executor, clock, observer=observer)
    return store, master.run(), executor, observer


def test_the_best_predicted_child_is_trained_and_the_screening_counted(tmp_path: Path) -> None:
    store, score, executor, observer = _screened_run(tmp_path, screen=2)
    # 6 tasks of 10 s fit in the minute: the seed, then screening -> child epoch, twice, then a
    # screening
    assert executor.keys == [
        "trial0-epoch1-try1",
        "screen0",
        "trial1-epoch1-try1",
        "screen1",
        "trial2-epoch1-try1",
        "screen2",
    ]
    trials, screenings = store.trials(), store.screenings()
    assert [s.trial for s in screenings] == [
        1,
        2,
        None,
    ]  # the last returned at the deadline: no trial
    for sc, trial in zip(screenings[:2], trials[1:], strict=True):
        assert sc.status == ScreenStatus.OK and sc.batch == 64 and len(sc.candidates) == 2
        predicted = [c.predicted for c in sc.candidates]
        assert sc.chosen == predicted.index(max(predicted))
        chosen = sc.candidates[sc.chosen]
        assert trial.arch_hash == chosen.arch_hash and trial.morph == chosen.morph
        assert trial.parent == sc.parent
        assert len({c.arch_hash for c in sc.candidates}) == 2  # siblings differ
        for c in sc.candidates:  # each candidate's operations are those its proxies perform
            spec = ArchSpec.from_dict(c.arch)
            assert c.ops == proxy_ops(SpecNet(spec), 64, spec.input_shape)[0] > 0
    # no screened-out architecture is ever trained
    losers = {
        c.arch_hash for sc in screenings for i, c in enumerate(sc.candidates) if i != sc.chosen
    }
    assert not losers & {t.arch_hash for t in trials}
    screening_ops = sum(sc.ops for sc in screenings)
    assert screening_ops > 0 and score.ops == store.total_ops() == 3 * 1100 + screening_ops
    assert [r.id for r in observer.screenings] == [0, 1, 2]


def test_a_failed_screening_trains_its_first_candidate_unscreened(
    tmp_path: Path, monkeypatch
) -> None:
    import aihpc.recommend.screen as screen

    def broken(kind, task, device, x, y):
        raise RuntimeError("no proxies today")

    monkeypatch.setattr(screen, "_score", broken)
    store, score, _, observer = _screened_run(tmp_path, screen=2)
    sc = store.screenings()[0]
    assert (
        sc.status == ScreenStatus.FAILED
        and sc.reason == "RuntimeError: no proxies today"
        and sc.ops == 0
    )
    assert sc.chosen == 0 and store.trials()[1].arch_hash == sc.candidates[0].arch_hash
    assert score.ops == 3 * 1100


def test_screening_is_off_by_default_and_bounded() -> None:
    assert read_config({}).search.screen == 0
    for bad in (1, -1, 17):
        with pytest.raises(
            ConfigError, match=f"screen must be 0 \\(off\\) or in \\[2, 16\\], got {bad}"
        ):
            read_config(dict(screen=bad))


def test_worker_scores_candidates_with_the_proxies_and_the_matcher() -> None:
    """screen_children on digits: the prediction is the matcher's on the proxies, the pick its
    argmax."""
    from aihpc.recommend.screen import screen_children
    from aihpc.tasks.image.seeds import seed_spec

    seed = seed_spec((1, 8, 8), 10)
    wide = ArchSpec.from_dict(json.loads(json.dumps(seed.to_dict())))
    task = ScreenTask(
        0, 0, (seed.to_dict(), wide.to_dict()), DataRef("digits"), seed=3, device="cpu", threads=1
    )
    image = task_of("image")
    a, b = screen_children(image, task), screen_children(image, task)
    assert a.status == "ok" and a.batch == 64 and len(a.predicted) == 2
    assert a.predicted == b.predicted and a.proxies == b.proxies  # seeded: the same every time
    assert (
        a.predicted[0] == a.predicted[1] and a.chosen == 0
    )  # the same architecture scores the same; ties: first
    assert set(a.proxies[0]) == {"snip", "grad_norm", "synflow", "jacob_cov", "naswot"}
