"""A whole characterisation: the profiled step, its memory, its counted operations, a sweep.

:func:`characterise` builds the workload, runs one warm-up step (under the
:class:`~aihpc.profile.memory.ActivationMeter`, so the timed steps carry no
hooks), then ``config.steps`` profiled steps, and counts the operations of
one step with :func:`aihpc.counting.count_ops` (forward, loss and backward;
the optimizer's update is not counted, as in the benchmark's score).
:func:`measure_point` is the light version a sweep runs per value: warm-up,
profiled steps, median seconds and peak bytes.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from aihpc.counting import OpCount, count_ops
from aihpc.profile.memory import (
    ActivationMeter,
    allocation_errors,
    check_fits,
    describe,
    gradient_bytes,
    memory_breakdown,
    optimizer_state_bytes,
    parameter_bytes,
    peak_method,
    resident_bytes,
    transient_peak,
)
from aihpc.profile.step import (
    StepConfig,
    StepTiming,
    StepWorkload,
    build_workload,
    run_profiled,
    run_step,
    step_timing,
)
from aihpc.profile.sweep import Sweep, plan_sweep, run_sweep
from aihpc.records.kinds_measure import (
    MemoryRecord,
    OperatorTimeRecord,
    PhaseTimeRecord,
    ProfileData,
    StepOpsRecord,
    StepPeakRecord,
)
from aihpc.records.peak import NominalPeakRecord
from aihpc.scoring.peak import PeakResult


@dataclass(frozen=True)
class Profile:
    """The characterisation of one training step (see :mod:`aihpc.profile` for the JSON form)."""

    config: StepConfig
    device: str
    timing: StepTiming
    memory: MemoryRecord
    ops: OpCount
    sweep: Sweep | None = None
    # the device's peak in float32 (what the step computes in), as every command measures it
    peak: PeakResult | None = None

    @property
    def flops_per_s(self) -> float:
        """Counted operations of a step over its median seconds."""
        return self.ops.total / self.timing.median

    def peak_record(self) -> StepPeakRecord | None:
        """The peak the step's rate is set against: measured (its fastest kernel) and nominal,
        with the step's share of each."""
        if self.peak is None:
            return None
        nominal = self.peak.nominal
        nominal_rate = nominal.flops_per_s if nominal is not None else None
        return StepPeakRecord(
            flops_per_s=self.peak.flops_per_s,
            kernel=self.peak.kernel,
            share=self.flops_per_s / self.peak.flops_per_s,
            nominal=None if nominal is None else NominalPeakRecord(**asdict(nominal)),
            nominal_share=self.flops_per_s / nominal_rate if nominal_rate else None,
        )

    def to_record(self) -> ProfileData:
        """The ``data`` of the ``profile`` result (:mod:`aihpc.profile`)."""
        t, c = self.timing, self.config
        return ProfileData(
            model=c.model,
            input_kind=c.input_kind,
            input_shape=tuple(c.input_shape),
            batch=c.batch,
            device=self.device,
            optimizer=c.optimizer,
            steps=c.steps,
            phases={p.name: PhaseTimeRecord(seconds=p.seconds, share=p.share) for p in t.phases},
            step_seconds=t.median,
            step_seconds_each=tuple(t.step_seconds),
            step_spread=t.spread,
            operators=tuple(
                OperatorTimeRecord(type=o.type, seconds=o.seconds, share=o.share, calls=o.calls)
                for o in t.operators
            ),
            ops=StepOpsRecord(
                forward=self.ops.forward,
                backward=self.ops.backward,
                total=self.ops.total,
                conv_linear_macs=self.ops.conv_linear_macs,
                uncounted=dict(self.ops.uncounted),
            ),
            flops_per_s=self.flops_per_s,
            peak=self.peak_record(),
            memory=self.memory,
            sweep=None if self.sweep is None else self.sweep.to_record(),
        )


def _profiled_steps(w: StepWorkload, steps: int) -> tuple[StepTiming, int]:
    """Profile ``steps`` steps of a warmed-up workload: their timing and the peak bytes."""
    resident = resident_bytes(w.model, w.optimizer)
    cuda = w.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(w.device)
        torch.cuda.reset_peak_memory_stats(w.device)
    prof = run_profiled(w, steps)
    timing = step_timing(prof, steps, w.device)
    peak = (
        torch.cuda.max_memory_allocated(w.device)
        if cuda
        else resident + transient_peak(prof, w.device)
    )
    return timing, int(peak)


def _release(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def measure_point(config: StepConfig, device: torch.device) -> tuple[float, int]:
    """Median seconds per step and peak bytes of ``config`` (one warm-up, ``config.steps``
    profiled)."""
    with allocation_errors(config, device):
        w = build_workload(config, device)
        run_step(w, 0)
        timing, peak = _profiled_steps(w, config.steps)
    del w
    _release(device)
    return timing.median, peak


def profile_workload(w: StepWorkload, steps: int) -> tuple[StepTiming, MemoryRecord]:
    """Warm-up (measuring saved activations), then ``steps`` profiled steps of any workload."""
    with ActivationMeter(w.model) as meter:
        run_step(w, 0)
    timing, peak = _profiled_steps(w, steps)
    memory = memory_breakdown(
        peak_bytes=peak,
        parameters=parameter_bytes(w.model),
        gradients=gradient_bytes(w.model),
        optimizer_state=optimizer_state_bytes(w.optimizer),
        activations=meter.bytes,
        method=peak_method(w.device),
    )
    return timing, memory


def characterise(
    config: StepConfig,
    device: torch.device,
    sweep: str | None = None,
    values: tuple[int, ...] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Profile:
    """Profile ``config`` on ``device`` and, with ``sweep`` (a dimension), sweep it;
    ``progress`` gets a line after the profile and after each sweep value.

    Everything is validated first (the config and every sweep value must fit
    memory), so bad input fails before any measuring; ConfigError otherwise
    if a step runs out of memory.
    """
    plan = plan_sweep(config, sweep, values) if sweep is not None else ()
    for point in (config, *plan):
        check_fits(point, device)
    with allocation_errors(config, device):
        w = build_workload(config, device)
        timing, memory = profile_workload(w, config.steps)
        idx = w.order[0]
        ops = count_ops(w.model, (w.inputs[idx],), train=True, target=w.targets[idx].reshape(-1))
    del w
    _release(device)
    swept = None
    if sweep is not None:
        if progress is not None:
            progress(
                f"{describe(config)}: {timing.median:.4g} s/step, peak "
                f"{memory.peak_bytes / 2**20:,.1f} MiB; "
                f"sweeping {sweep} over {len(plan)} values"
            )
        swept = run_sweep(plan, sweep, lambda point: measure_point(point, device), progress)
    return Profile(config, str(device), timing, memory, ops, swept)
