"""Deep500 Level 3: data-parallel training with ``torch.distributed`` against one process.

:func:`bench_distributed` launches ``procs`` ranks (each ``python -m
aihpc.bench.distributed_rank FOLDER``; :mod:`aihpc.bench.distributed_launch`):
on this node as ``torchrun`` does, or with ``--slurm`` as the tasks of one
``srun`` over ``nodes`` nodes; gloo on the CPU and NCCL on GPUs; then the
same with one process for the baseline.  Each rank trains a zoo model in
``DistributedDataParallel`` on a fixed random batch of ``batch`` samples
(weak scaling: the batch is per rank; no data loading is timed).  On this
node each rank runs ``max(1, cores // procs)`` threads unless
``threads_per_rank`` says otherwise, the baseline too: it is one rank of the
parallel run, alone; with srun, ``threads_per_rank`` (default 1) CPUs are
booked per task.

After ``warmup`` untimed steps of each kind, two kinds of step alternate,
each begun by an untimed barrier so that the ranks start together:

* the DDP step: zero the gradients, forward, loss, backward (DDP all-reduces
  gradient buckets while the backward pass runs), SGD step;
* the split step: forward and backward under ``no_sync()``, then, after a
  barrier, one ``all_reduce`` of all gradients (views into one flat buffer,
  so nothing is copied) divided by the world size, then the SGD step.
  ``compute_s`` is this step less the all-reduce, ``allreduce_s`` the
  all-reduce alone.

Per step the slowest rank counts; the figures are medians over the steps,
``step_spread`` the IQR / median of the DDP steps (:mod:`aihpc.base.spread`).
``overlap_s = compute_s + allreduce_s - step_s`` is the communication DDP hid behind the backward
pass (negative: the DDP step cost more than its parts, e.g. bucket copies;
reported as measured).  Throughput is ``procs * batch / step_s`` samples/s,
the scaling efficiency ``throughput_N / (N * throughput_1)``.

Buffers are not broadcast at each forward (``forward_sync_buffers=False``,
``broadcast_buffers=False`` in older PyTorch): BatchNorm statistics stay per
rank, so a step's only communication is the gradient all-reduce, whose ring
volume is ``2 (N - 1) / N * gradient_bytes`` per rank
(:func:`ring_allreduce_bytes`).  What is actually sent is measured around
:data:`VOLUME_CALLS` all-reduces of the gradients by each rank's own TCP
sockets' payload counter (``TCP_INFO`` ``tcpi_bytes_sent``, Linux >= 4.19;
other processes' traffic cannot enter it) and, as a cross-check, the
transmit counter of the interface gloo uses (``lo`` on one node; TCP/IP
headers, ACKs and anything else sent over it meanwhile included), over the
ranks.  NCCL moves data
outside sockets: nothing is measured.  Gloo's CPU all-reduce is a ring
(reduce-scatter, all-gather): on this machine (2 and 3 ranks, 0.4 to 44 MB)
its payload was within 0.15 % of the ring figure, about 590 bytes per call
more on 2 ranks (message headers).

Result data (the ``data`` of a ``bench-distributed`` result file), seconds
per step, throughput in samples/s over all ranks, bytes per rank and call::

    {"procs", "backend": "gloo" | "nccl", "device": "cpu" | "cuda", "model",
     "batch_per_rank", "steps", "warmup", "threads_per_rank",
     "launcher": "local" | "srun", "nodes", "hosts": the parallel run's host of each rank,
     "single": RUN, "parallel": RUN,
     "scaling_efficiency", "allreduce_share": parallel allreduce_s / step_s,
     "volume": {"gradient_bytes", "ring_bytes_per_rank_computed",
                "bytes_per_rank_measured" | None, "ratio": measured / computed | None,
                "measured_by": how, "interface": the one gloo used | None,
                "interface_bytes_per_rank" | None, "calls"}}
    RUN = {"procs", "step_s", "step_spread", "throughput", "compute_s",
           "allreduce_s", "overlap_s", "warning": str | None}
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from aihpc.base.checks import integer
from aihpc.base.errors import ConfigError
from aihpc.base.spread import spread as spread_of
from aihpc.base.spread import spread_warning
from aihpc.bench.distributed_launch import Launcher, RankReport, launch
from aihpc.records.kinds import BenchDistributedData, StepTimesRecord, VolumeRecord

VOLUME_CALLS = 10
"""All-reduces of the gradient buffer between the byte-counter readings."""

COLLECTIVE_TIMEOUT_S = 300
"""A rank waiting this long on a collective gives up (a peer died or hangs)."""


def ring_allreduce_bytes(gradient_bytes: int, procs: int) -> float:
    """Bytes each rank sends in a ring all-reduce of ``gradient_bytes``: ``2 (N - 1) / N * bytes``.

    The buffer is cut into N chunks of B / N.  Reduce-scatter: N - 1 steps in
    which every rank sends one chunk to its neighbour and adds the one it
    receives; all-gather: N - 1 more steps passing the reduced chunks on.
    So 2 (N - 1) chunks of B / N per rank; 0 for one rank.
    """
    if procs < 1:
        raise ValueError(f"procs must be >= 1, got {procs}")
    return 2.0 * (procs - 1) / procs * gradient_bytes


def available_cores() -> int:
    """Cores this process may run on (``os.sched_getaffinity``; ``os.cpu_count`` where it is
    missing)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass(frozen=True)
