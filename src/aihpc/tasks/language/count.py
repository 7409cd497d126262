"""Operations per window of a language model, counted in closed form.

:func:`count_lm_per_sample` returns exactly (bit for bit) what
:meth:`aihpc.tasks.language.task.LanguageTask.count_per_sample` returns --
(training-step operations per window, evaluation-forward operations per
window) -- without building or tracing the network: a sum of integer
polynomials over the blocks, microseconds per architecture where the traced
count takes a tenth of a second to seconds (``benchmarks/lm_count_speed.py``).
``aihpc verify`` recounts every trial of a run with it
(:meth:`~aihpc.tasks.language.task.LanguageTask.recount_per_sample`).

Derivation
----------
The traced count runs ``LMNet`` (flattened logits) and a mean cross entropy
against ``B*T`` targets on the meta device under FlopCounterMode with
:data:`~aihpc.counting.registry.FORMULAS`, ``T`` the spec's context and
``B`` the batch.  Every op that runs depends only on the spec's sizes, so its
formula is a polynomial in them; each helper below lists the ops it stands
for with their formulas' values.  Names: ``N = B*T`` token rows, ``d`` the
width, ``V`` the vocabulary, per block ``H`` heads of ``Q = head_dim``,
``A = H*Q``, ``h`` the MLP width, ``S = B*H*T*T`` attention scores and
``R = B*H*T`` their rows.  A matrix product of ``m x k`` by ``k x n`` counts
``2mkn``; every element-wise op one per output element.

Torch lowers on the meta device (this torch: 2.13) ``nn.RMSNorm`` to
``pow, mean, add_, rsqrt, mul, mul`` and ``scaled_dot_product_attention`` to
its math path (q and k scaled by ``sqrt(1/sqrt(Q))``, a ``T x T`` causal mask
built with ``where``, ``bmm``, mask add, ``_safe_softmax``, ``bmm``); the
mask and the rotary angles do not depend on the batch, which is why the
per-window count is not a polynomial in ``B`` alone and the totals are
divided by ``B`` at the end, as the traced count divides them.  The
gradient of a value read by ``k`` ops is summed by the autograd engine in
``k - 1`` additions: in each block, the residual stream before each norm
(read by the norm and the residual add) and the attention norm's output
(read by q, k and v).  Parameter gradients are stored without arithmetic.

``tests/tasks/language/test_lm_count.py`` holds this equal to the traced count on
the seeds, random specs and chains of random growth steps; a torch that
lowers these ops differently fails it.
"""

from __future__ import annotations

from aihpc.base.checks import integer
from aihpc.tasks.language.spec import Block, LMSpec

__all__ = ["count_lm_per_sample", "lm_ops"]


def count_lm_per_sample(spec: LMSpec, batch: int, dropout: float = 0.0) -> tuple[float, float]:
    """Operations per window of ``context + 1`` tokens of ``spec`` at batch size ``batch``:
    (training step, evaluation forward), equal to
    :meth:`aihpc.tasks.language.task.LanguageTask.count_per_sample`'s.  ``dropout`` is taken
    for the task interface's sake: the language model has no dropout.

    ConfigError for a batch that is not an integer >= 1.
    """
    train, evaluate = lm_ops(spec, batch)
    return train / batch, evaluate / batch


def lm_ops(spec: LMSpec, batch: int) -> tuple[int, int]:
    """The whole batch's operations: (training step, evaluation forward), integers."""
    integer("batch", batch, what=">= 1")
    t, d, v = spec.context, spec.width, spec.vocab_size
    n = batch * t
    forward = _rotary_angles(t, spec.head_dim) + _norm_forward(n, d) + 2 * n * d * v
    backward = 4 * n * d * v + _norm_backward(n, d) + n * d  # unembed, final norm, embedding
    for block in spec.blocks:
        forward += _block_forward(block, spec.head_dim, batch, t, d)
        backward += _block_backward(block, spec.head_dim, batch, t, d)
    return forward + _loss(n, v) + backward, forward


