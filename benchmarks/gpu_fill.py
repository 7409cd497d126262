"""Benchmark: how full does the default ``aihpc run`` keep a GPU?  (issues 9 and 41)

Runs the default ``aihpc run`` (``--task image``, or ``--task lm``) for
``--minutes`` on this machine's GPUs and prints:
- score (OPS) and its share of the measured bf16 peak (the fastest kernel) and of the
  nominal one (the GPU's data-sheet figure); model FLOPs where the task counts them;
- busy fraction: the share of the workers' wall time inside training and
  evaluation phases (CUDA-event timed), and the harness overhead (the rest);
- trials: how many trained, and what was lost (epochs lost with their worker, failed trials);
  epochs, and the seconds per epoch of each phase;
- the energy the run measured (NVML, RAPL) and its GOPS/W, and the data staging;
- GPU idle time inside an epoch, from ``torch.profiler``: one steady-state
  epoch of the task's seed network (the trial's second epoch, on a smaller
  copy of the default data: ``--profile-samples`` images, or windows of the
  language's context) is profiled, and the time no kernel runs is reported
  against the epoch's wall time and against its training steps alone; the
  training steps' kernel time by group of kernel (:func:`kernel_group`:
  matrix products, attention, elementwise work, the rest) and the epoch's
  by operator type (``aihpc profile``'s types: where a share of peak falls short).

Arguments after ``--`` go to ``aihpc run`` (e.g. ``-- --compile`` or
``-- --gpus-per-trial 2``).  ``--report RUN`` prints the run's figures again
from a run directory (or its results.json), on any machine: what a GPU run
kept (``--keep``) is read without a GPU.  ``--profile-out FILE`` writes the
profile's figures as JSON (benchmarks/gpu_summary.py reads them).

    python benchmarks/gpu_fill.py [--task image|lm] [--minutes 5] [--samples N] [--keep DIR]
        [--profile-samples N] [--no-profile] [--profile-out FILE] [-- RUN ARGS]
    python benchmarks/gpu_fill.py --report RUN
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from aihpc_runs import run_aihpc
from analysis import (
    peak_text,
    percent,
    quality_text,
    read_run,
    tally_text,
    trial_tally,
    utilisation,
)
from bench_main import script

# the profiled epoch's default size: images, or windows of the language's context (4 steps of
# the language's middle batch size on a GPU)
PROFILE_SAMPLES = {"image": 4096, "lm": 128}

# Kernel groups by the kernel's name before its template arguments, the first that matches:
# attention (flash and SDPA kernels, PyTorch's, cuDNN's, CUTLASS's), matrix products and
# convolutions (cuBLAS's, CUTLASS's, cuDNN's GEMM and convolution kernels, Triton's GEMM
# templates), elementwise work (PyTorch's elementwise and vectorised kernels, norms, copies and
# casts, layout changes, the optimizer's multi-tensor kernels, Triton's fused pointwise and
# reduction kernels); "other" is the rest (reductions, softmax and the loss, indexing, memory
# copies between host and device).
KERNEL_GROUPS = (
    ("attention", re.compile(r"flash|fmha|attention|sdpa|_attn", re.I)),
    ("matrix products", re.compile(r"gemm|gemv|nvjet|xmma|cutlass|cublas|wgmma|matmul|triton_tem_|conv|winograd", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|norm|copy|cast|tonhwc|tonchw|transpose|"
                               r"multi_tensor_apply|triton_poi_|triton_per_|triton_red_|fill|bn_", re.I)),
)  # fmt: skip
OTHER_GROUP = "other"


def kernel_group(name: str) -> str:
    """The group of a GPU kernel (``KERNEL_GROUPS``), judged by its name before ``<``."""
    base = name.split("<", 1)[0]
    return next((group for group, pattern in KERNEL_GROUPS if pattern.search(base)), OTHER_GROUP)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", choices=("image", "lm"), default="image")
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--samples", type=int,
                    help="the run's data: images, or training tokens with --task lm (default: the task's GPU default)")
    ap.add_argument("--profile-samples", type=int,
                    help="size of the profiled epoch: images, or windows with --task lm (default 4096, 128)")
    ap.add_argument("--no-profile", action="store_true", help="skip the profiled epoch")
    ap.add_argument("--profile-out", type=Path, help="write the profile's figures here as JSON")
    ap.add_argument("--keep", type=Path, help="run directory to keep (default: a temporary one)")
    ap.add_argument("--report", type=Path, metavar="RUN",
                    help="only print the figures of the run in RUN (a run directory or its results.json)")
    ap.add_argument("extra", nargs="*", help="more `aihpc run` arguments, after --")
    return ap.parse_args(argv)


@script
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report is not None:
        report_run(read_run(args.report))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("gpu_fill: no CUDA GPU on this machine (torch.cuda.is_available() is False); "
              "this benchmark measures a GPU run and has nothing to measure here", file=sys.stderr)
        return 2
    print(f"device            {torch.cuda.get_device_name(0)} x {torch.cuda.device_count()}, "
          f"torch {torch.__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    with tempfile.TemporaryDirectory() as tmp:
        out = args.keep or Path(tmp) / "run"
        extra = ["--task", args.task, *args.extra]
        if args.samples:
            config = Path(tmp) / "samples.toml"
            option = "train_tokens" if args.task == "lm" else "num_samples"
            config.write_text(f"[data_options]\n{option} = {args.samples}\n")
            extra += ["--config", str(config)]
        report_run(run_aihpc(out, args.minutes, *extra, show=True))
    if not args.no_profile:  # profiled as the run trained: compiled or not
        compiled = False if "--no-compile" in args.extra else True if "--compile" in args.extra else None
        samples = args.profile_samples or PROFILE_SAMPLES[args.task]
        figures = profile(args.task, "cuda", samples, compiled)
        print("\n".join(profile_text(figures)))
        if args.profile_out:
            args.profile_out.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


def report_run(results: dict[str, Any]) -> None:
    """The run's figures (the module docstring), from its results."""
    from aihpc.base.fmt import format_si
    from aihpc.records.codec import convert
    from aihpc.records.energy import EnergyRecord, energy_text

    s = results["score"]
    u = utilisation(results)
    print(f"score             {format_si(s['ops_per_second'], 'OPS')} over {s['wall_seconds']:.1f} s, "
          f"{quality_text(s)}, valid {s.get('valid')}")
    print("\n".join(peak_text(results)))
    mf = results.get("model_flops")
    if mf:
        mfu = "n/a" if mf["utilisation"] is None else f"{100 * mf['utilisation']:.1f} % of the nominal peak"
        print(f"model FLOPs       {mf['per_second'] / 1e12:.2f} TFLOP/s by 6N + 12LHQT: {mfu}")
    print(f"busy fraction     {100 * u['work_fraction']:.1f} % of {u['worker_slots']} workers' wall time in "
          f"training and evaluation phases; harness overhead {100 * u['overhead_fraction']:.1f} % "
          f"(idle between tasks {100 * u['idle_fraction']:.1f} %)")
    print(f"trials            {tally_text(trial_tally(results))}")
    target = s.get("min_accuracy")
    if target is not None:
        passing = sum(1 for t in results["trials"] if (t.get("best_val_accuracy") or 0) >= target)
        print(f"                  {passing} reached min_accuracy {target}")
    epochs = sum(len(t["epochs"]) for t in results["trials"])
    totals: dict[str, float] = {}
    for t in results["trials"]:
        for phase, seconds in t["phase_seconds"].items():
            totals[phase] = totals.get(phase, 0.0) + seconds
    print("per epoch         " + ", ".join(f"{p} {v / max(epochs, 1):.3f} s" for p, v in totals.items()))
    energy = results.get("energy")
    record = None if energy is None else convert(energy, EnergyRecord, "energy")
    print(f"energy            {energy_text(record)}")
    staging = results.get("staging")
    if staging:
        print(f"data staging      {staging['seconds']:.1f} s before the run's clock, "
              f"{staging['bytes'] / 2**30:.2f} GiB on {staging['workers']} workers")


