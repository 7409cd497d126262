import random

import pytest

from aihpc.errors import ConfigError
from aihpc.nas.hpo import HyperparameterSearch
from aihpc.nas.search import AgingEvolution, Candidate, RandomParent, make_strategy


def test_aging_evolution_picks_best_of_tournament_among_the_young():
    finished = [Candidate(i, acc) for i, acc in enumerate([0.99, 0.1, 0.2, 0.3, 0.4])]
    strategy = AgingEvolution(population=4, tournament=4)
    # trial 0 (0.99) has aged out of the population of 4; the whole population is the tournament
    assert strategy.choose(finished, random.Random(0)).trial_id == 4


def test_tournament_of_one_is_uniform_over_population():
    finished = [Candidate(i, i / 10) for i in range(10)]
    strategy = AgingEvolution(population=5, tournament=1)
    picks = {strategy.choose(finished, random.Random(s)).trial_id for s in range(200)}
    assert picks == {5, 6, 7, 8, 9}


def test_empty_history_gives_none():
    assert AgingEvolution(4, 2).choose([], random.Random(0)) is None
    assert RandomParent().choose([], random.Random(0)) is None


def test_strategy_factory_and_errors():
    assert isinstance(make_strategy("random", 4, 2), RandomParent)
    with pytest.raises(ConfigError, match="tournament must be in"):
        make_strategy("evolution", 4, 9)
    with pytest.raises(ConfigError, match="got 'nope'"):
        make_strategy("nope", 4, 2)


def test_hpo_ask_tell_and_restore():
    hpo = HyperparameterSearch(seed=0, batch_sizes=[32, 64], optimizer="sgd", schedule="cosine")
    n, params = hpo.ask()
    assert set(params) == {"lr", "batch_size", "weight_decay", "momentum", "dropout", "optimizer", "schedule"}
    assert 1e-3 <= params["lr"] <= 0.4 and params["batch_size"] in (32, 64)
    hpo.tell(n, 0.8)
    m, _ = hpo.ask()
    hpo.tell(m, None)
    # a new study rebuilt from the history holds the same two trials
    again = HyperparameterSearch(seed=0, batch_sizes=[32, 64], optimizer="sgd", schedule="cosine")
    again.restore(params, 0.8)
    again.restore(params, None)
    states = [t.state.name for t in again.study.trials]
    assert states == ["COMPLETE", "FAIL"]
    k = again.resume(params)
    assert again.study.trials[k].params["lr"] == params["lr"]


def test_hpo_is_deterministic_by_seed():
    a = HyperparameterSearch(seed=3, batch_sizes=[32], optimizer="adamw", schedule="step")
    b = HyperparameterSearch(seed=3, batch_sizes=[32], optimizer="adamw", schedule="step")
    assert a.ask()[1] == b.ask()[1]
