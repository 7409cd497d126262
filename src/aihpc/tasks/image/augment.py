"""Random shifts of training images: the image task's label-preserving augmentation.

Each training image is moved by a random whole number of pixels, up to
``shift`` along each axis, drawn per image; pixels moved in from outside are
zero (the staged data's mean, since staging normalises it).  This is the
padded random crop of the usual CIFAR recipe (He et al. 2016: 4 pixels on
32), by default at the same fraction of the image, :func:`default_shift`.  A
network then meets each image at up to ``(2 * shift + 1) ** 2`` positions, so
it fits the training set later; validation images are never moved.

The shifts come from a seeded generator, so an epoch trains on the same
images wherever it runs.  Augmentation costs no counted operations: like
staging, it is data preparation, not the network's work.
"""

from __future__ import annotations

import torch

#: The default largest shift, as a fraction of the image's smaller side (CIFAR's 4 of 32).
SHIFT_FRACTION = 1 / 8


def default_shift(height: int, width: int) -> int:
    """The largest shift, in pixels, when the run does not set one: :data:`SHIFT_FRACTION` of
    the smaller side, at least 1."""
    return max(1, int(min(height, width) * SHIFT_FRACTION))


def shifted(x: torch.Tensor, shift: int, gen: torch.Generator) -> torch.Tensor:
    """The images ``x`` (N, C, H, W), each moved by its own random offset of at most ``shift``
    pixels along each axis (drawn from ``gen``, a generator on ``x``'s device, so that nothing
    waits for a copy), zero-filled at the edges."""
    if shift <= 0 or x.shape[0] == 0:
        return x
    n, _, height, width = x.shape
    offsets = torch.randint(0, 2 * shift + 1, (2, n), generator=gen, device=x.device)
    padded = torch.nn.functional.pad(x, (shift, shift, shift, shift))
    rows = offsets[0, :, None] + torch.arange(height, device=x.device)  # (N, H)
    cols = offsets[1, :, None] + torch.arange(width, device=x.device)  # (N, W)
    images = torch.arange(n, device=x.device)[:, None, None]
    # advanced indices on either side of the channel slice put their (N, H, W) first
    moved = padded[images, :, rows[:, :, None], cols[:, None, :]]  # (N, H, W, C)
    return moved.permute(0, 3, 1, 2).contiguous()
