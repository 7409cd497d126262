"""A small decoder-only Transformer language model (GPT-2 layout, as nanoGPT).

Token ids ``(N, T)`` (int64, each in ``[0, vocab)``, ``T <= context``) ->
token embedding + learned position embedding -> ``layers`` pre-norm blocks
-> final LayerNorm -> linear head -> next-token logits for every position,
flattened to 2-D ``(N * T, vocab)`` (row ``n * T + t`` predicts token
``t + 1`` of sequence ``n``).  A block is::

    x = x + proj(attention(qkv(LayerNorm(x))))      causal, ``heads`` heads
    x = x + fc2(GELU(fc1(LayerNorm(x))))             hidden width 4 d

with attention through ``nn.functional.scaled_dot_product_attention(...,
is_causal=True)``.  No dropout; the head has a bias and is not tied to the
embedding.  Defaults: vocabulary 10,000, ``d = 256``, 4 heads, 4 layers,
context 128.  Parameters (``V`` vocabulary, ``C`` context)::

    token embedding   V d                         2,560,000
    positions         C d                            32,768
    block             12 d^2 + 13 d                 789,760  (x 4)
        LayerNorms 2 x 2d; qkv 3d^2 + 3d; proj d^2 + d; fc1 4d^2 + 4d; fc2 4d^2 + d
    final LayerNorm   2 d                               512
    head              d V + V                     2,570,000
    total                                         8,322,320

Forward multiply-accumulates of one block for ``N`` sequences of ``T``
tokens: ``12 N T d^2`` in the projections plus ``2 N T^2 d`` in attention
(``Q K^T`` and ``A V``; the causal mask does not skip the upper triangle).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from aihpc.base.errors import ModelError

VOCAB = 10_000
CONTEXT = 128


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention: one ``d -> 3d`` projection for q, k, v, one ``d -> d``
    out."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model must be a multiple of heads, got {d_model} and {heads}")
        self.heads = heads
        self.d_model = d_model
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, d = x.shape[0], x.shape[1], self.d_model  # d an int: traces without a warning
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(n, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out: torch.Tensor = self.proj(y.transpose(1, 2).reshape(n, t, d))
        return out


class MLP(nn.Module):
    """``d -> 4d``, exact GELU, ``4d -> d``."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, 4 * d_model)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc2(self.act(self.fc1(x)))
        return out


class Block(nn.Module):
    """Pre-norm Transformer block: attention and MLP, each a residual branch."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        out: torch.Tensor = x + self.mlp(self.ln2(x))
        return out


class TransformerLM(nn.Module):
    """Decoder-only Transformer over ``vocab`` tokens with ``context`` learned positions.

    Initialisation as GPT-2 / nanoGPT: linear and embedding weights normal
    with std 0.02, biases zero, each residual branch's last projection
    (``attn.proj``, ``mlp.fc2``) std ``0.02 / sqrt(2 layers)``.
    """

    def __init__(
        self,
        vocab: int = VOCAB,
        d_model: int = 256,
        heads: int = 4,
        layers: int = 4,
        context: int = CONTEXT,
    ) -> None:
        super().__init__()
        self.context = context
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(context, d_model)
        self.blocks = nn.Sequential(*(Block(d_model, heads) for _ in range(layers)))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                std = (
                    0.02 / math.sqrt(2 * layers)
                    if name.endswith(("proj.weight", "fc2.weight"))
                    else 0.02
                )
                nn.init.normal_(p, mean=0.0, std=std)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``(N, T)`` int64 token ids -> ``(N * T, vocab)`` logits; ModelError if
        ``T > context``."""
        t = tokens.shape[1]
        tracing = torch.jit.is_tracing()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        if not tracing and t > self.context:  # traced: T is fixed by the example
            raise ModelError(
                f"sequence length must be <= the model's context {self.context}, got {t}"
            )
        positions = torch.arange(t, device=tokens.device)
        x = self.tok_emb(tokens) + self.pos_emb(positions)
        logits = self.head(self.ln_f(self.blocks(x)))
        out: torch.Tensor = logits.reshape(-1, logits.shape[-1])
        return out


def transformer_small(num_classes: int = VOCAB) -> TransformerLM:
    """d 256, 4 heads, 4 layers, context 128; ``num_classes`` is the vocabulary size
    (8,322,320 parameters at 10,000 tokens)."""
    return TransformerLM(vocab=num_classes)
