"""Benchmark: what compiling a new architecture costs, whole-model against regional.

The CPU default workload (aihpc.runner.run): synthetic 3x16x16 images, 50
classes, the seed ``seed_spec((3, 16, 16), 50)`` (ResNet-20) and one child
of it (``random_plan`` from ``--seed``, within the CPU's 2 M parameters),
batch ``--batch`` (64), SGD with momentum, random inputs and labels.

"First step" is what a trial pays before its first epoch runs at speed:
one training step (forward, loss, backward, optimizer step) plus one
evaluation forward pass at the same batch size (the trainer pads eval
batches when compiled), timed together.  Each case runs in a process of its
own, with inductor's cache directory (``TORCHINDUCTOR_CACHE_DIR``, through
:func:`aihpc.train.regions.use_cache_dir`) empty or left by an earlier case:

    eager                  no compilation: the baseline
    (i)   whole, cold      torch.compile(model), empty cache
    (ii)  whole, warm      the same architecture again, new process, cache from (i)
    (*)   whole, child     the child, new process, cache from (i) and (ii): what a new
                           trial pays today
    (iii) regional, cold   RegionNet, empty cache
    (iv)  regional, child  the child in the process of (iii), after the parent
    (v)   regional, child  the child, new process, cache from (iii) and (iv)
    (vi)  regional, warm   the parent, new process, cache from (iii) and (iv)

Steady state (after the first step and 3 warm-up steps): ``--steps`` timed
training steps and as many evaluation batches of the parent, eager (in its
process), whole-compiled (in (ii)'s) and regional (in (iii)'s, before the
child); an epoch of the default size (10,800 training samples, 1,200
validation samples) is extrapolated from the medians, not run.  Prints the
load average with each case (the machine may be shared); ``--out`` writes
every number as JSON.  ``--cases`` runs some of the cases (their keys, below;
eager always runs, the baseline), each with the cases whose cache it reads.

    python benchmarks/compile_regions.py [--out FILE] [--batch 64] [--steps 30] [--seed 0]
                                         [--backend inductor] [--timeout 1800] [--cases KEY,...]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_main import script

SHAPE, CLASSES, MAX_PARAMS = (3, 16, 16), 50, 2_000_000
TRAIN_SAMPLES, VAL_SAMPLES = 10_800, 1_200  # the CPU default: 12,000 samples, 10 % validation
WARMUP = 3
FORMAT = 1
# case name -> (mode, architectures in order, cache folder key, steady state measured)
CASES: dict[str, tuple[str, tuple[str, ...], str | None, bool]] = {
    "eager": ("eager", ("parent",), None, True),
    "(i) whole, cold": ("whole", ("parent",), "whole", False),
    "(ii) whole, warm": ("whole", ("parent",), "whole", True),
    "(*) whole, child": ("whole", ("child",), "whole", False),
    "(iii)+(iv) regional, cold, then child": ("regional", ("parent", "child"), "regional", True),
    "(v) regional, child, new process": ("regional", ("child",), "regional", False),
    "(vi) regional, warm": ("regional", ("parent",), "regional", False),
}
# --cases: key -> (case name, the keys of the cases before it whose cache it reads)
KEYS: dict[str, tuple[str, tuple[str, ...]]] = {
    "eager": ("eager", ()),
    "whole-cold": ("(i) whole, cold", ()),
    "whole-warm": ("(ii) whole, warm", ("whole-cold",)),
    "whole-child": ("(*) whole, child", ("whole-cold", "whole-warm")),
    "regional": ("(iii)+(iv) regional, cold, then child", ()),
    "regional-child": ("(v) regional, child, new process", ("regional",)),
    "regional-warm": ("(vi) regional, warm", ("regional",)),
}


def chosen_cases(keys: str | None) -> list[str]:
    """The case names of ``--cases`` (all by default), in CASES's order, eager always among them;
    ValueError naming the key for an unknown key or a case without the cases whose cache it reads."""
    if keys is None:
        return list(CASES)
    chosen = {"eager", *keys.split(",")}
    for key in chosen:
        if key not in KEYS:
            raise ValueError(f"--cases: no case {key!r}; the cases are {', '.join(KEYS)}")
        missing = [k for k in KEYS[key][1] if k not in chosen]
        if missing:
            raise ValueError(f"--cases: {key} reads the cache of {', '.join(missing)}: add it")
    return [name for key, (name, _) in KEYS.items() if key in chosen]


def architectures(seed: int) -> dict[str, Any]:
    """The parent (the CPU seed) and its child, with the morphism's description."""
    from aihpc.tasks.image.morphism import random_plan
    from aihpc.tasks.image.seeds import seed_spec

    parent = seed_spec(SHAPE, CLASSES)
    child, _, description = random_plan(parent, random.Random(seed), MAX_PARAMS)
    return {"parent": parent, "child": child, "description": description}


