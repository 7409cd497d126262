"""Benchmark: staging the default GPU data set — its time and the host memory it takes (issue 18).

Stages the default GPU workload's synthetic data set (100 classes,
3x128x128, 50,000 samples: 40,000 train and 10,000 val) the way a worker
does (:mod:`aihpc.train.staging`): in chunks, produced by ``--threads``
threads, into one preallocated tensor per split in the staging dtype.
Without a GPU the target is a host tensor in that dtype (``--device cpu``,
bfloat16 by default: the bytes a GPU worker would hold), so the peak host
memory it prints splits into the staged tensors themselves and what staging
needed on top of them (the chunks in flight); ``--tier stream`` stages into
the node-local file instead.  The peak is the process's resident peak during
staging alone: Linux's peak (VmHWM) is reset before it starts (where the
kernel does not allow that, the peak since the process started, and the
line says so).

    python benchmarks/staging.py [--samples 50000] [--threads N] [--dtype bfloat16] [--tier device|stream]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import psutil
import torch
from bench_main import script


@script
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=None, help="data set size (default: the GPU default's 50,000)")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads(), help="staging threads (default: torch's)")
    ap.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tier", choices=["device", "stream"], default="device")
    args = ap.parse_args(argv)
    from aihpc.tasks.image.data import load_dataset
    from aihpc.tasks.image.task import DEFAULT_SYNTHETIC
    from aihpc.train import staging

    options = {**DEFAULT_SYNTHETIC["cuda"], **({"num_samples": args.samples} if args.samples else {})}
    data = load_dataset("synthetic", seed=0, **options)
    dtype, device = getattr(torch, args.dtype), torch.device(args.device)
    whole = sum(s.nbytes() for s in (data.train, data.val))
    print(f"data set          {data.describe()}; {whole / 2**30:.2f} GiB as float32")
    print(f"staging           {args.tier} tier, {args.dtype} on {device}, {args.threads} threads, "
          f"chunks of {staging.CHUNK_BYTES / 2**20:.0f} MiB float32")
    base = psutil.Process().memory_info().rss
    reset = reset_peak()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        splits = [staging.stage_split(s, device, dtype, args.threads,
                                      Path(tmp) / name if args.tier == "stream" else None)
                  for s, name in ((data.train, "train"), (data.val, "val"))]  # fmt: skip
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        report(splits, seconds, base, device, args.tier, len(data.train) + len(data.val), reset)
    return 0


def reset_peak() -> bool:
    """Reset this process's peak resident set (Linux: ``5`` to /proc/self/clear_refs); whether it could."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def peak_rss() -> int:
    """This process's peak resident set in bytes (VmHWM, since its reset), else getrusage's."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    kib = next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(kib) * 1024


def report(splits, seconds: float, base: int, device: torch.device, tier: str, samples: int, reset: bool) -> None:
    staged = sum(s.x.nbytes + s.y.nbytes for s in splits)
    peak = peak_rss()
    on_host = staged if device.type == "cpu" and tier == "device" else 0
    print(f"staging time      {seconds:.1f} s ({1e3 * seconds / samples:.2f} ms per image)")
    print(f"staged            {staged / 2**30:.2f} GiB")
    since = "during staging" if reset else "since the process started (its peak could not be reset)"
    print(f"peak host memory  {peak / 2**30:.2f} GiB resident {since}, of which {base / 2**30:.2f} GiB before staging"
          + (f" and {on_host / 2**30:.2f} GiB the staged tensors" if on_host else "")
          + f": staging itself needed {(peak - base - on_host) / 2**30:.2f} GiB"
          + (" (a stream tier's mapped pages count as resident while they are written)" if tier == "stream" else ""))


if __name__ == "__main__":
    sys.exit(main())
