"""Science workloads in the style of MLPerf HPC, and time to train to a quality target.

=============  ============================================================  ======  ===============
name           what it is                                                    metric  benchmark
=============  ============================================================  ======  ===============
``cosmoflow``  3D CNN regressing 4 cosmological parameters from 3D volumes   MAE     aihpc_cosmoflow
``deepcam``    encoder-decoder: segments weather in multi-channel 2D fields  IOU     aihpc_deepcam
=============  ============================================================  ======  ===============

Each workload module holds its model, a data generator of configurable size
(the real data sets are terabytes), a reader for the real file format, the
metric and the quality target with how it was chosen.
:mod:`aihpc.workloads.ttt` runs MLPerf HPC's time-to-train protocol on them
(``aihpc train-to-target``).

Adding a workload
-----------------
1. Write ``src/aihpc/workloads/<name>.py`` with a subclass of
   :class:`aihpc.workloads.base.Workload`: set ``name``, ``benchmark``
   (``aihpc_<name>``), ``metric``, ``metric_key`` (MLPerf's ``eval_error`` when
   lower is better, ``eval_accuracy`` when higher is), ``higher_is_better``,
   ``loss_name`` (for :func:`aihpc.count_ops`), ``sizes`` (at least
   ``"small"``, the reference configuration, and ``"tiny"``, for tests) and
   ``target`` with ``target_note`` saying how it was measured; implement
   ``generate``, ``read``, ``input_shape``, ``model``, ``loss``, ``evaluate``
   (and ``optimizer`` if not Adam).  Data on disk: ``DIR/train/`` and
   ``DIR/validation/``, one sample per file.
2. Register it in :data:`_WORKLOADS` below (one line).
3. Copy ``mlperf/rules/aihpc_cosmoflow.yaml`` (lower is better) or
   ``aihpc_deepcam.yaml`` (higher is better) to ``aihpc_<name>.yaml`` and
   change the benchmark name and the reference target in it.
4. Add ``tests/workloads/test_<name>.py``: the reader on files the test
   writes, the metric on a hand-worked case, the generator's signal, and
   ``aihpc count`` reporting no uncounted ops for the model.  The shared
   tests in ``tests/workloads/test_registry.py`` run on every registered
   workload.
5. Measure the target: ``aihpc train-to-target --workload <name> --runs 5``.
"""

from __future__ import annotations

from aihpc.base.errors import ConfigError
from aihpc.workloads.base import Samples, Size, Workload

__all__ = ["Samples", "Size", "Workload", "get", "names"]

# name -> "module:Class"; imported on first use
_WORKLOADS = {
    "cosmoflow": "aihpc.workloads.cosmoflow:CosmoFlow",
    "deepcam": "aihpc.workloads.deepcam:DeepCAM",
}


def names() -> list[str]:
    """Registered workload names."""
    return list(_WORKLOADS)


def get(name: str) -> Workload:
    """The workload called ``name``; ConfigError naming the valid ones if there is none."""
    import importlib

    if name not in _WORKLOADS:
        raise ConfigError(f"unknown workload {name!r}; valid names: {', '.join(names())}")
    module, cls = _WORKLOADS[name].split(":")
    workload: Workload = getattr(importlib.import_module(module), cls)()
    return workload