# ------------------------------------------------------------------ one case, in its process


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """Run one case; returns its numbers (printed as the last line of stdout)."""
    import torch

    from aihpc.tasks.image.build import SpecNet
    from aihpc.tasks.image.regions import RegionNet
    from aihpc.train.regions import RegionCache, use_cache_dir

    if args.cache_dir:
        use_cache_dir(args.cache_dir)
    specs = architectures(args.seed)
    cache = RegionCache(backend=args.backend)
    out: dict[str, Any] = {"load_before": os.getloadavg()[0], "archs": {}}
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(args.batch, *SHAPE, generator=gen)
    y = torch.randint(0, CLASSES, (args.batch,), generator=gen)
    for arch in args.archs.split(","):
        torch.manual_seed(0)
        net = SpecNet(specs[arch])
        model: torch.nn.Module = net
        if args.mode == "whole":
            torch._dynamo.reset()  # as the trainer does for each compiled model
            model = torch.compile(net, backend=args.backend)  # type: ignore[assignment]
        elif args.mode == "regional":
            model = RegionNet(net, cache)
        opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
        start = time.perf_counter()
        train_step(model, opt, x, y)
        eval_pass(model, x)
        first = time.perf_counter() - start
        result: dict[str, Any] = {"first_step_s": first}
        if args.mode == "regional":
            stats = cache.stats()
            result["regions"] = len(model.regions)  # type: ignore[arg-type]
            result["cache"] = dataclasses.asdict(stats)
        if args.steady and arch == "parent":
            result["steady"] = steady(model, opt, x, y, args.steps)
        out["archs"][arch] = result
    out["load_after"] = os.getloadavg()[0]
    out["compile_threads"] = int(torch._inductor.config.compile_threads or 0)
    out["torch_threads"] = torch.get_num_threads()
    return out


def train_step(model, opt, x, y) -> None:
    import torch.nn.functional as F

    model.train()
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def eval_pass(model, x) -> None:
    import torch

    model.eval()
    with torch.no_grad():
        model(x)
    model.train()


def steady(model, opt, x, y, steps: int) -> dict[str, Any]:
    """Median and spread of ``steps`` training steps and evaluation batches, after warm-up."""
    for _ in range(WARMUP):
        train_step(model, opt, x, y)
    train, val = [], []
    for _ in range(steps):
        start = time.perf_counter()
        train_step(model, opt, x, y)
        train.append(time.perf_counter() - start)
    for _ in range(steps):
        start = time.perf_counter()
        eval_pass(model, x)
        val.append(time.perf_counter() - start)
    return {"train_step_s": summary(train), "eval_batch_s": summary(val)}


def summary(values: list[float]) -> dict[str, float]:
    q = statistics.quantiles(values, n=4)
    return {"median": statistics.median(values), "q1": q[0], "q3": q[2], "min": min(values)}


# --------------------------------------------------------------------------- the driver


