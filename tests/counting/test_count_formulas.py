"""The counting formulas, each checked against arithmetic done by hand in the
test on tiny tensors (the convention is in the aihpc.counting docstring)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from aihpc.counting import count_ops
from aihpc.counting.registry import FORMULAS, KNOWN_ZERO

aten = torch.ops.aten


class Fn(nn.Module):
    """Applies ``fn`` to parameters of the given shapes (so they get gradients)."""

    def __init__(self, fn: Callable[..., torch.Tensor], *shapes: tuple[int, ...]) -> None:
        super().__init__()
        self.params = nn.ParameterList([nn.Parameter(torch.randn(s)) for s in shapes])
        self.fn = fn

    def forward(self, dummy: torch.Tensor) -> torch.Tensor:
        return self.fn(*self.params)


def fwd_bwd(
    fn: Callable[..., torch.Tensor], *shapes: tuple[int, ...], family: str
) -> tuple[int, int]:
    """(forward, backward) ops of ``family`` for fn(params) with loss = sum."""
    c = count_ops(Fn(fn, *shapes), torch.zeros(1), loss="sum")
    row = c.by_operator.get(family, {"forward": 0, "backward": 0})
    return row["forward"], row["backward"]


def fwd(fn: Callable[..., torch.Tensor], *shapes: tuple[int, ...]) -> dict[str, int]:
    """Inference: family -> forward ops."""
    c = count_ops(Fn(fn, *shapes), torch.zeros(1), train=False)
    assert c.backward == 0 and c.uncounted == {}
    return {k: v["forward"] for k, v in c.by_operator.items()}


# ------------------------------------------------------------ element-wise
def test_binary_elementwise_one_per_output_element() -> None:
    n = 12
    assert fwd(lambda a, b: a + b, (3, 4), (3, 4)) == {"add": n}
    assert fwd(lambda a, b: a - b, (3, 4), (3, 4)) == {"sub": n}
    assert fwd(lambda a, b: a * b, (3, 4), (3, 4)) == {"mul": n}
    assert fwd(lambda a, b: a / b, (3, 4), (3, 4)) == {"div": n}
    assert fwd(lambda a: a * 3.0, (3, 4)) == {"mul": n}
    assert fwd(lambda a, b: a + b, (3, 4), (4,)) == {"add": n}  # broadcast: output size
    assert fwd(lambda a, b: torch.add(a, b, alpha=2), (3, 4), (3, 4)) == {"add": 2 * n}
    assert fwd(lambda a: a.clone().add_(1.0), (3, 4)) == {"add": n}  # in-place
    assert fwd(lambda a: a.clone().mul_(2.0).div_(3.0), (3, 4)) == {"mul": n, "div": n}


def test_silu_backward_total() -> None:
    # silu_backward has a composite kernel that FlopCounterMode decomposes into
    # sigmoid (4) + 1 - s, x * ., 1 + ., s * ., g * . (5): 9 per element in all.
    n = 2 * 3 * 5
    c = count_ops(Fn(F.silu, (2, 3, 5)), torch.zeros(1), loss="sum")
    assert c.by_operator["silu"]["forward"] == 5 * n
    assert c.backward == 9 * n


@pytest.mark.parametrize(
    "fn, family, per_fwd, per_bwd",
    [
        (F.relu, "relu", 1, 2),  # max(x, 0); backward compare + select
        (torch.sigmoid, "sigmoid", 4, 3),  # neg exp add div; g*y*(1-y)
        (torch.tanh, "tanh", 1, 3),  # primitive; g*(1-y*y)
        (F.gelu, "gelu", 5, 11),
        (lambda x: F.gelu(x, approximate="tanh"), "gelu", 9, 19),
        (F.relu6, "hardtanh", 2, 4),  # relu6 is hardtanh(0, 6)
        (F.hardswish, "hardswish", 5, 8),
        (F.hardsigmoid, "hardsigmoid", 4, 5),
        (F.leaky_relu, "leaky_relu", 3, 3),
    ],
)
def test_activations(
    fn: Callable[..., torch.Tensor], family: str, per_fwd: int, per_bwd: int
) -> None:
    n = 2 * 3 * 5
    assert fwd_bwd(fn, (2, 3, 5), family=family) == (per_fwd * n, per_bwd * n)


# ------------------------------------------------------------ reductions, softmax
def test_reductions() -> None:
    assert fwd(lambda x: x.sum(), (3, 4)) == {"sum": 11}  # 12 inputs -> 1: 11 adds
    assert fwd(lambda x: x.sum(dim=1), (3, 4)) == {"sum": 9}  # 3 rows of 4: 3 adds each
    assert fwd(lambda x: x.mean(dim=0), (3, 4)) == {"mean": 12}  # 4 x (2 adds + 1 div)
    assert fwd(lambda x: x.amax(dim=1), (3, 4)) == {"amax": 9}


def test_softmax_and_log_softmax() -> None:
    n, r = 15, 3  # (3, 5), softmax over the last dim
    assert fwd_bwd(lambda x: F.softmax(x, -1), (3, 5), family="softmax") == (
        5 * n - 2 * r,
        4 * n - r,
    )
    assert fwd_bwd(lambda x: F.log_softmax(x, -1), (3, 5), family="log_softmax") == (
        5 * n - r,
        4 * n - r,
    )


# ------------------------------------------------------------ losses, dropout
def test_cross_entropy_is_log_softmax_plus_nll() -> None:
    def ce(logits: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, torch.zeros(4, dtype=torch.long, device=logits.device))

    c = count_ops(Fn(ce, (4, 5)), torch.zeros(1), loss="sum")
    n, r, t = 20, 4, 4
    assert c.by_operator["log_softmax"] == {"forward": 5 * n - r, "backward": 4 * n - r}
    # mean reduction: T negations, T-1 adds, 1 divide; backward: 1 divide + T negations
    assert c.by_operator["nll_loss"] == {"forward": 2 * t, "backward": t + 1}


def test_mse_loss() -> None:
    n = 12
    assert fwd_bwd(lambda a: F.mse_loss(a, torch.zeros_like(a)), (3, 4), family="mse_loss") == (
        3 * n,
        2 * n + 2,
    )
    # autograd computes the target's gradient with a second mse_loss_backward
    assert fwd_bwd(lambda a, b: F.mse_loss(a, b), (3, 4), (3, 4), family="mse_loss") == (
        3 * n,
        2 * (2 * n + 2),
    )


def test_dropout_training_and_eval() -> None:
    # meta/CPU path: bernoulli (1 compare each), mask / (1-p), x * mask
    assert fwd(lambda x: F.dropout(x, 0.5, training=True), (3, 4)) == {
        "dropout": 12,
        "div": 12,
        "mul": 12,
    }
    assert fwd(lambda x: F.dropout(x, 0.5, training=False), (3, 4)) == {}
    shape = torch.Size([3, 4])
    native = FORMULAS[aten.native_dropout].ops
    assert native(shape, 0.5, True, out_shape=(shape, shape)) == 36
    assert native(shape, 0.5, False, out_shape=(shape, shape)) == 0
    assert FORMULAS[aten.native_dropout_backward].ops(shape, shape, 2.0, out_shape=shape) == 24


# ------------------------------------------------------------ pooling
def test_pooling() -> None:
    # 7x7, kernel 3, stride 2 -> 3x3 outputs, 2 channels: 18 outputs x 8 compares
    assert fwd_bwd(lambda x: F.max_pool2d(x, 3, 2), (1, 2, 7, 7), family="max_pool2d") == (144, 18)
    # 4x4, kernel 2 -> 8 outputs x (3 adds + 1 div); backward 8 x (1 div + 4 adds)
    assert fwd_bwd(lambda x: F.avg_pool2d(x, 2), (1, 2, 4, 4), family="avg_pool2d") == (32, 40)
    # adaptive 7 -> 3: windows [0,3) [2,5) [4,7), 3 each: 9 x 9 x 2 channels = 162
    assert fwd_bwd(
        lambda x: F.adaptive_avg_pool2d(x, 3), (1, 2, 7, 7), family="adaptive_avg_pool2d"
    ) == (162, 162 + 18)
    # global: a mean of 49 per channel (48 adds + 1 div); its backward expands
    # the 2 gradients (free) and divides the 98 expanded elements by 49
    c = count_ops(
        Fn(lambda x: F.adaptive_avg_pool2d(x, 1), (1, 2, 7, 7)), torch.zeros(1), loss="sum"
    )
    assert c.by_operator["mean"]["forward"] == 98
    assert c.by_operator["div"]["backward"] == 98


# ------------------------------------------------------------ normalisation
class Norm(nn.Module):
    """A normalisation layer applied to a parameter (so it gets all gradients)."""

    def __init__(self, norm: nn.Module, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.x, self.norm = nn.Parameter(torch.randn(shape)), norm

    def forward(self, dummy: torch.Tensor) -> torch.Tensor:
        return self.norm(self.x)


def test_batch_norm_train_eval_backward() -> None:
    n, ch = 2 * 3 * 4 * 4, 3
    net = Norm(nn.BatchNorm2d(ch), (2, 3, 4, 4))
    c = count_ops(net, torch.zeros(1), loss="sum")
    # mean n, var 3n, invstd 2C, normalise 2n, affine 2n, running stats 7C
    assert c.by_operator["batch_norm"]["forward"] == 8 * n + 2 * ch + 7 * ch
    # sums n-C and 2n-C, xhat 2n, dx 4n + 3C
    assert c.by_operator["batch_norm"]["backward"] == 9 * n + ch
    assert c.by_operator["add"]["forward"] == 1  # num_batches_tracked += 1
    e = count_ops(net, torch.zeros(1), train=False)
    assert e.by_operator == {"batch_norm": {"forward": 2 * n + 5 * ch, "backward": 0}}

    plain = Norm(nn.BatchNorm2d(ch, affine=False, track_running_stats=False), (2, 3, 4, 4))
    c = count_ops(plain, torch.zeros(1), loss="sum")
    assert c.by_operator["batch_norm"] == {"forward": 6 * n + 2 * ch, "backward": 9 * n}


def test_layer_norm() -> None:
    n, d, rows = 24, 4, 6
    row = count_ops(Norm(nn.LayerNorm(d), (2, 3, 4)), torch.zeros(1), loss="sum").by_operator[
        "layer_norm"
    ]
    f, b = row["forward"], row["backward"]
    assert f == 6 * n + 2 * rows + 2 * n
    # dx 9n + n (gamma); dgamma 2n - D; dbeta n - D
    assert b == 9 * n + n + (2 * n - d) + (n - d)


# ------------------------------------------------------------ matmul, conv
def test_linear() -> None:
    c = count_ops(Fn(F.linear, (5, 8), (4, 8), (4,)), torch.zeros(1), loss="sum")
    macs = 5 * 8 * 4
    assert c.by_operator["addmm"] == {"forward": 2 * macs + 5 * 4, "backward": 0}
    assert c.by_operator["mm"] == {"forward": 0, "backward": 2 * 2 * macs}  # dx, dW
    assert c.by_operator["sum"]["backward"] == 5 * 4 - 4  # bias grad
    assert c.conv_linear_macs == macs


def test_convolution_with_bias_and_grouped() -> None:
    out = 2 * 4 * 6 * 6
    macs = out * 3 * 3 * 3
    c = count_ops(
        Fn(lambda x, w, b: F.conv2d(x, w, b, padding=1), (2, 3, 6, 6), (4, 3, 3, 3), (4,)),
        torch.zeros(1),
        loss="sum",
    )
    assert c.by_operator["convolution"] == {
        "forward": 2 * macs + out,
        "backward": 2 * 2 * macs + (out - 4),
    }
    assert c.conv_linear_macs == macs
    # depthwise: each output uses 9 weights of its own channel; backward exactly 2x
    dw_macs = out * 9
    assert fwd_bwd(
        lambda x, w: F.conv2d(x, w, padding=1, groups=4),
        (2, 4, 6, 6),
        (4, 1, 3, 3),
        family="convolution",
    ) == (2 * dw_macs, 4 * dw_macs)
    # transposed: every input element meets each of its channel's 2 x 2x2 weights
    assert fwd(lambda x, w: F.conv_transpose2d(x, w, stride=2), (1, 4, 3, 3), (4, 2, 2, 2)) == {
        "convolution": 2 * 9 * 4 * 2 * 2 * 2
    }


def test_first_layer_has_no_input_gradient() -> None:
    conv = nn.Conv2d(3, 8, 3, bias=False)
    c = count_ops(conv, (2, 3, 10, 10), loss="sum")
    assert c.by_operator["convolution"]["backward"] == c.by_operator["convolution"]["forward"]


# ------------------------------------------------------------ attention
class Attention(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v)


def test_attention_counted_on_meta() -> None:
    b, h, length, source, dk, dv = 2, 3, 5, 7, 8, 6
    q, k, v = (
        torch.randn(b, h, length, dk),
        torch.randn(b, h, source, dk),
        torch.randn(b, h, source, dv),
    )
    c = count_ops(Attention(), (q, k, v), train=False)
    assert c.by_operator["bmm"]["forward"] == 2 * b * h * length * source * (dk + dv)
    assert c.conv_linear_macs == b * h * length * source * (dk + dv)
    n, r = b * h * length * source, b * h * length
    assert c.by_operator["softmax"]["forward"] == 6 * n - 2 * r
    assert c.by_operator["mul"]["forward"] == q.numel() + k.numel()  # sqrt(scale) on q, k
    assert c.uncounted == {}


class SelfAttention(nn.Module):
    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads, self.qkv, self.out = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, length, dim = x.shape
        q, k, v = self.qkv(x).view(b, length, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.out(y.transpose(1, 2).reshape(b, length, dim))


def test_attention_on_cpu_matches_meta() -> None:
    # On real CPU tensors PyTorch picks its fused flash kernel, which torch's
    # FlopCounterMode alone counts as 0; ours must give the meta (math) count.
    q = k = v = torch.randn(2, 3, 5, 8)
    meta = count_ops(Attention(), (q, k, v), train=False)
    cpu = count_ops(Attention(), (q, k, v), train=False, device="cpu")
    assert cpu.total == meta.total and cpu.uncounted == {}
    x = torch.randn(2, 6, 16)
    meta = count_ops(SelfAttention(), x, loss="mse")
    cpu = count_ops(SelfAttention(), x, loss="mse", device="cpu")
    assert (cpu.forward, cpu.backward) == (meta.forward, meta.backward)
    assert cpu.uncounted == {} and meta.uncounted == {}


# ------------------------------------------------------------ bookkeeping
def test_uncounted_ops_are_reported() -> None:
    net = nn.Sequential(nn.Linear(4, 4), nn.ELU())  # no formula for elu
    assert count_ops(net, (2, 4), train=False).uncounted == {"elu": 1}
    assert count_ops(net, (2, 4)).uncounted == {"elu": 1, "elu_backward": 1}


def test_registry_is_consistent() -> None:
    assert not (KNOWN_ZERO & FORMULAS.keys())
    for packet in (
        aten.native_batch_norm,
        aten.native_batch_norm_backward,
        aten.relu,
        aten.threshold_backward,
        aten.hardtanh,
        aten.hardtanh_backward,
        aten.max_pool2d_with_indices,
        aten.max_pool2d_with_indices_backward,
        aten.avg_pool2d,
        aten.avg_pool2d_backward,
        aten._adaptive_avg_pool2d,
        aten._adaptive_avg_pool2d_backward,
        aten.mean,
        aten.add_,
        aten.mul,
        aten._softmax,
        aten._log_softmax_backward_data,
        aten.nll_loss_forward,
        aten.nll_loss_backward,
        aten.native_dropout,
        aten.convolution_backward,
    ):
        assert packet in FORMULAS, packet
    for packet in (aten.view, aten.cat, aten.copy_, aten.transpose, aten.zeros):
        assert packet in KNOWN_ZERO
