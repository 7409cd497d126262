"""The optimizer's state through every growth step: each step's moment map is its gradient map.

For a step that keeps the function, a child entry that derives from the parent has, at the
morph point, the parent entry's gradient times the step's factor.  Each test builds a
parent's optimizer state from two known gradients (``known_states``: a first moment, a
second moment of their squares, a momentum buffer, a step count), maps it with the step's
moment map, and compares it with the same state built from the CHILD's gradients on the same
two batches, in float64: the first moments check the factors, the second moments that they
are squared.  Which child entries derive from the parent is found independently of the
moment map: the weight map applied to a parent of NaNs leaves NaN exactly there.  Every other
entry must have zero moments, and a tensor with no derived entry no state at all (a fresh
optimizer's).  CNN gradients are taken in eval mode (the mode whose function the steps
keep); a transformer has no mode.  The worst relative error is printed (run with ``-s``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from functools import reduce

import pytest
import torch
import torch.nn.functional as F

from aihpc.base.errors import MorphError
from aihpc.nas.moments import Growth, ParamStates, copy_states, map_param
from aihpc.tasks.image.layer import Layer
from aihpc.tasks.image.morphism import plan_deepen, plan_skip, random_plan
from aihpc.tasks.image.seeds import _resnet, seed_spec
from aihpc.tasks.image.spec import ArchSpec
from aihpc.tasks.image.widening import plan_widen
from aihpc.tasks.language.deepen import plan_add_block
from aihpc.tasks.language.morphism import random_lm_plan
from aihpc.tasks.language.net import LMNet
from aihpc.tasks.language.spec import LMSpec, seed_lm_spec
from aihpc.tasks.language.widen import (
    plan_add_heads,
    plan_grow_context,
    plan_widen_mlp,
    plan_widen_stream,
)
from arch_helpers import inputs_for, mixed_spec, model_of, perturbed, tiny_spec, tokens_for

TOLERANCE = 1e-10
STEP = 7.0  # the parent's step count, kept by every mapped tensor
WORST: dict[str, float] = {}
State = dict[str, torch.Tensor]
Spec = ArchSpec | LMSpec

pytestmark = pytest.mark.usefixtures("one_thread")


# ------------------------------------------------------------------------------- gradients
def cnn_batch(spec: ArchSpec, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return inputs_for(spec, 4, seed), torch.randint(0, spec.num_classes, (4,), generator=g)


def cnn_grads(spec: ArchSpec, state: State, batch: tuple[torch.Tensor, torch.Tensor]) -> State:
    model = model_of(spec, state)  # float64, eval mode
    x, y = batch
    F.cross_entropy(model(x), y).backward()
    return {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def lm_batch(spec: LMSpec, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    return tokens_for(spec, seed, batch=2, length=8), tokens_for(spec, seed + 100, 2, 8)


def lm_grads(spec: LMSpec, state: State, batch: tuple[torch.Tensor, torch.Tensor]) -> State:
    net = LMNet(spec, device="meta")
    net.load_state_dict({k: v.clone() for k, v in state.items()}, strict=True, assign=True)
    tokens, targets = batch
    F.cross_entropy(net(tokens).flatten(0, 1), targets.flatten()).backward()
    return {n: p.grad for n, p in net.named_parameters() if p.grad is not None}


GRADS: dict[type, tuple[Callable[..., object], Callable[..., State]]] = {
    ArchSpec: (cnn_batch, cnn_grads),
    LMSpec: (lm_batch, lm_grads),
}


# ------------------------------------------------------------------------------- the check
def known_states(first: Mapping[str, torch.Tensor], second: Mapping[str, torch.Tensor]):
    """An optimizer's state after two known gradients (Adam's moments, SGD's momentum)."""
    return {
        n: {
            "step": torch.tensor(STEP),
            "exp_avg": 0.4 * first[n] + 0.6 * second[n],
            "exp_avg_sq": 0.3 * first[n] ** 2 + 0.7 * second[n] ** 2,
            "momentum_buffer": first[n] - 0.5 * second[n],
        }
        for n in first
    }


def derived_entries(growth: Growth, parent: State, names: list[str]) -> State:
    """Per child parameter, the entries the weight map fills from the parent's (NaN in, NaN
    out: every weight map gathers, scales and concatenates)."""
    nan = {
        k: torch.full_like(v, float("nan")) if v.is_floating_point() else v
        for k, v in parent.items()
    }
    child = growth.weights(nan)
    return {n: torch.isnan(child[n]) for n in names}


