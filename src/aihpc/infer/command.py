"""``aihpc infer``: one model served under LoadGen in each scenario asked for, recorded.

The steps, in order (nothing is written before the LoadGen tests, and they
write into ``OUT.partial``, renamed to ``OUT`` only when the record is
complete, so a failure leaves nothing half written):

1. the model on its device, in the served dtype (bfloat16 and channels-last
   on a GPU, float32 on the CPU unless asked), and its quality there
   against float32 (:mod:`aihpc.infer.accuracy`: MLPerf's 99 % rule);
2. every batch size warmed up and timed, on a GPU also as a CUDA graph, the
   faster kept (:func:`aihpc.infer.scenarios.warm_up`); a server bound that
   even one sample's batch misses is refused here;
3. the duration of what follows predicted and printed
   (:func:`aihpc.infer.scenarios.predicted_seconds`, the peak's stages);
4. the LoadGen tests: offline, single-stream, the server's rate search,
   each metered for energy where the machine lets it;
5. the measured peak of the device in the served dtype, for the offline
   rate's share of it.

The record holds each phase's seconds beside the prediction.

Operations per query are counted analytically, as ``aihpc count`` counts:
an image's forward pass, or a language model's prefill of its prompt plus
each decode step at its real cache length (:func:`aihpc.tasks.language.decode.decode_ops`).
"""

from __future__ import annotations

import copy
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import msgspec
import torch

from aihpc.base.errors import ConfigError, DataError
from aihpc.infer.loadgen import loadgen
from aihpc.infer.record import InferRecord, Measured
from aihpc.infer.scenarios import (
    Bounds,
    Calibration,
    ScenarioBench,
    ScenarioRun,
    ServerSearch,
    predicted_seconds,
    warm_up,
)
from aihpc.infer.source import Source
from aihpc.infer.steps import Classify, Generate
from aihpc.infer.systems import Step
from aihpc.records.codec import exact
from aihpc.records.inference import InferDuration
from aihpc.records.peak import NominalPeakRecord, PeakRecord
from aihpc.tasks import Arch

#: MLPerf Inference's datacenter server bound for ResNet-50: 15 ms at the 99th percentile.
IMAGE_LATENCY_S = 0.015
#: MLPerf Inference's server bounds for its smallest LLM (Llama-3.1-8B): first token within
#: 2 s and 100 ms per output token, both at the 99th percentile.
LM_TTFT_S, LM_TPOT_S = 2.0, 0.1


@dataclass(frozen=True)
class InferOptions:
    """What ``aihpc infer`` is asked (see ``aihpc infer --help``)."""

    scenarios: tuple[str, ...] = ("offline", "single-stream", "server")
    device: str = "auto"
    dtype: str | None = None
    seconds: float = 10.0
    max_batch: int = 256
    server_steps: int = 6
    latency: float | None = None
    ttft: float | None = None
    tpot: float | None = None
    prompt_tokens: int | None = None
    new_tokens: int | None = None
    threads: int | None = None
    peak_seconds: float = 2.0  # the peak search's time per stage (aihpc.roofline.peak)


def serving_threads(options: InferOptions, device: torch.device) -> int:
    """Threads of the model's operators: the options', else on the CPU one fewer than its
    cores (at least 1), the last core left to LoadGen's threads and the serving thread (on 2
    cores a tiny model's step measured 21 ms with 1 thread, 300-900 ms with 2 sharing the
    cores with other work); on a GPU torch's default."""
    import os

    if options.threads is not None:
        return options.threads
    if device.type != "cpu":
        return torch.get_num_threads()
    return max(1, (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1) - 1)


def served_dtype(options: InferOptions, device: torch.device) -> str:
    if options.dtype is not None:
        return options.dtype
    return "bfloat16" if device.type == "cuda" else "float32"


def bounds(options: InferOptions, generates: bool) -> Bounds:
    """The server's bounds: the options', else MLPerf's for the nearest workload."""
    if generates:
        return Bounds(None, options.ttft or LM_TTFT_S, options.tpot or LM_TPOT_S)
    return Bounds(options.latency or IMAGE_LATENCY_S)


def generation(source: Source, options: InferOptions) -> tuple[int, int] | None:
    """(prompt tokens, new tokens) for a model of aihpc's search whose task generates
    (:attr:`aihpc.tasks.base.Task.generates`); None otherwise (a model that answers in one
    forward pass, or a zoo model, served as one forward pass per query)."""
    if not source.task.generates or source.arch is None:
        return None
    context = int(source.inputs.shape[1])
    prompt = options.prompt_tokens or context // 2
    new = options.new_tokens or min(context - prompt, 64)
    try:
        source.task.decode_ops(_spec(source), prompt, new)  # ValueError where they do not fit
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return prompt, new


