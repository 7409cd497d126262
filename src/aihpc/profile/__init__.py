"""Workload characterisation (Deep500 BOF): where a training step's time and memory go.

For one zoo model at one input shape and batch size, :func:`characterise`
reports, per training step:

* time by phase: ``data`` (a batch from a host-side data set copied to the
  device), ``forward``, ``loss`` (cross-entropy), ``backward``,
  ``optimizer`` (SGD with momentum or AdamW), read from ``torch.profiler``
  ranges (:mod:`aihpc.profile.step`);
* time by operator type: the self time of each ``aten::`` op, grouped into
  the counter's op types, and the counted operations of the step beside the
  time, for the achieved operations per second;
* memory at the peak, broken into parameters, gradients, optimizer state,
  activations and other (:mod:`aihpc.profile.memory` says what each means
  and how the peak is measured on the CPU and on a GPU);
* optionally a sweep of time and peak memory against the batch size, an
  image model's resolution or a sequence model's length
  (:mod:`aihpc.profile.sweep`), with plots.

The workloads of the sources are all in the zoo: VGG (``vgg11``, ``vgg16``,
``vgg_small``) and ResNet (``resnet18/20/34/50``) CNNs, the LSTM language
model ``lstm_lm`` and the Transformer ``transformer_small``.

``aihpc profile`` writes the result as a ``"profile"`` document
(:mod:`aihpc.records.files`) whose ``data`` is :meth:`Profile.to_record`
(:class:`aihpc.records.kinds_measure.ProfileData`)::

    {"model": "resnet18", "input_kind": "image", "input_shape": [3, 224, 224],
     "batch": 32, "device": "cpu", "optimizer": "sgd", "steps": 3,
     "phases": {"data": {"seconds": s, "share": f}, ...},   # mean s/step; share of the mean step
     "step_seconds": s,                                     # median of the profiled steps
     "step_seconds_each": [s, ...],
     "step_spread": f,                                      # IQR / median (aihpc.base.spread)
     "operators": [{"type": "convolution", "seconds": s,   # self time per step, slowest first
                    "share": f, "calls": n}, ...],          # share of the mean step; calls per step
     "ops": {"forward": n, "backward": n, "total": n,       # counted, forward + loss + backward
             "conv_linear_macs": n, "uncounted": {...}},
     "flops_per_s": x,                                      # ops.total / step_seconds
     "peak": {"flops_per_s": x, "kernel": "...",            # the float32 peak (its fastest kernel)
              "share": f, "nominal": {...}, "nominal_share": f},   # and the nominal one; or null
     "memory": {"peak_bytes": b, "parameters": b, "gradients": b, "optimizer_state": b,
                "activations": b, "other": b, "method": "..."},
     "sweep": null | {"dimension": "batch", "values": [n, ...],
                      "rows": [{"value": n, "step_seconds": s, "peak_bytes": b}, ...]}}

Units: seconds, bytes, operations (1 multiply-accumulate = 2, as in
:mod:`aihpc.counting`); shares are fractions of the mean profiled step.  The
phase shares sum to a little under 1 (the rest is the glue between phases),
the operator shares to less (the rest runs outside ``aten`` ops: Python,
the autograd engine, the profiler's own bookkeeping).
"""

from __future__ import annotations

from aihpc.profile.characterise import Profile, characterise, measure_point, profile_workload
from aihpc.profile.memory import ActivationMeter, check_fits, memory_breakdown
from aihpc.profile.step import (
    OPTIMIZERS,
    PHASES,
    StepConfig,
    StepTiming,
    StepWorkload,
    build_workload,
)
from aihpc.profile.sweep import DIMENSIONS, Sweep, parse_values, plan_sweep, plot_names, plot_sweep
from aihpc.profile.table import format_profile

__all__ = [
    "DIMENSIONS",
    "OPTIMIZERS",
    "PHASES",
    "ActivationMeter",
    "memory_breakdown",
    "Profile",
    "StepConfig",
    "StepTiming",
    "StepWorkload",
    "Sweep",
    "build_workload",
    "characterise",
    "check_fits",
    "format_profile",
    "measure_point",
    "parse_values",
    "plan_sweep",
    "plot_names",
    "plot_sweep",
    "profile_workload",
]
