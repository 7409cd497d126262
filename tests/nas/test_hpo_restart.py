"""A hyperparameter search process killed mid-run is started again, told the history, and the
search goes on; real child processes throughout."""

import os
import signal
import time

import pytest

from aihpc.base.errors import RunFailure
from aihpc.nas import hpo_process
from aihpc.nas.hpo import PREFETCH_MIN, HyperparameterSearch
from aihpc.nas.hpo_process import ProcessDied
from aihpc.tasks.image.task import image_space

WINDOW = 8  # a history of the 4 best and the 4 most recent


def _search(**options) -> HyperparameterSearch:
    return HyperparameterSearch(
        seed=0, space=image_space([32, 64], "sgd", "cosine"), window=WINDOW, **options
    )


def _drawn(params: dict) -> dict:
    """The searched hyperparameters of an ask's answer (without the fixed ones)."""
    return {name: value for name, value in params.items() if name not in ("optimizer", "schedule")}


def _accuracy(i: int) -> float | None:
    """Every fifth trial fails; the others repeat a few accuracies (ties between best ones)."""
    return None if i % 5 == 4 else (i * 7 % 10) / 10


def _expected_history(finished: list[tuple[dict, float | None]]) -> list[tuple[dict, float]]:
    """The WINDOW // 2 best (of equal accuracies the later) and the WINDOW - WINDOW // 2 most
    recent finished trials, failed ones left out, oldest first."""
    done = [
        (i, params, accuracy)
        for i, (params, accuracy) in enumerate(finished)
        if accuracy is not None
    ]
    best = sorted(done, key=lambda trial: (trial[2], trial[0]), reverse=True)[: WINDOW // 2]
    recent = done[-(WINDOW - WINDOW // 2) :]
    kept = {i for i, _, _ in best + recent}
    return [(params, accuracy) for i, params, accuracy in done if i in kept]


def _run_trials(hpo: HyperparameterSearch, count: int, finished: list) -> None:
    """Ask and tell ``count`` trials, noting each in ``finished``."""
    for _ in range(count):
        number, params = hpo.ask()
        accuracy = _accuracy(len(finished))
        hpo.tell(number, accuracy)
        finished.append((_drawn(params), accuracy))


def _kill(process) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.join(timeout=10)
    assert process.exitcode == -signal.SIGKILL


def _ask_until_restarted(hpo: HyperparameterSearch, restarts: int) -> list[tuple[int, dict]]:
    """Ask until the search has restarted ``restarts`` children: each ask returns a suggestion
    (the first ones may still come from the pipe of the dead child)."""
    asked = []
    while len(hpo.restarts) < restarts:
        assert len(asked) <= len(hpo._children) * (PREFETCH_MIN + 2), "the death went unnoticed"
        asked.append(hpo.ask())
    return asked


def test_a_killed_search_process_is_restarted_with_the_history():
    hpo = _search()
    try:
        finished = []
        for i in range(3):  # an earlier segment's trials count too
            params = {
                "lr": 0.01 * (i + 1),
                "batch_size": 32,
                "weight_decay": 1e-4,
                "momentum": 0.9,
                "dropout": 0.1,
            }
            hpo.restore({**params, "optimizer": "sgd", "schedule": "cosine"}, _accuracy(i))
            finished.append((params, _accuracy(i)))
        _run_trials(hpo, 17, finished)
        running = [hpo.ask() for _ in range(2)]  # drawn by the child about to die
        expected = _expected_history(finished)
        assert len(expected) > WINDOW // 2 and hpo.history() == expected
        dead = hpo._children[0]
        before = time.time()
        _kill(dead.process)

        running += _ask_until_restarted(hpo, 1)
        (restart,) = hpo.restarts
        assert (restart.stream, restart.pid, restart.how) == (
            0,
            dead.process.pid,
            "was killed by signal 9",
        )
        assert restart.history == len(expected) and before <= restart.t <= time.time()
        new = hpo._children[0]
        assert (
            new is not dead
            and new.process.is_alive()
            and (new.drawn, new.received) == (PREFETCH_MIN + 1, 1)
        )
        number, params = running[-1]
        assert hpo._tokens[number][0] is new  # the ask that noticed the death read the new child

        for number, params in running[:-1]:  # drawn by the dead child: told as finished elsewhere
            hpo.tell(number, _accuracy(len(finished)))
            finished.append((_drawn(params), _accuracy(len(finished))))
        hpo.tell(running[-1][0], _accuracy(len(finished)))
        finished.append((_drawn(running[-1][1]), _accuracy(len(finished))))
        _run_trials(hpo, 6, finished)
        assert hpo.history() == _expected_history(finished)
        assert len(hpo.restarts) == 1 and not hpo._tokens
    finally:
        hpo.close()
    assert not new.process.is_alive()


def test_a_death_noticed_by_a_tell_restarts_the_process_there():
    hpo = _search()
    try:
        finished = []
        _run_trials(hpo, 6, finished)
        number, params = hpo.ask()
        dead = hpo._children[0]
        _kill(dead.process)
        # its owner is dead: the tell restarts it, and the trial is in the new one's history
        hpo.tell(number, 0.95)
        finished.append((_drawn(params), 0.95))
        expected = _expected_history(finished)
        assert hpo.history() == expected and expected[-1] == (_drawn(params), 0.95)
        (restart,) = hpo.restarts
        assert (restart.pid, restart.how) == (dead.process.pid, "was killed by signal 9")
        assert restart.history == len(expected)
        number, _ = hpo.ask()
        assert hpo._tokens[number][0] is hpo._children[0] is not dead
    finally:
        hpo.close()


def test_two_processes_one_killed_both_streams_go_on():
    hpo = _search(processes=2)
    first, second = hpo._children
    try:
        finished = []
        _run_trials(hpo, 12, finished)
        running = [hpo.ask(depth=8) for _ in range(4)]  # two from each stream
        assert [hpo._tokens[n][0] for n, _ in running] == [first, second, first, second]
        _kill(second.process)
        asked = _ask_until_restarted(hpo, 1)
        (restart,) = hpo.restarts
        assert (restart.stream, restart.pid, restart.how) == (
            1,
            second.process.pid,
            "was killed by signal 9",
        )
        assert restart.history == len(_expected_history(finished))
        assert hpo._children[0] is first and hpo._children[1] is not second
        more = [hpo.ask(depth=8) for _ in range(4)]  # both streams, in turn
        assert [hpo._tokens[n][0] for n, _ in more] == hpo._children * 2
        for number, params in running + asked + more:  # the dead child's trials among them
            hpo.tell(number, _accuracy(len(finished)))
            finished.append((_drawn(params), _accuracy(len(finished))))
        assert hpo.history() == _expected_history(finished) and not hpo._tokens
        _run_trials(hpo, 4, finished)
        assert len(hpo.restarts) == 1 and first.process.is_alive()
    finally:
        hpo.close()


def test_a_silent_search_process_is_killed_and_restarted(monkeypatch):
    hpo = _search()
    try:
        _run_trials(hpo, 2, [])
        silent = hpo._children[0]
        monkeypatch.setattr(
            hpo_process, "REPLY_TIMEOUT_S", 3.0
        )  # long enough for a new child to start
        monkeypatch.setattr(hpo_process, "POLL_S", 0.1)
        os.kill(silent.process.pid, signal.SIGSTOP)  # alive, and answers nothing
        _ask_until_restarted(hpo, 1)
        assert hpo.restarts[0].how == "sent nothing for 3 s and was killed"
        assert silent.process.exitcode == -signal.SIGKILL
    finally:
        hpo.close()


def test_restarts_are_bounded():
    hpo = _search(max_restarts=1)
    try:
        _run_trials(hpo, 2, [])
        _kill(hpo._children[0].process)
        _ask_until_restarted(hpo, 1)
        pid = hpo._children[0].process.pid
        _kill(hpo._children[0].process)  # the new one dies too
        message = (
            rf"^the hyperparameter search process \(pid {pid}\) was killed by signal 9; "
            r"not restarted: the run's 1 restarts of search processes are used up$"
        )
        with pytest.raises(RunFailure, match=message) as caught:
            for _ in range(PREFETCH_MIN + 2):
                hpo.ask()
        assert type(caught.value) is RunFailure and len(hpo.restarts) == 1
    finally:
        hpo.close()


def test_an_error_in_a_search_process_is_not_restarted():
    hpo = _search(processes=2)
    try:
        params = {
            "lr": 0.01,
            "batch_size": 512,
            "weight_decay": 1e-4,
            "momentum": 0.9,
            "dropout": 0.1,
        }
        hpo.restore(params, 0.5)  # 512 is not one of the batch sizes: each child fails on it
        with pytest.raises(
            RunFailure, match="^the hyperparameter search process failed: ValueError: .*512"
        ) as caught:
            hpo.ask()
        assert not isinstance(caught.value, ProcessDied) and hpo.restarts == []
    finally:
        hpo.close()
