"""The image task's random shifts of training images, against a plain per-image reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aihpc.base.errors import ConfigError
from aihpc.records.messages import DataRef
from aihpc.tasks.image.augment import default_shift, shifted
from aihpc.tasks.image.options import ImageOptions
from aihpc.tasks.image.task import ImageTask


def moved(image: np.ndarray, dy: int, dx: int) -> np.ndarray:
    """``image`` (C, H, W) moved by ``dy`` rows and ``dx`` columns, zeros moved in."""
    out = np.zeros_like(image)
    _, h, w = image.shape
    out[:, max(dy, 0) : h + min(dy, 0), max(dx, 0) : w + min(dx, 0)] = image[
        :, max(-dy, 0) : h + min(-dy, 0), max(-dx, 0) : w + min(-dx, 0)
    ]
    return out


def offsets_of(x: torch.Tensor, y: torch.Tensor, shift: int) -> list[tuple[int, int]]:
    """For each image, the one move of at most ``shift`` pixels per axis that makes ``y`` of
    ``x`` (AssertionError where none or several do)."""
    found = []
    for a, b in zip(x.numpy(), y.numpy(), strict=True):
        fits = [
            (dy, dx)
            for dy in range(-shift, shift + 1)
            for dx in range(-shift, shift + 1)
            if np.array_equal(moved(a, dy, dx), b)
        ]
        assert len(fits) == 1, fits
        found.append(fits[0])
    return found


def test_each_image_is_moved_by_its_own_offset_within_the_shift() -> None:
    x = torch.rand(400, 3, 9, 7) + 1.0  # no zeros, so every move is told apart
    y = shifted(x, 2, torch.Generator().manual_seed(0))
    found = offsets_of(x, y, 2)
    assert y.shape == x.shape and y.is_contiguous()
    assert set(found) == {(dy, dx) for dy in range(-2, 3) for dx in range(-2, 3)}


def test_the_shifts_repeat_with_the_seed_and_differ_without_it() -> None:
    x = torch.rand(64, 1, 8, 8)
    first = shifted(x, 1, torch.Generator().manual_seed(7))
    assert torch.equal(first, shifted(x, 1, torch.Generator().manual_seed(7)))
    assert not torch.equal(first, shifted(x, 1, torch.Generator().manual_seed(8)))


def test_no_shift_leaves_the_batch_as_it_is() -> None:
    x = torch.rand(4, 3, 8, 8)
    assert shifted(x, 0, torch.Generator()) is x


@pytest.mark.parametrize(("size", "shift"), [((8, 8), 1), ((16, 16), 2), ((128, 96), 12)])
def test_the_default_shift_is_an_eighth_of_the_smaller_side(size, shift) -> None:
    assert default_shift(*size) == shift


def test_the_task_shifts_by_the_runs_setting_or_the_default() -> None:
    task, x = ImageTask(), torch.rand(200, 3, 16, 16) + 1.0
    by_default = task.augment(x, DataRef("synthetic"), torch.Generator().manual_seed(1))
    assert max(max(abs(dy), abs(dx)) for dy, dx in offsets_of(x, by_default, 2)) == 2
    ref = DataRef("synthetic", options=(("shift", 0),))
    assert task.augment(x, ref, torch.Generator()) is x


def test_the_shift_reaches_the_workers_data_reference_but_not_the_data_set() -> None:
    options = ImageOptions(data_options={"num_samples": 200, "image_size": 8}, shift=1)
    assert options.ref_options() == {"num_samples": 200, "image_size": 8, "shift": 1}
    assert "shift" not in ImageOptions().ref_options()
    ref = DataRef("synthetic", options=tuple(sorted(options.ref_options().items())))
    train, val = ImageTask().splits(ref)
    assert len(train) + len(val) == 200


@pytest.mark.parametrize("shift", [-1, 1.5, True])
def test_a_shift_that_is_not_a_whole_number_from_0_is_refused(shift) -> None:
    with pytest.raises(ConfigError, match="shift must be a whole number of pixels >= 0"):
        ImageOptions(shift=shift)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_shifts_are_drawn_there_in_the_staged_dtype() -> None:
    x = (torch.rand(64, 3, 16, 16) + 1.0).to(torch.bfloat16)
    y = shifted(x.cuda(), 2, torch.Generator("cuda").manual_seed(0))
    assert y.dtype == torch.bfloat16 and y.is_cuda
    offsets_of(x.float(), y.float().cpu(), 2)
