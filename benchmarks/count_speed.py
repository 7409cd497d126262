"""Benchmark: operations per sample of fresh architectures, counted whole and layer by layer.

``aihpc verify`` recounts every trial's operations from its logged architecture.
The whole-network count (:meth:`aihpc.tasks.image.task.ImageTask.count_per_sample`: build
the SpecNet on the meta device, trace it under FlopCounterMode) takes 85 ms
(the CPU workload) to 200 ms (the GPU workload's ResNet-50 children) per architecture
with its op memo (:mod:`aihpc.counting.op_memo`; 230 and 570 ms without,
2026-11-27), and the search never repeats one; the layered count
(:func:`aihpc.tasks.image.count.count_spec_per_sample`) counts each distinct
layer once and then only walks the architecture.

Architectures are made as the search makes them: each is one ``random_plan``
morph of a parent drawn from every architecture made so far (the seed
first; as the ``random`` strategy draws), or from the last ``--population``
(as aging evolution draws; the networks then grow deeper), within the
workload's ``max_params``; each gets a batch size drawn from the workload's
and a dropout drawn from [0, 0.5], as a trial's hyperparameters are.
Every architecture is new, so the reference's cache never hits; the layered
memo starts empty (only the reference counts the seed, once, untimed, to
warm torch up).  For the first ``--children`` architectures both are timed
and must agree exactly; ``--more`` further architectures are counted layer
by layer only, to show the rate as the memo warms.  Prints ms per
architecture for each and the speed-up.

    python benchmarks/count_speed.py [--workload gpu|cpu] [--children 100] [--more 1000]
        [--population 0] [--seed 0]

Workloads (aihpc.runner.run's defaults): ``gpu``: 3x128x128, 100 classes
(the ResNet-50 seed), max_params 60 M, batch 128/256/512; ``cpu``: 3x16x16,
50 classes (ResNet-20), max_params 2 M, batch 32/64/128.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from bench_main import script

from aihpc.base.errors import MorphError
from aihpc.tasks.image.count import count_spec_per_sample
from aihpc.tasks.image.morphism import random_plan
from aihpc.tasks.image.seeds import seed_spec
from aihpc.tasks.image.spec import ArchSpec
from aihpc.tasks.image.task import ImageTask

count_ops_per_sample = ImageTask().count_per_sample  # the whole-network count

WORKLOADS = {
    "gpu": ((3, 128, 128), 100, 60_000_000, (256, 512)),
    "cpu": ((3, 16, 16), 50, 2_000_000, (32, 64, 128)),
}
WARM_AFTER = 10  # architectures after which the layered memo is reported as warm


def architectures(
    seed: ArchSpec, n: int, population: int, max_params: int, rng: random.Random
) -> list[ArchSpec]:
    """``n`` distinct children, each a morph of one of the last ``population`` made (of any
    made, with 0)."""
    made = [seed]
    seen = {seed.content_hash()}
    while len(made) <= n:
        parent = rng.choice(made[-population:] if population else made)
        try:
            child = random_plan(parent, rng, max_params)[0]
        except MorphError:
            continue
        if child.content_hash() not in seen:
            seen.add(child.content_hash())
            made.append(child)
    return made[1:]


def timed(count, spec: ArchSpec, batch: int, dropout: float) -> tuple[tuple[float, float], float]:
    start = time.perf_counter()
    result = count(spec, batch, dropout)
    return result, (time.perf_counter() - start) * 1e3


@script
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="gpu")
    ap.add_argument("--children", type=int, default=100, help="counted both ways")
    ap.add_argument("--more", type=int, default=1000, help="then counted layer by layer only")
    ap.add_argument("--population", type=int, default=0, help="0: every architecture")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.children < 1 or args.more < 0:
        ap.error(f"--children must be at least 1 and --more at least 0, got {args.children} and {args.more}")
    shape, classes, max_params, batches = WORKLOADS[args.workload]
    rng = random.Random(args.seed)
    seed = seed_spec(shape, classes)
    specs = architectures(seed, args.children + args.more, args.population, max_params, rng)
    trials = [(s, rng.choice(batches), rng.uniform(0.0, 0.5)) for s in specs]
    count_ops_per_sample(seed, batches[0], 0.0)  # warm torch up (not the layered memo)

    reference, layered = [], []
    for spec, batch, dropout in trials[: args.children]:
        expected, ms_ref = timed(count_ops_per_sample, spec, batch, dropout)
        got, ms_layered = timed(count_spec_per_sample, spec, batch, dropout)
        if got != expected:
            raise SystemExit(f"MISMATCH on {spec.content_hash()[:12]}: {got} != {expected}")
        reference.append(ms_ref)
        layered.append(ms_layered)
    more = [timed(count_spec_per_sample, *trial)[1] for trial in trials[args.children :]]

    sizes = [len(s.layers) for s in specs]
    print(
        f"workload {args.workload}: input {shape}, {classes} classes, max_params {max_params:,}; "
        f"{len(specs)} architectures of {min(sizes)}-{max(sizes)} layers "
        f"(median {statistics.median(sizes):.0f}), "
        f"{min(s.num_params() for s in specs):,}-{max(s.num_params() for s in specs):,} "
        "parameters"
    )
    ref_mean, lay_mean = statistics.fmean(reference), statistics.fmean(layered)
    print(f"first {len(reference)} architectures, counted both ways (all equal):")
    print(f"  count_ops_per_sample   {ref_mean:9.2f} ms/architecture")
    speed_up = ref_mean / lay_mean
    print(f"  count_spec_per_sample  {lay_mean:9.2f} ms/architecture  (speed-up {speed_up:.0f}x)")
    if len(layered) > WARM_AFTER:
        cold = statistics.fmean(layered[:WARM_AFTER])
        warm = statistics.fmean(layered[WARM_AFTER:])
        speed_up = statistics.fmean(reference[WARM_AFTER:]) / warm
        print(
            f"    of which the first {WARM_AFTER}: {cold:.2f} ms, "
            f"the rest: {warm:.2f} ms (speed-up {speed_up:.0f}x)"
        )
    if more:
        print(
            f"next {len(more)} architectures, layer by layer only: "
            f"{statistics.fmean(more):.3f} ms/architecture "
            f"(median {statistics.median(more):.3f}, max {max(more):.1f})"
        )
        step = max(1, len(more) // 5)
        for start in range(0, len(more), step):
            part = more[start : start + step]
            first = args.children + start + 1
            print(
                f"  architectures {first}-{first + len(part) - 1}: "
                f"{statistics.fmean(part):.3f} ms/architecture"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
