import math
import os
import signal
from pathlib import Path

import pytest

from aihpc.base.errors import AihpcError
from aihpc.nas.hpo import PREFETCH_MAX, PREFETCH_MIN, HyperparameterSearch
from aihpc.nas.tpe_study import WindowedStudy
from aihpc.tasks.image.task import image_space

NAMES = {"lr", "batch_size", "weight_decay", "momentum", "dropout"}
BEST_LR = 0.03


def _core(seed: int = 0, window: int = 128, optimizer: str = "sgd") -> WindowedStudy:
    return WindowedStudy(seed, image_space([32, 64], optimizer, "cosine").distributions(), window)


def _accuracy(params: dict) -> float:
    """Peaks at lr = BEST_LR, falls with the squared distance in decades."""
    return 0.9 - 0.05 * (math.log10(params["lr"]) - math.log10(BEST_LR)) ** 2


def _drive(core: WindowedStudy, asks: int, in_flight: int) -> list[dict]:
    """Ask ``asks`` times, telling the trial asked ``in_flight`` asks earlier; params in order."""
    running, asked = [], []
    for _ in range(asks):
        token, params = core.ask()
        running.append((token, params))
        asked.append(params)
        if len(running) > in_flight:
            told, told_params = running.pop(0)
            core.tell(told, _accuracy(told_params))
    return asked


def _params(lr: float = 0.01, batch_size: int = 32) -> dict:
    return {
        "lr": lr,
        "batch_size": batch_size,
        "weight_decay": 1e-4,
        "momentum": 0.9,
        "dropout": 0.1,
    }


@pytest.mark.parametrize("optimizer, lr_range", [("sgd", (1e-3, 0.4)), ("adamw", (1e-4, 1e-2))])
def test_hyperparameters_lie_within_their_ranges(optimizer, lr_range):
    core = _core(optimizer=optimizer)
    for params in _drive(core, 20, in_flight=4):  # random start-up, then TPE
        assert set(params) == NAMES
        assert lr_range[0] <= params["lr"] <= lr_range[1]
        assert 1e-6 <= params["weight_decay"] <= 1e-2
        assert 0.5 <= params["momentum"] <= 0.99 and 0.0 <= params["dropout"] <= 0.5
        assert params["batch_size"] in (32, 64)


def test_core_is_deterministic_by_seed():
    # window 8: the sequence crosses several rebuilds, whose samplers are seeded too
    a, b, c = _core(3, window=8), _core(3, window=8), _core(4, window=8)
    first = _drive(a, 40, in_flight=4)
    assert first == _drive(b, 40, in_flight=4)
    assert first != _drive(c, 40, in_flight=4)
    assert a.generation > 2


def test_core_add_and_tell_across_a_rebuild():
    core = _core(window=8)
    core.add(_params(0.01), 0.8)  # a trial finished in an earlier segment
    core.add(_params(0.02), None)  # a failed one tells TPE nothing and is not kept
    assert [(t.params["lr"], t.value) for t in core.study.trials] == [(0.01, 0.8)]
    old_token, old_params = core.ask()
    for i in range(20):  # past the limit of 12 trials: the study is rebuilt
        core.add(_params(0.001 * (i + 1)), 0.1)
    assert core.generation >= 1 and core.size <= core.limit
    core.tell(old_token, 0.95)  # asked from a study since replaced: added as a frozen trial
    completed = [t for t in core.study.trials if t.state.name == "COMPLETE"]
    assert (completed[-1].params, completed[-1].value) == (old_params, 0.95)
    assert not any(t.state.name == "RUNNING" for t in core.study.trials)
    token, _ = core.ask()
    core.tell(token, None)  # a failed trial of the current study ends as FAIL
    assert core.study.trials[-1].state.name == "FAIL"
    with pytest.raises(KeyError):
        core.tell(token, 0.5)  # told twice


def test_window_bounds_the_study_and_keeps_the_best():
    core = _core(window=16)
    for i in range(1_000):
        core.add(_params(10 ** (-3 + 2.5 * (i % 97) / 97)), (i * 7919 % 1000) / 1000)
        if i % 50 == 0:
            token, params = core.ask()
            core.tell(token, 0.5)
        assert core.size <= core.limit == 24
    values = sorted((t.value for t in core.study.trials), reverse=True)
    assert values[:8] == [
        0.999,
        0.998,
        0.997,
        0.996,
        0.995,
        0.994,
        0.993,
        0.992,
    ]  # the best half-window


def test_tpe_concentrates_near_the_optimum():
    # lr is log-uniform over [1e-3, 0.4]: a random lr lies 0.66 decades from 0.03 on average
    core = _core(seed=0)
    asked = _drive(core, 120, in_flight=4)
    distance = [abs(math.log10(p["lr"]) - math.log10(BEST_LR)) for p in asked[-40:]]
    assert sum(distance) / len(distance) < 0.25


