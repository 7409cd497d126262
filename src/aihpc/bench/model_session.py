"""``aihpc bench network``'s one call: check that a step fits, allocate the batch, measure it.

:func:`measure_network` takes the model and a maker of its input batch (the
CLI builds them from a zoo name or a spec) and returns the ``bench-network``
result's data (:mod:`aihpc.bench.model` documents the method and the
format, :class:`aihpc.records.kinds_bench.BenchNetworkData` the record);
:func:`aihpc.bench.tables.network_table` renders it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch import nn

from aihpc.records.kinds_bench import BenchNetworkData


def measure_network(
    model: nn.Module,
    make_example: Callable[[Any], Any],
    label: tuple[str | None, str | None],
    *,
    mode: str,
    device_name: str,
    dtype: str,
    roofline_file: Path | None,
    depth: int | None,
    profile_seconds: float,
    batch_text: str,
) -> BenchNetworkData:
    """Measure ``mode`` ("inference", "training" or "both") of ``model`` on ``device_name``.

    The step is checked against the device's free memory on the meta device
    before anything big is allocated (:class:`~aihpc.base.errors.OutOfMemory`, one
    line naming ``batch_text``); the roofline is read from ``roofline_file``
    or measured now.  ``label`` is the zoo model's name and the spec file's (one of them
    None).
    """
    from aihpc.bench.model import MODES, bench_network
    from aihpc.bench.model_checks import check_dtype, check_fits, memory_guard
    from aihpc.machine.devices import resolve_device
    from aihpc.roofline.model import load_or_measure

    device = resolve_device(device_name)
    check_dtype(dtype, device)
    modes = MODES if mode == "both" else (mode,)
    check_fits(model, make_example("meta"), modes, device, dtype)
    with memory_guard(f"input batch {batch_text}", device):
        example = make_example(device)
    roofline = load_or_measure(roofline_file, str(device), (dtype,))
    result = bench_network(
        model,
        example,
        modes=modes,
        device=device,
        dtype=dtype,
        roofline=roofline,
        depth=depth,
        profile_seconds=profile_seconds,
    )
    return result.to_record(*label)
