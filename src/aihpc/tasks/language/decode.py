"""Autoregressive inference of an :class:`~aihpc.tasks.language.net.LMNet` with a key-value cache.

:func:`prefill` runs a prompt ``(B, P)`` through the net once, with causal
attention as :class:`~aihpc.tasks.language.net.LMNet` has it, and keeps every block's
keys and values in a :class:`KVCache`; :func:`decode` then runs one new
position per sequence, its single query attending (no mask needed) to the
cached keys and itself, and appends its key and value.  Both return the
logits of the last position only, ``(B, vocab)``: the final norm and the
unembedding run on that position alone.  Everything runs under
``torch.inference_mode`` with the net in eval mode, in the net's dtype and on
its device.

Serving decodes with every shape fixed (:class:`StaticDecoder`, as gpt-fast
does), so that a step can be captured once as a CUDA graph and replayed:
:func:`decode_at` takes its position as a tensor, writes its key and value at
that index of the whole cache, and attends to all ``max_len`` cached
positions with the later ones masked out.  A masked position's weight is
exactly 0, so the answer is :func:`decode`'s up to the order of the sums; the
cache starts zeroed so that a masked, never written position holds no NaN
(0 x NaN would be NaN).  :func:`generate` is greedy decoding on it.

Positions are rotary, as in the net: the cache holds keys already rotated, and
the ``cos``/``sin`` tables of its ``max_len`` positions, computed once by
:func:`~aihpc.tasks.language.net.rotary_angles` (each row depends only on its
position, so row ``t`` is what the full forward pass uses at position ``t``).
A step at position ``t`` (from 0) rotates its query and key by row ``t``.

:func:`decode_ops` counts the operations analytically in aihpc's convention
(:mod:`aihpc.counting`: a multiply-add is 2, every other scalar primitive 1,
data movement 0), as :func:`aihpc.counting.count_ops` counts :func:`prefill`
and :func:`decode` on the meta device: the attention of a pass is scaled q
and k, its two products, the mask (causal passes only) and the safe softmax,
over the real key lengths (the masked positions :func:`decode_at` also
computes are work of the serving's fixed shapes, not of the model).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import cast

import torch
import torch.nn.functional as F

from aihpc.tasks.language.net import Attention, LMNet, TransformerBlock, apply_rotary, rotary_angles
from aihpc.tasks.language.spec import LMSpec

#: ``on_token(step_index, tokens)``: step 0 is the token from the prefill; ``tokens`` is ``(B,)``.
OnToken = Callable[[int, torch.Tensor], None]


class KVCache:
    """Per block, keys and values ``(batch, heads, max_len, head_dim)`` (keys rotated),
    preallocated zeroed in ``dtype`` on ``device``; ``length`` positions are filled (by
    :func:`prefill` and :func:`decode`).  ``cos`` and ``sin`` are the rotary tables
    ``(max_len, head_dim // 2)``, in at least float32 as the net computes them;
    ``positions`` is ``arange(max_len)``, for :func:`decode_at`'s mask."""

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
        self.keys = [torch.zeros(s, device=device, dtype=dtype) for s in shapes]
        self.values = [torch.zeros(s, device=device, dtype=dtype) for s in shapes]
        where = self.keys[0].device
        wide = torch.promote_types(dtype, torch.float32)
        self.cos, self.sin = rotary_angles(max_len, spec.head_dim, where, wide)
        self.positions = torch.arange(max_len, device=where)

    def rows(self, batch: int) -> KVCache:
        """A cache of this one's first ``batch`` rows, sharing its memory (and its tables),
        empty: for a smaller batch that never runs at the same time as this one."""
        if not 1 <= batch <= self.batch:
            raise ValueError(f"batch must be between 1 and {self.batch}, got {batch}")
        view = copy.copy(self)
        view.batch, view.length = batch, 0
        view.keys = [k[:batch] for k in self.keys]
        view.values = [v[:batch] for v in self.values]
        return view


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
    result: torch.Tensor = attn.out(y.transpose(1, 2).reshape(b, t, attn.heads * attn.head_dim))
    return result


def _run(model: LMNet, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """The net on ``tokens`` ``(B, T)`` at positions ``cache.length`` on; the logits of the
    last position ``(B, vocab)``; ``cache.length`` grows by ``T``."""
    x = model.embed(tokens)
    for i, module in enumerate(model.blocks):
        block = cast(TransformerBlock, module)
        x = x + _attend(block.attn, block.attn_norm(x), cache, i)
        x = x + block.mlp(block.mlp_norm(x))
    cache.length += tokens.shape[1]
    result: torch.Tensor = model.unembed(model.final_norm(x[:, -1]))
    return result


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


def _attend_at(
    attn: Attention, x: torch.Tensor, cache: KVCache, index: int, position: torch.Tensor
) -> torch.Tensor:
    """Block ``index``'s attention of one new position ``x`` ``(B, 1, d)`` at ``position``
    (a ``(1,)`` tensor): its key and value written at that index, its query attending to the
    whole cache with the positions after it masked out."""
    b = x.shape[0]
    cos, sin = cache.cos.index_select(0, position), cache.sin.index_select(0, position)
    shape = (b, 1, attn.heads, attn.head_dim)
    q = apply_rotary(attn.q(x).view(shape).transpose(1, 2), cos, sin)
    keys, values = cache.keys[index], cache.values[index]
    k = apply_rotary(attn.k(x).view(shape).transpose(1, 2), cos, sin)
    keys.index_copy_(2, position, k.to(keys.dtype))
    values.index_copy_(2, position, attn.v(x).view(shape).transpose(1, 2).to(values.dtype))
    visible = (cache.positions <= position).view(1, 1, 1, cache.max_len)
    y = F.scaled_dot_product_attention(q, keys, values, attn_mask=visible)
    result: torch.Tensor = attn.out(y.transpose(1, 2).reshape(b, 1, attn.heads * attn.head_dim))
    return result


@torch.inference_mode()
def decode_at(
    model: LMNet, token: torch.Tensor, position: torch.Tensor, cache: KVCache
) -> torch.Tensor:
    """:func:`decode` with every shape fixed (the module docstring): ``token`` ``(B,)`` at
    ``position``, a ``(1,)`` long tensor on the cache's device (the caller keeps it within
    ``max_len``: a tensor is not read back to check); its logits ``(B, vocab)``.  The cache's
    ``length`` is not used."""
    x = model.embed(token[:, None])
    for i, module in enumerate(model.blocks):
        block = cast(TransformerBlock, module)
        x = x + _attend_at(block.attn, block.attn_norm(x), cache, i, position)
        x = x + block.mlp(block.mlp_norm(x))
    result: torch.Tensor = model.unembed(model.final_norm(x[:, -1]))
    return result


class StaticDecoder:
    """Greedy answers of ``new_tokens`` tokens to ``batch`` prompts of ``prompt_len`` tokens,
    every tensor allocated once: the cache, the ``prompt`` ``(batch, prompt_len)``, the
    current ``token`` ``(batch,)`` and its ``position`` ``(1,)``.  :meth:`prefill` and
    :meth:`step` read and write only these, so each can be captured as a CUDA graph and
    replayed (:meth:`answer` takes the callables to run).  The cache holds
    ``prompt_len + new_tokens - 1`` positions in ``dtype`` (default the net's), or is
    ``cache`` (of ``batch`` rows and that length: :meth:`KVCache.rows` of a larger one's)."""

    def __init__(
        self,
        model: LMNet,
        batch: int,
        prompt_len: int,
        new_tokens: int,
        dtype: torch.dtype | None = None,
        cache: KVCache | None = None,
    ) -> None:
        check_context(model.spec, prompt_len, new_tokens)
        model.eval()
        weight = model.embed.weight
        max_len = prompt_len + new_tokens - 1
        self.model, self.new_tokens = model, new_tokens
        if cache is None:
            where, dtype = weight.device, dtype or weight.dtype
            cache = KVCache(model.spec, batch, max_len, device=where, dtype=dtype)
        if (cache.batch, cache.max_len) != (batch, max_len):
            raise ValueError(
                f"the cache holds {cache.batch} rows of {cache.max_len} positions, not "
                f"{batch} of {max_len}"
            )
        self.cache = cache
        self.prompt = torch.zeros((batch, prompt_len), dtype=torch.long, device=weight.device)
        self.token = torch.zeros((batch,), dtype=torch.long, device=weight.device)
        self.position = torch.zeros((1,), dtype=torch.long, device=weight.device)

    @torch.inference_mode()
    def prefill(self) -> None:
        """The prompts into the cache; ``token``: the first answer token; ``position``: its."""
        self.cache.length = 0
        logits = _run(self.model, self.prompt, self.cache)
        self.token.copy_(logits.argmax(dim=-1))
        self.position.fill_(self.prompt.shape[1])

    @torch.inference_mode()
    def step(self) -> None:
        """``token`` at ``position`` decoded: ``token`` becomes the next, ``position`` + 1."""
        logits = decode_at(self.model, self.token, self.position, self.cache)
        self.token.copy_(logits.argmax(dim=-1))
        self.position.add_(1)

    @torch.inference_mode()
    def answer(
        self,
        prompt: torch.Tensor,
        on_token: OnToken | None = None,
        prefill: Callable[[], None] | None = None,
        step: Callable[[], None] | None = None,
    ) -> torch.Tensor:
        """The answers ``(batch, new_tokens)`` to ``prompt`` (copied into ``self.prompt``);
        ``prefill`` and ``step`` replace :meth:`prefill` and :meth:`step` (their captured
        graphs' replays).  ``on_token(i, tokens)`` as in :func:`generate`."""
        if prompt.shape != self.prompt.shape:
            raise ValueError(
                f"prompt must be {tuple(self.prompt.shape)}, got {tuple(prompt.shape)}"
            )
        self.prompt.copy_(prompt)
        shape = (prompt.shape[0], self.new_tokens)
        out = torch.empty(shape, dtype=torch.long, device=self.token.device)
        first, later = prefill or self.prefill, step or self.step
        for i in range(self.new_tokens):
            (later if i else first)()
            out[:, i] = self.token
            if on_token is not None:
                on_token(i, out[:, i])
        return out


@torch.inference_mode()
def generate(
    model: LMNet, prompt: torch.Tensor, new_tokens: int, on_token: OnToken | None = None
) -> torch.Tensor:
    """Greedy decoding: ``new_tokens`` tokens ``(B, new_tokens)`` after ``prompt`` ``(B, P)``,
    each the argmax of the logits (the lowest id of a tie).  The first comes from the
    prefill, each later one from a :func:`decode_at` step fed the one before, so the
    cache holds ``P + new_tokens - 1`` positions (a :class:`StaticDecoder`).
    ``on_token(i, tokens)`` is called as token ``i`` (``(B,)``, on the model's device: a
    timing caller synchronises) is produced."""
    if prompt.dim() != 2:
        raise ValueError(f"prompt must be (batch, positions), got {tuple(prompt.shape)}")
    decoder = StaticDecoder(model, prompt.shape[0], prompt.shape[1], new_tokens)
    return decoder.answer(prompt.to(decoder.prompt.device), on_token)


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