class DistributedConfig:
    """One Level-3 run, validated when built; :meth:`backend` checks it against this machine."""

    procs: int
    model: str = "resnet20"
    batch: int = 32
    steps: int = 20
    warmup: int = 3
    device: str = "auto"
    threads_per_rank: int | None = None  # None: cores // procs here; 1 with srun
    launcher: Launcher = Launcher()

    def __post_init__(self) -> None:
        for name, minimum in (("procs", 1), ("batch", 1), ("steps", 1), ("warmup", 0)):
            value = getattr(self, name)
            integer(name, value, minimum)
        if self.device not in ("auto", "cpu", "cuda"):
            raise ConfigError(f"device must be cpu, cuda or auto, got {self.device!r}")
        if self.threads_per_rank is not None and self.threads_per_rank < 1:
            raise ConfigError(f"threads per rank must be >= 1, got {self.threads_per_rank}")
        nodes = self.launcher.nodes
        if nodes < 1 or nodes > self.procs or (nodes > 1 and not self.launcher.srun):
            raise ConfigError(
                f"nodes must be 1, or with --slurm between 1 and procs ({self.procs}), got {nodes}"
            )

    def backend(self) -> tuple[str, str]:
        """(device type, backend): ("cpu", "gloo") or ("cuda", "nccl"); ConfigError if the machine
        lacks them.  With srun the nodes decide ("auto", "auto"), once SLURM is checked."""
        from aihpc import models
        from aihpc.machine.cluster import check_slurm

        models.info(self.model)  # ModelError for an unknown name
        if self.launcher.srun:
            check_slurm(self.launcher.partition)
            backend = {"cpu": "gloo", "cuda": "nccl"}.get(self.device, "auto")
            return self.device, backend
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if self.device == "cuda" and gpus == 0:
            raise ConfigError("device 'cuda' was asked for but this machine has no CUDA GPU")
        if self.device == "cuda" or (self.device == "auto" and gpus > 0):
            if self.procs > gpus:
                raise ConfigError(
                    f"procs must be at most the {gpus} GPU(s) of this machine, got {self.procs}"
                )
            return "cuda", "nccl"
        cores = available_cores()
        if self.procs > cores:
            raise ConfigError(
                f"procs must be at most the {cores} cores this process may run on "
                f"(os.sched_getaffinity), got {self.procs}"
            )
        return "cpu", "gloo"


@dataclass(frozen=True)
class StepTimes:
    """One run's figures (seconds per step, medians over the steps; see the module docstring)."""

    procs: int
    step_s: float
    step_spread: float
    throughput: float
    compute_s: float
    allreduce_s: float
    overlap_s: float
    warning: str | None


