"""The operators of Level 0 (Deep500's operator level): what runs, at which
shapes, and the float64 reference each is validated against.

Each :class:`OpCase` names an operator and gives

* ``build(shape, dtype, device)`` -> ``(module, inputs)``: the *candidate*,
  an ``nn.Module`` in training mode whose ``forward(*inputs)`` is the operator
  (a function is wrapped in a small module), and its inputs.  The module
  returns one tensor or a tuple of tensors; the first is the one
  differentiated (an LSTM cell returns ``(h', c')`` and backward flows from
  ``h'``).  Every floating-point input is differentiated, as are all
  parameters; integer inputs (class targets) are data.
* ``reference(module, *inputs)``: the same operator written out independently
  from its definition (convolution as im2col by ``unfold`` and a product,
  batch norm from its mean and variance, softmax from ``exp``, ...), reading
  the parameters and settings (stride, eps, ...) of ``module``.  It is called
  on a float64 copy of the module and float64 copies of the inputs, so a
  candidate that is wrong in *its* code differs from it, whatever the dtype.
* three shapes (``dict`` of named sizes, the batch-like size first, the one
  ``scale`` multiplies): ``quick`` (a smoke test: the whole catalogue in
  seconds), ``full`` (a few milliseconds per forward on a 2-core CPU, so the
  catalogue runs in minutes; scale it up on a GPU) and ``check`` (tiny, for
  ``torch.autograd.gradcheck`` in float64, whose cost grows with the number
  of input elements times the number of output elements).

:data:`CATALOGUE` maps names to cases in display order; :func:`register`
adds one (a test injects a deliberately wrong operator this way).  Builders
draw random values from the global RNG: :func:`build_case` seeds it.

:mod:`aihpc.bench.op_check` checks a case against its reference.

Adding an operator: write its builder (module + inputs at the given dtype and
device, in training mode), its reference (float64, from the definition, not
by calling the same torch kernel where a definition is short), and register
an :class:`OpCase` with quick, full and check shapes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aihpc.base.checks import integer
from aihpc.base.errors import ConfigError

Output = Tensor | tuple[Tensor, ...]
Built = tuple[nn.Module, tuple[Tensor, ...]]
"""What a builder returns: the operator as a module, and its inputs."""
Builder = Callable[[Mapping[str, int], torch.dtype, torch.device], Built]
Reference = Callable[..., Output]


@dataclass(frozen=True)
class OpCase:
    """One operator of the catalogue (see the module docstring for each field)."""

    name: str
    family: str
    build: Builder
    reference: Reference
    quick: Mapping[str, int]
    full: Mapping[str, int]
    check: Mapping[str, int]
    note: str = ""

    def __post_init__(self) -> None:
        for label, shape in (("quick", self.quick), ("full", self.full), ("check", self.check)):
            if not shape or any(not isinstance(v, int) or v < 1 for v in shape.values()):
                raise ConfigError(
                    f"{self.name}: {label} shape must be positive integers, got {dict(shape)}"
                )
        if not (list(self.quick) == list(self.full) == list(self.check)):
            raise ConfigError(f"{self.name}: quick, full and check shapes must name the same sizes")

    def shape(self, quick: bool, scale: int = 1) -> dict[str, int]:
        """The quick or full shape with its first (batch-like) size multiplied by ``scale``."""
        integer("scale", scale)
        shape = dict(self.quick if quick else self.full)
        shape[next(iter(shape))] *= scale
        return shape


CATALOGUE: dict[str, OpCase] = {}
"""Operator name -> case, in display order."""


def register(case: OpCase, *, replace: bool = False) -> OpCase:
    """Add ``case`` to :data:`CATALOGUE`; a name already there needs ``replace=True``."""
    if case.name in CATALOGUE and not replace:
        raise ConfigError(f"operator {case.name!r} is already registered")
    CATALOGUE[case.name] = case
    return case


def unregister(name: str) -> None:
    """Remove ``name`` from :data:`CATALOGUE` (no error if absent)."""
    CATALOGUE.pop(name, None)


def select(names: Iterable[str] | None = None) -> list[OpCase]:
    """The cases named (all when None), in the order asked; ConfigError names an unknown one."""
    if names is None:
        return list(CATALOGUE.values())
    chosen: dict[str, OpCase] = {}
    for name in names:
        if name not in CATALOGUE:
            raise ConfigError(f"unknown operator {name!r}; known: {', '.join(CATALOGUE)}")
        chosen[name] = CATALOGUE[name]
    if not chosen:
        raise ConfigError("no operator named; known: " + ", ".join(CATALOGUE))
    return list(chosen.values())


def _randn(dtype: torch.dtype, device: torch.device, *size: int) -> Tensor:
    return torch.randn(*size, dtype=dtype, device=device)


def _place(module: nn.Module, dtype: torch.dtype, device: torch.device) -> nn.Module:
    return module.to(device=device, dtype=dtype).train()


# ------------------------------------------------------------------ modules
class Function(nn.Module):
    """A tensor function as a module: ``forward(*inputs) = fn(*inputs)``."""

    def __init__(self, fn: Callable[..., Output]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *inputs: Tensor) -> Output:
        return self.fn(*inputs)


class MatMul(nn.Module):
    """``x @ weight``: (M, K) @ (K, N), the weight a parameter (a linear layer without bias)."""

    def __init__(self, k: int, n: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k, n) / math.sqrt(k))

    def forward(self, x: Tensor) -> Tensor:
        return x @ self.weight


class LSTMStep(nn.Module):
    """One step of an LSTM cell: ``(x, h, c) -> (h', c')``."""

    def __init__(self, inputs: int, hidden: int) -> None:
        super().__init__()
        self.cell = nn.LSTMCell(inputs, hidden)

    def forward(self, x: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
        h2, c2 = self.cell(x, (h, c))
        return h2, c2


# --------------------------------------------------------------- references
def _sigmoid(x: Tensor) -> Tensor:
    return 1.0 / (1.0 + torch.exp(-x))


def softmax_reference(x: Tensor, dim: int = -1) -> Tensor:
    """exp(x - max) / sum exp(x - max) along ``dim``."""
    e = torch.exp(x - x.amax(dim, keepdim=True))
    return e / e.sum(dim, keepdim=True)


def conv2d_reference(m: nn.Conv2d, x: Tensor) -> Tensor:
    """Convolution as im2col (``F.unfold``, data movement only) and a grouped product."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (dh, dw) = m.kernel_size, m.stride, m.dilation
    ph, pw = cast(tuple[int, int], m.padding)  # tuple padding, zeros mode (as built below)
    ho, wo = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    g = m.groups
    cols = F.unfold(x, (kh, kw), dilation=(dh, dw), padding=(ph, pw), stride=(sh, sw))
    cols = cols.view(n, g, (c // g) * kh * kw, ho * wo)
    weight = m.weight.reshape(g, m.out_channels // g, (c // g) * kh * kw)
    y = torch.einsum("gok,ngkl->ngol", weight, cols).reshape(n, m.out_channels, ho, wo)
    return y if m.bias is None else y + m.bias.view(1, -1, 1, 1)


def _windows(x: Tensor, k: int, s: int) -> Tensor:
    """(N, C, H, W) -> (N, C, Ho, Wo, k, k) sliding windows (a view)."""
    return x.unfold(2, k, s).unfold(3, k, s)


def max_pool_reference(m: nn.MaxPool2d, x: Tensor) -> Tensor:
    """Max over each window of the input padded with -inf, taken by gathering the
    first maximum in row-major window order: with ties (frequent in bfloat16 and
    float16) the gradient goes to that one element, as PyTorch's kernels route
    it (``amax`` would share it among the ties)."""
    p = cast(int, m.padding)
    padded = F.pad(x, (p, p, p, p), value=-math.inf)
    windows = _windows(padded, cast(int, m.kernel_size), cast(int, m.stride)).flatten(-2)
    return windows.gather(-1, windows.argmax(-1, keepdim=True)).squeeze(-1)


def avg_pool_reference(m: nn.AvgPool2d, x: Tensor) -> Tensor:
    """Mean over each window (no padding)."""
    return _windows(x, cast(int, m.kernel_size), cast(int, m.stride)).mean(dim=(-2, -1))


def batch_norm_reference(m: nn.BatchNorm2d, x: Tensor) -> Tensor:
    """Training mode: (x - mean) / sqrt(biased var + eps) * gamma + beta, per channel."""
    mean = x.mean(dim=(0, 2, 3), keepdim=True)
    var = ((x - mean) ** 2).mean(dim=(0, 2, 3), keepdim=True)
    y = (x - mean) / torch.sqrt(var + m.eps)
    return y * m.weight.view(1, -1, 1, 1) + m.bias.view(1, -1, 1, 1)


def cross_entropy_reference(m: nn.Module, logits: Tensor, target: Tensor) -> Tensor:
    """mean over rows of logsumexp(x) - x[target]."""
    top = logits.amax(-1, keepdim=True)
    lse = top.squeeze(-1) + torch.log(torch.exp(logits - top).sum(-1))
    return (lse - logits.gather(1, target[:, None]).squeeze(1)).mean()


def attention_reference(m: nn.Module, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """softmax(q k^T / sqrt(d)) v."""
    return softmax_reference(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])) @ v


def lstm_reference(m: LSTMStep, x: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
    """gates = x W_ih^T + b_ih + h W_hh^T + b_hh -> (i, f, g, o);
    c' = s(f) c + s(i) tanh g; h' = s(o) tanh c'."""
    cell = m.cell
    gates = x @ cell.weight_ih.T + cell.bias_ih + h @ cell.weight_hh.T + cell.bias_hh
    i, f, g, o = gates.chunk(4, dim=1)
    c2 = _sigmoid(f) * c + _sigmoid(i) * torch.tanh(g)
    return _sigmoid(o) * torch.tanh(c2), c2


# ----------------------------------------------------------------- builders
def _conv_builder(kernel: int, stride: int, depthwise: bool) -> Builder:
    """Conv2d (cin -> cout, or depthwise: groups = channels) on a (batch, cin, hw, hw) input."""

    def build(s: Mapping[str, int], dtype: torch.dtype, device: torch.device) -> Built:
        cout = s["cin"] if depthwise else s["cout"]
        conv = nn.Conv2d(
            s["cin"],
            cout,
            kernel,
            stride=stride,
            padding=(kernel // 2, kernel // 2),
            groups=s["cin"] if depthwise else 1,
        )
        return _place(conv, dtype, device), (
            _randn(dtype, device, s["batch"], s["cin"], s["hw"], s["hw"]),
        )

    return build


def _image_builder(make: Callable[[Mapping[str, int]], nn.Module]) -> Builder:
    """A module made from the shape, on one (batch, channels, hw, hw) input."""

    def build(s: Mapping[str, int], dtype: torch.dtype, device: torch.device) -> Built:
        return _place(make(s), dtype, device), (
            _randn(dtype, device, s["batch"], s["channels"], s["hw"], s["hw"]),
        )

    return build


def _elements_builder(fn: Callable[..., Tensor], arity: int) -> Builder:
    """``fn`` on ``arity`` tensors of (batch, features)."""

    def build(s: Mapping[str, int], dtype: torch.dtype, device: torch.device) -> Built:
        return Function(fn), tuple(
            _randn(dtype, device, s["batch"], s["features"]) for _ in range(arity)
        )

    return build


def _build_matmul(s: Mapping[str, int], dtype: torch.dtype, device: torch.device) -> Built:
    return _place(MatMul(s["k"], s["n"]), dtype, device), (_randn(dtype, device, s["m"], s["k"]),)


def _build_cross_entropy(s: Mapping[str, int], dtype: torch.dtype, device: torch.device) -> Built:
    target = torch.randint(0, s["classes"], (s["batch"],), device=device)
    return nn.CrossEntropyLoss().train(), (_randn(dtype, device, s["batch"], s["classes"]), target)


def _build_attention(s: Mapping[str, int], dtype: torch.dtype, device: torch.device) -> Built:
    size = (s["batch"], s["heads"], s["length"], s["head_dim"])
    return Function(F.scaled_dot_product_attention), tuple(
        _randn(dtype, device, *size) for _ in range(3)
    )


def _build_lstm(s: Mapping[str, int], dtype: torch.dtype, device: torch.device) -> Built:
    b, n, hidden = s["batch"], s["inputs"], s["hidden"]
    inputs = (
        _randn(dtype, device, b, n),
        _randn(dtype, device, b, hidden),
        _randn(dtype, device, b, hidden),
    )
    return _place(LSTMStep(n, hidden), dtype, device), inputs


_VECTOR = {
    "quick": dict(batch=64, features=1024),
    "full": dict(batch=1024, features=4096),
    "check": dict(batch=3, features=5),
}
"""Shapes of the operators on a (batch, features) tensor: activations, softmax, add, mul."""


def _register_catalogue() -> None:
    """The catalogue, in display order: convolution and matmul, image, vector, sequence,
    elementwise operators."""
    _register_convolutions()
    _register_image_ops()
    _register_vector_ops()
    _register_sequence_ops()
    _register_elementwise()


def _register_convolutions() -> None:
    conv = {
        "quick": dict(batch=2, cin=16, hw=14, cout=16),
        "check": dict(batch=2, cin=3, hw=5, cout=4),
    }
    for name, k, s, dw, full, note in (
        ("conv1x1", 1, 1, False, dict(batch=8, cin=128, hw=28, cout=128), "pointwise"),
        ("conv3x3", 3, 1, False, dict(batch=8, cin=64, hw=28, cout=64), ""),
        ("conv3x3_s2", 3, 2, False, dict(batch=8, cin=32, hw=56, cout=64), "stride 2"),
        (
            "conv3x3_dw",
            3,
            1,
            True,
            dict(batch=8, cin=128, hw=28, cout=128),
            "depthwise (groups = channels)",
        ),
    ):
        register(
            OpCase(
                name,
                "convolution",
                _conv_builder(k, s, dw),
                conv2d_reference,
                conv["quick"],
                full,
                conv["check"],
                note,
            )
        )
    register(
        OpCase(
            "matmul",
            "matmul",
            _build_matmul,
            lambda m, x: x @ m.weight,
            dict(m=64, k=128, n=64),
            dict(m=512, k=1024, n=512),
            dict(m=3, k=4, n=5),
            "(m, k) @ (k, n)",
        )
    )


def _register_image_ops() -> None:
    img = {"quick": dict(batch=2, channels=16, hw=16), "check": dict(batch=2, channels=2, hw=6)}
    full = dict(batch=8, channels=64, hw=56)
    for name, family, make, ref, note in (
        (
            "batch_norm",
            "normalisation",
            lambda s: nn.BatchNorm2d(s["channels"]),
            batch_norm_reference,
            "training mode: batch statistics",
        ),
        (
            "max_pool3x3_s2",
            "pooling",
            lambda s: nn.MaxPool2d(3, 2, 1),
            max_pool_reference,
            "padding 1",
        ),
        ("avg_pool2x2", "pooling", lambda s: nn.AvgPool2d(2, 2), avg_pool_reference, ""),
    ):
        register(
            OpCase(name, family, _image_builder(make), ref, img["quick"], full, img["check"], note)
        )


def _register_vector_ops() -> None:
    vec = _VECTOR
    for name, family, fn, ref in (
        ("relu", "activation", torch.relu, lambda m, x: torch.where(x > 0, x, torch.zeros_like(x))),
        (
            "gelu",
            "activation",
            F.gelu,
            lambda m, x: 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0))),
        ),
        ("silu", "activation", F.silu, lambda m, x: x * _sigmoid(x)),
        ("softmax", "softmax", lambda x: torch.softmax(x, -1), lambda m, x: softmax_reference(x)),
    ):
        register(
            OpCase(
                name, family, _elements_builder(fn, 1), ref, vec["quick"], vec["full"], vec["check"]
            )
        )
    register(
        OpCase(
            "cross_entropy",
            "softmax",
            _build_cross_entropy,
            cross_entropy_reference,
            dict(batch=32, classes=100),
            dict(batch=256, classes=1000),
            dict(batch=3, classes=4),
            "log-softmax + NLL, mean over the batch",
        )
    )


def _register_sequence_ops() -> None:
    register(
        OpCase(
            "sdpa",
            "attention",
            _build_attention,
            attention_reference,
            dict(batch=2, heads=4, length=64, head_dim=32),
            dict(batch=4, heads=8, length=256, head_dim=64),
            dict(batch=1, heads=2, length=4, head_dim=3),
            "scaled_dot_product_attention, no mask",
        )
    )
    register(
        OpCase(
            "lstm_cell",
            "recurrent",
            _build_lstm,
            lstm_reference,
            dict(batch=16, inputs=128, hidden=128),
            dict(batch=64, inputs=512, hidden=512),
            dict(batch=2, inputs=3, hidden=2),
            "one step; backward from h'",
        )
    )


def _register_elementwise() -> None:
    vec = _VECTOR
    for name, fn, ref in (
        ("add", torch.add, lambda m, x, y: x + y),
        ("mul", torch.mul, lambda m, x, y: x * y),
    ):
        register(
            OpCase(
                name,
                "elementwise",
                _elements_builder(fn, 2),
                ref,
                vec["quick"],
                vec["full"],
                vec["check"],
            )
        )


_register_catalogue()