def assert_moments_follow_gradients(
    spec: Spec, state: State, child: Spec, growth: Growth, label: str
) -> float:
    """The check of the module docstring for one step (or a composition) on one parent."""
    batch, grads = GRADS[type(spec)]
    batches = [batch(spec, seed) for seed in (1, 2)]
    child_state = growth.weights(state)
    parent = known_states(*(grads(spec, state, b) for b in batches))
    expected = known_states(*(grads(child, child_state, b) for b in batches))
    mapped = growth.moments(parent)
    derived = derived_entries(growth, state, list(expected))
    assert set(mapped) <= set(expected), sorted(set(mapped) - set(expected))
    worst = 0.0
    for key in ("exp_avg", "exp_avg_sq", "momentum_buffer"):
        scale = max(float(e[key].abs().max()) for e in expected.values())
        for name, mask in derived.items():
            if not mask.any():
                assert name not in mapped, f"{label}: new tensor {name} must start fresh"
                continue
            got, want = mapped[name][key], expected[name][key]
            assert got.shape == want.shape, f"{label}: {name}"
            assert not got[~mask].any(), f"{label}: new entries of {name} must have zero {key}"
            worst = max(worst, float((got[mask] - want[mask]).abs().max()) / scale)
            assert float(mapped[name]["step"]) == STEP
    assert worst < TOLERANCE, label
    WORST[label] = worst
    return worst


def composed(growths: list[Growth]) -> Growth:
    """The steps one after another, as a recipe replays them."""
    return Growth(
        lambda state: reduce(lambda s, g: g.weights(s), growths, state),
        lambda states: reduce(lambda s, g: g.moments(s), growths, states),
    )


# ------------------------------------------------------------------------------- CNN steps
def _tied_concat() -> ArchSpec:
    layers = (
        Layer("a", "conv", ("input",), out_channels=1, kernel_size=1),
        Layer("b", "conv", ("input",), out_channels=1, kernel_size=1),
        Layer("cat", "concat", ("a", "b")),
        Layer("c", "conv", ("input",), out_channels=2, kernel_size=1),
        Layer("s", "add", ("cat", "c")),
        Layer("g", "global_avgpool", ("s",)),
        Layer("fc", "dense", ("g",), out_features=3),
    )
    return ArchSpec((2, 4, 4), 3, layers, "fc")


CNN_STEPS: dict[str, Callable[[], tuple[ArchSpec, Callable[[ArchSpec], object]]]] = {
    "deepen r1 k1": lambda: (tiny_spec(), lambda s: plan_deepen(s, "r1", 1)),
    "deepen r1 k3": lambda: (tiny_spec(), lambda s: plan_deepen(s, "r1", 3)),
    "deepen p1": lambda: (tiny_spec(), lambda s: plan_deepen(s, "p1")),
    "deepen flat": lambda: (
        seed_spec((1, 8, 8), 4, width=3, blocks=1),
        lambda s: plan_deepen(s, "avgpool"),
    ),
    "widen c1 (add, pool, concat, dense)": lambda: (
        tiny_spec(),
        lambda s: plan_widen(s, "c1", 7, random.Random(0)),
    ),
    "widen c3 (concat branch)": lambda: (
        tiny_spec(),
        lambda s: plan_widen(s, "c3", 5, random.Random(7)),
    ),
    "widen residual stream": lambda: (
        seed_spec((1, 8, 8), 4, width=3, blocks=1),
        lambda s: plan_widen(s, "layer1_0_conv2", 9, random.Random(1)),
    ),
    "widen bottleneck": lambda: (
        _resnet((3, 8, 8), 5, [4, 8], [1, 1], bottleneck=True, imagenet_stem=False),
        lambda s: plan_widen(s, "layer2_0_conv3", 40, random.Random(3)),
    ),
    "widen tied concat": lambda: (
        _tied_concat(),
        lambda s: plan_widen(s, "a", 3, random.Random(2)),
    ),
    "skip r1 -> c3 strided": lambda: (tiny_spec(), lambda s: plan_skip(s, "r1", "c3")),
    "skip input -> fc": lambda: (tiny_spec(), lambda s: plan_skip(s, "input", "fc")),
    "skip c2 -> c2": lambda: (tiny_spec(), lambda s: plan_skip(s, "c2", "c2")),
}