def serving_devices(options: InferOptions) -> list[torch.device]:
    """The devices served on: every GPU of the node for ``auto`` or ``cuda`` (one LoadGen, one
    system under test per GPU), else the one named."""
    from aihpc.machine.devices import resolve_device

    first = resolve_device(options.device)
    if first.type == "cuda" and options.device in ("auto", "cuda"):
        return [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    return [first]


def serving_steps(
    source: Source,
    devices: list[torch.device],
    dtype: str,
    tokens: tuple[int, int] | None,
    sizes: tuple[int, ...],
) -> tuple[list[Step], float]:
    """The batch step LoadGen's queries run on each device at the batch ``sizes``, and the
    operations of one query."""
    steps: list[Step] = []
    for device in devices:
        model = (source.model if device == devices[0] else copy.deepcopy(source.model)).to(device)
        if tokens is None:
            channels_last = device.type == "cuda" and source.inputs.dim() == 4
            if channels_last:
                model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
            steps.append(Classify(model, source.inputs, device, dtype, sizes, channels_last))
        else:
            prompts = source.inputs[:, : tokens[0]]
            steps.append(Generate(model, prompts, tokens[1], device, dtype, sizes))
    if tokens is None:
        return steps, source.ops_per_query
    return steps, sum(source.task.decode_ops(_spec(source), *tokens))


def _spec(source: Source) -> Arch:
    """The architecture of a model of aihpc's search, read by its task."""
    assert source.arch is not None  # a model of aihpc's search
    return source.task.arch(source.arch)


def infer(
    source: Source, options: InferOptions, out: Path, say: Callable[[str], None] = print
) -> InferRecord:
    """Serve ``source`` (the module docstring); the record, written to ``out/infer.json``."""
    from aihpc.infer.accuracy import check_quality

    loadgen()  # refused before any work if LoadGen is missing
    clock = Clock()
    devices = serving_devices(options)
    dtype = served_dtype(options, devices[0])
    torch.set_num_threads(serving_threads(options, devices[0]))
    if devices[0].type == "cuda":
        torch.backends.cudnn.benchmark = True  # each size's kernels tuned in its warm-up
    tokens = generation(source, options)
    where = ", ".join(str(d) for d in devices)
    say(f"aihpc infer: {source.label} on {where} in {dtype}")
    model = source.model.to(devices[0])
    quality = check_quality(model, source.inputs, source.targets, devices[0], dtype)
    clock.lap("quality")
    calibration, steps, ops = _warmed_up(source, options, devices, dtype, tokens, say)
    clock.lap("warm_up")
    limits = bounds(options, tokens is not None)
    if "server" in options.scenarios:
        check_bound(calibration, limits)
    server = (options.server_steps, limits, len(devices))
    plan = predicted_seconds(calibration, options.scenarios, options.seconds, server)
    plan["peak"] = PEAK_STAGES * options.peak_seconds
    say(plan_line(plan, clock))
    measured = Measured(dtype, ops, quality, calibration, limits, tokens, plan)
    record = _serve_and_record(source, options, devices, steps, measured, (clock, out), say)
    return replace(record, out_dir=str(out))


#: The peak search's length in ``--peak-seconds`` (aihpc.roofline.peak.search_peak: every
#: candidate briefly, then the fastest warmed up for a quarter and measured), each kernel's
#: setup aside.
PEAK_STAGES = 2.25


class Clock:
    """Seconds since the command started, and by phase (``lap`` ends one)."""

    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()
        self.phases: dict[str, float] = {}

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.phases[phase] = now - self.last
        self.last = now

    def total(self) -> float:
        return time.perf_counter() - self.start


def plan_line(plan: dict[str, float], clock: Clock) -> str:
    """What is left and when it should end (the module docstring's step 3)."""
    rest = sum(plan.values())
    parts = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in plan.items())
    ends = time.strftime("%H:%M:%S", time.localtime(time.time() + rest))
    return (
        f"  warmed up in {clock.phases['warm_up']:.1f} s; what follows should take about "
        f"{rest:.0f} s ({parts}), ending about {ends}"
    )


def _warmed_up(
    source: Source,
    options: InferOptions,
    devices: list[torch.device],
    dtype: str,
    tokens: tuple[int, int] | None,
    say: Callable[[str], None],
) -> tuple[Calibration, list[Step], float]:
    """The steps of every device at the batch sizes, each size warmed up and timed."""
    from aihpc.infer.batches import batch_sizes

    sizes = batch_sizes(options.max_batch, int(source.inputs.shape[0]))
    steps, ops = serving_steps(source, devices, dtype, tokens, sizes)
    how = "eager and as a CUDA graph" if devices[0].type == "cuda" else "eager"
    say(f"  warming up batches of {', '.join(map(str, sizes))}, each timed {how}")
    return warm_up(steps), steps, ops


