"""Exact growth of language models: every operator, random chains of plans, training a child.

Exactness is measured as max |child logits - parent logits| / max |parent logits| in float64
on random tokens, with every parent weight perturbed first (gains in [0.5, 1.5], matrices
normal with 1/sqrt(fan-in)), so that zero projections left by earlier steps cannot hide a bug.
The worst error over the chains is printed (run with ``-s``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping

import pytest
import torch
import torch.nn.functional as F

from aihpc.base.errors import MorphError
from aihpc.tasks.language.deepen import add_block
from aihpc.tasks.language.morphism import WIDTH_MULTIPLE, random_lm_morph, random_lm_plan
from aihpc.tasks.language.net import LMNet
from aihpc.tasks.language.spec import Block, LMSpec, seed_lm_spec
from aihpc.tasks.language.widen import add_heads, grow_context, widen_mlp, widen_stream
from arch_helpers import mixed_spec, perturbed, tokens_for

TOLERANCE = 1e-10
CHAIN_STEPS = 50
# Context growth adds no parameter, so it is what a chain does once max_params is near: a
# context of billions only makes sure that 50 steps fit (the tests feed 8 tokens).
MAX_CONTEXT = 1 << 30
WORST: dict[str, float] = {}
State = dict[str, torch.Tensor]


pytestmark = pytest.mark.usefixtures("one_thread")


def logits(spec: LMSpec, state: Mapping[str, torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
    net = LMNet(spec, device="meta")  # no initialisation: the state replaces every tensor
    net.load_state_dict(state, strict=True, assign=True)
    with torch.no_grad():
        return net(tokens)


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / a.abs().max())


def assert_exact(
    parent: LMSpec, state: State, child: LMSpec, child_state: State, seed: int = 0
) -> float:
    tokens = tokens_for(parent, seed)
    error = relative_error(logits(parent, state, tokens), logits(child, child_state, tokens))
    assert error < TOLERANCE
    return error


def assert_fresh(parent: State, child: State) -> None:
    """No child tensor shares memory with a parent tensor; dtype and device kept."""
    ptrs = {v.untyped_storage().data_ptr() for v in parent.values()}
    kind = next(iter(parent.values()))
    for key, value in child.items():
        assert value.untyped_storage().data_ptr() not in ptrs, key
        assert (value.dtype, value.device) == (kind.dtype, kind.device), key


# ------------------------------------------------------------------------------ operators
@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_add_block_is_exact(index: int) -> None:
    spec = mixed_spec()
    state = perturbed(spec, index)
    child, child_state = add_block(spec, state, index, random.Random(index))
    assert child.blocks[index] == spec.blocks[max(index - 1, 0)]
    assert child.blocks[:index] + child.blocks[index + 1 :] == spec.blocks
    assert_exact(spec, state, child, child_state)
    assert_fresh(state, child_state)
    new = f"blocks.{index}."
    assert not child_state[new + "attn.out.weight"].any()
    assert not child_state[new + "mlp.down.weight"].any()
    assert child_state[new + "attn.q.weight"].std() > 0.01  # random, so the zeros learn
    for j in range(index, spec.layers):  # later blocks moved up by one
        torch.testing.assert_close(
            child_state[f"blocks.{j + 1}.mlp.up.weight"], state[f"blocks.{j}.mlp.up.weight"]
        )


def test_add_block_with_its_own_shape() -> None:
    spec = mixed_spec()
    state = perturbed(spec, 3)
    child, child_state = add_block(spec, state, 1, random.Random(0), heads=5, mlp_hidden=8)
    assert child.blocks[1] == Block(5, 8)
    assert_exact(spec, state, child, child_state)


@pytest.mark.parametrize(("block", "new_hidden"), [(0, 41), (1, 64), (2, 100)])
def test_widen_mlp_is_exact(block: int, new_hidden: int) -> None:
    spec = mixed_spec()
    state = perturbed(spec, block)
    child, child_state = widen_mlp(spec, state, block, new_hidden, random.Random(block))
    assert child.blocks[block].mlp_hidden == new_hidden
    assert_exact(spec, state, child, child_state)
    assert_fresh(state, child_state)
    old = spec.blocks[block].mlp_hidden
    assert not child_state[f"blocks.{block}.mlp.down.weight"][:, old:].any()


@pytest.mark.parametrize(("block", "count"), [(0, 1), (1, 3), (2, 8)])
def test_add_heads_is_exact(block: int, count: int) -> None:
    spec = mixed_spec()
    state = perturbed(spec, block + 10)
    child, child_state = add_heads(spec, state, block, count, random.Random(block))
    assert child.blocks[block].heads == spec.blocks[block].heads + count
    assert child.head_dim == spec.head_dim
    assert_exact(spec, state, child, child_state)
    assert_fresh(state, child_state)
    inner = spec.blocks[block].heads * spec.head_dim
    assert not child_state[f"blocks.{block}.attn.out.weight"][:, inner:].any()


@pytest.mark.parametrize("new_width", [21, 32, 40, 77])
def test_widen_stream_is_exact(new_width: int) -> None:
    spec = mixed_spec()
    state = perturbed(spec, new_width)
    child, child_state = widen_stream(spec, state, new_width, random.Random(new_width))
    assert child.width == new_width
    d = spec.width
    assert child.norm_eps == pytest.approx(spec.norm_eps * d / new_width, rel=1e-15)
    gain = math.sqrt(d / new_width)
    for key in ("blocks.1.attn_norm.weight", "final_norm.weight"):
        torch.testing.assert_close(child_state[key][:d], state[key] * gain)
        torch.testing.assert_close(
            child_state[key][d:], torch.full((new_width - d,), gain).double()
        )
    assert not child_state["embed.weight"][:, d:].any()
    assert not child_state["blocks.0.mlp.down.weight"][d:].any()
    assert child_state["unembed.weight"][:, d:].std() > 0.01
    assert_exact(spec, state, child, child_state)
    assert_fresh(state, child_state)


def test_widen_stream_ignores_the_key_order() -> None:
    spec = mixed_spec()
    state = perturbed(spec, 5)
    reordered = dict(reversed(list(state.items())))
    _, a = widen_stream(spec, state, 32, random.Random(1))
    _, b = widen_stream(spec, reordered, 32, random.Random(1))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_grow_context_is_exact_and_admits_longer_sequences() -> None:
    spec = mixed_spec()
    state = perturbed(spec, 7)
    child, child_state = grow_context(spec, state, 40)
    assert child.context == 40
    assert_exact(spec, state, child, child_state)
    assert_fresh(state, child_state)
    long = tokens_for(child, 1)
    prefix = logits(child, child_state, long)[:, : spec.context]
    assert relative_error(logits(spec, state, long[:, : spec.context]), prefix) < TOLERANCE


def test_float32_parent_gives_float32_child() -> None:
    spec = mixed_spec()
    state = {k: v.float() for k, v in perturbed(spec, 2).items()}
    for _, child_state in (
        add_block(spec, state, 1, random.Random(0)),
        widen_stream(spec, state, 32, random.Random(0)),
        add_heads(spec, state, 0, 2, random.Random(0)),
    ):
        assert_fresh(state, child_state)


@pytest.mark.parametrize(
    ("op", "args", "message"),
    [
        (add_block, (4, random.Random()), "index must be in 0..3, got 4"),
        (widen_mlp, (3, 80, random.Random()), "block must be in 0..2, got 3"),
        (widen_mlp, (0, 40, random.Random()), "new_hidden must be an integer > 40, got 40"),
        (add_heads, (0, 0, random.Random()), "count must be an integer >= 1, got 0"),
        (add_heads, (-1, 2, random.Random()), "block must be in 0..2, got -1"),
        (widen_stream, (16, random.Random()), "new_width must be an integer > 20, got 16"),
        (grow_context, (12,), "new_context must be an integer > 12, got 12"),
        (add_block, (0, random.Random(), 0), "block heads must be an integer >= 1, got 0"),
    ],
)
def test_invalid_requests(
    op: Callable[..., object], args: tuple[object, ...], message: str
) -> None:
    spec = mixed_spec()
    with pytest.raises(MorphError) as info:
        op(spec, perturbed(spec, 0), *args)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_state_must_match_the_spec() -> None:
    spec = mixed_spec()
    state = perturbed(spec, 0)
    del state["final_norm.weight"]
    with pytest.raises(MorphError, match=r"missing keys \['final_norm.weight'\]"):
        widen_stream(spec, state, 32, random.Random())
    state = perturbed(spec, 0)
    state["embed.weight"] = state["embed.weight"][:, :4]
    with pytest.raises(MorphError, match=r"'embed.weight' is \(29, 4\), the spec needs \(29, 20\)"):
        add_block(spec, state, 0, random.Random())


# --------------------------------------------------------------------------- random plans
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_random_chain_is_exact_on_perturbed_parents(seed: int) -> None:
    """50 random steps; before each the parent's weights are all re-drawn, and the planned
    child (rng state replayed) equals the applied one."""
    spec = seed_lm_spec(37, 16, 16, 1, 1, 8, 16)
    rng, worst, grown = random.Random(seed), 0.0, 0
    state = perturbed(spec, seed)
    for step in range(CHAIN_STEPS):
        state = perturbed(spec, 1000 * seed + step, state)
        replay = random.Random()
        replay.setstate(rng.getstate())
        child, child_state, description = random_lm_morph(
            spec, state, rng, max_params=500_000, max_context=MAX_CONTEXT
        )
        planned, _, planned_description = random_lm_plan(spec, replay, 500_000, MAX_CONTEXT)
        assert planned.content_hash() == child.content_hash()
        assert planned_description == description
        tokens = tokens_for(spec, step, batch=1, length=8)
        error = relative_error(logits(spec, state, tokens), logits(child, child_state, tokens))
        assert error < TOLERANCE, f"step {step}: {description}"
        worst, grown = max(worst, error), grown + (child.num_params() > spec.num_params())
        spec, state = child, child_state
    assert grown >= 25  # most steps grow the network, not only its context
    WORST[f"perturbed {seed}"] = worst
    print(f"\nchain {seed}: {CHAIN_STEPS} steps, {spec.num_params()} parameters, worst {worst:.2e}")


def test_random_chain_keeps_the_seed_function() -> None:
    """50 steps without re-drawing weights: every child computes the first parent's logits."""
    spec = seed_lm_spec(37, 16, 16, 1, 1, 8, 16)
    state = perturbed(spec, 99)
    tokens = tokens_for(spec, 99, batch=1, length=8)
    reference = logits(spec, state, tokens)
    rng, worst = random.Random(99), 0.0
    for _ in range(CHAIN_STEPS):
        spec, state, description = random_lm_morph(
            spec, state, rng, max_params=500_000, max_context=MAX_CONTEXT
        )
        worst = max(worst, relative_error(reference, logits(spec, state, tokens)))
        assert worst < TOLERANCE, description
    WORST["unperturbed"] = worst
    print(f"\nunperturbed chain: worst {worst:.2e}; all chains {max(WORST.values()):.2e}")


