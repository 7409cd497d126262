"""Zero-cost proxies: how capable an untrained network is, from one minibatch.

Each proxy takes a freshly initialised model, a minibatch ``x`` (N, C, H, W)
and labels ``y`` (N,), and returns one float (larger = predicted better).
The model is never modified: every proxy works on a deep copy.  "Weights"
below means the ``weight`` of every ``nn.Conv2d`` and ``nn.Linear`` (as in
the reference code of Abdelfattah et al., SamsungLabs/zero-cost-nas); ``L``
is the mean cross-entropy of the minibatch, with the model in training mode
(batch-norm uses batch statistics).

* ``grad_norm``: sum over layers of ||dL/dW||_2 (Frobenius norm per layer)
  (Abdelfattah et al. 2021, "Zero-Cost Proxies for Lightweight NAS", ICLR).
* ``snip``: sum over weights of |dL/dw * w|, the connection sensitivity of
  Lee et al. 2019, "SNIP: Single-shot network pruning based on connection
  sensitivity", ICLR (summed over the network as in Abdelfattah et al.).
* ``synflow``: every weight replaced by its absolute value, batch norm and
  dropout in eval mode (fresh BN statistics make BN the identity), in
  float64; the input is all ones of shape (1, C, H, W); R = sum of the
  outputs; score = sum over weights of |dR/dw * w| (Tanaka et al. 2020,
  "Pruning neural networks without any data by iteratively conserving
  synaptic flow", NeurIPS).  Data-free: ``x`` gives the shape only.
* ``jacob_cov``: J_i = d(sum_k f_k(x_i))/dx_i flattened; C = corrcoef of the
  rows J_i; with eigenvalues l of C and k = 1e-5,
  score = -sum(log(l + k) + 1/(l + k)) (Mellor et al. 2020, "Neural
  Architecture Search without Training", arXiv:2006.04647v1, eq. 2).
* ``naswot``: c_i = binary code of which ReLU units are active for x_i
  (all ``nn.ReLU``/``nn.ReLU6`` module outputs, > 0); K_ij = N_A -
  Hamming(c_i, c_j) = c_i.c_j + (1 - c_i).(1 - c_j); score = log |det K|
  (Mellor et al. 2021, "Neural Architecture Search without Training",
  ICML, eq. 2).  NaN if the model has no ReLU module.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

__all__ = [
    "PROXIES",
    "grad_norm",
    "jacob_cov",
    "naswot",
    "proxy_ops",
    "proxy_total",
    "score_all",
    "snip",
    "synflow",
]


def _weighted_layers(model: nn.Module) -> list[nn.Conv2d | nn.Linear]:
    return [m for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]


def _loss_gradients(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> nn.Module:
    """A training-mode copy of ``model`` holding dL/dW of the minibatch in ``.grad``."""
    net = copy.deepcopy(model).train()
    net.zero_grad(set_to_none=True)
    torch.autograd.backward(F.cross_entropy(net(x), y))
    return net


def grad_norm(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Sum over conv/linear layers of the Frobenius norm of dL/dW."""
    net = _loss_gradients(model, x, y)
    with torch.no_grad():
        return float(
            sum(
                m.weight.grad.double().norm()
                for m in _weighted_layers(net)
                if m.weight.grad is not None
            )
        )


