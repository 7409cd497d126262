"""Benchmark: one training step of the language task's seed network, each way it can run.

The seed network of the device's default workload (aihpc.tasks.language.task:
``SEEDS``, ``DEFAULT_CONTEXT``; vocabulary 257, the synthetic language's 256
tokens and its begin-of-sequence token) at ``--batch`` windows (32 on a GPU,
16 on the CPU), random tokens, AdamW (fused on a GPU) with the trainer's
gradient clipping, trained the way :mod:`aihpc.train.trainer` trains it, in
these variants (``--variants``, comma-separated):

    eager          as the trainer ran it before per-block compilation: the LMNet itself,
                   float32 weights, under bfloat16 autocast on a GPU
    eager-bf16     LMStep on bfloat16 compute weights (the residual stream, norms and
                   products in bfloat16, no casts per step) with the float32 master
    compiled       LMStep with each block compiled (aihpc.tasks.language.regions), float32
                   weights (autocast on a GPU)
    compiled-bf16  both

Each variant builds its network afresh, times its first step (compilation
included: inductor's on-disk cache is a fresh folder for the whole script
unless ``--cache-dir``), runs two more steps, then times steps for
``--seconds`` (at least 3), the device synchronised only at the ends: the
step time is their mean.  Rates: PaLM's model FLOPs (6N + 12·L·H·Q·T per
token, what Megatron-LM and torchtitan report) and aihpc's counted operations
(every operation, :mod:`aihpc.tasks.language.count`), per second.  "compile" is the
first step less a timed one.  A compiled variant then grows two children of
the seed and times each one's first step: one more block (its blocks all of
the seed's shape: nothing to compile) and one block's MLP widened (one new
shape); "regions" says how many regions each pass needed and how many it
compiled.  On a GPU, ``torch.profiler`` then records ``--profile-steps``
steps and sorts kernel time by type (matrix products, attention,
elementwise and reductions, the optimizer, copies).  A variant that fails
prints its error and the next one runs.

    python benchmarks/lm_step.py [--device cpu|cuda] [--variants eager,eager-bf16,...]
                                 [--seconds 10] [--batch B] [--backend inductor]
                                 [--cache-dir DIR] [--no-children] [--profile-steps 3]
                                 [--peak TFLOPS] [--out FILE] [--smallest]

``--smallest``: a 2-block network of width 32 at batch 2, 0.2 s per variant,
compiled with the "aot_eager" backend (dynamo and autograd, no code
generation): every path of the script in seconds, no figure worth reading.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from bench_main import script

VARIANTS = ("eager", "eager-bf16", "compiled", "compiled-bf16")
VOCAB = 257  # the synthetic language's 256 tokens and its begin-of-sequence token
TINY = {"width": 32, "layers": 2, "heads": 2, "head_dim": 16, "mlp_hidden": 64}


@script
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="lm-step-inductor-")
    from aihpc.train.regions import use_cache_dir

    use_cache_dir(cache_dir)
    spec = seed(args)
    print(f"lm_step: {describe(spec, args.batch, device)}; inductor cache {cache_dir}", flush=True)
    rows = []
    for name in args.variants:
        try:
            rows.append(run_variant(name, spec, args, device))
        except Exception as exc:  # one failing variant must not hide the others
            traceback.print_exc()
            print(f"{name}: failed: {type(exc).__name__}: {exc}", flush=True)
            rows.append({"variant": name, "error": f"{type(exc).__name__}: {exc}"})
        free(device)
    print_table(rows, args.peak)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": describe(spec, args.batch, device), "variants": rows}, f, indent=1)
    return 0 if all("error" not in r for r in rows) else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    default_device = "cuda" if torch.cuda.is_available() else "cpu"
    p.add_argument("--device", default=default_device)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--seconds", type=float, default=10.0, help="timed steps per variant")
    p.add_argument("--batch", type=int, help="windows per step (default: 32 GPU, 16 CPU)")
    p.add_argument("--backend", default="inductor")
    p.add_argument("--cache-dir", help="inductor's cache folder (default: a fresh one: cold)")
    p.add_argument("--no-children", dest="children", action="store_false")
    p.add_argument("--profile-steps", type=int, default=3, help="steps profiled on a GPU (0: none)")
    p.add_argument("--peak", type=float, help="the device's measured peak in TFLOP/s: shares of it")
    p.add_argument("--out", help="write every figure as JSON")
    p.add_argument("--smallest", action="store_true", help="the suite's setting (seconds)")
    args = p.parse_args(argv)
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for v in args.variants:
        if v not in VARIANTS:
            p.error(f"a variant is one of {', '.join(VARIANTS)}, got {v!r}")
    kind = torch.device(args.device).type
    if args.batch is None:
        args.batch = 32 if kind == "cuda" else 16
    if args.smallest:
        args.batch, args.seconds, args.backend, args.profile_steps = 2, 0.2, "aot_eager", 1
    return args


def seed(args: argparse.Namespace):
    from aihpc.tasks.language.spec import seed_lm_spec
    from aihpc.tasks.language.task import DEFAULT_CONTEXT, SEEDS

    kind = torch.device(args.device).type
    if args.smallest:
        return seed_lm_spec(vocab_size=VOCAB, context=32, **TINY)
    return seed_lm_spec(vocab_size=VOCAB, context=DEFAULT_CONTEXT[kind], **SEEDS[kind])


def describe(spec, batch: int, device: torch.device) -> str:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    threads = torch.get_num_threads()
    return (
        f"{name}, torch {torch.__version__}, {threads} threads; {spec.num_params() / 1e6:.1f} M "
        f"parameters ({spec.layers} blocks of width {spec.width}), batch {batch} x "
        f"{spec.context} tokens"
    )


# ------------------------------------------------------------------------ one variant


class Trainer:
    """A network, its optimizer and the step model the trainer would make for a variant."""

    def __init__(self, spec, name: str, device: torch.device, cache, batch: int) -> None:
        from aihpc.tasks.language.net import LMNet
        from aihpc.tasks.language.regions import LMStep

        torch.manual_seed(0)
        with torch.device(device):
            self.net = LMNet(spec)
        low = torch.bfloat16 if name.endswith("-bf16") else None
        compiled = name.startswith("compiled")
        self.optimizer = torch.optim.AdamW(
            self.net.parameters(), lr=1e-4, fused=device.type == "cuda" or None
        )
        self.model: torch.nn.Module = self.net
        if low is not None or compiled:
            step = LMStep(self.net, compute_dtype=low, cache=cache if compiled else None)
            step.follow(self.optimizer)
            self.model = step
        gpu = device.type == "cuda" and low is None
        self.autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=gpu)
        gen = torch.Generator().manual_seed(1)
        tokens = torch.randint(0, spec.vocab_size, (batch, spec.context + 1), generator=gen)
        self.tokens = tokens.to(device)

    def step(self) -> torch.Tensor:
        x, y = self.tokens[:, :-1], self.tokens[:, 1:]
        with self.autocast:
            logits = self.model(x)
            loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.net.parameters(), 1.0)
        self.optimizer.step()
        return loss.detach()


def run_variant(name: str, spec, args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    from aihpc.tasks.language.count import lm_ops
    from aihpc.tasks.language.task import model_flops_per_token
    from aihpc.train.regions import RegionCache

    cache = RegionCache(args.backend)
    trainer = Trainer(spec, name, device, cache, args.batch)
    first = timed(trainer.step, 1, device)
    for _ in range(2):
        trainer.step()
    step_s, steps, loss = steady(trainer.step, args.seconds, device)
    tokens = args.batch * spec.context
    row: dict[str, Any] = {
        "variant": name,
        "step_s": step_s,
        "steps": steps,
        "loss": loss,
        "first_step_s": first,
        "compile_s": max(first - step_s, 0.0) if name.startswith("compiled") else 0.0,
        "model_tflops": tokens * model_flops_per_token(spec) / step_s / 1e12,
        "counted_tops": lm_ops(spec, args.batch)[0] / step_s / 1e12,
    }
    if device.type == "cuda":
        row["max_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    stats = cache.stats()
    row["regions"] = {
        "compiled": stats.compiled,
        "needed": spec.layers if name.startswith("compiled") else 0,
    }
    print(f"{name}: {step_s * 1e3:.1f} ms a step, first {first:.2f} s, loss {loss:.4f}", flush=True)
    if device.type == "cuda" and args.profile_steps > 0:
        row["kernels"] = kernel_times(trainer.step, args.profile_steps)
    if name.startswith("compiled") and args.children:
        row["children"] = children(spec, name, device, cache, args.batch)
    return row


def timed(fn: Callable[[], Any], n: int, device: torch.device) -> float:
    sync(device)
    start = time.perf_counter()
    for _ in range(n):
        fn()
    sync(device)
    return (time.perf_counter() - start) / n


def steady(
    fn: Callable[[], torch.Tensor], seconds: float, device: torch.device
) -> tuple[float, int, float]:
    """Steps for ``seconds`` (at least 3): the mean step time, the steps, the last loss."""
    sync(device)
    start = time.perf_counter()
    steps, loss = 0, torch.zeros(())
    while steps < 3 or time.perf_counter() - start < seconds:
        loss = fn()
        steps += 1
        if device.type == "cuda" and steps % 8 == 0:
            sync(device)  # the host may run ahead of the device: keep the clock honest
    sync(device)
    return (time.perf_counter() - start) / steps, steps, float(loss)


def children(spec, name: str, device: torch.device, cache, batch: int) -> dict[str, Any]:
    """The first step of two children of ``spec``: one more block, one block's MLP wider."""
    from aihpc.tasks.language.spec import Block

    grown = {
        "add_block": spec.blocks + (spec.blocks[-1],),
        "widen_mlp": (Block(spec.blocks[0].heads, spec.blocks[0].mlp_hidden * 2),)
        + spec.blocks[1:],
    }
    out: dict[str, Any] = {}
    for how, blocks in grown.items():
        child = type(spec).from_dict({**spec.to_dict(), "blocks": [b.to_dict() for b in blocks]})
        before = cache.stats().compiled
        trainer = Trainer(child, name, device, cache, batch)
        first = timed(trainer.step, 1, device)
        step_s = timed(trainer.step, 2, device)
        out[how] = {
            "first_step_s": first,
            "step_s": step_s,
            "regions_needed": child.layers,
            "regions_compiled": cache.stats().compiled - before,
        }
        del trainer
        free(device)
    return out


