"""The memory layout the trainer and the evaluation give a batch
(:func:`aihpc.train.evaluation.channels_last`): images channels-last on a GPU only; on a CPU
(where PyTorch's backward pass of channels-last images crashed the process on 64x64 inputs) and
for anything but images, as they are."""

from __future__ import annotations

import torch

from aihpc.train.evaluation import channels_last


def test_a_cpu_s_images_and_any_tokens_stay_as_they_are() -> None:
    images = torch.randn(4, 3, 8, 8)
    assert channels_last(images) is images
    tokens = torch.randint(0, 257, (4, 16))
    assert channels_last(tokens) is tokens
