"""The memory layout the trainer and the evaluation give a batch
(:func:`aihpc.train.evaluation.channels_last`): images channels-last where convolutions run
fastest so (a GPU, a CPU whose PyTorch has oneDNN), anything else as it is; and a network
computes the same in either layout, to rounding."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from aihpc.tasks.image.build import SpecNet
from aihpc.tasks.image.seeds import seed_spec
from aihpc.train.evaluation import channels_last


def test_images_go_channels_last_on_a_cpu_with_onednn_and_tokens_stay_as_they_are() -> None:
    images = torch.randn(4, 3, 8, 8)
    laid = channels_last(images)
    onednn = torch.backends.mkldnn.is_available()
    assert laid.is_contiguous(memory_format=torch.channels_last) == onednn
    assert laid.is_contiguous() == (not onednn) and torch.equal(laid, images)
    tokens = torch.randint(0, 257, (4, 16))
    assert channels_last(tokens) is tokens


def _gradients(net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    net.zero_grad()
    F.cross_entropy(net(x), y).backward()
    return [p.grad.double() for p in net.parameters() if p.grad is not None]


def test_the_seed_network_s_gradients_in_either_layout_are_as_close_to_float64() -> None:
    """float32 gradients differ from float64's by rounding (more at initialisation, where a
    layer's gradients are small sums of cancelling terms); channels-last inputs change which
    kernels run, not how close they come."""
    torch.manual_seed(0)
    net = SpecNet(seed_spec((3, 16, 16), 50, width=8))  # float32: oneDNN's kernels
    x, y = torch.randn(32, 3, 16, 16), torch.randint(0, 50, (32,))
    reference = _gradients(copy.deepcopy(net).double(), x.double(), y)

    def error(grads: list[torch.Tensor]) -> float:
        return sum(float((g - r).abs().sum()) for g, r in zip(grads, reference, strict=True))

    contiguous = error(_gradients(net, x, y))
    laid = error(_gradients(net, x.contiguous(memory_format=torch.channels_last), y))
    size = sum(float(r.abs().sum()) for r in reference)
    assert contiguous < 0.05 * size and laid <= 1.25 * contiguous, (contiguous, laid, size)