@dataclass(frozen=True)
class Volume:
    """Bytes per rank and per all-reduce: computed from the gradient sizes, and measured."""

    gradient_bytes: int
    ring_bytes_per_rank_computed: float
    bytes_per_rank_measured: float | None
    ratio: float | None
    measured_by: str
    interface: str | None
    interface_bytes_per_rank: float | None
    calls: int


@dataclass(frozen=True)
class DistributedOutcome:
    """A finished Level-3 run: the baseline, the parallel run and the communication volume."""

    config: DistributedConfig
    device: str
    backend: str
    threads_per_rank: int
    hosts: tuple[str, ...]  # the parallel run's host of each rank
    single: StepTimes
    parallel: StepTimes
    volume: Volume

    @property
    def scaling_efficiency(self) -> float:
        return self.parallel.throughput / (self.config.procs * self.single.throughput)

    @property
    def allreduce_share(self) -> float:
        return self.parallel.allreduce_s / self.parallel.step_s

    def to_record(self) -> BenchDistributedData:
        """The result data documented in the module docstring."""
        c = self.config
        return BenchDistributedData(
            procs=c.procs,
            backend=self.backend,
            device=self.device,
            model=c.model,
            batch_per_rank=c.batch,
            steps=c.steps,
            warmup=c.warmup,
            threads_per_rank=self.threads_per_rank,
            launcher="srun" if c.launcher.srun else "local",
            nodes=c.launcher.nodes,
            hosts=tuple(self.hosts),
            single=StepTimesRecord(**asdict(self.single)),
            parallel=StepTimesRecord(**asdict(self.parallel)),
            scaling_efficiency=self.scaling_efficiency,
            allreduce_share=self.allreduce_share,
            volume=VolumeRecord(**asdict(self.volume)),
        )


def step_times(samples: list[list[float]], procs: int, batch: int) -> StepTimes:
    """Medians of per-step ``[ddp step s, compute s, all-reduce s]`` rows (the slowest rank's
    each)."""
    ddp, compute, comm = (statistics.median(column) for column in zip(*samples, strict=True))
    spread = spread_of([row[0] for row in samples])
    warning = spread_warning(f"{procs} process(es)", f"{len(samples)} step times", spread)
    return StepTimes(
        procs=procs,
        step_s=ddp,
        step_spread=spread,
        throughput=procs * batch / ddp,
        compute_s=compute,
        allreduce_s=comm,
        overlap_s=compute + comm - ddp,
        warning=warning,
    )


