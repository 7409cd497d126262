"""Counting formulas for normalisation: batch norm (training, eval, backward, the
vendor kernels), layer norm and group norm.  Conventions: see
:mod:`aihpc.counting`; ``n`` is an element count, ``C`` channels, ``R`` rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aihpc.counting.formula_table import FormulaTable, numel

TABLE = FormulaTable()
_reg = TABLE.register


# ------------------------------------------------------------ batch norm
def bn_forward(x: Any, weight: Any, bias: Any, training: bool, running: bool) -> int:
    """Training (batch statistics), n elements, C channels:
    mean: n - C adds + C divisions = n; variance: x - mean, square (2n),
    n - C adds + C divisions (n) = 3n; 1/sqrt(var + eps): 2C;
    normalise (x - mean) * invstd: 2n; affine * gamma + beta: n each.
    Running statistics (when tracked): r = (1-m) r + m s is 3C for the mean,
    4C for the variance (with the n/(n-1) correction) = 7C.
    -> 6n + n[gamma] + n[beta] + 2C + 7C[running].
    Eval (running statistics): folded affine y = x * a + b: 2n, with
    a = gamma / sqrt(var + eps) (2C + C[gamma]), b = beta - mean * a
    (C mul + C[beta] sub).
    """
    n, c = numel(x), int(x[1]) if len(x) > 1 else 1
    if training:
        ops = 6 * n + 2 * c + (7 * c if running else 0)
        return ops + (n if weight is not None else 0) + (n if bias is not None else 0)
    return 2 * n + 3 * c + (c if weight is not None else 0) + (c if bias is not None else 0)


def bn_backward(x: Any, weight: Any, training: bool, mask: Sequence[bool]) -> int:
    """Training: dbeta = sum g (n - C); xhat = (x - mean) * invstd (2n);
    dgamma = sum g*xhat (2n - C); dx = gamma*invstd * (g - dbeta/m - xhat*dgamma/m)
    needs both sums plus 4n, 2C for the /m and C[gamma] for gamma*invstd
    -> with grad_input: 9n + C[gamma]; without: (n - C)[dbeta] + (4n - C)[dgamma].
    Eval (running statistics): dx = g * gamma * invstd: n + 2C + C[gamma];
    dgamma, dbeta as above.
    """
    n, c = numel(x), int(x[1]) if len(x) > 1 else 1
    has_w = weight is not None
    if training and mask[0]:
        return 9 * n + (c if has_w else 0)
    ops = (n + 2 * c + (c if has_w else 0)) if mask[0] else 0
    ops += (4 * n - c) if mask[1] else 0
    ops += (n - c) if mask[2] else 0
    return ops


@_reg(
    [
        "native_batch_norm",
        "cudnn_batch_norm",
        "miopen_batch_norm",
        "_native_batch_norm_legit",
        "_native_batch_norm_legit_functional",
    ],
    "batch_norm",
)
def batch_norm_ops(
    x: Any, weight: Any, bias: Any, *args: Any, out_shape: Any = None, **kw: Any
) -> int:
    """(x, w, b, running_mean, running_var, training, ...) or, for the
    ``no_stats`` overload, (x, w, b, training, ...)."""
    if isinstance(args[0], bool):  # _native_batch_norm_legit.no_stats
        return bn_forward(x, weight, bias, args[0], running=False)
    running_mean, training = args[0], bool(args[2])
    return bn_forward(x, weight, bias, training, running=running_mean is not None)


@_reg(["_native_batch_norm_legit_no_training", "_batch_norm_no_update"], "batch_norm")
def batch_norm_eval_ops(
    x: Any, weight: Any, bias: Any, running_mean: Any, *args: Any, out_shape: Any = None, **kw: Any
) -> int:
    """Normalisation with running statistics (batch statistics if there are none)."""
    if running_mean is None:
        return bn_forward(x, weight, bias, True, running=False)
    return bn_forward(x, weight, bias, False, running=True)


@_reg(["_batch_norm_with_update"], "batch_norm")
def batch_norm_update_ops(
    x: Any, weight: Any, bias: Any, *args: Any, out_shape: Any = None, **kw: Any
) -> int:
    """Training normalisation that updates running statistics."""
    return bn_forward(x, weight, bias, True, running=True)


@_reg(["native_batch_norm_backward"], "batch_norm")
def batch_norm_backward_ops(
    g: Any,
    x: Any,
    weight: Any,
    running_mean: Any,
    running_var: Any,
    save_mean: Any,
    save_invstd: Any,
    train: bool,
    eps: float,
    output_mask: Sequence[bool],
    *,
    out_shape: Any = None,
    **kw: Any,
) -> int:
    """See :func:`bn_backward`."""
    return bn_backward(x, weight, bool(train), output_mask)


@_reg(["batch_norm_backward"], "batch_norm")
def batch_norm_backward2_ops(
    g: Any,
    x: Any,
    weight: Any,
    running_mean: Any,
    running_var: Any,
    save_mean: Any,
    save_var: Any,
    update: bool,
    eps: float,
    output_mask: Sequence[bool],
    *args: Any,
    out_shape: Any = None,
    **kw: Any,
) -> int:
    """See :func:`bn_backward` (``update`` is true in training)."""
    return bn_backward(x, weight, bool(update) or running_mean is None, output_mask)


@_reg(["cudnn_batch_norm_backward", "miopen_batch_norm_backward"], "batch_norm")
def batch_norm_backward_gpu_ops(
    x: Any, g: Any, weight: Any, *args: Any, out_shape: Any = None, **kw: Any
) -> int:
    """Vendor kernels: training mode, all three gradients."""
    return bn_backward(x, weight, True, (True, True, True))


# ------------------------------------------------------------ layer / group norm
def _row_norm_forward(n: int, rows: int, has_w: bool, has_b: bool) -> int:
    """Statistics per row of D elements: mean (n), variance (3n), 1/sqrt(var +
    eps) (2 per row), normalise (2n), affine (n each) -> 6n + 2R + n[w] + n[b]."""
    return 6 * n + 2 * rows + (n if has_w else 0) + (n if has_b else 0)


def _row_norm_backward(n: int, rows: int, params: int, has_w: bool, mask: Sequence[bool]) -> int:
    """dx = rstd * (gw - mean(gw) - xhat * mean(gw*xhat)) with gw = g * w (n[w]):
    xhat (2n), row sums (n - R, 2n - R), 2R for the /D, 4n -> 9n + n[w].
    dw = sum over rows of g * xhat: 2n - P (+2n for xhat if dx was not needed);
    db = sum over rows of g: n - P (P = number of affine parameters)."""
    ops = (9 * n + (n if has_w else 0)) if mask[0] else 0
    if mask[1]:
        ops += 2 * n - params + (0 if mask[0] else 2 * n)
    if mask[2]:
        ops += n - params
    return ops


@_reg(["native_layer_norm"], "layer_norm")
def layer_norm_ops(
    x: Any,
    normalized_shape: Any,
    weight: Any,
    bias: Any,
    *args: Any,
    out_shape: Any = None,
    **kw: Any,
) -> int:
    """See :func:`_row_norm_forward`; rows = numel / prod(normalized_shape)."""
    n, d = numel(x), numel(normalized_shape)
    return _row_norm_forward(n, n // d if d else 0, weight is not None, bias is not None)


@_reg(["native_layer_norm_backward"], "layer_norm")
def layer_norm_backward_ops(
    g: Any,
    x: Any,
    normalized_shape: Any,
    mean: Any,
    rstd: Any,
    weight: Any,
    bias: Any,
    output_mask: Sequence[bool],
    *,
    out_shape: Any = None,
    **kw: Any,
) -> int:
    """See :func:`_row_norm_backward`."""
    n, d = numel(x), numel(normalized_shape)
    return _row_norm_backward(n, n // d if d else 0, d, weight is not None, output_mask)


@_reg(["native_group_norm"], "group_norm")
def group_norm_ops(
    x: Any,
    weight: Any,
    bias: Any,
    batch: int,
    channels: int,
    hw: int,
    groups: int,
    *args: Any,
    out_shape: Any = None,
    **kw: Any,
) -> int:
    """As layer norm with R = N * groups rows."""
    return _row_norm_forward(
        numel(x), int(batch) * int(groups), weight is not None, bias is not None
    )


@_reg(["native_group_norm_backward"], "group_norm")
def group_norm_backward_ops(
    g: Any,
    x: Any,
    mean: Any,
    rstd: Any,
    weight: Any,
    batch: int,
    channels: int,
    hw: int,
    groups: int,
    output_mask: Sequence[bool],
    *,
    out_shape: Any = None,
    **kw: Any,
) -> int:
    """As layer norm with R = N * groups rows and C affine parameters."""
    return _row_norm_backward(
        numel(x), int(batch) * int(groups), int(channels), weight is not None, output_mask
    )


__all__ = ["TABLE", "bn_backward", "bn_forward"]