def run_case(name: str, args: argparse.Namespace, folders: dict[str, str]) -> dict[str, Any]:
    mode, archs, folder, measure = CASES[name]
    cmd = [sys.executable, __file__, "--worker", "--mode", mode, "--archs", ",".join(archs)]
    cmd += ["--batch", str(args.batch), "--steps", str(args.steps), "--seed", str(args.seed)]
    cmd += ["--backend", args.backend] + (["--steady"] if measure else [])
    if folder:
        cmd += ["--cache-dir", folders[folder]]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        raise SystemExit(f"case {name!r} failed:\n{proc.stderr[-4000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - start
    return result


def epoch_seconds(steady_numbers: dict[str, Any], batch: int) -> float:
    """Training steps and eval batches of one default epoch at the measured medians."""
    steps = TRAIN_SAMPLES // batch
    evals = -(-VAL_SAMPLES // batch)
    return (
        steps * steady_numbers["train_step_s"]["median"]
        + evals * steady_numbers["eval_batch_s"]["median"]
    )


def print_tables(results: dict[str, Any], args: argparse.Namespace) -> None:
    eager_first = results["eager"]["archs"]["parent"]["first_step_s"]
    print(f"\nfirst training step + first eval pass, batch {args.batch} (seconds)")
    print(f"{'case':40} {'arch':6} {'first':>8} {'- eager':>8} {'regions':>8} {'compiled':>8} "
          f"{'load':>9}")  # fmt: skip
    for name, res in results.items():
        for arch, r in res["archs"].items():
            cache = r.get("cache")
            compiled = "" if cache is None else str(cache["compiled"])
            regions = "" if cache is None else str(r["regions"])
            load = f"{res['load_before']:.1f}-{res['load_after']:.1f}"
            first = r["first_step_s"]
            print(f"{name:40} {arch:6} {first:8.1f} {first - eager_first:8.1f} "
                  f"{regions:>8} {compiled:>8} {load:>9}")  # fmt: skip
    print("  (compiled: region keys compiled so far in that process, train and eval counted apart)")
    print(f"\nsteady state, parent, batch {args.batch} (ms; median [q1-q3] of {args.steps})")
    steps, evals = TRAIN_SAMPLES // args.batch, -(-VAL_SAMPLES // args.batch)
    print(f"{'mode':10} {'train step':>22} {'eval batch':>22} {'epoch s':>8} {'vs eager':>9}")
    base = None
    for name, res in results.items():
        st = res["archs"].get("parent", {}).get("steady")
        if st is None:
            continue
        mode = CASES[name][0]
        t, e = st["train_step_s"], st["eval_batch_s"]
        epoch = epoch_seconds(st, args.batch)
        base = base or epoch
        cells = [
            f"{v['median'] * 1e3:7.1f} [{v['q1'] * 1e3:.1f}-{v['q3'] * 1e3:.1f}]" for v in (t, e)
        ]
        print(f"{mode:10} {cells[0]:>22} {cells[1]:>22} {epoch:8.2f} {base / epoch:8.2f}x")
        if (t["q3"] - t["q1"]) > 0.1 * t["median"]:
            print(f"  warning: {mode}'s training steps spread by more than 10 % (loaded machine?)")
    print(f"  (epoch extrapolated: {steps} training steps + {evals} eval batches, not run)")


@script
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write every number as JSON here")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=30, help="timed steps in steady state")
    ap.add_argument("--seed", type=int, default=0, help="draws the child's morphism")
    ap.add_argument("--backend", default="inductor")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per case")
    ap.add_argument("--cases", help=f"the cases to run, comma-separated, of {', '.join(KEYS)} (default all)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--archs", help=argparse.SUPPRESS)
    ap.add_argument("--cache-dir", help=argparse.SUPPRESS)
    ap.add_argument("--steady", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    try:
        cases = chosen_cases(args.cases)
    except ValueError as exc:
        ap.error(str(exc))
    from aihpc.tasks.image.regions import partition

    specs = architectures(args.seed)
    parent_sigs = {r.signature for r in partition(specs["parent"])}
    child_regions = partition(specs["child"])
    new = {r.signature for r in child_regions} - parent_sigs
    print(f"parent: seed {SHAPE} {CLASSES} classes, {len(partition(specs['parent']))} regions, "
          f"{len(parent_sigs)} distinct; child: {specs['description']}: {len(child_regions)} "
          f"regions, {len(new)} new")  # fmt: skip
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="compile-regions-") as tmp:
        folders = {"whole": f"{tmp}/whole", "regional": f"{tmp}/regional"}
        for name in cases:
            results[name] = run_case(name, args, folders)
            archs = results[name]["archs"]
            first = ", ".join(f"{a} {r['first_step_s']:.1f} s" for a, r in archs.items())
            print(f"  {name}: {first} (load {results[name]['load_before']:.2f})", flush=True)
    print_tables(results, args)
    if args.out:
        write_json(args, specs, new, results)
    return 0


def write_json(args, specs, new, results) -> None:
    from aihpc.machine.environment import collect

    doc = {
        "format": FORMAT,
        "benchmark": "compile_regions",
        "environment": collect(Path(__file__).resolve().parents[1]).to_dict(),
        "settings": {k: getattr(args, k) for k in ("batch", "steps", "seed", "backend", "cases")},
        "child": {"description": specs["description"], "new_signatures": len(new)},
        "epoch_extrapolated": {"train_samples": TRAIN_SAMPLES, "val_samples": VAL_SAMPLES},
        "cases": results,
    }
    args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    raise SystemExit(main())
