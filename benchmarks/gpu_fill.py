"""Benchmark: how full does the default ``aihpc run`` keep a GPU?  (issue 9)

Runs the default ``aihpc run`` for ``--minutes`` on this machine's GPUs and
prints:
- score (OPS) and its share of the measured bf16 peak (the fastest kernel) and of the
  nominal one (the GPU's data-sheet figure);
- busy fraction: the share of the workers' wall time inside training and
  evaluation phases (CUDA-event timed), and the harness overhead (the rest);
- trials and epochs (and those past ``min_accuracy``), and the seconds per epoch of each phase;
- the energy the run measured (NVML, RAPL) and its GOPS/W;
- GPU idle time inside an epoch, from ``torch.profiler``: one steady-state
  epoch of the default workload's seed network (the trial's second epoch, on
  a smaller copy of the default data set: ``--profile-samples``) is
  profiled, and the time no kernel runs is reported against the epoch's
  wall time and against its training steps alone, with the kernels' time by
  operator type (``aihpc profile``'s types: where a share of peak falls short).

Arguments after ``--`` go to ``aihpc run`` (e.g. ``-- --compile`` or
``-- --gpus-per-trial 2``).

    python benchmarks/gpu_fill.py [--minutes 5] [--samples N] [--keep DIR] [--no-profile] [-- RUN ARGS]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from aihpc_runs import run_aihpc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--samples", type=int, help="data set size of the run (default: the GPU default workload's)")
    ap.add_argument("--profile-samples", type=int, default=4096, help="data set size of the profiled epoch")
    ap.add_argument("--no-profile", action="store_true", help="skip the profiled epoch")
    ap.add_argument("--keep", type=Path, help="run directory to keep (default: a temporary one)")
    ap.add_argument("extra", nargs="*", help="more `aihpc run` arguments, after --")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("gpu_fill: no CUDA GPU on this machine (torch.cuda.is_available() is False); "
              "this benchmark measures a GPU run and has nothing to measure here", file=sys.stderr)
        return 2
    print(f"device            {torch.cuda.get_device_name(0)} x {torch.cuda.device_count()}, "
          f"torch {torch.__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    with tempfile.TemporaryDirectory() as tmp:
        out = args.keep or Path(tmp) / "run"
        extra = list(args.extra)
        if args.samples:
            config = Path(tmp) / "samples.toml"
            config.write_text(f"[data_options]\nnum_samples = {args.samples}\n")
            extra += ["--config", str(config)]
        results = run_aihpc(out, args.minutes, *extra, show=True)
        report_run(results, out)
    if not args.no_profile:  # profiled as the run trained: compiled or not
        compiled = False if "--no-compile" in args.extra else True if "--compile" in args.extra else None
        report_profile(args.profile_samples, compiled)
    return 0


def report_run(results: dict, run_dir: Path) -> None:
    from analysis import peak_text, utilisation

    s = results["score"]
    u = utilisation(results)
    epochs = sum(len(t["epochs"]) for t in results["trials"])
    quality = (f"best loss {s['best_val_loss']} (floor {s.get('loss_floor')})" if s.get("best_val_loss") is not None
               else f"best accuracy {s['best_accuracy']}")
    print(f"score             {s['ops_per_second'] / 1e12:.2f} TOPS over {s['wall_seconds']:.1f} s, "
          f"{quality}, valid {s.get('valid')}")
    print("\n".join(peak_text(results)))
    mf = results.get("model_flops")
    if mf:
        mfu = "n/a" if mf["utilisation"] is None else f"{100 * mf['utilisation']:.1f} % of the nominal peak"
        print(f"model FLOPs       {mf['per_second'] / 1e12:.2f} TFLOP/s by 6N + 12LHQT: {mfu}")
    print(f"busy fraction     {100 * u['work_fraction']:.1f} % of {u['worker_slots']} workers' wall time in "
          f"training and evaluation phases; harness overhead {100 * u['overhead_fraction']:.1f} % "
          f"(idle between tasks {100 * u['idle_fraction']:.1f} %)")
    target = s.get("min_accuracy")
    passing = sum(1 for t in results["trials"] if target is not None and (t.get("best_val_accuracy") or 0) >= target)
    print(f"trials            {len(results['trials'])}, {epochs} epochs; {passing} reached min_accuracy {target}")
    totals: dict[str, float] = {}
    for t in results["trials"]:
        for phase, seconds in t["phase_seconds"].items():
            totals[phase] = totals.get(phase, 0.0) + seconds
    print("per epoch         " + ", ".join(f"{p} {v / max(epochs, 1):.3f} s" for p, v in totals.items()))
    from aihpc.records.energy import energy_text
    from aihpc.records.store import read_meta

    print(f"energy            {energy_text(results.get('energy'))}")

    staging = read_meta(run_dir / "aihpc.sqlite").staging
    if staging:
        print(f"data staging      {staging['seconds']:.1f} s before the run's clock, "
              f"{staging['bytes'] / 2**30:.2f} GiB on {staging['workers']} workers")


def report_profile(samples: int, compiled: bool | None) -> None:
    """Profile a steady-state epoch of the default GPU workload's seed; print the GPU's idle time."""
    with tempfile.TemporaryDirectory() as tmp:
        task = profile_task(samples, tmp, compiled)
        from aihpc.train.worker import run_epoch

        first = run_epoch(task)  # builds, stages the data, (compiles); the profiled epoch keeps its model
        if first.status != "ok":
            raise SystemExit(f"gpu_fill: the profiled trial's first epoch failed: {first.reason}")
        from dataclasses import replace

        second = replace(task, epoch=2, start=first.weights)
        busy, wall, steps, by_type = profiled_epoch(second)
    print(f"profiled epoch    {samples} samples, batch {task.hparams.batch_size}: GPU idle "
          f"{100 * (1 - busy / wall):.1f} % of the epoch's {wall:.2f} s, "
          f"{100 * (1 - steps['busy'] / steps['wall']):.1f} % of its training steps' {steps['wall']:.2f} s")
    total = sum(row.seconds for row in by_type)
    print(f"GPU time by type  {total:.2f} s of kernels: "
          + ", ".join(f"{row.type} {100 * row.seconds / total:.1f} %" for row in by_type[:10]))


def profile_task(samples: int, weights_dir: str, compiled: bool | None = None):
    from aihpc.data import load_dataset
    from aihpc.nas.seeds import seed_spec
    from aihpc.tasks.image import DEFAULT_BATCH_SIZES, DEFAULT_SYNTHETIC
    from aihpc.records.messages import DataRef, EpochTask
    from aihpc.records.trial import Hyperparameters

    options = {**DEFAULT_SYNTHETIC["cuda"], "num_samples": samples}
    data = load_dataset("synthetic", seed=0, **options)
    spec = seed_spec(data.input_shape, data.num_classes)
    batch = statistics.median_high(DEFAULT_BATCH_SIZES["cuda"])
    hp = {"lr": 0.1, "batch_size": batch, "weight_decay": 5e-5, "momentum": 0.9, "dropout": 0.0,
          "optimizer": "sgd", "schedule": "cosine"}  # fmt: skip
    return EpochTask(trial_id=0, epoch=1, epochs=2, arch=spec.to_dict(), hparams=Hyperparameters.from_dict(hp),
                     data=DataRef("synthetic", options=tuple(sorted(options.items()))),
                     deadline=time.time() + 3600, seed=0, weights_dir=weights_dir, device="cuda",
                     compile=compiled)  # fmt: skip


def profiled_epoch(task) -> tuple[float, float, dict[str, float], tuple]:
    """(kernel-busy seconds, wall seconds) of one epoch, the same within its training steps, and
    the kernels' time by operator type, slowest first (``aihpc profile``'s rows)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from aihpc.profile.step import operator_times
    from aihpc.train.worker import run_epoch

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with record_function("aihpc:epoch"):
            result = run_epoch(task)
        torch.cuda.synchronize()
    if result.status != "ok":
        raise SystemExit(f"gpu_fill: the profiled epoch failed: {result.reason}")
    events = prof.events()
    kernels = sorted((e.time_range.start, e.time_range.end) for e in events
                     if e.device_type == torch.autograd.DeviceType.CUDA)  # fmt: skip
    epoch = next(e for e in events if e.name == "aihpc:epoch")
    steps = [e for e in events if e.name.startswith("Optimizer.step")]
    lo, hi = epoch.time_range.start, epoch.time_range.end
    busy = _union(kernels, lo, hi)
    # the training steps: from the epoch's start to the last optimizer step (eval and snapshot after it)
    last_step = max((e.time_range.end for e in steps), default=hi)
    step_busy = _union(kernels, lo, last_step)
    rows = operator_times(prof, 1, (hi - lo) / 1e6, torch.device("cuda"))
    by_type = tuple(row for row in rows if row.seconds > 0)
    steps_time = {"busy": step_busy / 1e6, "wall": max(last_step - lo, 1) / 1e6}
    return busy / 1e6, (hi - lo) / 1e6, steps_time, by_type


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
