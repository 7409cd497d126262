"""One rank of ``aihpc bench distributed`` (:mod:`aihpc.bench.distributed`), run as
``python -m aihpc.bench.distributed_rank FOLDER`` with torchrun's environment or as a task of
``srun`` (:mod:`aihpc.bench.distributed_launch`).

It joins the process group, times the DDP and split steps, measures the bytes
its sockets send around the explicit all-reduces, and (rank 0) writes the
report to ``FOLDER/result.json``.  Under srun (no ``MASTER_ADDR``) rank 0
serves the rendezvous, a ``TCPStore`` on its own address, and writes that
address to ``FOLDER/rendezvous`` for the others.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from aihpc.base.fileio import atomic_write, wait_for_file
from aihpc.bench.distributed import COLLECTIVE_TIMEOUT_S

_TCP_BYTES_SENT_OFFSET = 200
"""Offset of ``tcpi_bytes_sent`` (u64) in Linux's ``struct tcp_info`` (since 4.19)."""


@dataclass
class _Replica:
    """This rank's DDP model, optimizer and batch; every gradient is a view into ``flat``."""

    ddp: torch.nn.parallel.DistributedDataParallel
    optimizer: torch.optim.Optimizer
    x: torch.Tensor
    y: torch.Tensor
    flat: torch.Tensor
    device: torch.device


def _build_replica(model_name: str, batch: int, device: torch.device, rank: int) -> _Replica:
    """Same initial weights on every rank (seed 0), a different random batch per rank."""
    from torch.nn.parallel import DistributedDataParallel

    from aihpc import models

    torch.manual_seed(0)
    model = models.create(model_name).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    flat = torch.zeros(sum(p.numel() for p in params), device=device)
    offset = 0
    for p in params:  # backward accumulates into existing gradients in place: into flat
        p.grad = flat[offset : offset + p.numel()].view_as(p)
        offset += p.numel()
    ids = [device.index] if device.type == "cuda" else None
    ddp = DistributedDataParallel(model, device_ids=ids, **_no_buffer_sync())
    torch.manual_seed(1 + rank)
    x = models.example_input(model_name, batch, device=device)
    with torch.no_grad():
        logits = model(x)
    y = torch.randint(logits.shape[1], (logits.shape[0],), device=device)
    optimizer = torch.optim.SGD(params, lr=0.01, momentum=0.9)
    return _Replica(ddp, optimizer, x, y, flat, device)


def _no_buffer_sync() -> dict[str, Any]:
    """DDP's option not to broadcast buffers at each forward (newer PyTorch renamed it)."""
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters:
        return {"forward_sync_buffers": False}
    return {"broadcast_buffers": False}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _ddp_step(r: _Replica) -> float:
    """Seconds of one DDP step (all-reduce overlapped with the backward pass)."""
    dist.barrier()
    _sync(r.device)
    start = time.perf_counter()
    r.flat.zero_()
    torch.autograd.backward(F.cross_entropy(r.ddp(r.x), r.y))
    r.optimizer.step()
    _sync(r.device)
    return time.perf_counter() - start


def _split_step(r: _Replica, world: int) -> tuple[float, float]:
    """(compute seconds, all-reduce seconds) of one step with the all-reduce run apart."""
    dist.barrier()
    _sync(r.device)
    t0 = time.perf_counter()
    r.flat.zero_()
    with r.ddp.no_sync():
        torch.autograd.backward(F.cross_entropy(r.ddp(r.x), r.y))
    _sync(r.device)
    t1 = time.perf_counter()
    dist.barrier()  # untimed: the all-reduce starts on every rank together
    t2 = time.perf_counter()
    dist.all_reduce(r.flat)
    r.flat.div_(world)
    _sync(r.device)
    t3 = time.perf_counter()
    r.optimizer.step()
    _sync(r.device)
    return (t1 - t0) + (time.perf_counter() - t3), t3 - t2


def _timed_steps(r: _Replica, steps: int, warmup: int, world: int) -> list[list[float]]:
    """Per step ``[ddp s, compute s, all-reduce s]``, each the maximum over the ranks."""
    for _ in range(warmup):
        _ddp_step(r)
        _split_step(r, world)
    lo, hi = r.flat.data_ptr(), r.flat.data_ptr() + r.flat.numel() * r.flat.element_size()
    if any(not lo <= p.grad.data_ptr() < hi for p in r.ddp.module.parameters() if p.requires_grad):
        raise RuntimeError(
            "a gradient left the flat buffer: the split step would all-reduce stale values"
        )
    rows = []
    for _ in range(steps):
        ddp = _ddp_step(r)
        rows.append([ddp, *_split_step(r, world)])
    times = torch.tensor(rows, dtype=torch.float64, device=r.device)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    return times.cpu().tolist()


def _tcp_bytes_sent() -> int | None:
    """Payload bytes sent so far by this process's TCP sockets (TCP_INFO); None where unreadable."""
    if not hasattr(socket, "TCP_INFO") or not os.path.isdir("/proc/self/fd"):
        return None
    total, found = 0, False
    for fd in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                continue
            # a duplicate: closing it leaves gloo's socket open
            s = socket.socket(fileno=os.dup(int(fd)))
        except OSError:
            continue
        with s:
            if s.type != socket.SOCK_STREAM or s.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            try:
                info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
            except OSError:
                continue
            if len(info) >= _TCP_BYTES_SENT_OFFSET + 8:
                total += struct.unpack_from("=Q", info, _TCP_BYTES_SENT_OFFSET)[0]
                found = True
    return total if found else None


def _interface_bytes_sent(interface: str | None) -> int | None:
    """Bytes ``interface`` has sent (None: unnamed or unknown); read from /proc/net/dev, which
    shows this process's own network namespace."""
    import psutil

    counters = psutil.net_io_counters(pernic=True).get(interface) if interface else None
    return counters.bytes_sent if counters is not None else None