def test_plans_are_deterministic_in_the_rng() -> None:
    spec = mixed_spec()
    state = perturbed(spec, 4)
    for seed in range(12):
        a = random_lm_plan(spec, random.Random(seed), max_context=64)
        b = random_lm_plan(spec, random.Random(seed), max_context=64)
        assert a[0] == b[0] and a[2] == b[2]
        sa, sb = a[1].weights(state), b[1].weights(state)
        assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_random_plan_kinds_widths_and_descriptions() -> None:
    spec = mixed_spec()
    seen: set[str] = set()
    for seed in range(200):
        child, _, description = random_lm_plan(spec, random.Random(seed))
        assert child.context == spec.context  # no context growth unless asked
        words = description.split()
        seen.add(" ".join(words[:2]) if words[0] != "add" or words[1] == "block" else "add heads")
        if description.startswith("widen"):
            assert int(words[-1]) % WIDTH_MULTIPLE == 0
    assert seen == {"add block", "widen mlp", "add heads", "widen stream"}
    grown = {random_lm_plan(spec, random.Random(s), max_context=20)[2] for s in range(100)}
    assert "grow context to 20" in grown


def test_max_params() -> None:
    spec = mixed_spec()
    n = spec.num_params()
    with pytest.raises(MorphError, match=f"no growth step keeps the model within max_params={n}"):
        random_lm_plan(spec, random.Random(0), max_params=n)
    with pytest.raises(MorphError, match=f"the parent has {n} parameters, more than"):
        random_lm_plan(spec, random.Random(0), max_params=n - 1)
    with pytest.raises(MorphError, match="max_params must be an integer >= 1, got 0"):
        random_lm_plan(spec, random.Random(0), max_params=0)
    with pytest.raises(MorphError, match="max_context must be an integer >= 1, got 1.5"):
        random_lm_plan(spec, random.Random(0), max_context=1.5)  # type: ignore[arg-type]
    # only context growth adds no parameter
    child, _, description = random_lm_plan(spec, random.Random(0), n, max_context=100)
    assert description.startswith("grow context") and child.num_params() == n


