"""Turn an :class:`~aihpc.tasks.language.spec.LMSpec` into a runnable decoder-only transformer.

:class:`LMNet` maps tokens ``(B, T)`` to logits ``(B, T, vocab)``:

    embed -> [x += attn(norm(x)); x += mlp(norm(x))] per block -> norm -> unembed

Pre-norm blocks with RMSNorm (a learned gain, no bias, ``spec.norm_eps``),
causal multi-head attention through ``F.scaled_dot_product_attention`` (which
picks a fused kernel where there is one) and a GELU MLP; every Linear is
bias-free and the output projection is not tied to the embedding (so that
the morphisms can treat reading and writing the residual stream apart).

Positions are rotary (RoPE, base 10000, applied to q and k): the first half
of each head's dimensions is rotated against the second half, pair ``i`` by
the angle ``position * 10000**(-2i/head_dim)``.  Rotary positions rather than
a learned table because they have no parameters: a model trained on short
sequences computes the same logits for them when its context grows, and the
context grows without weights to invent; they are also relative, so
attention sees distances, not absolute slots.

``state_dict`` keys (``i`` counts blocks from 0; shapes in brackets, ``d`` the
width, ``A = heads * head_dim`` of that block, ``h`` its ``mlp_hidden``):

============================== =================
``embed.weight``               (vocab, d)
``blocks.i.attn_norm.weight``  (d,)
``blocks.i.attn.q.weight``     (A, d)
``blocks.i.attn.k.weight``     (A, d)
``blocks.i.attn.v.weight``     (A, d)
``blocks.i.attn.out.weight``   (d, A)
``blocks.i.mlp_norm.weight``   (d,)
``blocks.i.mlp.up.weight``     (h, d)
``blocks.i.mlp.down.weight``   (d, h)
``final_norm.weight``          (d,)
``unembed.weight``             (vocab, d)
============================== =================

There are no buffers: the rotary angles are computed in each forward pass
for the positions it sees.  The net runs in any float dtype, on the meta
device (for counting), and under ``torch.autocast``: dtypes are left to
torch, except that the rotation is computed in at least float32.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from aihpc.base.errors import SpecError
from aihpc.tasks.language.spec import Block, LMSpec

#: The rotary base (RoFormer's and LLaMA's).
ROPE_BASE = 10000.0
Device = torch.device | str | None
DType = torch.dtype | None

#: Standard deviation of the initial embedding and Linear weights (GPT-2).
INIT_STD = 0.02


def lm_state_shapes(spec: LMSpec) -> dict[str, tuple[int, ...]]:
    """The keys and shapes of ``LMNet(spec).state_dict()``, without building it."""
    d, v = spec.width, spec.vocab_size
    out: dict[str, tuple[int, ...]] = {"embed.weight": (v, d)}
    for i, b in enumerate(spec.blocks):
        a, p = b.heads * spec.head_dim, f"blocks.{i}."
        out[p + "attn_norm.weight"] = (d,)
        for name in ("q", "k", "v"):
            out[f"{p}attn.{name}.weight"] = (a, d)
        out[p + "attn.out.weight"] = (d, a)
        out[p + "mlp_norm.weight"] = (d,)
        out[p + "mlp.up.weight"] = (b.mlp_hidden, d)
        out[p + "mlp.down.weight"] = (d, b.mlp_hidden)
    out["final_norm.weight"] = (d,)
    out["unembed.weight"] = (v, d)
    return out


def rotary_angles(
    positions: int, head_dim: int, device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` of the rotary angles, each ``(positions, head_dim // 2)``."""
    pair = torch.arange(0, head_dim, 2, device=device, dtype=dtype) / head_dim
    inv_freq = ROPE_BASE ** (-pair)
    angles = torch.arange(positions, device=device, dtype=dtype)[:, None] * inv_freq[None, :]
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` ``(B, H, T, head_dim)``: dimension ``j`` of the first half
    with dimension ``j`` of the second, by the angles in ``cos``/``sin``."""
    half = x.shape[-1] // 2
    # x's dtype promotes to the angles' (at least float32) in each product: no widened copy
    x1, x2 = x[..., :half], x[..., half:]
    rotated = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return rotated.to(x.dtype)


class Attention(nn.Module):
    """Causal multi-head self-attention of ``heads`` heads of ``head_dim``."""

    def __init__(
        self, width: int, heads: int, head_dim: int, *, device: Device = None, dtype: DType = None
    ) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        inner = heads * head_dim
        self.q = nn.Linear(width, inner, bias=False, device=device, dtype=dtype)
        self.k = nn.Linear(width, inner, bias=False, device=device, dtype=dtype)
        self.v = nn.Linear(width, inner, bias=False, device=device, dtype=dtype)
        self.out = nn.Linear(inner, width, bias=False, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        shape = (b, t, self.heads, self.head_dim)
        q = apply_rotary(self.q(x).view(shape).transpose(1, 2), cos, sin)
        k = apply_rotary(self.k(x).view(shape).transpose(1, 2), cos, sin)
        v = self.v(x).view(shape).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        result: torch.Tensor = self.out(y.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))
        return result


class MLP(nn.Module):
    """Linear ``d -> hidden``, GELU, Linear ``hidden -> d``."""

    def __init__(
        self, width: int, hidden: int, *, device: Device = None, dtype: DType = None
    ) -> None:
        super().__init__()
        self.up = nn.Linear(width, hidden, bias=False, device=device, dtype=dtype)
        self.down = nn.Linear(hidden, width, bias=False, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.down(F.gelu(self.up(x)))
        return result


class TransformerBlock(nn.Module):
    """``x + attn(norm(x))``, then ``+ mlp(norm(x))``: pre-norm, so a block whose two
    output projections are zero is the identity."""

    def __init__(
        self, spec: LMSpec, block: Block, *, device: Device = None, dtype: DType = None
    ) -> None:
        super().__init__()
        d = spec.width
        self.attn_norm = nn.RMSNorm(d, eps=spec.norm_eps, device=device, dtype=dtype)
        self.attn = Attention(d, block.heads, spec.head_dim, device=device, dtype=dtype)
        self.mlp_norm = nn.RMSNorm(d, eps=spec.norm_eps, device=device, dtype=dtype)
        self.mlp = MLP(d, block.mlp_hidden, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        result: torch.Tensor = x + self.mlp(self.mlp_norm(x))
        return result


class LMNet(nn.Module):
    """The network of ``spec`` (see the module docstring): ``forward(tokens)``
    maps a LongTensor ``(B, T)``, ``T <= spec.context``, to logits ``(B, T, vocab)``.

    Initialisation (GPT-2's): embedding and Linear weights normal(0, 0.02),
    the attention and MLP output projections' standard deviation divided by
    ``sqrt(2 * layers)`` (each block adds two terms to the residual stream,
    whose variance would otherwise grow with depth), RMSNorm gains 1.
    ``device`` and ``dtype`` are passed to every parameter (``device="meta"``
    builds it without memory, for counting).
    """

    def __init__(
        self,
        spec: LMSpec,
        *,
        device: Device = None,
        dtype: DType = None,
    ) -> None:
        super().__init__()
        if not isinstance(spec, LMSpec):
            raise SpecError(f"LMNet needs an LMSpec, got {type(spec).__name__}")
        self.spec = spec
        d = spec.width
        self.embed = nn.Embedding(spec.vocab_size, d, device=device, dtype=dtype)
        self.blocks = nn.ModuleList(
            TransformerBlock(spec, b, device=device, dtype=dtype) for b in spec.blocks
        )
        self.final_norm = nn.RMSNorm(d, eps=spec.norm_eps, device=device, dtype=dtype)
        self.unembed = nn.Linear(d, spec.vocab_size, bias=False, device=device, dtype=dtype)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """GPT-2's initialisation (see the class docstring); nothing on the meta device,
        whose tensors hold no values (and whose random fills are slow)."""
        if self.embed.weight.is_meta:
            return
        residual_std = INIT_STD / math.sqrt(2 * self.spec.layers)
        for name, param in self.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            elif name.endswith(("attn.out.weight", "mlp.down.weight")):
                param.normal_(0.0, residual_std)
            else:
                param.normal_(0.0, INIT_STD)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x, cos, sin = self.start(tokens)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.logits(x)

    def start(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """What the first block reads: the embedded ``tokens`` ``(B, T, d)`` and the rotary
        ``cos`` and ``sin`` of their ``T`` positions (SpecError for tokens of another shape)."""
        if tokens.dim() != 2:
            raise SpecError(f"tokens must be (batch, positions), got shape {tuple(tokens.shape)}")
        t = tokens.shape[1]
        if t > self.spec.context:
            raise SpecError(
                f"tokens have {t} positions, more than the spec's context {self.spec.context}"
            )
        x = self.embed(tokens)
        # the rotation in float32, or float64 for a float64 model (bf16 angles lose positions)
        wide = torch.promote_types(self.embed.weight.dtype, torch.float32)
        cos, sin = rotary_angles(t, self.spec.head_dim, x.device, wide)
        return x, cos, sin

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """The logits ``(B, T, vocab)`` of the last block's output ``x``."""
        result: torch.Tensor = self.unembed(self.final_norm(x))
        return result


class FlatLogits(nn.Module):
    """A language model whose logits come flattened to (tokens, vocabulary), as the loss reads
    them: what :func:`aihpc.counting.count_ops` counts."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.net(tokens)
        return logits.flatten(0, 1)
