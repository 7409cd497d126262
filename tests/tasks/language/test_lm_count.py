"""count_lm_per_sample equals the language task's traced count (count_per_sample) bit for bit:
on the seeds of both devices at their batch sizes, at contexts and batches from 1 up, on random
specs (odd and tiny sizes, blocks that differ), and on chains of random function-preserving
growth steps (aihpc.tasks.language.morphism: 12 in the quick tier, 20 and 4 in the slow one), the
context grown among them.  Also: the task's recount uses it, and a bad batch raises what the
reference raises."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from aihpc.base.errors import ConfigError, MorphError
from aihpc.tasks.language.count import count_lm_per_sample
from aihpc.tasks.language.morphism import random_lm_plan
from aihpc.tasks.language.spec import Block, LMSpec, seed_lm_spec
from aihpc.tasks.language.task import DEFAULT_BATCH_SIZES, DEFAULT_CONTEXT, SEEDS, LanguageTask

LM = LanguageTask()
traced_count = LM.count_per_sample  # the whole network traced under FlopCounterMode
TINY = LMSpec(vocab_size=1, context=1, width=1, head_dim=2, blocks=(Block(1, 1),))


def assert_same(spec: LMSpec, batch: int) -> None:
    expected = traced_count(spec, batch, 0.0)
    got = count_lm_per_sample(spec, batch, 0.0)
    assert got == expected, (spec.to_dict(), batch, got, expected)
    assert all(type(v) is float for v in got)


def random_spec(rng: random.Random) -> LMSpec:
    blocks = tuple(Block(rng.randint(1, 5), rng.randint(1, 96)) for _ in range(rng.randint(1, 4)))
    return LMSpec(
        vocab_size=rng.randint(1, 300),
        context=rng.randint(1, 40),
        width=rng.randint(1, 48),
        head_dim=2 * rng.randint(1, 8),
        blocks=blocks,
        norm_eps=rng.uniform(1e-8, 1e-3),
    )


def chain(root: LMSpec, steps: int, max_params: int, max_context: int, seed: int) -> list[LMSpec]:
    """``steps`` specs, each a random_lm_plan child of the one before (back to ``root`` where no
    step fits within ``max_params``)."""
    rng = random.Random(seed)
    specs, spec = [], root
    while len(specs) < steps:
        try:
            spec = random_lm_plan(spec, rng, max_params, max_context)[0]
        except MorphError:
            spec = root
            continue
        specs.append(spec)
    return specs


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_seeds_match_at_their_batch_sizes(device) -> None:
    # a vocabulary of bytes and the documents' begin-of-sequence token
    spec = seed_lm_spec(vocab_size=257, context=DEFAULT_CONTEXT[device], **SEEDS[device])
    for batch in (1, DEFAULT_BATCH_SIZES[device][0]):
        assert_same(spec, batch)


def test_every_context_and_batch_from_one_up_matches() -> None:
    """The causal mask and the rotary angles are counted once per forward, whatever the batch,
    so a window's share of them depends on the batch: contexts and batches both vary."""
    seed = seed_lm_spec(vocab_size=65, context=8, **SEEDS["cpu"])
    for context in (1, 2, 3, 7, 16, 33):
        spec = replace(seed, context=context)
        for batch in (1, 2, 3, 8):
            assert_same(spec, batch)
    for batch in (1, 2, 5):
        assert_same(TINY, batch)


def test_random_specs_match() -> None:
    rng = random.Random(2024)
    for _ in range(20):
        assert_same(random_spec(rng), rng.choice((1, 2, 3, 4, 7, 16)))


def test_a_chain_of_growth_steps_matches_at_every_step() -> None:
    root = seed_lm_spec(
        vocab_size=65, context=16, width=16, layers=1, heads=2, head_dim=8, mlp_hidden=32
    )
    specs = chain(root, 12, max_params=400_000, max_context=64, seed=0)
    rng = random.Random(3)
    for spec in specs:
        assert_same(spec, rng.choice((1, 3, 8)))
    assert len({s.content_hash() for s in specs}) == len(specs)
    assert max(s.context for s in specs) > root.context  # the context was grown too
    assert max(s.layers for s in specs) > root.layers and max(s.width for s in specs) > root.width
    assert max(b.heads for s in specs for b in s.blocks) > 2  # heads added
    assert max(b.mlp_hidden for s in specs for b in s.blocks) > 32  # an MLP widened


@pytest.mark.slow
def test_longer_chains_from_both_seeds_match() -> None:
    """A chain of 20 steps from the CPU seed within its max_params (the context grown up to 256,
    blocks added, the width, heads and MLPs grown, then back to the seed where no step fits) and
    4 from the CUDA seed (16 blocks of width 1024, context 1024: an MLP widened, heads and
    blocks added), at the devices' batch sizes; the asserts below hold the chains to that."""
    rng = random.Random(11)
    cpu = seed_lm_spec(vocab_size=257, context=32, **SEEDS["cpu"])
    specs = chain(cpu, 20, max_params=2_000_000, max_context=256, seed=0)
    for spec in specs:
        assert_same(spec, rng.choice(DEFAULT_BATCH_SIZES["cpu"]))
    top = max(range(len(specs)), key=lambda i: specs[i].context)
    assert specs[top].context == 256 and specs[-1].context < 256  # grown, then back to the seed
    assert max(s.layers for s in specs) > cpu.layers and max(s.width for s in specs) > cpu.width
    assert max(b.heads for s in specs for b in s.blocks) > SEEDS["cpu"]["heads"]
    assert max(b.mlp_hidden for s in specs for b in s.blocks) > SEEDS["cpu"]["mlp_hidden"]
    cuda = seed_lm_spec(vocab_size=256, context=1024, **SEEDS["cuda"])
    specs = chain(cuda, 4, max_params=700_000_000, max_context=1024, seed=5)
    for spec in specs:
        assert_same(spec, rng.choice(DEFAULT_BATCH_SIZES["cuda"]))
    assert max(s.layers for s in specs) > cuda.layers
    assert max(b.heads for s in specs for b in s.blocks) > SEEDS["cuda"]["heads"]
    assert max(b.mlp_hidden for s in specs for b in s.blocks) > SEEDS["cuda"]["mlp_hidden"]


def test_the_tasks_recount_is_the_closed_form(monkeypatch) -> None:
    spec = chain(seed_lm_spec(vocab_size=65, context=32, **SEEDS["cpu"]), 3, 2_000_000, 32, 1)[-1]
    expected = traced_count(spec, 16, 0.0)

    def traced(*args: object) -> None:
        raise AssertionError("the recount traced the network")

    monkeypatch.setattr(LanguageTask, "count_per_sample", traced)
    assert LanguageTask().recount_per_sample(spec, 16, 0.0) == expected


def test_a_batch_below_one_is_a_config_error() -> None:
    spec = seed_lm_spec(vocab_size=65, context=8, **SEEDS["cpu"])
    for count in (traced_count, count_lm_per_sample):
        with pytest.raises(ConfigError, match="batch must be >= 1"):
            count(spec, 0, 0.0)
    for bad in (-1, True, 2.0):
        with pytest.raises(ConfigError, match="batch must be >= 1"):
            count_lm_per_sample(spec, bad, 0.0)  # type: ignore[arg-type]
