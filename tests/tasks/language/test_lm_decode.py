"""Key-value cached inference of language models against independent references.

Logits: prefill + decode steps (and the fixed-shape ``decode_at`` steps serving uses) against
``LMNet``'s full forward pass in float64, at every position, as max |difference| / max
|reference| (the worst is printed; run with ``-s``).
Weights are perturbed first (gains in [0.5, 1.5], matrices normal with 1/sqrt(fan-in)) so
that attention is far from uniform and a wrong position or key would show.  Tokens: greedy
``generate`` against a loop rerunning the full forward each step.  Counts: ``decode_ops``
against ``FlopCounterMode`` (matrix products alone, 2 per multiply-add) and against
``aihpc.counting.count_ops`` (every operation), both exact, both on the meta device, where
``scaled_dot_product_attention`` takes its math path (two ``bmm``); on the CPU it calls a
fused kernel to which ``FlopCounterMode`` has no formula (it counts it 0).
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from aihpc.counting import count_ops
from aihpc.tasks.language import morphism as lm_morphism
from aihpc.tasks.language.decode import (
    KVCache,
    StaticDecoder,
    decode,
    decode_at,
    decode_ops,
    generate,
    prefill,
)
from aihpc.tasks.language.net import LMNet
from aihpc.tasks.language.spec import LMSpec, seed_lm_spec
from arch_helpers import mixed_spec

TOLERANCE = 1e-10
WORST: dict[str, float] = {}


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(autouse=True, scope="module")
def worst_error() -> Iterator[None]:
    """Prints the worst relative logit error the module's tests saw."""
    yield
    print(f"\nworst relative logit error: {WORST}")


def seed_spec() -> LMSpec:
    return seed_lm_spec(
        vocab_size=23, context=10, width=16, layers=2, heads=2, head_dim=4, mlp_hidden=24
    )


def grown_spec() -> LMSpec:
    """Four random exact growth steps from the seed (blocks, heads, widths, norm_eps change)."""
    spec, state, rng = seed_spec(), LMNet(seed_spec()).state_dict(), random.Random(3)
    for _ in range(4):
        spec, state, _ = lm_morphism.random_lm_morph(spec, state, rng, max_params=60_000)
    return spec


SPECS = {"seed": seed_spec, "mixed": mixed_spec, "grown": grown_spec}


def model_of(spec: LMSpec, seed: int) -> LMNet:
    """A float64 net of ``spec`` with perturbed weights (module docstring)."""
    net = LMNet(spec, dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in net.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(0.5 + torch.rand(p.shape, generator=g, dtype=p.dtype))
            else:
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) / p.shape[1] ** 0.5)
    return net


def tokens_of(spec: LMSpec, batch: int, length: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(spec.vocab_size, (batch, length), generator=g)


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).abs().max() / want.abs().max())