# ----------------------------------------------------------------------------- the profiled epoch


def profile(kind: str, device: str, samples: int, compiled: bool | None = None) -> dict[str, Any]:
    """Profile a steady-state epoch of task ``kind``'s seed on ``device`` (the epoch after a first
    one that builds the model, stages the data and compiles); its figures (:func:`profile_text`)."""
    from aihpc.tasks import task_of
    from aihpc.train.worker import run_epoch

    with tempfile.TemporaryDirectory() as tmp:
        task = profile_task(kind, device, samples, tmp, compiled)
        first = run_epoch(task_of(kind), task)
        if first.status != "ok":
            raise SystemExit(f"gpu_fill: the profiled trial's first epoch failed: {first.reason}")
        figures = profiled_epoch(replace(task, epoch=2, start=first.weights))
    return {"task": kind, "device": device, "samples": samples, "batch": task.hparams.batch_size,
            "params": first.num_params, **figures}  # fmt: skip


def profile_data(kind: str, device: str, samples: int) -> dict[str, int]:
    """The data options of a profiled epoch of ``samples`` images, or windows of the language's
    context (as many training tokens as the epoch takes)."""
    if kind == "image":
        return {"num_samples": samples}
    from aihpc.tasks.language.task import DEFAULT_CONTEXT

    tokens = samples * DEFAULT_CONTEXT[device]
    return {"epoch_tokens": tokens, "train_tokens": tokens}


