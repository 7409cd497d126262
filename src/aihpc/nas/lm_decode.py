"""Autoregressive inference of an :class:`~aihpc.nas.lm_net.LMNet` with a key-value cache.

:func:`prefill` runs a prompt ``(B, P)`` through the net once, with causal
attention as :class:`~aihpc.nas.lm_net.LMNet` has it, and keeps every block's
keys and values in a :class:`KVCache`; :func:`decode` then runs one new
position per sequence, its single query attending (no mask needed) to the
cached keys and itself, and appends its key and value.  Both return the
logits of the last position only, ``(B, vocab)``: the final norm and the
unembedding run on that position alone.  :func:`generate` is greedy decoding
on them.  Everything runs under ``torch.inference_mode`` with the net in eval
mode, in the net's dtype and on its device.

Positions are rotary, as in the net: the cache holds keys already rotated, and
the ``cos``/``sin`` tables of its ``max_len`` positions, computed once by
:func:`~aihpc.nas.lm_net.rotary_angles` (each row depends only on its
position, so row ``t`` is what the full forward pass uses at position ``t``).
A step at position ``t`` (from 0) rotates its query and key by row ``t``.

:func:`decode_ops` counts the operations analytically in aihpc's convention
(:mod:`aihpc.counting`: a multiply-add is 2, every other scalar primitive 1,
data movement 0), as :func:`aihpc.counting.count_ops` counts these calls on
the meta device: the attention of a pass is scaled q and k, its two products,
the mask (causal passes only) and the safe softmax, over the real key lengths.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch
import torch.nn.functional as F

from aihpc.nas.lm_net import Attention, LMNet, TransformerBlock, apply_rotary, rotary_angles
from aihpc.nas.lm_spec import LMSpec

#: ``on_token(step_index, tokens)``: step 0 is the token from the prefill; ``tokens`` is ``(B,)``.
OnToken = Callable[[int, torch.Tensor], None]


class KVCache:
    """Per block, keys and values ``(batch, heads, max_len, head_dim)`` (keys rotated),
    preallocated in ``dtype`` on ``device``; ``length`` positions are filled.  ``cos`` and
    ``sin`` are the rotary tables ``(max_len, head_dim // 2)``, in at least float32 as the
    net computes them."""

    def __init__(
        self,
        spec: LMSpec,
        batch: int,
        max_len: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        if not 1 <= max_len <= spec.context:
            raise ValueError(
                f"max_len must be between 1 and the model's context {spec.context}, got {max_len}"
            )
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        dtype = dtype or torch.get_default_dtype()
        self.batch, self.max_len, self.length = batch, max_len, 0
        shapes = [(batch, b.heads, max_len, spec.head_dim) for b in spec.blocks]
        self.keys = [torch.empty(s, device=device, dtype=dtype) for s in shapes]
        self.values = [torch.empty(s, device=device, dtype=dtype) for s in shapes]
        wide = torch.promote_types(dtype, torch.float32)
        self.cos, self.sin = rotary_angles(max_len, spec.head_dim, self.keys[0].device, wide)


def _attend(attn: Attention, x: torch.Tensor, cache: KVCache, index: int) -> torch.Tensor:
    """Block ``index``'s attention of the new positions ``x`` ``(B, T, d)``: their keys and
    values written at ``cache.length`` on, each query attending to every cached position up to
    its own (causal when ``T > 1``, which :func:`prefill` allows only into an empty cache)."""
    b, t, _ = x.shape
    start, stop = cache.length, cache.length + t
    cos, sin = cache.cos[start:stop], cache.sin[start:stop]
    shape = (b, t, attn.heads, attn.head_dim)
    q = apply_rotary(attn.q(x).view(shape).transpose(1, 2), cos, sin)
    keys, values = cache.keys[index], cache.values[index]
    keys[:, :, start:stop] = apply_rotary(attn.k(x).view(shape).transpose(1, 2), cos, sin)
    values[:, :, start:stop] = attn.v(x).view(shape).transpose(1, 2)
    y = F.scaled_dot_product_attention(q, keys[:, :, :stop], values[:, :, :stop], is_causal=t > 1)
    return attn.out(y.transpose(1, 2).reshape(b, t, attn.heads * attn.head_dim))


def _run(model: LMNet, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """The net on ``tokens`` ``(B, T)`` at positions ``cache.length`` on; the logits of the
    last position ``(B, vocab)``; ``cache.length`` grows by ``T``."""
    x = model.embed(tokens)
    for i, module in enumerate(model.blocks):
        block = cast(TransformerBlock, module)
        x = x + _attend(block.attn, block.attn_norm(x), cache, i)
        x = x + block.mlp(block.mlp_norm(x))
    cache.length += tokens.shape[1]
    return model.unembed(model.final_norm(x[:, -1]))


@torch.inference_mode()
def prefill(model: LMNet, tokens: torch.Tensor, max_len: int) -> tuple[torch.Tensor, KVCache]:
    """Run the prompts ``tokens`` ``(B, P)`` once (the net set to eval mode) into a new cache
    of ``max_len`` positions (``P <= max_len <= context``); the logits of position ``P - 1``,
    ``(B, vocab)``, and the cache."""
    if tokens.dim() != 2 or tokens.shape[1] < 1:
        raise ValueError(f"tokens must be (batch, positions >= 1), got {tuple(tokens.shape)}")
    batch, length = tokens.shape
    if length > max_len:
        raise ValueError(f"the prompt has {length} positions, more than max_len {max_len}")
    model.eval()
    weight = model.embed.weight
    cache = KVCache(model.spec, batch, max_len, device=weight.device, dtype=weight.dtype)
    return _run(model, tokens, cache), cache


@torch.inference_mode()
def decode(model: LMNet, token: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """One new position per sequence, ``token`` ``(B,)`` at position ``cache.length``,
    attending to the cache, appended to it; its logits ``(B, vocab)``."""
    if token.shape != (cache.batch,):
        raise ValueError(f"token must be ({cache.batch},), got {tuple(token.shape)}")
    if cache.length >= cache.max_len:
        raise ValueError(f"the cache is full: all its max_len {cache.max_len} positions are used")
    return _run(model, token[:, None], cache)


def check_context(spec: LMSpec, prompt_len: int, new_tokens: int) -> None:
    """ValueError unless ``prompt_len >= 1``, ``new_tokens >= 1`` and the prompt and the new
    tokens together fit the model's context."""
    if prompt_len < 1 or new_tokens < 1:
        raise ValueError(
            f"prompt length and new tokens must be >= 1, got {prompt_len} and {new_tokens}"
        )
    if prompt_len + new_tokens > spec.context:
        raise ValueError(
            f"a prompt of {prompt_len} tokens plus {new_tokens} new tokens is "
            f"{prompt_len + new_tokens} positions, more than the model's context {spec.context}"
        )


@torch.inference_mode()
def generate(
    model: LMNet, prompt: torch.Tensor, new_tokens: int, on_token: OnToken | None = None
) -> torch.Tensor:
    """Greedy decoding: ``new_tokens`` tokens ``(B, new_tokens)`` after ``prompt`` ``(B, P)``,
    each the argmax of the logits (the lowest id of a tie).  The first comes from
    :func:`prefill`, each later one from a :func:`decode` step fed the one before, so the
    cache holds ``P + new_tokens - 1`` positions.  ``on_token(i, tokens)`` is called as token
    ``i`` (``(B,)``, on the model's device: a timing caller synchronises) is produced."""
    if prompt.dim() != 2:
        raise ValueError(f"prompt must be (batch, positions), got {tuple(prompt.shape)}")
    check_context(model.spec, prompt.shape[1], new_tokens)
    logits, cache = prefill(model, prompt, prompt.shape[1] + new_tokens - 1)
    out = torch.empty((prompt.shape[0], new_tokens), dtype=torch.long, device=prompt.device)
    for i in range(new_tokens):
        if i:
            logits = decode(model, out[:, i - 1], cache)
        out[:, i] = logits.argmax(dim=-1)
        if on_token is not None:
            on_token(i, out[:, i])
    return out


def _pass_ops(spec: LMSpec, batch: int, queries: int, keys: int, matmuls_only: bool) -> int:
    """Operations of one :func:`_run` of ``queries`` positions per sequence attending to
    ``keys`` positions (the rotary tables apart), as ``count_ops`` counts them on meta."""
    d, hd, m = spec.width, spec.head_dim, batch * queries
    scores = batch * queries * keys  # per head
    total = 2 * batch * d * spec.vocab_size  # the unembedding, of the last position only
    others = 4 * batch * d + 2 * batch  # final RMSNorm: x^2, mean, +eps, rsqrt, *, gain
    for b in spec.blocks:
        a = b.heads * hd
        total += 8 * m * d * a + 4 * m * d * b.mlp_hidden + 4 * b.heads * scores * hd
        others += 2 * (4 * m * d + 2 * m) + 2 * m * d  # two RMSNorms, two residual adds
        others += 6 * m * a + 5 * m * b.mlp_hidden  # rotary q and k (3 per element), GELU
        # attention: scale q and k by sqrt(scale), safe softmax 6n - 2r
        others += m * a + batch * keys * a + 6 * b.heads * scores - 2 * b.heads * m
        if queries > 1:  # causal mask: built (queries x keys) and added
            others += queries * keys + b.heads * scores
    return total if matmuls_only else total + others


def decode_ops(
    spec: LMSpec, prompt_len: int, new_tokens: int, batch: int = 1, *, matmuls_only: bool = False
) -> tuple[float, float]:
    """Operations of :func:`generate` on ``batch`` prompts of ``prompt_len`` tokens:
    ``(prefill, all decode steps together)``.  The prefill includes the rotary tables of the
    cache's ``prompt_len + new_tokens - 1`` positions; the ``new_tokens - 1`` decode steps are
    at positions ``prompt_len ..``, the step at position ``t`` attending to ``t + 1`` keys.
    ``matmuls_only``: the matrix products alone (2 per multiply-add; the projections, the
    unembedding and attention's two products), what ``FlopCounterMode`` counts."""
    check_context(spec, prompt_len, new_tokens)
    half = spec.head_dim // 2
    tables = 0 if matmuls_only else 3 * half + 3 * (prompt_len + new_tokens - 1) * half
    first = tables + _pass_ops(spec, batch, prompt_len, prompt_len, matmuls_only)
    # a step's count is affine in its key length: steps * (count at 0 keys) + slope * keys
    steps = new_tokens - 1
    base = _pass_ops(spec, batch, 1, 0, matmuls_only)
    slope = _pass_ops(spec, batch, 1, 1, matmuls_only) - base
    keys = sum(range(prompt_len + 1, prompt_len + new_tokens))
    return float(first), float(steps * base + slope * keys)
