"""A language model's training passes: its blocks compiled one by one, its weights in bfloat16.

:class:`LMStep` is what the trainer's steps call for an
:class:`~aihpc.tasks.language.net.LMNet`.  The network it wraps stays the trial's
model: its float32 parameters are the ones the optimizer steps, the weight
files hold and the morphisms read, its ``state_dict`` keys unchanged.  Two
things can change how the passes run, each on its own:

* **Per-block compilation** (``cache``): each transformer block runs as a
  region of a :class:`~aihpc.tasks.base.RegionRunner` (the trainer's
  :class:`~aihpc.train.regions.RegionCache`), its compiled code
  kept under the block's *signature* (width, head size, heads, MLP width,
  norm epsilon: :class:`BlockRegion`), so the equal blocks of a network
  share one compiled artefact, and a grown child compiles only the blocks
  of a shape no network compiled before in this process (adding a block
  copies an existing one's shape: nothing to compile).  Inside a block,
  inductor fuses each norm with the residual add before it, the rotary
  products and the GELU into a few kernels.  The embedding, the rotary
  angles and the head (final norm, unembedding) run eagerly: one lookup,
  two small tables and one norm and product per pass.  Only training
  passes compile; evaluation (no gradients) runs the same blocks eagerly,
  since a forward-only graph per block shape would double the
  compilations for a pass a small share of the epoch.
* **Compute weights** (``compute_dtype``, bfloat16): the passes run on a
  copy of the network in that dtype (a *twin*: an ``LMNet`` of the same
  spec whose parameters are the copies), so the residual stream, the
  norms and every product read and write bfloat16 and nothing casts a
  weight per step, as ``torch.autocast`` does.  The float32 parameters are
  the master copy: each copy's gradient is added to its master's as soon
  as the backward pass has it (a post-accumulate-grad hook) and freed, the
  optimizer steps the masters, and its step hook (:meth:`LMStep.follow`)
  copies them into the twin again.  The logits come back in float32 for
  the loss, as autocast gives them.  One process only: data-parallel
  training reduces the gradients of the module it wraps, so the trainer
  keeps float32 weights (with autocast) there.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import nn

from aihpc.tasks.base import RegionRunner, canonical, signature
from aihpc.tasks.language.net import LMNet, TransformerBlock
from aihpc.tasks.language.spec import Block, LMSpec

#: The dtype of a language model's compute weights by device kind (None: its own float32).
COMPUTE_DTYPE: dict[str, torch.dtype | None] = {"cpu": None, "cuda": torch.bfloat16}


@dataclass(frozen=True)
class BlockRegion:
    """One transformer block as a region of a :class:`~aihpc.tasks.base.RegionRunner` (the trainer's
    :class:`~aihpc.train.regions.RegionCache`):
      what its function depends on, so equal blocks (in one network or in many) share it."""

    width: int
    head_dim: int
    norm_eps: float
    block: Block

    @property
    def signature(self) -> str:
        return signature(
            canonical(
                {
                    "kind": "lm_block",
                    "width": self.width,
                    "head_dim": self.head_dim,
                    "norm_eps": self.norm_eps,
                    **self.block.to_dict(),
                }
            )
        )

    def template(self) -> nn.Module:
        """The block as a module of its own (keys ``attn_norm.weight``, ``attn.q.weight``...)."""
        spec = LMSpec(
            vocab_size=1,
            context=1,
            width=self.width,
            head_dim=self.head_dim,
            blocks=(self.block,),
            norm_eps=self.norm_eps,
        )
        return TransformerBlock(spec, self.block)


def block_regions(spec: LMSpec) -> tuple[BlockRegion, ...]:
    """The regions of ``spec``'s blocks, in order."""
    return tuple(BlockRegion(spec.width, spec.head_dim, spec.norm_eps, b) for b in spec.blocks)


class LMStep(nn.Module):
    """Computes what ``net`` computes, for the trainer's steps (see the module docstring).

    ``net`` is its submodule (``state_dict`` keys prefixed ``net.``) and the
    optimizer is built on ``net``; with a ``compute_dtype`` the twin is one
    too (``twin.``), holding the copies.  With a ``cache``, training passes
    run each block through it.  Call :meth:`follow` with the optimizer
    before the first step when there is a twin.
    """

    def __init__(
        self,
        net: LMNet,
        *,
        compute_dtype: torch.dtype | None = None,
        cache: RegionRunner | None = None,
    ) -> None:
        super().__init__()
        self.net = net
        self.cache = cache
        self.regions = block_regions(net.spec)
        self.twin = _twin(net, compute_dtype) if compute_dtype is not None else None

    @property
    def compiled_modes(self) -> tuple[str, ...]:
        """The passes that compile on their first run: training's, with a cache."""
        return ("train",) if self.cache is not None else ()

    def regions_needed(self) -> int:
        """The compiled regions a training pass calls: one per block."""
        return len(self.regions) if self.cache is not None else 0

    def follow(self, optimizer: torch.optim.Optimizer) -> None:
        """After each of ``optimizer``'s steps (on ``net``'s parameters), copy them into the
        twin (nothing without one)."""
        if self.twin is not None:
            optimizer.register_step_post_hook(lambda *_: self.refresh())

    @torch.no_grad()
    def refresh(self) -> None:
        """Copy ``net``'s parameters into the twin's (rounded to its dtype)."""
        if self.twin is not None:
            masters: list[torch.Tensor] = list(self.net.parameters())
            torch._foreach_copy_(list(self.twin.parameters()), masters)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        model = self.twin if self.twin is not None else self.net
        logits: torch.Tensor
        if self.cache is None or not torch.is_grad_enabled():
            logits = model(tokens)
        else:
            logits = self._compiled(model, tokens)
        if self.twin is None:
            return logits
        return logits.to(torch.promote_types(logits.dtype, torch.float32))

    def _compiled(self, model: LMNet, tokens: torch.Tensor) -> torch.Tensor:
        assert self.cache is not None
        x, cos, sin = model.start(tokens)
        for region, block in zip(self.regions, model.blocks, strict=True):
            tensors: dict[str, torch.Tensor] = dict(block.named_parameters())
            x = self.cache.run(region, tensors, (x, cos, sin), self.net.training)
        return model.logits(x)


def _twin(net: LMNet, dtype: torch.dtype) -> LMNet:
    """An ``LMNet`` of ``net``'s spec whose parameters are copies of ``net``'s in ``dtype``, each
    handing its gradient on to the parameter it copies."""
    with torch.device("meta"):
        twin = LMNet(net.spec)
    copies = {name: p.detach().to(dtype, copy=True) for name, p in net.named_parameters()}
    twin.load_state_dict(copies, assign=True)
    twin.train(net.training)
    for copy, master in zip(twin.parameters(), net.parameters(), strict=True):
        # torch leaves the hook's registration unannotated
        copy.register_post_accumulate_grad_hook(partial(_to_master, master))  # type: ignore[no-untyped-call]
    return twin


def _to_master(master: nn.Parameter, copy: Any) -> None:
    """Add ``copy``'s gradient to ``master``'s (in its dtype) and free it."""
    grad = copy.grad.to(master.dtype)
    if master.grad is None:
        master.grad = grad
    else:
        master.grad.add_(grad)
    copy.grad = None