def kernel_times(step: Callable[[], Any], n: int) -> dict[str, Any]:
    """GPU kernel time per step over ``n`` steps: by kind of kernel, in all (``busy``, with
    the steps' wall time), and the slowest kernels by name."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    wall = (time.perf_counter() - start) / n
    by_kind: dict[str, float] = {}
    by_name: dict[str, float] = {}
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        seconds = event.time_range.elapsed_us() / 1e6 / n
        kind = kernel_kind(event.name)
        by_kind[kind] = by_kind.get(kind, 0.0) + seconds
        by_name[event.name] = by_name.get(event.name, 0.0) + seconds
    slowest = sorted(by_name.items(), key=lambda item: -item[1])[:8]
    return {
        "by_kind": by_kind,
        "busy_s": sum(by_kind.values()),
        "profiled_step_s": wall,
        "slowest": [[kernel_kind(name), name[:90], sec] for name, sec in slowest],
    }


def kernel_kind(name: str) -> str:
    """A kernel's kind from its name (cuBLAS, cuDNN, flash attention, inductor's Triton...)."""
    low = name.lower()
    if "memcpy" in low or "memset" in low:
        return "copies"
    if any(k in low for k in ("flash", "fmha", "sdpa", "attention")):
        return "attention"
    matmul = ("gemm", "cutlass", "xmma", "nvjet", "cublas", "matmul", "triton_tem")
    if any(k in low for k in matmul):
        return "matmul"
    if any(k in low for k in ("multi_tensor", "adam", "foreach")):
        return "optimizer"
    return "elementwise"


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def free(device: torch.device) -> None:
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


# ------------------------------------------------------------------------ the table


def print_table(rows: list[dict[str, Any]], peak: float | None = None) -> None:
    print()
    print(f"{'variant':<14} {'step ms':>9} {'model TFLOP/s':>14} {'counted TOP/s':>14} "
          f"{'first step s':>13} {'compile s':>10} {'regions':>8}")  # fmt: skip
    for r in rows:
        if "error" in r:
            print(f"{r['variant']:<14} failed: {r['error']}")
            continue
        regions = f"{r['regions']['compiled']}/{r['regions']['needed']}"
        print(f"{r['variant']:<14} {r['step_s'] * 1e3:>9.2f} {r['model_tflops']:>14.3f} "
              f"{r['counted_tops']:>14.3f} {r['first_step_s']:>13.2f} {r['compile_s']:>10.2f} "
              f"{regions:>8}")  # fmt: skip
    if peak:
        for r in rows:
            if "error" not in r:
                model, counted = 100 * r["model_tflops"] / peak, 100 * r["counted_tops"] / peak
                print(f"  {r['variant']}: {model:.1f} % of {peak:g} TFLOP/s in model FLOPs, "
                      f"{counted:.1f} % counted")  # fmt: skip
    for r in rows:
        for how, c in (r.get("children") or {}).items():
            print(f"  {r['variant']} child {how}: first step {c['first_step_s']:.2f} s, then "
                  f"{c['step_s'] * 1e3:.1f} ms; regions compiled {c['regions_compiled']} of "
                  f"{c['regions_needed']}")  # fmt: skip
    kernels = [r for r in rows if r.get("kernels")]
    if not kernels:
        return
    kinds = sorted({k for r in kernels for k in r["kernels"]["by_kind"]})
    print("\nGPU kernel time per step: busy against the profiled step, and its share by kind")
    head = " ".join(f"{k:>12}" for k in kinds)
    print(f"{'variant':<14} {'kernel ms':>10} {'step ms':>8} {'busy':>6} {head}")
    for r in kernels:
        k = r["kernels"]
        total, wall = k["busy_s"], k["profiled_step_s"]
        shares = " ".join(f"{100 * k['by_kind'].get(kind, 0.0) / total:>11.1f}%" for kind in kinds)
        print(f"{r['variant']:<14} {total * 1e3:>10.2f} {wall * 1e3:>8.2f} "
              f"{100 * total / wall:>5.1f}% {shares}")  # fmt: skip
    for r in kernels:
        print(f"\n{r['variant']}: slowest kernels (ms per step)")
        for kind, name, sec in r["kernels"]["slowest"]:
            print(f"  {sec * 1e3:>8.2f}  {kind:<12} {name}")


if __name__ == "__main__":
    sys.exit(main())
