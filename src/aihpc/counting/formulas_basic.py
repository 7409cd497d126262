"""Counting formulas: element-wise arithmetic, activations, reductions,
softmax, losses and dropout.  Conventions: see :mod:`aihpc.counting`.

``n`` is the number of output elements (for reductions: input elements),
``r`` the number of rows a softmax or reduction produces.  Every formula
below states its derivation as "op count per element = sum of primitives".
"""

from __future__ import annotations

from typing import Any

from aihpc.counting.formula_table import FormulaTable, first_shape, is_shape, numel, rows_along

TABLE = FormulaTable()
_reg = TABLE.register

# ------------------------------------------------------------ element-wise
# One primitive per output element: arithmetic, comparison, logic, select,
# and each "special function" (exp, log, sqrt, rsqrt, reciprocal, tanh, erf,
# sin, cos, pow), counted as one operation like an FMA-less FLOP.
_UNARY_1 = [
    "neg",
    "abs",
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "sqrt",
    "rsqrt",
    "reciprocal",
    "tanh",
    "erf",
    "erfc",
    "sin",
    "cos",
    "sign",
    "floor",
    "ceil",
    "round",
    "trunc",
    "pow",
    "logical_not",
    "isnan",
    "isinf",
    "isneginf",
]
for _name in _UNARY_1:
    TABLE.constant([_name, _name + "_"], _name, 1)

# relu(x) = max(x, 0): one max per element.
TABLE.constant(["relu", "relu_"], "relu", 1)

_BINARY_1 = [
    "mul",
    "maximum",
    "minimum",
    "fmax",
    "fmin",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "logical_and",
    "logical_or",
    "logical_xor",
    "remainder",
    "fmod",
]
for _name in _BINARY_1:
    TABLE.constant([_name, _name + "_"], _name, 1)

# where(c, a, b) and masked_fill: one select per output element.
TABLE.constant(["where"], "where", 1)
TABLE.constant(["masked_fill", "masked_fill_"], "masked_fill", 1)


def _scaled_binary(*args: Any, out_shape: Any = None, alpha: Any = 1, **kwargs: Any) -> int:
    """add/sub/rsub: ``a + alpha*b`` -> 1 op per element, 2 when ``alpha != 1``."""
    return numel(first_shape(out_shape)) * (1 if alpha == 1 else 2)


for _name in ("add", "sub", "rsub"):
    _reg([_name, _name + "_"], _name)(_scaled_binary)


@_reg(["div", "div_"], "div")
def div_ops(*args: Any, out_shape: Any = None, rounding_mode: Any = None, **kwargs: Any) -> int:
    """a / b: 1 per element; with a rounding mode (floor/trunc) 2 (divide, round)."""
    return numel(first_shape(out_shape)) * (1 if rounding_mode is None else 2)


@_reg(["clamp", "clamp_"], "clamp")
def clamp_ops(x: Any, lo: Any = None, hi: Any = None, *, out_shape: Any = None, **kw: Any) -> int:
    """clamp(x, lo, hi) = min(max(x, lo), hi): 1 per element per bound given."""
    bounds = (lo is not None) + (hi is not None)
    return numel(first_shape(out_shape)) * bounds


TABLE.constant(["clamp_min", "clamp_min_", "clamp_max", "clamp_max_"], "clamp", 1)


@_reg(["addcmul", "addcmul_", "addcdiv", "addcdiv_"], "addcmul")
def addcmul_ops(*args: Any, out_shape: Any = None, value: Any = 1, **kwargs: Any) -> int:
    """x + value * (a op b): op, add -> 2 per element; 3 when ``value != 1``."""
    return numel(first_shape(out_shape)) * (2 if value == 1 else 3)


# lerp(a, b, w) = a + w * (b - a): sub, mul, add.
TABLE.constant(["lerp", "lerp_"], "lerp", 3)

# ------------------------------------------------------------ activations
# threshold(x, t, v) = x > t ? x : v: compare + select.
TABLE.constant(["threshold", "threshold_"], "threshold", 2)
# relu backward: g * (y > 0) = compare + select.
TABLE.constant(["threshold_backward"], "relu", 2)
# hardtanh/relu6 = min(max(x, lo), hi): 2.  Backward: g * (lo < x < hi):
# 2 compares + and + select = 4.
TABLE.constant(["hardtanh", "hardtanh_"], "hardtanh", 2)
TABLE.constant(["hardtanh_backward"], "hardtanh", 4)
# leaky_relu: x > 0 ? x : s*x -> compare, mul, select = 3; backward: compare,
# g*s, select = 3.
TABLE.constant(["leaky_relu", "leaky_relu_"], "leaky_relu", 3)
TABLE.constant(["leaky_relu_backward"], "leaky_relu", 3)
# sigmoid = 1 / (1 + exp(-x)): neg, exp, add, div = 4.
# backward from y: g * y * (1 - y): sub, mul, mul = 3.
TABLE.constant(["sigmoid", "sigmoid_"], "sigmoid", 4)
TABLE.constant(["sigmoid_backward"], "sigmoid", 3)
# tanh is a primitive (1, above); backward from y: g * (1 - y*y): mul, sub, mul = 3.
TABLE.constant(["tanh_backward"], "tanh", 3)
# silu = x * sigmoid(x): 4 + 1 = 5.  Backward: s = sigmoid(x) (4); 1 - s,
# x * (1 - s), 1 + ., s * ., g * . (5) = 9.
TABLE.constant(["silu", "silu_"], "silu", 5)
TABLE.constant(["silu_backward"], "silu", 9)
# hardswish = x * relu6(x + 3) / 6: add, 2 (clamp), mul, div = 5.
# backward: g * (x < -3 ? 0 : x <= 3 ? (2x + 3) / 6 : 1): 2 compares,
# 2x, +3, /6, *g, 2 selects = 8.
TABLE.constant(["hardswish", "hardswish_"], "hardswish", 5)
TABLE.constant(["hardswish_backward"], "hardswish", 8)
# hardsigmoid = relu6(x + 3) / 6: add, 2, div = 4.  backward: g/6 where
# -3 < x < 3: 2 compares, and, div, select = 5.
TABLE.constant(["hardsigmoid", "hardsigmoid_"], "hardsigmoid", 4)
TABLE.constant(["hardsigmoid_backward"], "hardsigmoid", 5)