def test_search_process_end_to_end():
    hpo = HyperparameterSearch(seed=0, space=image_space([32, 64], "sgd", "cosine"), window=8)
    try:
        for i in range(
            10
        ):  # an earlier segment: restored before the first ask, so TPE starts from them
            hpo.restore(
                {**_params(10 ** (-3 + 0.25 * i)), "optimizer": "sgd", "schedule": "cosine"},
                0.5 + i / 100,
            )
        resumed = hpo.adopt(_params(0.05))
        numbers = set()
        for _ in range(3 * PREFETCH_MIN):
            number, params = hpo.ask()
            assert set(params) == NAMES | {"optimizer", "schedule"}
            assert params["optimizer"] == "sgd" and params["schedule"] == "cosine"
            assert 1e-3 <= params["lr"] <= 0.4
            numbers.add(number)
            hpo.tell(number, _accuracy(params) if number % 3 else None)
        assert len(numbers) == 3 * PREFETCH_MIN and resumed not in numbers
        for depth, ahead in (
            (10, 10),
            (1, 9),
            (10**6, PREFETCH_MAX),
        ):  # depth follows the slots, bounded
            hpo.ask(depth=depth)
            assert hpo._children[0].drawn - hpo._children[0].received == ahead
        hpo.tell(resumed, 0.7)
        with pytest.raises(ValueError, match="was never asked, or was told already"):
            hpo.tell(resumed, 0.7)
        maps = Path(f"/proc/{hpo._children[0].process.pid}/maps")
        if maps.exists():
            assert "libtorch" not in maps.read_text()  # the child never imports torch
    finally:
        hpo.close()
    assert not hpo._children[0].process.is_alive()
    with pytest.raises(AihpcError, match="closed"):
        hpo.ask()
    hpo.close()  # twice is fine


def test_killed_search_process_past_the_restarts_is_a_clear_error():
    # a killed process is restarted (tests/nas/test_hpo_restart.py), max_restarts times in a run
    hpo = HyperparameterSearch(seed=0, space=image_space([32], "adamw", "step"), max_restarts=0)
    try:
        hpo.ask()
        os.kill(hpo._children[0].process.pid, signal.SIGKILL)
        message = (
            r"^the hyperparameter search process \(pid \d+\) was killed by signal 9; "
            r"not restarted: the run's 0 restarts of search processes are used up$"
        )
        with pytest.raises(AihpcError, match=message):
            for _ in range(PREFETCH_MIN + 2):  # suggestions already in the pipe may still be read
                hpo.ask()
    finally:
        hpo.close()


def test_an_error_in_the_search_process_is_reported():
    hpo = HyperparameterSearch(seed=0, space=image_space([32], "sgd", "cosine"))
    try:
        hpo.restore(
            _params(batch_size=512), 0.5
        )  # not one of the batch sizes: the child fails on it
        with pytest.raises(
            AihpcError, match="the hyperparameter search process failed: ValueError: .*512"
        ):
            hpo.ask()
        assert hpo.restarts == []  # a bug in the child is not restarted
    finally:
        hpo.close()


def test_streams_of_one_seed_differ_and_each_repeats():
    def first_lrs(stream: int) -> list[float]:
        study = WindowedStudy(
            0, image_space([32, 64], "sgd", "cosine").distributions(), 128, stream
        )
        return [study.ask()[1]["lr"] for _ in range(5)]

    assert first_lrs(1) == first_lrs(1)
    assert first_lrs(1) != first_lrs(0)


def test_two_search_processes_take_turns_and_share_every_result():
    hpo = HyperparameterSearch(
        seed=0, space=image_space([32, 64], "sgd", "cosine"), window=8, processes=2
    )
    first, second = hpo._children
    try:
        hpo.restore({**_params(0.01), "optimizer": "sgd", "schedule": "cosine"}, 0.6)  # to both
        asked = [hpo.ask(depth=10) for _ in range(12)]
        assert [hpo._tokens[n][0] for n, _ in asked] == [first, second] * 6  # in turn
        for child in (first, second):
            assert child.drawn - child.received == 5  # depth 10, shared
        assert [p["lr"] for _, p in asked[0::2]] != [
            p["lr"] for _, p in asked[1::2]
        ]  # different streams
        for number, params in asked:  # the owner gets a tell, the other child the finished trial
            hpo.tell(number, _accuracy(params))
        assert {n for n, _ in asked} == set(range(12)) and not hpo._tokens
    finally:
        hpo.close()
    assert not first.process.is_alive() and not second.process.is_alive()