def _serve_and_record(
    source: Source,
    options: InferOptions,
    devices: list[torch.device],
    steps: list[Step],
    m: Measured,
    clocked: tuple[Clock, Path],
    say: Callable[[str], None],
) -> InferRecord:
    """The LoadGen tests, then the peak, written to ``OUT.partial`` renamed ``OUT`` when whole
    (``clocked``: the command's clock and ``OUT``)."""
    clock, out = clocked
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        bench = ScenarioBench(steps, int(source.inputs.shape[0]), partial / "loadgen",
                              options.seconds, say, str(devices[0]))  # fmt: skip
        runs, search = run_scenarios(bench, m.calibration, m.limits, options)
        clock.lap("loadgen")
        peak = _peak(source, devices[0], m.dtype, len(devices), options.peak_seconds)
        clock.lap("peak")
        duration = duration_record(m.plan, clock, runs)
        record = InferRecord.build(
            source, options.seconds, devices, m, runs, search, peak, duration
        )
        record.write(partial)
        if out.exists():
            shutil.rmtree(out)
        partial.rename(out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return record


def duration_record(
    plan: dict[str, float], clock: Clock, runs: dict[str, list[ScenarioRun]]
) -> InferDuration:
    """The seconds predicted for each scenario and the peak, and taken: by those and by the
    phases before them; what followed the warm-up, predicted and taken; the whole."""
    taken = {
        "quality": clock.phases["quality"],
        "warm_up": clock.phases["warm_up"],
        **{name: sum(r.wall_s for r in scenario_runs) for name, scenario_runs in runs.items()},
        "peak": clock.phases["peak"],
    }
    return InferDuration(
        predicted_s=plan,
        actual_s=taken,
        after_warm_up_predicted_s=sum(plan.values()),
        after_warm_up_actual_s=clock.phases["loadgen"] + clock.phases["peak"],
        total_s=clock.total(),
    )


def check_bound(calibration: Calibration, limits: Bounds) -> None:
    """ConfigError where one sample alone takes longer than the server's bound."""
    alone = calibration.seconds[min(calibration.seconds)]
    bound = limits.first
    if limits.latency is not None and alone > bound:
        raise ConfigError(
            f"a latency bound of {1e3 * bound:g} ms cannot be met: one sample alone takes "
            f"{1e3 * alone:.3g} ms on this device (set a larger one with --latency-ms)"
        )


def run_scenarios(
    bench: ScenarioBench, calibration: Calibration, limits: Bounds, options: InferOptions
) -> tuple[dict[str, list[ScenarioRun]], ServerSearch | None]:
    """Each scenario's tests, in the order asked; the server's search where it ran."""
    runs: dict[str, list[ScenarioRun]] = {}
    search = None
    generates = limits.latency is None
    for name in options.scenarios:
        if name == "offline":
            runs[name] = [bench.offline(calibration)]
        elif name == "single-stream":
            runs[name] = [bench.single_stream(calibration, generates)]
        else:
            offline = runs.get("offline")
            top = offline[0].loadgen.samples_per_second if offline else None
            rate = top or len(bench.steps) * calibration.rate(calibration.best_batch())
            search = bench.server(calibration, limits, rate, options.server_steps)
            runs[name] = search.runs
    return runs, search


def _peak(
    source: Source, device: torch.device, dtype: str, devices: int, seconds: float
) -> PeakRecord | None:
    """The measured peak in ``dtype`` (the kernels the task calls) of one device, searched for
    ``seconds`` a stage, times ``devices`` (the devices served on, alike), with the nominal one;
    None where it cannot be measured."""
    from aihpc.roofline.peak import search_peak

    try:
        found = search_peak(device, dtype, seconds=seconds, kinds=source.task.peak_kernels)
    except (ConfigError, DataError, RuntimeError):
        return None
    one: PeakRecord = exact(found.to_dict(), PeakRecord, "the measured peak")
    nominal = one.nominal if isinstance(one.nominal, NominalPeakRecord) else None
    return msgspec.structs.replace(
        one,
        seconds=seconds,
        devices=devices,
        flops_per_s=one.flops_per_s * devices,
        nominal=None
        if nominal is None
        else msgspec.structs.replace(
            nominal, flops_per_s=(nominal.flops_per_s or 0) * devices or None
        ),
    )


__all__ = ["InferOptions", "infer"]