def snip(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Sum over conv/linear weights of |dL/dw * w|."""
    net = _loss_gradients(model, x, y)
    with torch.no_grad():
        return float(
            sum(
                (m.weight.grad.double() * m.weight.double()).abs().sum()
                for m in _weighted_layers(net)
                if m.weight.grad is not None
            )
        )


def synflow(model: nn.Module, x: torch.Tensor, y: torch.Tensor | None = None) -> float:
    """Sum over conv/linear weights of |dR/dw * w| with |weights|, all-ones input, float64."""
    net = copy.deepcopy(model).double().eval()
    with torch.no_grad():
        for p in net.parameters():
            p.abs_()
    net.zero_grad(set_to_none=True)
    ones = torch.ones((1, *x.shape[1:]), dtype=torch.float64, device=x.device)
    net(ones).sum().backward()
    with torch.no_grad():
        return float(
            sum(
                (m.weight.grad * m.weight).abs().sum()
                for m in _weighted_layers(net)
                if m.weight.grad is not None
            )
        )


def jacob_cov(model: nn.Module, x: torch.Tensor, y: torch.Tensor | None = None) -> float:
    """-sum(log(l + k) + 1/(l + k)) over eigenvalues l of the input-Jacobian correlation."""
    net = copy.deepcopy(model).train()
    inputs = x.detach().clone().requires_grad_(True)
    net(inputs).sum().backward()
    if inputs.grad is None:
        raise RuntimeError(f"{type(model).__name__}'s output does not depend on its input")
    jac = inputs.grad.reshape(inputs.shape[0], -1).double().cpu().numpy()
    return float(jacobian_score(jac))


def jacobian_score(jac: np.ndarray, k: float = 1e-5) -> float:
    """The jacob_cov score of Jacobian rows ``jac`` (N, D); -inf-free: NaN corrcoef -> 0."""
    corr = np.nan_to_num(np.corrcoef(jac), nan=0.0)
    eig = np.clip(np.linalg.eigvalsh(corr), 0.0, None)
    return float(-np.sum(np.log(eig + k) + 1.0 / (eig + k)))


def naswot(model: nn.Module, x: torch.Tensor, y: torch.Tensor | None = None) -> float:
    """log |det K| with K = c c^T + (1 - c)(1 - c)^T over the ReLU activation codes c."""
    net = copy.deepcopy(model).train()
    codes: list[torch.Tensor] = []

    def hook(_module: nn.Module, _inputs: object, output: torch.Tensor) -> None:
        codes.append((output.detach() > 0).reshape(output.shape[0], -1).double())

    handles = [
        m.register_forward_hook(hook) for m in net.modules() if isinstance(m, (nn.ReLU, nn.ReLU6))
    ]
    with torch.no_grad():
        net(x)
    for h in handles:
        h.remove()
    if not codes:
        return math.nan
    c = torch.cat(codes, dim=1)
    kernel = c @ c.T + (1 - c) @ (1 - c).T
    return float(torch.linalg.slogdet(kernel)[1])


#: name -> proxy function, in the order the tables show them.
PROXIES: dict[str, Callable[[nn.Module, torch.Tensor, torch.Tensor], float]] = {
    "snip": snip,
    "grad_norm": grad_norm,
    "synflow": synflow,
    "jacob_cov": jacob_cov,
    "naswot": naswot,
}


def score_all(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, seed: int = 0
) -> dict[str, float]:
    """Every proxy of :data:`PROXIES` on one minibatch; torch's RNG seeded before each (dropout)."""
    out = {}
    for name, fn in PROXIES.items():
        torch.manual_seed(seed)
        out[name] = float(fn(model, x, y))
    return out


def proxy_ops(model: nn.Module, batch: int, input_shape: tuple[int, ...]) -> tuple[int, float]:
    """(operations :func:`score_all` performs on ``model`` with a minibatch of ``batch`` samples,
    training operations per sample).

    Counted by :func:`aihpc.count_ops`: ``S``, a training step of the
    minibatch (forward, cross-entropy, backward), and ``F``, its evaluation
    forward.  snip, grad_norm and jacob_cov each run a training step of the
    minibatch (jacob_cov's loss is the sum of the outputs: counted as S);
    synflow runs one on a single sample (counted as S / batch); naswot a
    forward of the minibatch (F)::

        proxy operations = 3 S + S / batch + F

    Not counted: jacob_cov's gradient with respect to the input (one layer's
    backward more), and the eigenvalues, determinant and norms computed from
    the results (not network operations).  Two counts per model keep this
    cheap next to the proxies themselves.
    """
    from aihpc.counting import count_ops

    shape = (batch, *input_shape)
    step = count_ops(model, shape, train=True).total
    forward = count_ops(model, shape, train=False).total
    return proxy_total(step, forward, batch), step / batch


def proxy_total(step: int, forward: int, batch: int) -> int:
    """The operations of :func:`score_all` from those of a training step (``step``) and an
    evaluation forward (``forward``) of a minibatch of ``batch``: ``3 S + S / batch + F``
    (:func:`proxy_ops`)."""
    return int(3 * step + round(step / batch) + forward)