def _rotary_angles(t: int, q: int) -> int:
    """``rotary_angles`` once per forward: ``/ head_dim``, ``neg``, ``10000 ** .`` over the
    ``Q/2`` frequencies; the outer product, ``cos``, ``sin`` over ``T x Q/2``."""
    half = q // 2
    return 3 * half + 3 * t * half


def _norm_forward(n: int, d: int) -> int:
    """RMSNorm: ``x**2`` (Nd), ``mean`` (Nd), ``+ eps`` (N), ``rsqrt`` (N), ``x * rsqrt`` (Nd),
    ``* gain`` (Nd)."""
    return 4 * n * d + 2 * n


def _norm_backward(n: int, d: int) -> int:
    """RMSNorm's backward: the gain's gradient (mul Nd, sum over the tokens Nd - d), ``g * gain``
    and ``* rsqrt`` (2Nd), the gradient of rsqrt (mul Nd, row sum Nd - N; ``**3``, ``* -0.5``,
    mul: 3N), of the mean (``/ d`` Nd), of the square (``** 1``, ``* 2``, mul: 3Nd), and the two
    paths to x added (Nd)."""
    return (n * d - d) + (n * d - n) + 3 * n + 9 * n * d


def _attention_forward(b: int, t: int, heads: int, q: int) -> int:
    """Math-path attention: q and k scaled (2NA), the causal mask's ``where`` (T*T), the two
    products (2 x 2SQ), the mask added (S), ``_safe_softmax`` (6S - 2R)."""
    a, scores, rows = heads * q, b * heads * t * t, b * heads * t
    return 2 * b * t * a + t * t + 4 * scores * q + scores + 6 * scores - 2 * rows


def _attention_backward(b: int, t: int, heads: int, q: int) -> int:
    """Its backward: four products (4 x 2SQ), the softmax's (4S - R), the scales on the
    gradients of q and k (2NA); the mask takes no gradient."""
    a, scores, rows = heads * q, b * heads * t * t, b * heads * t
    return 8 * scores * q + 4 * scores - rows + 2 * b * t * a


def _block_forward(block: Block, q: int, b: int, t: int, d: int) -> int:
    """Two norms, q/k/v (3 x 2NdA), rotary on q and k (2 x (4 mul, sub, add) over NA/2),
    attention, the output projection (2NAd), MLP up (2Ndh), GELU (5Nh), down (2Nhd), two
    residual adds (2Nd)."""
    n, a, h = b * t, block.heads * q, block.mlp_hidden
    projections = 6 * n * d * a + 2 * n * a * d + 4 * n * d * h
    rotary = 2 * 6 * n * block.heads * (q // 2)
    attention = _attention_forward(b, t, block.heads, q)
    return 2 * _norm_forward(n, d) + projections + rotary + attention + 5 * n * h + 2 * n * d


def _block_backward(block: Block, q: int, b: int, t: int, d: int) -> int:
    """Every product twice (input and weight gradients), GELU's backward (11Nh), rotary's on q
    and k (each: 4 mul, neg, 2 add over NA/2, the halves' gradients added NA), attention's,
    two norms', and four gradient sums (2Nd for the norm's output read by q, k and v; Nd for
    the stream read by each norm and residual add)."""
    n, a, h = b * t, block.heads * q, block.mlp_hidden
    projections = 2 * (6 * n * d * a + 2 * n * a * d + 4 * n * d * h)
    rotary = 2 * (7 * n * block.heads * (q // 2) + n * a)
    attention = _attention_backward(b, t, block.heads, q)
    norms = 2 * _norm_backward(n, d)
    return projections + 11 * n * h + rotary + attention + norms + 4 * n * d


def _loss(n: int, v: int) -> int:
    """Mean cross entropy of ``N`` rows of ``V`` logits: ``_log_softmax`` (5NV - N),
    ``nll_loss`` (2N); backward: ``nll_loss_backward`` (N + 1), ``_log_softmax_backward_data``
    (4NV - N)."""
    return (5 * n * v - n) + 2 * n + (n + 1) + (4 * n * v - n)