def profile_task(kind: str, device: str, samples: int, weights_dir: str, compiled: bool | None = None):
    """The first epoch of the seed of task ``kind`` on ``device``, its default workload for the
    device on a smaller synthetic data set (:func:`profile_data`), at the middle of its batch sizes."""
    from aihpc.records.messages import DataRef, EpochTask
    from aihpc.records.trial import Hyperparameters
    from aihpc.tasks import read_config, task_of

    task = task_of(kind)
    config = task.default_workload(read_config(dict(task=kind, data_options=profile_data(kind, device, samples))), device)
    info = task.inspect_data(config, device)
    lr = 0.1 if config.search.optimizer == "sgd" else 3e-4
    hp = {"lr": lr, "batch_size": statistics.median_high(config.search.batch_sizes), "weight_decay": 5e-5,
          "momentum": 0.9, "dropout": 0.0, "optimizer": config.search.optimizer, "schedule": "cosine"}  # fmt: skip
    return EpochTask(trial_id=0, epoch=1, epochs=2, arch=task.seed_arch(info).to_dict(),
                     hparams=Hyperparameters.from_dict(hp), data=DataRef.of(config),
                     deadline=time.time() + 3600, seed=0, weights_dir=weights_dir, device=device,
                     compile=compiled)  # fmt: skip