def _measure_volume(
    r: _Replica, calls: int, hosts: list[str], interface: str | None
) -> dict[str, float | None]:
    """Bytes per rank and call of ``calls`` all-reduces of the gradients: own sockets, and the
    interface gloo uses (each rank reads its own node's counter; the sum over the ranks)."""
    dist.barrier()
    tcp0, if0 = _tcp_bytes_sent(), _interface_bytes_sent(interface)
    for _ in range(calls):
        dist.all_reduce(r.flat)
    _sync(r.device)
    dist.barrier()  # every peer has received this rank's bytes: they have all been sent
    tcp1, if1 = _tcp_bytes_sent(), _interface_bytes_sent(interface)
    mine = -1.0 if tcp0 is None or tcp1 is None else float(tcp1 - tcp0)
    # this rank's share of its node's counter: ranks on one node read the same counter
    world, here = len(hosts), hosts.count(socket.gethostname())
    counted = -1.0 if if0 is None or if1 is None else (if1 - if0) / here
    sent = torch.tensor(
        [mine, float(mine < 0), counted, float(counted < 0)], dtype=torch.float64, device=r.device
    )
    dist.all_reduce(sent)  # sums over the ranks, and how many could not read their counters
    tcp = float(sent[0]) / (world * calls) if float(sent[1]) == 0 else None
    nic = float(sent[2]) / (world * calls) if float(sent[3]) == 0 else None
    return {"tcp_bytes_per_rank": tcp, "interface_bytes_per_rank": nic}


def _hosts() -> list[str]:
    """Each rank's host name, by rank."""
    hosts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, socket.gethostname())
    return [str(h) for h in hosts]


def _identity() -> tuple[int, int, int]:
    """(rank, world size, local rank): torchrun's variables, else srun's."""
    env = os.environ
    if "RANK" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", "0"))
    return int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), int(env["SLURM_LOCALID"])


def _join(folder: Path, backend: str, rank: int, world: int) -> None:
    """Join the process group: at ``MASTER_ADDR`` where the launcher set it, else through the
    rendezvous file rank 0 writes into ``folder``."""
    timeout = timedelta(seconds=COLLECTIVE_TIMEOUT_S)
    if "MASTER_ADDR" in os.environ:
        dist.init_process_group(backend, timeout=timeout)
        return
    path = folder / "rendezvous"
    if rank == 0:
        host = _own_address()
        # not waiting for the others here: they learn where to connect from the file below
        store = dist.TCPStore(  # type: ignore[attr-defined, unused-ignore]
            host, 0, world, is_master=True, timeout=timeout, wait_for_workers=False
        )
        atomic_write(path, f"{host} {store.port}")  # the others never read half of it
    else:
        if not wait_for_file(path, COLLECTIVE_TIMEOUT_S):
            raise TimeoutError(
                f"rank 0 wrote no rendezvous in {path} within {COLLECTIVE_TIMEOUT_S} s"
            )
        host, port = path.read_text().split()
        store = dist.TCPStore(  # type: ignore[attr-defined, unused-ignore]
            host, int(port), world, is_master=False, timeout=timeout
        )
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)


def _own_address() -> str:
    """This node's address for the rendezvous: on gloo's interface where one is named."""
    from aihpc.machine.cluster import interface_address

    interface = os.environ.get("GLOO_SOCKET_IFNAME")
    return interface_address(interface) if interface else socket.gethostbyname(socket.gethostname())


def _device(asked: str, local_rank: int) -> tuple[torch.device, str]:
    """The device (aihpc's one rule for "auto") and its backend: this node's GPU ``local_rank``
    (modulo those it sees: srun may give each task one) with NCCL, or the CPU with gloo."""
    from aihpc.machine.devices import resolve_device

    if resolve_device(asked).type == "cpu":
        return torch.device("cpu"), "gloo"
    device = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device, "nccl"


def _rank_main(folder: Path) -> None:
    """One rank: join the group, time the steps, measure the volume; rank 0 writes the report."""
    spec = json.loads((folder / "config.json").read_text())
    rank, world, local_rank = _identity()
    threads = spec["threads"] or int(os.environ.get("SLURM_CPUS_PER_TASK", "1"))
    torch.set_num_threads(threads)
    device, backend = _device(spec["device"], local_rank)
    interface = os.environ.get("GLOO_SOCKET_IFNAME")
    _join(folder, backend, rank, world)
    try:
        replica = _build_replica(spec["model"], spec["batch"], device, rank)
        hosts = _hosts()
        report: dict[str, Any] = {
            "times": _timed_steps(replica, spec["steps"], spec["warmup"], world),
            "gradient_bytes": replica.flat.numel() * replica.flat.element_size(),
            "hosts": hosts,
            "device": device.type,
            "backend": backend,
            "threads": threads,
            "interface": interface if backend == "gloo" else None,
        }
        if world > 1 and backend == "gloo":
            report.update(_measure_volume(replica, spec["volume_calls"], hosts, interface))
        if rank == 0:
            (folder / "result.json").write_text(json.dumps(report))
        dist.barrier()  # no rank leaves while a peer still works
    except BaseException:
        traceback.print_exc()  # before anything of the group is torn down, which can abort
        _leave(1)
    _leave(0)


def _leave(code: int) -> None:
    """End the rank now, without tearing down the process group or running C++'s exit-time
    destructors.  That teardown once aborted rank 0 of a two-node run with no Python error
    ("terminate called without an active exception", C++'s end for a thread left running),
    failing a benchmark whose ranks had nothing left to do but exit.  Everything a rank writes
    is written and closed by then, and its sockets close with the process."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _rank_main(Path(sys.argv[1]))