@_reg(["gelu", "gelu_"], "gelu")
def gelu_ops(
    x: Any, *args: Any, out_shape: Any = None, approximate: str = "none", **kw: Any
) -> int:
    """Exact: 0.5 * x * (1 + erf(x / sqrt 2)): mul, erf, add, mul, mul = 5.

    tanh: 0.5 * x * (1 + tanh(c * (x + 0.044715 x^3))): x*x, *x, *0.044715,
    +x, *c, tanh, +1, *x, *0.5 = 9.
    """
    if args:
        approximate = args[0]
    return numel(first_shape(out_shape)) * (5 if approximate == "none" else 9)


@_reg(["gelu_backward"], "gelu")
def gelu_backward_ops(
    g: Any, x: Any, *args: Any, out_shape: Any = None, approximate: str = "none", **kw: Any
) -> int:
    """Exact: g * (Phi(x) + x * phi(x)); Phi = 0.5 (1 + erf(x/sqrt 2)) (4),
    phi = exp(-x^2 / 2) / sqrt(2 pi) (x*x, *-0.5, exp, *c = 4), x*phi, add, *g
    -> 11.  tanh: t = tanh(inner) (6, as forward); 0.5 (1 + t) (2);
    1 - t^2 (2); x^2, *3*0.044715, +1, *c (4); products with (1 - t^2) and
    0.5 x (3); add, *g (2) -> 19.
    """
    if args:
        approximate = args[0]
    return numel(first_shape(out_shape)) * (11 if approximate == "none" else 19)


# ------------------------------------------------------------ reductions
def _in_shape(args: tuple[Any, ...]) -> Any:
    return args[0] if args and is_shape(args[0]) else None