# ----------------------------------------------------------------------------- training
def test_a_grown_child_trains() -> None:
    """One AdamW step lowers the loss of a child made by every operator, and its
    zero-initialised projections have non-zero gradients and move."""
    spec = seed_lm_spec(31, 16, 16, 2, 2, 8, 32)
    state = perturbed(spec, 0)
    rng = random.Random(0)
    spec, state = widen_stream(spec, state, 32, rng)  # new rows 16: of out/down, cols of embed
    spec, state = add_block(spec, state, 1, rng)  # block 1: out, down zero
    spec, state = widen_mlp(spec, state, 0, 48, rng)  # block 0: down[:, 32:] zero
    spec, state = add_heads(spec, state, 2, 1, rng)  # block 2: out[:, 16:] zero
    spec, state = grow_context(spec, state, 32)
    tokens = tokens_for(spec, 3, batch=4)
    zeros = {  # where each zero-initialised projection is zero (embedding: the rows used)
        "embed.weight": (tokens[:, :-1].unique(), slice(16, None)),
        "blocks.0.attn.out.weight": (slice(16, None), slice(None)),
        "blocks.1.attn.out.weight": (slice(None), slice(None)),
        "blocks.1.mlp.down.weight": (slice(None), slice(None)),
        "blocks.0.mlp.down.weight": (slice(None), slice(32, None)),
        "blocks.2.attn.out.weight": (slice(None), slice(16, None)),
    }
    for key, where in zeros.items():
        assert not state[key][where].any(), key
    net = LMNet(spec, dtype=torch.float64)
    net.load_state_dict(state, strict=True)

    def loss() -> torch.Tensor:
        out = net(tokens[:, :-1])
        return F.cross_entropy(out.reshape(-1, spec.vocab_size), tokens[:, 1:].reshape(-1))

    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
    before = loss()
    before.backward()
    params = dict(net.named_parameters())
    for key, where in zeros.items():
        grad = params[key].grad
        assert grad is not None and grad[where].abs().max() > 0, key
    optimizer.step()
    with torch.no_grad():
        assert loss() < before
        for key, where in zeros.items():
            assert params[key][where].abs().min() > 0, key