def profiled_epoch(task) -> dict[str, Any]:
    """One epoch under ``torch.profiler``: its wall time and its training steps' (from its start to
    the last optimizer step; evaluation and the weight file after it); on a GPU the share of each
    in which no kernel ran, and the steps' kernel time by group (:func:`kernel_group`) with the
    slowest kernels; the epoch's time by operator type (device time on a GPU, CPU time on the CPU)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from aihpc.profile.step import operator_times
    from aihpc.tasks import task_of
    from aihpc.train.worker import run_epoch

    device = torch.device(task.device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        with record_function("aihpc:epoch"):
            result = run_epoch(task_of(task.data.task), task)
        if device.type == "cuda":
            torch.cuda.synchronize()
    if result.status != "ok":
        raise SystemExit(f"gpu_fill: the profiled epoch failed: {result.reason}")
    events = prof.events()
    epoch = next(e for e in events if e.name == "aihpc:epoch")
    lo, hi = epoch.time_range.start, epoch.time_range.end
    # the training steps: from the epoch's start to the last optimizer step
    last_step = max((e.time_range.end for e in events if e.name.startswith("Optimizer.step")), default=hi)
    # the device's work: kernels, copies and fills (a range's copy on the GPU's timeline, a user
    # annotation, is not work)
    kernels = [(e.name, e.time_range.start, e.time_range.end) for e in events
               if e.device_type == torch.autograd.DeviceType.CUDA and not e.is_user_annotation]  # fmt: skip
    rows = operator_times(prof, 1, (hi - lo) / 1e6, device)
    figures = {"epoch_s": (hi - lo) / 1e6, "steps_s": max(last_step - lo, 1) / 1e6,
               "types": [[row.type, row.seconds] for row in rows if row.seconds > 0]}  # fmt: skip
    return {**figures, **kernel_figures(kernels, lo, hi, last_step)}


def kernel_figures(kernels: list[tuple[str, float, float]], lo: float, hi: float, last_step: float) -> dict[str, Any]:
    """From the kernels' (name, start, end) in microseconds: the share of the epoch [lo, hi] and of
    its training steps [lo, last_step] in which no kernel ran, and the steps' kernel seconds by
    group and the slowest kernels (none of it where no kernel ran: the CPU)."""
    if not kernels:
        return {"idle_epoch": None, "idle_steps": None, "kernel_s": 0.0, "groups": {}, "kernels": []}
    spans = sorted((a, b) for _, a, b in kernels)
    by_name: dict[str, float] = {}
    for name, a, b in kernels:
        if a < last_step and b > lo:
            by_name[name] = by_name.get(name, 0.0) + (min(b, last_step) - max(a, lo)) / 1e6
    groups = {group: 0.0 for group, _ in KERNEL_GROUPS} | {OTHER_GROUP: 0.0}
    for name, seconds in by_name.items():
        groups[kernel_group(name)] += seconds
    slowest = sorted(by_name.items(), key=lambda kv: -kv[1])[:10]
    return {
        "idle_epoch": 1 - _union(spans, lo, hi) / max(hi - lo, 1),
        "idle_steps": 1 - _union(spans, lo, last_step) / max(last_step - lo, 1),
        "kernel_s": sum(by_name.values()),
        "groups": groups,
        "kernels": [[name, kernel_group(name), seconds] for name, seconds in slowest],
    }


def profile_text(f: dict[str, Any]) -> list[str]:
    """The profile's lines (what :func:`profile` measured)."""
    unit = "windows" if f["task"] == "lm" else "samples"
    lines = [f"profiled epoch    {f['task']} seed ({f['params']:,} parameters) on {f['device']}, "
             f"{f['samples']} {unit}, batch {f['batch']}: {f['epoch_s']:.2f} s, its training steps {f['steps_s']:.2f} s"]
    if f["idle_epoch"] is not None:
        lines.append(f"GPU idle          {percent(f['idle_epoch'])} of the epoch, {percent(f['idle_steps'])} "
                     "of its training steps")
        total = f["kernel_s"]
        lines.append(f"kernels by group  {total:.3f} s of kernels in the training steps: "
                     + ", ".join(f"{g} {percent(s / total if total else None)}" for g, s in f["groups"].items()))
        lines += [f"                  {percent(s / total if total else None):>7}  {g:<15} {name[:90]}"
                  for name, g, s in f["kernels"][:6]]
    total = sum(s for _, s in f["types"])
    time_of = "GPU time" if f["idle_epoch"] is not None else "CPU time"
    lines.append(f"{time_of} by type  {total:.2f} s in the epoch's operators: "
                 + ", ".join(f"{t} {percent(s / total if total else None)}" for t, s in f["types"][:10]))
    return lines


def _union(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Length of the union of sorted intervals, clipped to [lo, hi]."""
    total, end = 0.0, lo
    for a, b in intervals:
        a, b = max(a, end), min(b, hi)
        if b > a:
            total += b - a
            end = b
    return total


if __name__ == "__main__":
    sys.exit(main())
