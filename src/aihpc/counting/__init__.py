"""Operation counting: the number every aihpc score rests on.

``count_ops(model, example_inputs, train=True)`` counts every arithmetic
operation of one forward pass and, with ``train=True``, of the loss and the
backward pass, at the level of the aten operators PyTorch really dispatches,
for any ``nn.Module``.  It runs on the meta device: no memory, no compute
(ResNet-50 at batch 256 with backward counts in a third of a second, and
in half that or less where :mod:`aihpc.counting.op_memo` has seen its ops).

Convention (what one "operation" is)
------------------------------------
* A multiply-accumulate (MAC) is **2** operations.  A dot product of length
  K is K MACs = 2K operations (strictly K multiplies and K - 1 adds; like
  every FLOP count we round up).  Convolutions and matrix products are the
  MACs they perform: conv = batch x output positions x prod(weight shape)
  (the weight shape (C_out, C_in/groups, *kernel) already holds the groups);
  a bias adds 1 per output element.
* Every other scalar primitive is **1** operation per output element: add,
  subtract, multiply, max/min, compare, logical and/or, select (``where``,
  masking), and also **divide, square root, reciprocal square root, exp,
  log, tanh, erf, power**.  Weighting those by their instruction cost would
  make the count hardware-specific (a divide is 1 instruction on a GPU's
  special-function unit and ~10-20 on a CPU's vector unit); counting 1 each
  is the usual FLOP convention and keeps the count a property of the model.
  Composite functions are the sum of their primitives: sigmoid
  1/(1 + exp(-x)) = neg, exp, add, div = 4; exact GELU
  0.5 x (1 + erf(x / sqrt 2)) = 5; SiLU x sigmoid(x) = 5; ReLU max(x, 0) = 1.
* A reduction of n inputs to m outputs costs n - m (the adds, or compares);
  a mean adds m divides, so costs exactly n.  Softmax over rows of length
  D (n elements, r rows): max, subtract, exp, sum, divide = 5n - 2r.
* Pure data movement costs 0: views, reshapes, transposes, ``cat``, copies,
  gathers (embedding lookup, nearest upsampling, padding), allocation and
  constant fills, random number generation.  Those ops are listed
  explicitly in :data:`aihpc.counting.registry.KNOWN_ZERO`; any op that is
  neither counted nor listed there is reported in ``OpCount.uncounted``
  (name -> calls) so nothing is silently dropped.
* Batch norm, training mode (n elements, C channels): mean n; variance
  (x - mean, square, sum, divide) 3n; 1/sqrt(var + eps) 2C; normalise
  (x - mean) * invstd 2n; affine * gamma + beta 2n -> 8n + 2C, plus 7C
  updating running statistics.  Eval mode: the normalisation folds into one
  affine map y = a x + b: 2n (+5C for a and b).
  Backward, training: sum(g) (n - C), xhat (2n), sum(g xhat) (2n - C) and
  dx = gamma invstd (g - mean(g) - xhat mean(g xhat)) (4n + 3C) -> 9n + C.
* Backward formulas are derived per op from the arithmetic of the gradient
  (each formula's docstring states it): convolution and matmul backward
  are the forward MACs once for the input gradient and once for the weight
  gradient, each counted only when autograd asks for it -- the first layer,
  whose input needs no gradient, gets only its weight gradient, so the
  backward of conv/linear is exactly 2x forward minus the first layer's
  input gradient; ReLU backward (compare + select) = 2; max-pool backward
  routes each gradient to one input (1 add); softmax backward
  y (g - sum(g y)) = 4n - r; cross-entropy = log_softmax + nll_loss.
* Which ops run is decided by PyTorch's dispatcher on the meta device,
  which follows the CPU paths: e.g. ``scaled_dot_product_attention`` runs
  its math path (scale q and k, two ``bmm``, safe softmax), counted from
  those ops; the fused CPU kernel, if called directly, has a formula that
  mirrors that count.

Public API: :func:`count_ops`, :class:`OpCount` and :func:`format_count`
(human-readable table; its numbers by :func:`aihpc.base.fmt.format_si`).
"""

from __future__ import annotations

from aihpc.counting.counter import LOSSES, OpCount, count_ops
from aihpc.counting.text import format_count

__all__ = ["LOSSES", "OpCount", "count_ops", "format_count"]
