import random

import pytest

from aihpc.base.errors import ConfigError
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