def reduce_ops(*args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    """Reducing n inputs to m outputs takes n - m binary ops (adds, max, ...)."""
    return max(numel(_in_shape(args)) - numel(first_shape(out_shape)), 0)


for _name in ("sum", "prod", "amax", "amin", "any", "all", "argmax", "argmin"):
    _reg([_name], _name)(reduce_ops)


@_reg(["mean"], "mean")
def mean_ops(*args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    """n - m adds and m divisions: exactly n (the input numel)."""
    return numel(_in_shape(args))


@_reg(["max", "min"], "max")
def max_ops(*args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    """``max(a, b)`` (two tensors) is element-wise: 1 per output element;
    ``max(x)`` / ``max(x, dim)`` is a reduction: n - m compares."""
    if len(args) >= 2 and is_shape(args[1]):
        return numel(first_shape(out_shape))
    return max(numel(_in_shape(args)) - numel(first_shape(out_shape)), 0)


@_reg(["var", "var_mean"], "var")
def var_ops(*args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    """mean (n), x - mean (n), square (n), sum (n - m), divide (m) = 4n."""
    return 4 * numel(_in_shape(args))


@_reg(["std", "std_mean"], "std")
def std_ops(*args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    """var (4n) plus one sqrt per output (m)."""
    return 4 * numel(_in_shape(args)) + numel(first_shape(out_shape))


@_reg(["linalg_vector_norm", "norm"], "norm")
def norm_ops(*args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    """|x|^p (n), sum (n - m), root (m) = 2n (p = 2: square, add, sqrt)."""
    return 2 * numel(_in_shape(args))


# ------------------------------------------------------------ softmax
def _softmax_sizes(x: Any, dim: int) -> tuple[int, int]:
    return numel(x), rows_along(x, dim)


@_reg(["_softmax"], "softmax")
def softmax_ops(x: Any, dim: int, *args: Any, out_shape: Any = None, **kw: Any) -> int:
    """Row max (n - r), x - max (n), exp (n), row sum (n - r), divide (n) = 5n - 2r."""
    n, r = _softmax_sizes(x, dim)
    return 5 * n - 2 * r


@_reg(["_safe_softmax"], "softmax")
def safe_softmax_ops(x: Any, dim: int, *args: Any, out_shape: Any = None, **kw: Any) -> int:
    """Softmax (5n - 2r) plus one compare per element to find fully masked
    (all -inf) rows, which are zeroed = 6n - 2r."""
    n, r = _softmax_sizes(x, dim)
    return 6 * n - 2 * r


@_reg(["_log_softmax"], "log_softmax")
def log_softmax_ops(x: Any, dim: int, *args: Any, out_shape: Any = None, **kw: Any) -> int:
    """Row max (n - r), x - max (n), exp (n), row sum (n - r), log (r),
    shifted - log-sum (n) = 5n - r."""
    n, r = _softmax_sizes(x, dim)
    return 5 * n - r


@_reg(["_softmax_backward_data"], "softmax")
def softmax_backward_ops(
    g: Any, y: Any, dim: int, *args: Any, out_shape: Any = None, **kw: Any
) -> int:
    """dx = y * (g - sum(g * y)): mul (n), row sum (n - r), sub (n), mul (n) = 4n - r."""
    n, r = _softmax_sizes(y, dim)
    return 4 * n - r


@_reg(["_log_softmax_backward_data"], "log_softmax")
def log_softmax_backward_ops(
    g: Any, y: Any, dim: int, *args: Any, out_shape: Any = None, **kw: Any
) -> int:
    """dx = g - exp(y) * sum(g): row sum (n - r), exp (n), mul (n), sub (n) = 4n - r."""
    n, r = _softmax_sizes(y, dim)
    return 4 * n - r


# ------------------------------------------------------------ losses
_REDUCTION_NONE, _REDUCTION_MEAN, _REDUCTION_SUM = 0, 1, 2


@_reg(["nll_loss_forward", "nll_loss2d_forward"], "nll_loss")
def nll_loss_ops(
    x: Any, target: Any, weight: Any, reduction: int, *args: Any, out_shape: Any = None, **kw: Any
) -> int:
    """Per target t: -x[t] (1, the gather itself is free); sum: + (T - 1) adds;
    mean: + 1 division -> none T, sum 2T - 1, mean 2T.  A class ``weight``
    adds a multiply per target (T) and, for mean, the weight sum (T - 1)."""
    t = numel(target)
    ops = {_REDUCTION_NONE: t, _REDUCTION_SUM: 2 * t - 1, _REDUCTION_MEAN: 2 * t}[reduction]
    if weight is not None:
        ops += t + (t - 1 if reduction == _REDUCTION_MEAN else 0)
    return ops


@_reg(["nll_loss_backward", "nll_loss2d_backward"], "nll_loss")
def nll_loss_backward_ops(
    g: Any,
    x: Any,
    target: Any,
    weight: Any,
    reduction: int,
    *args: Any,
    out_shape: Any = None,
    **kw: Any,
) -> int:
    """grad_input is zero except at the targets, which get -g (T negations);
    mean first divides g by the total weight (+1); a class weight multiplies
    each (+T).  The zero fill is free."""
    t = numel(target)
    ops = t + (1 if reduction == _REDUCTION_MEAN else 0)
    return ops + (t if weight is not None else 0)


@_reg(["mse_loss"], "mse_loss")
def mse_loss_ops(
    x: Any,
    target: Any,
    reduction: int = _REDUCTION_MEAN,
    *args: Any,
    out_shape: Any = None,
    **kw: Any,
) -> int:
    """(x - y)^2: sub, mul (2n); sum adds n - 1; mean one more division ->
    none 2n, sum 3n - 1, mean 3n."""
    n = numel(x)
    return {_REDUCTION_NONE: 2 * n, _REDUCTION_SUM: 3 * n - 1, _REDUCTION_MEAN: 3 * n}[reduction]


@_reg(["mse_loss_backward"], "mse_loss")
def mse_loss_backward_ops(
    g: Any, x: Any, target: Any, reduction: int, *args: Any, out_shape: Any = None, **kw: Any
) -> int:
    """Reduced: s = 2 g (/ n for mean) is 1-2 scalar ops, then (x - y) * s:
    2n -> mean 2n + 2, sum 2n + 1.  none: (x - y) * 2 * g = 3n."""
    n = numel(x)
    return {_REDUCTION_NONE: 3 * n, _REDUCTION_SUM: 2 * n + 1, _REDUCTION_MEAN: 2 * n + 2}[
        reduction
    ]


# ------------------------------------------------------------ dropout
# bernoulli(p): one compare of a uniform sample with p per element (random
# number generation itself is not arithmetic and is not counted).
TABLE.constant(["bernoulli", "bernoulli_"], "dropout", 1)


@_reg(["native_dropout"], "dropout")
def native_dropout_ops(
    x: Any, p: float, train: Any = True, *, out_shape: Any = None, **kw: Any
) -> int:
    """Training: mask compare (n), x * mask (n), * 1/(1-p) (n) = 3n; eval: 0."""
    return 3 * numel(x) if train or train is None else 0


# backward: g * mask * scale = 2n.
TABLE.constant(["native_dropout_backward"], "dropout", 2)