@pytest.mark.parametrize("name", list(SPECS))
def test_prefill_and_decode_reproduce_the_full_forward(name: str) -> None:
    spec = SPECS[name]()
    net = model_of(spec, seed=len(name))
    seq = tokens_of(spec, 3, spec.context, seed=1)
    with torch.no_grad():
        full = net(seq)  # (B, context, vocab)
    worst = 0.0
    for prompt in (1, 2, spec.context // 2, spec.context):
        logits, cache = prefill(net, seq[:, :prompt], max_len=spec.context)
        assert logits.shape == (3, spec.vocab_size) and logits.dtype == torch.float64
        worst = max(worst, relative(logits, full[:, prompt - 1]))
        for pos in range(prompt, spec.context):
            worst = max(worst, relative(decode(net, seq[:, pos], cache), full[:, pos]))
        assert cache.length == spec.context
    WORST[name] = worst
    assert worst <= TOLERANCE


@pytest.mark.parametrize("name", list(SPECS))
def test_fixed_shape_steps_reproduce_the_full_forward(name: str) -> None:
    """decode_at writes at a position given as a tensor and attends to the whole cache, the
    later positions masked: the same logits as the full forward at every position."""
    spec = SPECS[name]()
    net = model_of(spec, seed=len(name))
    seq = tokens_of(spec, 3, spec.context, seed=1)
    with torch.no_grad():
        full = net(seq)
    worst = 0.0
    for prompt in (1, spec.context // 2):
        _, cache = prefill(net, seq[:, :prompt], max_len=spec.context)
        for pos in range(prompt, spec.context):
            logits = decode_at(net, seq[:, pos], torch.tensor([pos]), cache)
            worst = max(worst, relative(logits, full[:, pos]))
    WORST[f"{name} fixed shapes"] = worst
    assert worst <= TOLERANCE


def test_a_decoder_reused_and_a_padded_batch_give_each_prompt_its_own_answer() -> None:
    """A StaticDecoder's cache is reused from one batch to the next (the earlier batch's keys
    stay in the masked positions), and serving pads a batch with copies of a prompt: each
    prompt's answer is the one it gets alone."""
    spec = mixed_spec()
    net = model_of(spec, seed=5)
    prompts = tokens_of(spec, 4, 3, seed=9)
    alone = [generate(net, prompts[i : i + 1], 6)[0].tolist() for i in range(4)]
    decoder = StaticDecoder(net, 4, 3, 6)
    for rows in ([0, 1, 2, 3], [2, 2, 2, 2], [3, 0, 3, 3]):  # the last two padded with copies
        out = decoder.answer(prompts[rows])
        assert out.tolist() == [alone[r] for r in rows]
    with pytest.raises(ValueError, match=r"prompt must be \(4, 3\), got \(2, 3\)"):
        decoder.answer(prompts[:2])


def test_cache_shapes_and_dtype() -> None:
    spec = mixed_spec()
    _, cache = prefill(model_of(spec, 0), tokens_of(spec, 2, 3, 0), max_len=7)
    assert cache.length == 3 and cache.max_len == 7
    assert [k.shape for k in cache.keys] == [(2, b.heads, 7, 6) for b in spec.blocks]
    assert all(v.dtype == torch.float64 for v in cache.values)


def test_generate_equals_a_naive_greedy_loop() -> None:
    spec = mixed_spec()
    net = model_of(spec, seed=7)
    prompt, new = tokens_of(spec, 4, 3, seed=2), spec.context - 3
    seq = prompt
    with torch.no_grad():
        for _ in range(new):
            seq = torch.cat((seq, net(seq)[:, -1].argmax(-1, keepdim=True)), dim=1)
    seen: list[tuple[int, list[int]]] = []
    out = generate(net, prompt, new, on_token=lambda i, t: seen.append((i, t.tolist())))
    assert out.tolist() == seq[:, 3:].tolist()
    assert len(set(out.flatten().tolist())) > 3  # not a degenerate repeat of one token
    assert seen == [(i, out[:, i].tolist()) for i in range(new)]


def test_beyond_the_context_is_a_value_error() -> None:
    spec = mixed_spec()  # context 12
    net = model_of(spec, seed=0)
    with pytest.raises(ValueError, match=r"5 tokens plus 8 new tokens is 13 .* context 12"):
        generate(net, tokens_of(spec, 1, 5, 0), 8)
    with pytest.raises(ValueError, match=r"5 tokens plus 8 new tokens is 13 .* context 12"):
        decode_ops(spec, 5, 8)
    with pytest.raises(ValueError, match="context 12, got 13"):
        prefill(net, tokens_of(spec, 1, 5, 0), max_len=13)
    _, cache = prefill(net, tokens_of(spec, 1, 5, 0), max_len=6)
    decode(net, torch.tensor([1]), cache)
    with pytest.raises(ValueError, match="cache is full"):
        decode(net, torch.tensor([1]), cache)
    assert generate(net, tokens_of(spec, 1, 5, 0), 7).shape == (1, 7)  # 12 positions fit


def meta_runs(spec: LMSpec, batch: int, prompt: int, new: int) -> tuple[int, int]:
    """FlopCounterMode's totals of the prefill and of the decode steps of ``generate``."""
    net = LMNet(spec, device="meta")
    with FlopCounterMode(display=False) as counter:
        _, cache = prefill(
            net,
            torch.zeros(batch, prompt, dtype=torch.long, device="meta"),
            max_len=prompt + new - 1,
        )
    first = counter.get_total_flops()
    with FlopCounterMode(display=False) as counter:
        for _ in range(new - 1):
            decode(net, torch.zeros(batch, dtype=torch.long, device="meta"), cache)
    return first, counter.get_total_flops()


@pytest.mark.parametrize(("batch", "prompt", "new"), [(1, 1, 2), (2, 5, 4), (3, 4, 8)])
def test_decode_ops_matmuls_equal_flop_counter_mode(batch: int, prompt: int, new: int) -> None:
    spec = mixed_spec()
    assert decode_ops(spec, prompt, new, batch, matmuls_only=True) == meta_runs(
        spec, batch, prompt, new
    )


class _Prefill(torch.nn.Module):
    def __init__(self, net: LMNet, max_len: int) -> None:
        super().__init__()
        self.net, self.max_len = net, max_len

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return prefill(self.net, tokens, self.max_len)[0]


class _Decode(torch.nn.Module):
    """One decode step into a cache filled up to ``position`` (built here, outside the count)."""

    def __init__(self, net: LMNet, batch: int, max_len: int, position: int) -> None:
        super().__init__()
        self.net = net
        self.cache = KVCache(net.spec, batch, max_len, device="meta")
        self.cache.length = position

    def forward(self, token: torch.Tensor) -> torch.Tensor:
        return decode(self.net, token, self.cache)


@pytest.mark.parametrize(("batch", "prompt", "new"), [(1, 1, 3), (2, 5, 4)])
def test_decode_ops_equal_count_ops(batch: int, prompt: int, new: int) -> None:
    spec = mixed_spec()
    net, max_len = LMNet(spec, device="meta"), prompt + new - 1
    tokens = torch.zeros(batch, prompt, dtype=torch.long)
    counted = count_ops(_Prefill(net, max_len), (tokens,), train=False)
    assert not counted.uncounted
    steps = 0
    for position in range(prompt, max_len):
        step = count_ops(_Decode(net, batch, max_len, position), (tokens[:, 0],), train=False)
        assert not step.uncounted
        steps += step.forward
    assert decode_ops(spec, prompt, new, batch) == (counted.forward, steps)
