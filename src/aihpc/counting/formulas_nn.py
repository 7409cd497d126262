"""Counting formulas: matrix products, convolution, pooling, fused attention,
embedding and upsampling (normalisation is :mod:`aihpc.counting.formulas_norm`'s).
Conventions: see :mod:`aihpc.counting`; ``n`` is an element count, ``C`` channels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from aihpc.counting.formula_table import FormulaTable, first_shape, ntuple, numel

TABLE = FormulaTable()
_reg = TABLE.register


# ------------------------------------------------------------ matrix products
# A dot product of length K is K multiply-accumulates (MACs) = 2K operations
# (strictly K multiplies and K - 1 adds; the convention rounds up).
def mm_macs(a: Any, b: Any, *args: Any, **kw: Any) -> int:
    """(M, K) @ (K, N): M*K*N MACs."""
    return int(a[0]) * int(a[1]) * int(b[1])


def bmm_macs(a: Any, b: Any, *args: Any, **kw: Any) -> int:
    """(B, M, K) @ (B, K, N): B*M*K*N MACs."""
    return int(a[0]) * int(a[1]) * int(a[2]) * int(b[2])


def mv_macs(a: Any, v: Any, *args: Any, **kw: Any) -> int:
    """(M, K) @ (K,): M*K MACs."""
    return int(a[0]) * int(a[1])


def dot_macs(a: Any, b: Any, *args: Any, **kw: Any) -> int:
    """(K,) . (K,): K MACs."""
    return numel(a)


def _add_term(out: Any, beta: Any, alpha: Any) -> int:
    """beta * self + alpha * (product): one add per output element (none when
    beta == 0), plus a multiply for each of beta, alpha that is not 1."""
    n = numel(first_shape(out))
    if beta == 0:
        return n * int(alpha != 1)
    return n * (1 + int(beta != 1) + int(alpha != 1))


@_reg(["mm"], "mm", macs=mm_macs)
def mm_ops(a: Any, b: Any, *, out_shape: Any = None, **kw: Any) -> int:
    """2 per MAC."""
    return 2 * mm_macs(a, b)


@_reg(["bmm"], "bmm", macs=bmm_macs)
def bmm_ops(a: Any, b: Any, *, out_shape: Any = None, **kw: Any) -> int:
    """2 per MAC."""
    return 2 * bmm_macs(a, b)


@_reg(["dot", "vdot"], "dot", macs=dot_macs)
def dot_ops(a: Any, b: Any, *, out_shape: Any = None, **kw: Any) -> int:
    """2 per MAC."""
    return 2 * dot_macs(a, b)


@_reg(["mv"], "mv", macs=mv_macs)
def mv_ops(a: Any, v: Any, *, out_shape: Any = None, **kw: Any) -> int:
    """2 per MAC."""
    return 2 * mv_macs(a, v)


def _shifted(macs_fn: Any) -> Any:
    def fn(bias: Any, a: Any, b: Any, *args: Any, **kw: Any) -> int:
        return int(macs_fn(a, b))

    fn.__doc__ = f"MACs of {macs_fn.__name__} applied to arguments 2 and 3."
    return fn


@_reg(["addmm"], "addmm", macs=_shifted(mm_macs))
def addmm_ops(
    bias: Any, a: Any, b: Any, *, out_shape: Any = None, beta: Any = 1, alpha: Any = 1, **kw: Any
) -> int:
    """beta*bias + alpha*(a @ b): 2 per MAC plus the bias add (1 per output)."""
    return 2 * mm_macs(a, b) + _add_term(out_shape, beta, alpha)


@_reg(["baddbmm"], "baddbmm", macs=_shifted(bmm_macs))
def baddbmm_ops(
    bias: Any, a: Any, b: Any, *, out_shape: Any = None, beta: Any = 1, alpha: Any = 1, **kw: Any
) -> int:
    """Batched addmm: 2 per MAC plus the add (1 per output)."""
    return 2 * bmm_macs(a, b) + _add_term(out_shape, beta, alpha)


@_reg(["addmv"], "addmv", macs=_shifted(mv_macs))
def addmv_ops(
    bias: Any, a: Any, v: Any, *, out_shape: Any = None, beta: Any = 1, alpha: Any = 1, **kw: Any
) -> int:
    """2 per MAC plus the add (1 per output)."""
    return 2 * mv_macs(a, v) + _add_term(out_shape, beta, alpha)


# ------------------------------------------------------------ convolution
def _conv_macs(x: Any, w: Any, out: Any, transposed: bool) -> int:
    """Every output position of a convolution (input position, if transposed)
    multiplies one C_in/groups x kernel window per output channel, so
    MACs = batch * prod(spatial) * prod(weight shape); the weight shape
    (C_out, C_in/groups, *k) already holds the group division."""
    k = len(w) - 2
    spatial = (x if transposed else out)[-k:] if k else ()
    batch = numel(x[: -(k + 1)])
    return batch * numel(spatial) * numel(w)


def conv_macs(
    x: Any,
    w: Any,
    bias: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    transposed: bool,
    *args: Any,
    out_shape: Any = None,
    **kw: Any,
) -> int:
    """MACs of one convolution call (see :func:`_conv_macs`)."""
    return _conv_macs(x, w, first_shape(out_shape), bool(transposed))


@_reg(["convolution", "_convolution"], "convolution", macs=conv_macs)
def conv_ops(
    x: Any,
    w: Any,
    bias: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    transposed: bool,
    *args: Any,
    out_shape: Any = None,
    **kw: Any,
) -> int:
    """2 per MAC, plus one add per output element for the bias."""
    out = first_shape(out_shape)
    return 2 * _conv_macs(x, w, out, bool(transposed)) + (numel(out) if bias is not None else 0)


@_reg(["convolution_backward"], "convolution")
def conv_backward_ops(
    g: Any,
    x: Any,
    w: Any,
    bias_sizes: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    transposed: bool,
    output_padding: Any,
    groups: int,
    output_mask: Sequence[bool],
    *,
    out_shape: Any = None,
    **kw: Any,
) -> int:
    """Each forward product x[i] * w[j] feeding y[o] appears once in
    grad_input (g[o] * w[j]) and once in grad_weight (g[o] * x[i]), so each of
    the two costs exactly the forward MACs; they are counted only when
    ``output_mask`` asks for them (autograd does not ask for grad_input of a
    layer whose input needs no gradient, e.g. the first layer).  grad_bias
    reduces g over batch and space: numel(g) - C_out adds."""
    fwd_macs = _conv_macs(x, w, g, bool(transposed))
    ops = 2 * fwd_macs * (int(bool(output_mask[0])) + int(bool(output_mask[1])))
    if output_mask[2]:
        k = len(w) - 2
        ops += numel(g) - int(g[-(k + 1)])
    return ops


# ------------------------------------------------------------ pooling
def _max_pool(nd: int) -> Any:
    def fn(x: Any, kernel_size: Any, *args: Any, out_shape: Any = None, **kw: Any) -> int:
        """Max over a k-element window: k - 1 compares per output."""
        return numel(first_shape(out_shape)) * (math.prod(ntuple(kernel_size, nd)) - 1)

    return fn


def _avg_pool(nd: int) -> Any:
    def fn(x: Any, kernel_size: Any, *args: Any, out_shape: Any = None, **kw: Any) -> int:
        """Mean over a k-element window: k - 1 adds + 1 divide = k per output
        (padding positions included, as the kernel visits them)."""
        return numel(first_shape(out_shape)) * math.prod(ntuple(kernel_size, nd))

    return fn


def _avg_pool_backward(nd: int) -> Any:
    def fn(g: Any, x: Any, kernel_size: Any, *args: Any, out_shape: Any = None, **kw: Any) -> int:
        """Each output gradient is divided by k (1) and added to k inputs (k)."""
        return numel(g) * (math.prod(ntuple(kernel_size, nd)) + 1)

    return fn


def scatter_add_ops(g: Any, *args: Any, out_shape: Any = None, **kw: Any) -> int:
    """Gradient routed back to one input per output element: 1 add each."""
    return numel(g)


for _nd in (2, 3):
    _reg([f"max_pool{_nd}d_with_indices", f"max_pool{_nd}d"], f"max_pool{_nd}d")(_max_pool(_nd))
    _reg([f"max_pool{_nd}d_with_indices_backward", f"max_pool{_nd}d_backward"], f"max_pool{_nd}d")(
        scatter_add_ops
    )
    _reg([f"avg_pool{_nd}d"], f"avg_pool{_nd}d")(_avg_pool(_nd))
    _reg([f"avg_pool{_nd}d_backward"], f"avg_pool{_nd}d")(_avg_pool_backward(_nd))
_reg(["max_pool1d"], "max_pool1d")(_max_pool(1))


def adaptive_window_total(in_sizes: Sequence[int], out_sizes: Sequence[int]) -> int:
    """Sum over all output positions of the window size of adaptive pooling,
    whose i-th window along a dim spans [floor(i*I/O), ceil((i+1)*I/O))."""
    total = 1
    for size_in, size_out in zip(in_sizes, out_sizes, strict=True):
        size_in, size_out = int(size_in), int(size_out)
        total *= sum(
            -((-(i + 1) * size_in) // size_out) - (i * size_in) // size_out for i in range(size_out)
        )
    return total


def _pooled_shape(out_shape: Any) -> torch.Size:
    """The output shape of an adaptive pooling op (the counter always passes it)."""
    out = first_shape(out_shape)
    if out is None:
        raise TypeError(f"adaptive pooling formula needs the output shape, got {out_shape!r}")
    return out


def _adaptive_avg(nd: int) -> Any:
    def fn(x: Any, output_size: Any, *args: Any, out_shape: Any = None, **kw: Any) -> int:
        """Sum of window sizes (k - 1 adds + 1 divide = k per output)."""
        out = _pooled_shape(out_shape)
        lead = numel(x[:-nd])
        return lead * adaptive_window_total(x[-nd:], out[-nd:])

    return fn


def _adaptive_avg_backward(nd: int) -> Any:
    def fn(g: Any, x: Any, *args: Any, out_shape: Any = None, **kw: Any) -> int:
        """Each output gradient divided by its window size (1) and added to
        each input of the window (k)."""
        lead = numel(x[:-nd])
        return lead * adaptive_window_total(x[-nd:], g[-nd:]) + numel(g)

    return fn


def _adaptive_max(nd: int) -> Any:
    def fn(x: Any, output_size: Any, *args: Any, out_shape: Any = None, **kw: Any) -> int:
        """k - 1 compares per output window."""
        out = _pooled_shape(out_shape)
        lead = numel(x[:-nd])
        return lead * adaptive_window_total(x[-nd:], out[-nd:]) - numel(out)

    return fn


for _nd in (2, 3):
    _reg([f"_adaptive_avg_pool{_nd}d", f"adaptive_avg_pool{_nd}d"], f"adaptive_avg_pool{_nd}d")(
        _adaptive_avg(_nd)
    )
    _reg([f"_adaptive_avg_pool{_nd}d_backward"], f"adaptive_avg_pool{_nd}d")(
        _adaptive_avg_backward(_nd)
    )
    _reg([f"adaptive_max_pool{_nd}d"], f"adaptive_max_pool{_nd}d")(_adaptive_max(_nd))
    _reg([f"adaptive_max_pool{_nd}d_backward"], f"adaptive_max_pool{_nd}d")(scatter_add_ops)


# ------------------------------------------------------------ attention
def _attention_sizes(q: Any, k: Any, v: Any) -> tuple[int, int, int]:
    """(matmul MACs, score elements n, score rows r) for q (.., L, Dk),
    k (.., S, Dk), v (.., S, Dv); the leading dims of q (batch, heads) count."""
    lead, length, d_k = numel(q[:-2]), int(q[-2]), int(q[-1])
    source, d_v = int(k[-2]), int(v[-1])
    scores = lead * length * source
    return scores * (d_k + d_v), scores, lead * length


def attention_macs(q: Any, k: Any, v: Any, *args: Any, **kw: Any) -> int:
    """Q K^T (L*S*Dk) and P V (L*S*Dv) per batch x head."""
    return _attention_sizes(q, k, v)[0]


@_reg(["_scaled_dot_product_flash_attention_for_cpu"], "attention", macs=attention_macs)
def cpu_attention_ops(
    q: Any,
    k: Any,
    v: Any,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    attn_mask: Any = None,
    out_shape: Any = None,
    **kw: Any,
) -> int:
    """The fused CPU kernel, counted like the math path that runs on the meta
    device: scale q and k by sqrt(scale) (numel q + numel k), the two matmuls
    (2 per MAC), mask add (n, when causal or masked), safe softmax (6n - 2r),
    dropout (3n, when p > 0)."""
    macs, n, r = _attention_sizes(q, k, v)
    ops = numel(q) + numel(k) + 2 * macs + 6 * n - 2 * r
    ops += n if (is_causal or attn_mask is not None) else 0
    return ops + (3 * n if dropout_p else 0)


@_reg(["_scaled_dot_product_flash_attention_for_cpu_backward"], "attention")
def cpu_attention_backward_ops(
    g: Any,
    q: Any,
    k: Any,
    v: Any,
    out: Any,
    lse: Any,
    dropout_p: float = 0.0,
    *args: Any,
    out_shape: Any = None,
    **kw: Any,
) -> int:
    """Four matmuls (dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q: twice
    the forward MACs), softmax backward (4n - r), the sqrt(scale) factor on dq
    and dk (numel q + numel k), dropout mask (n, when p > 0)."""
    macs, n, r = _attention_sizes(q, k, v)
    ops = 2 * 2 * macs + 4 * n - r + numel(q) + numel(k)
    return ops + (n if dropout_p else 0)


# ------------------------------------------------------------ embedding, upsampling
# The embedding lookup and nearest upsampling are gathers (0, listed as known
# zero); their backward scatter-adds one gradient element each.
_reg(["embedding_dense_backward", "embedding_backward"], "embedding")(scatter_add_ops)
for _nd in (1, 2, 3):
    _reg(
        [f"upsample_nearest{_nd}d_backward", f"_upsample_nearest_exact{_nd}d_backward"],
        f"upsample_nearest{_nd}d",
    )(scatter_add_ops)


@_reg(["upsample_bilinear2d"], "upsample_bilinear2d")
def bilinear_ops(x: Any, *args: Any, out_shape: Any = None, **kw: Any) -> int:
    """Weighted sum of 4 neighbours: 4 mul + 3 add = 7 per output element."""
    return 7 * numel(first_shape(out_shape))


@_reg(["upsample_bilinear2d_backward"], "upsample_bilinear2d")
def bilinear_backward_ops(g: Any, *args: Any, out_shape: Any = None, **kw: Any) -> int:
    """Each output gradient times 4 weights, added into 4 inputs: 8 each."""
    return 8 * numel(g)


__all__ = ["TABLE", "adaptive_window_total"]