@pytest.mark.parametrize("case", list(CNN_STEPS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_cnn_step_maps_moments_as_gradients(case: str, seed: int) -> None:
    spec, plan = CNN_STEPS[case]()
    state = model_of(spec, seed=seed).state_dict()
    child, growth, _ = plan(spec)
    assert_moments_follow_gradients(spec, state, child, growth, f"cnn {case} {seed}")


def test_a_conv_read_and_written_in_the_widened_space_gets_its_rows_factor() -> None:
    """A 1x1 skip conv from r1 into c2's add reads and writes the space widening c1 grows."""
    spec = tiny_spec()
    state = model_of(spec, seed=3).state_dict()
    skipped, skip, _ = plan_skip(spec, "r1", "c2")
    wider, widen, _ = plan_widen(skipped, "c1", 9, random.Random(4))
    assert wider.layer("skip1_conv").out_channels == 9
    # the skip's zero weights are new: give the skipped parent random ones, then widen it
    assert_moments_follow_gradients(
        skipped, model_of(skipped, seed=5).state_dict(), wider, widen, "cnn skip read+write"
    )
    assert_moments_follow_gradients(spec, state, wider, composed([skip, widen]), "cnn skip+widen")


@pytest.mark.parametrize("case", range(3))
def test_random_cnn_recipes_compose(case: str) -> None:
    """Four random steps as a recipe replays them: each on a parent re-drawn at random, and
    the whole recipe from the first parent."""
    spec = [
        seed_spec((1, 8, 8), 10, width=3, blocks=1),
        tiny_spec(),
        seed_spec((2, 12, 12), 5, "tiny", width=2, blocks=1),
    ][case]
    first, state = spec, model_of(spec, seed=case).state_dict()
    rng, growths = random.Random(case), []
    for step in range(4):
        child, growth, description = random_plan(spec, rng, max_params=150_000)
        fresh = model_of(spec, seed=100 * case + step).state_dict()
        assert_moments_follow_gradients(
            spec, fresh, child, growth, f"cnn chain {case}: {description}"
        )
        spec, growths = child, [*growths, growth]
    assert_moments_follow_gradients(first, state, spec, composed(growths), f"cnn recipe {case}")


# ------------------------------------------------------------------------------- LM steps
LM_STEPS: dict[str, Callable[[LMSpec], object]] = {
    "add_block 0": lambda s: plan_add_block(s, 0, random.Random(0)),
    "add_block 2": lambda s: plan_add_block(s, 2, random.Random(2)),
    "add_block 3": lambda s: plan_add_block(s, 3, random.Random(3)),
    "widen_mlp": lambda s: plan_widen_mlp(s, 1, 48, random.Random(1)),
    "add_heads": lambda s: plan_add_heads(s, 2, 3, random.Random(2)),
    "widen_stream 21": lambda s: plan_widen_stream(s, 21, random.Random(0)),
    "widen_stream 40": lambda s: plan_widen_stream(s, 40, random.Random(1)),
    "grow_context": lambda s: plan_grow_context(s, 32),
}


@pytest.mark.parametrize("case", list(LM_STEPS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_lm_step_maps_moments_as_gradients(case: str, seed: int) -> None:
    spec = mixed_spec()
    child, growth, _ = LM_STEPS[case](spec)
    assert_moments_follow_gradients(spec, perturbed(spec, seed), child, growth, f"lm {case} {seed}")


def test_widen_stream_divides_a_gains_moments_by_its_scale() -> None:
    """By hand: the gain's factor is sqrt(d'/d), its square d'/d."""
    spec = mixed_spec()
    _, growth, _ = plan_widen_stream(spec, 80, random.Random(0))
    gain = torch.ones(20, dtype=torch.float64)
    out = growth.moments({"final_norm.weight": {"exp_avg": gain, "exp_avg_sq": gain, "step": 3}})
    moments = out["final_norm.weight"]
    torch.testing.assert_close(moments["exp_avg"][:20], 2 * gain, atol=1e-15, rtol=0)
    torch.testing.assert_close(moments["exp_avg_sq"][:20], 4 * gain, atol=1e-15, rtol=0)
    assert not moments["exp_avg"][20:].any() and moments["step"] == 3


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_lm_recipes_compose(seed: int) -> None:
    spec = seed_lm_spec(37, 16, 16, 1, 1, 8, 16)
    first, state = spec, perturbed(spec, seed)
    rng, growths = random.Random(seed), []
    for step in range(5):
        child, growth, description = random_lm_plan(spec, rng, 500_000, max_context=64)
        fresh = perturbed(spec, 1000 * seed + step)
        assert_moments_follow_gradients(
            spec, fresh, child, growth, f"lm chain {seed}: {description}"
        )
        spec, growths = child, [*growths, growth]
    assert_moments_follow_gradients(first, state, spec, composed(growths), f"lm recipe {seed}")
    print(f"\nworst relative error over the steps so far: {max(WORST.values()):.2e}")


# ------------------------------------------------------------------------------- the states
def test_a_parameter_without_momentum_and_unknown_state() -> None:
    moment = torch.arange(3.0)
    assert map_param({"momentum_buffer": None}, lambda m, p: m) == {"momentum_buffer": None}
    states: ParamStates = {"w": {"exp_avg": moment, "step": 2}}
    copied = copy_states(states)
    assert torch.equal(copied["w"]["exp_avg"], moment)
    assert copied["w"]["exp_avg"].data_ptr() != moment.data_ptr()  # never aliases the parent
    with pytest.raises(MorphError, match="cannot carry the optimizer's 'sum' state"):
        copy_states({"w": {"sum": moment}})
