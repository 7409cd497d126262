"""Benchmark: operations per window of grown language models, traced and in closed form.

``aihpc verify`` recounts every trial's operations from its logged architecture.
The traced count (:meth:`aihpc.tasks.language.task.LanguageTask.count_per_sample`:
build the LMNet on the meta device, trace a training step and an evaluation
forward under FlopCounterMode) takes 0.1 to 1 s per architecture, and the
search never repeats one; the closed form
(:func:`aihpc.tasks.language.count.count_lm_per_sample`) sums integer polynomials
over the blocks.

Architectures are made as the search makes them: each is one
``random_lm_plan`` step from a parent drawn from every architecture made so
far (the seed first), within the workload's ``max_params``; each gets a batch
size drawn from the workload's.  Both counts are timed on every one and must
agree exactly.  Prints seconds per architecture for each and the speed-up.

    python benchmarks/lm_count_speed.py [--workload cpu|cuda] [--children 50] [--seed 0]

Workloads (aihpc.tasks.language.task's defaults): ``cpu``: the 2-block width-64 seed,
context 128, max_params 2 M, batch 8/16/32; ``cuda``: the 16-block width-1024
seed, context 1024, max_params 700 M, batch 16/32/64; vocabulary 257 (bytes and
a begin-of-sequence token).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from bench_main import script

from aihpc.base.errors import MorphError
from aihpc.tasks.language.count import count_lm_per_sample
from aihpc.tasks.language.morphism import random_lm_plan
from aihpc.tasks.language.spec import LMSpec, seed_lm_spec
from aihpc.tasks.language.task import (
    DEFAULT_BATCH_SIZES,
    DEFAULT_CONTEXT,
    DEFAULT_MAX_PARAMS,
    SEEDS,
    LanguageTask,
)

traced_count = LanguageTask().count_per_sample


def architectures(seed: LMSpec, n: int, max_params: int, rng: random.Random) -> list[LMSpec]:
    """``n`` distinct children, each a growth step of one made before."""
    made, seen = [seed], {seed.content_hash()}
    while len(made) <= n:
        try:
            child = random_lm_plan(rng.choice(made), rng, max_params)[0]
        except MorphError:
            continue
        if child.content_hash() not in seen:
            seen.add(child.content_hash())
            made.append(child)
    return made[1:]


def timed(count, spec: LMSpec, batch: int) -> tuple[tuple[float, float], float]:
    start = time.perf_counter()
    result = count(spec, batch, 0.0)
    return result, time.perf_counter() - start


@script
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--children", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.children < 1:
        ap.error(f"--children must be at least 1, got {args.children}")
    rng = random.Random(args.seed)
    context, batches = DEFAULT_CONTEXT[args.workload], DEFAULT_BATCH_SIZES[args.workload]
    seed = seed_lm_spec(vocab_size=257, context=context, **SEEDS[args.workload])
    specs = architectures(seed, args.children, DEFAULT_MAX_PARAMS[args.workload], rng)
    traced_count(seed, batches[0], 0.0)  # warm torch up
    traced, closed = [], []
    for spec in specs:
        batch = rng.choice(batches)
        expected, s_traced = timed(traced_count, spec, batch)
        got, s_closed = timed(count_lm_per_sample, spec, batch)
        if got != expected:
            raise SystemExit(f"MISMATCH on {spec.content_hash()[:12]}: {got} != {expected}")
        traced.append(s_traced)
        closed.append(s_closed)
    blocks = [s.layers for s in specs]
    print(
        f"workload {args.workload}: {len(specs)} architectures of {min(blocks)}-{max(blocks)} "
        f"blocks (median {statistics.median(blocks):.0f}), "
        f"{min(s.num_params() for s in specs):,}-{max(s.num_params() for s in specs):,} "
        "parameters; every count equal"
    )
    t, c = statistics.fmean(traced), statistics.fmean(closed)
    print(f"  traced (count_per_sample)          {t:.4f} s/architecture (max {max(traced):.3f})")
    print(f"  closed form (count_lm_per_sample) {c * 1e6:.1f} us/architecture")
    print(f"  speed-up {t / c:,.0f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