def bench_distributed(
    config: DistributedConfig,
    progress: Callable[[str], None] | None = None,
    shared_dir: Path | None = None,
) -> DistributedOutcome:
    """Run the baseline and the ``procs``-rank run; ``progress`` gets a line before and after
    each.  ``shared_dir``: where the ranks' folder goes (with srun, seen by every node)."""
    _, backend = config.backend()
    threads = config.threads_per_rank
    if threads is None and not config.launcher.srun:
        threads = max(1, available_cores() // config.procs)
    spec = {
        "model": config.model,
        "batch": config.batch,
        "steps": config.steps,
        "warmup": config.warmup,
        "threads": threads,
        "device": config.device,
        "volume_calls": VOLUME_CALLS,
    }
    say = progress or (lambda line: None)
    reports: dict[int, RankReport] = {}
    for procs in sorted({1, config.procs}):
        say(
            f"{procs} process(es), {config.model}, batch {config.batch} per rank, {backend}: "
            f"{config.warmup} warm-up and {config.steps} timed steps of each kind"
        )
        reports[procs] = launch(spec, procs, config.launcher, shared_dir)
        say(
            f"{procs} process(es) on {', '.join(sorted(set(reports[procs].hosts)))}: DDP step "
            f"{statistics.median(r[0] for r in reports[procs].times):.4f} s"
        )
    report = reports[config.procs]
    return DistributedOutcome(
        config=config,
        device=report.device,
        backend=report.backend,
        threads_per_rank=report.threads,
        hosts=tuple(report.hosts),
        single=step_times(reports[1].times, 1, config.batch),
        parallel=step_times(report.times, config.procs, config.batch),
        volume=_volume(report, config.procs),
    )


def _volume(report: RankReport, procs: int) -> Volume:
    """The computed ring volume against what the ranks' sockets (and their interface) sent."""
    grad = report.gradient_bytes
    computed = ring_allreduce_bytes(grad, procs)
    measured, sent = report.tcp_bytes_per_rank, report.interface_bytes_per_rank
    if procs == 1:
        how = "nothing to measure: one process sends nothing"
    elif report.backend == "nccl":
        how = "not measured: NCCL moves the data over NVLink/PCIe, not sockets"
    elif measured is not None:
        how = "tcp_info: payload bytes sent by each rank's own TCP sockets"
    elif sent is not None:
        measured, how = (
            sent,
            f"interface: bytes sent over {report.interface} (headers, ACKs and other traffic "
            "included) / ranks",
        )
    else:
        how = "not measured: neither the sockets' counters nor an interface's could be read"
    ratio = measured / computed if measured is not None and computed > 0 else None
    return Volume(
        gradient_bytes=grad,
        ring_bytes_per_rank_computed=computed,
        bytes_per_rank_measured=measured,
        ratio=ratio,
        measured_by=how,
        interface=report.interface,
        interface_bytes_per_rank=sent,
        calls=VOLUME_CALLS,
    )


# -- the table ------------------------------------------------------------------------------
def format_table(outcome: DistributedOutcome) -> str:
    """Both runs side by side, then efficiency, all-reduce share and the communication volume."""
    c, one, par, v = outcome.config, outcome.single, outcome.parallel, outcome.volume
    n_procs = f"{c.procs} process{'es' if c.procs > 1 else ''}"
    rows = [
        ("step s (DDP, median)", "{:.4f}", "step_s"),
        ("step spread (IQR/median)", "{:.0%}", "step_spread"),
        ("throughput samples/s", "{:.1f}", "throughput"),
        ("compute s (no_sync)", "{:.4f}", "compute_s"),
        ("all-reduce s (apart)", "{:.4f}", "allreduce_s"),
        ("overlap s (hidden by DDP)", "{:.4f}", "overlap_s"),
    ]
    hosts = sorted(set(outcome.hosts))
    lines = [
        f"bench distributed: {c.model}, batch {c.batch} per rank, {c.steps} timed steps "
        f"({c.warmup} warm-up), {outcome.backend} on {outcome.device}, {outcome.threads_per_rank} "
        f"thread(s) per rank",
        f"ranks on {len(hosts)} node(s): {', '.join(hosts)}"
        + (" (srun)" if c.launcher.srun else ""),
        f"{'':26}  {'1 process':>12}  {n_procs:>12}",
    ]
    for label, fmt, name in rows:
        lines.append(
            f"{label:26}  {fmt.format(getattr(one, name)):>12}  "
            f"{fmt.format(getattr(par, name)):>12}"
        )
    lines.append(
        f"scaling efficiency: {outcome.scaling_efficiency:.3f} "
        f"(throughput of {c.procs} / ({c.procs} x throughput of 1))"
    )
    lines.append(f"all-reduce share of the step: {outcome.allreduce_share:.1%} ({n_procs})")
    lines.append(
        f"gradients: {v.gradient_bytes:,} B; ring all-reduce 2(N-1)/N x gradients = "
        f"{v.ring_bytes_per_rank_computed:,.0f} B sent per rank and call (computed)"
    )
    if v.bytes_per_rank_measured is not None:
        lines.append(
            f"measured: {v.bytes_per_rank_measured:,.0f} B per rank and call, ratio {v.ratio:.4f} "
            f"({v.measured_by}; {v.calls} calls)"
        )
    else:
        lines.append(f"measured: {v.measured_by}")
    if v.interface_bytes_per_rank is not None:
        lines.append(
            f"{v.interface} counter: {v.interface_bytes_per_rank:,.0f} B per rank and call "
            f"(TCP/IP headers, ACKs and other traffic over {v.interface} included)"
        )
    lines += [f"warning: {w}" for w in dict.fromkeys(t.warning for t in (one, par) if t.warning)]
    return "\n".join(lines)
