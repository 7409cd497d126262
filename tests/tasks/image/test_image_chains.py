"""Function preservation over random chains of morphisms.

Each chain starts from a seed (or hand-written) spec with randomised weights
and BN statistics and applies 12 ``random_morph`` steps.  Every child is
compared, in float64 eval mode, with its parent and with the original
(atol 1e-5, rtol 0).  At every step the same morph (same rng state) is also
applied to a *re-randomised* copy of the parent, so that identity-like
parameters left by earlier morphs cannot hide a bug.  The largest absolute
difference seen is printed (run with ``-s``) and recorded in ``MAX_DIFF``.
"""

from __future__ import annotations

import random

import pytest
import torch

from aihpc.tasks.image.morphism import random_morph
from aihpc.tasks.image.seeds import seed_spec
from aihpc.tasks.image.spec import ArchSpec
from arch_helpers import inputs_for, model_of, randomize, run, tiny_spec

STEPS = 12
MAX_DIFF: dict[str, float] = {}


def _start(case: int) -> ArchSpec:
    rng = random.Random(1000 + case)
    if case % 4 == 0:
        return seed_spec((1, 8, 8), 10, width=rng.choice([3, 4, 6]), blocks=rng.choice([1, 2]))
    if case % 4 == 1:
        return seed_spec((3, 32, 32), 10, "cifar", width=rng.choice([2, 3]), blocks=1)
    if case % 4 == 2:
        return seed_spec((2, 12, 12), 5, "tiny", width=rng.choice([2, 4]), blocks=1)
    return tiny_spec()


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    return float((a - b).abs().max())


@pytest.mark.parametrize("case", range(8))
def test_random_chain_preserves_function(case: int) -> None:
    spec = _start(case)
    original = model_of(spec, seed=case)
    state = original.state_dict()
    x = inputs_for(spec, 2, seed=case)
    y_original = run(original, x)
    assert y_original.abs().max() > 1e-3  # a non-degenerate function
    rng = random.Random(case)
    worst = 0.0
    parent, parent_y = original, y_original
    for step in range(STEPS):
        rng_state = rng.getstate()
        child, cstate, description = random_morph(spec, state, rng, max_params=150_000)
        model = model_of(child, cstate)
        y = run(model, x)
        worst = max(worst, _diff(y, parent_y), _diff(y, y_original))
        assert ArchSpec.from_json(child.to_json()) == child, description
        assert ArchSpec.from_json(child.to_json()).to_json() == child.to_json()

        # Same morph on a re-randomised copy of the parent.
        fresh = parent
        randomize(fresh, seed=100 * case + step)  # the parent model is not needed any more
        twin_rng = random.Random()
        twin_rng.setstate(rng_state)
        twin, tstate, twin_description = random_morph(
            spec, fresh.state_dict(), twin_rng, max_params=150_000
        )
        assert twin == child and twin_description == description
        worst = max(worst, _diff(run(model_of(twin, tstate), x), run(fresh, x)))
        spec, state, parent, parent_y = child, cstate, model, y
    MAX_DIFF[f"case{case}"] = worst
    print(
        f"\nchain case {case}: {STEPS} morphs, {spec.num_params()} params, "
        f"max |child - parent/original| = {worst:.3e}; overall so far "
        f"{max(MAX_DIFF.values()):.3e}"
    )
