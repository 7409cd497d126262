"""Train one epoch of one trial: the function every worker runs.

Phases are timed with the device synchronised at their edges: ``data``
(batch selection and transfer), ``forward`` (model and loss), ``backward``,
``optimizer`` (the step), ``eval`` (validation forward passes) and ``other``
(model build, weight loading, operation counting, serialisation).

Operations are counted exactly, never estimated from time: the counter gives
the operations of one training step (forward + loss + backward) and of one
evaluation forward pass at the trial's batch size; every formula is linear in
the batch, so dividing by the batch gives operations per sample, and an epoch
is credited ``train samples × train ops/sample + eval samples × eval
ops/sample`` for the samples it actually processed.  Work cut short by the
deadline counts as far as it went; nothing is counted twice.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import socket
import time
from typing import Any

import torch
import torch.nn.functional as F

from aihpc.train.task import DataRef, EpochResult, EpochTask, from_bytes, to_bytes

PHASES = ("data", "forward", "backward", "optimizer", "eval", "other")


def run_epoch(task: EpochTask) -> EpochResult:
    """Train ``task`` for one epoch; never raises for a failing trial.

    With ``task.procs > 1`` the epoch trains data-parallel in that many
    processes (see :mod:`aihpc.train.distributed`).
    """
    t_start = time.time()
    worker = _worker_name()
    try:
        if task.procs > 1:
            from aihpc.train.distributed import run_epoch_parallel

            return run_epoch_parallel(task, worker, t_start)
        return train_epoch(task, worker, t_start)
    except torch.cuda.OutOfMemoryError as exc:
        reason = f"out of memory: {str(exc).splitlines()[0]}"
    except Exception as exc:  # a trial's failure is data for the master, not a crash
        reason = f"{type(exc).__name__}: {exc}"
    return EpochResult(task.trial_id, task.epoch, "failed", worker, t_start, time.time(), reason=reason)


class Group:
    """The processes training one trial together; a single process by default.

    Subclassed by :class:`aihpc.train.distributed.ProcessGroup`.  Every
    method is a collective: all ranks call it, in the same order.
    """

    rank = 0
    world = 1

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return model

    def any(self, flag: bool) -> bool:
        return flag

    def sum(self, *values: float) -> tuple[float, ...]:
        return values


SINGLE = Group()


def train_epoch(
    task: EpochTask, worker: str, t_start: float, group: Group = SINGLE, device: torch.device | None = None
) -> EpochResult:
    """One epoch in this process; with a ``group``, this rank's share of it.

    Each global batch of ``batch_size`` is split across the ranks; samples,
    losses and accuracies are summed over the ranks, so the result (and the
    operation count, made once from global samples) is the trial's.
    """
    from aihpc.nas.spec import ArchSpec

    phases = dict.fromkeys(PHASES, 0.0)
    if task.threads:
        torch.set_num_threads(task.threads)
    device = device or resolve_device(task.device)
    sync = _synchronizer(device)
    t0 = time.perf_counter()

    spec = ArchSpec.from_dict(task.arch)
    hp = task.hparams
    batch = int(hp["batch_size"])
    torch.manual_seed(task.seed)
    model = spec.build()
    if task.state is not None:
        model.load_state_dict(from_bytes(task.state), strict=True)
    _set_dropout(model, float(hp.get("dropout", 0.0)))
    train_ops, eval_ops = ops_per_sample(spec, batch, float(hp.get("dropout", 0.0)))
    params = sum(p.numel() for p in model.parameters())

    gpu = device.type == "cuda"
    model = model.to(device)
    if gpu:
        model = model.to(memory_format=torch.channels_last)
    optimizer = make_optimizer(model, hp)
    if task.opt_state is not None:
        optimizer.load_state_dict(from_bytes(task.opt_state))
    step_model = group.wrap(torch.compile(model) if task.compile else model)

    x_train, y_train, x_val, y_val = device_tensors(task.data, str(device))
    n_train = x_train.shape[0]
    steps = math.ceil(n_train / batch)
    gen = torch.Generator().manual_seed(task.seed * 1_000_003 + task.epoch)
    order = torch.randperm(n_train, generator=gen)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if gpu else contextlib.nullcontext()
    sync()
    phases["other"] += time.perf_counter() - t0

    model.train()
    status, loss_sum, correct, seen = "ok", 0.0, 0, 0
    for i in range(steps):
        if group.any(time.time() >= task.deadline):
            status = "deadline"
            break
        t0 = time.perf_counter()
        idx = order[i * batch : (i + 1) * batch]
        global_batch = idx.shape[0]
        if global_batch < group.world:  # a last batch too small to give every rank a sample
            break
        idx = idx[group.rank :: group.world].to(x_train.device)
        xb, yb = x_train[idx], y_train[idx]
        if gpu:
            xb = xb.contiguous(memory_format=torch.channels_last)
        sync()
        t1 = time.perf_counter()
        set_lr(optimizer, hp, task.epochs, (task.epoch - 1) + i / steps)
        with autocast:
            logits = step_model(xb)
            loss = F.cross_entropy(logits, yb)
        sync()
        t2 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        sync()
        t3 = time.perf_counter()
        optimizer.step()
        sync()
        t4 = time.perf_counter()
        phases["data"] += t1 - t0
        phases["forward"] += t2 - t1
        phases["backward"] += t3 - t2
        phases["optimizer"] += t4 - t3
        seen += global_batch
        loss_value = float(loss.detach())
        if group.any(not math.isfinite(loss_value)):
            status = "diverged"
            break
        loss_sum += loss_value * yb.shape[0]
        correct += int((logits.detach().argmax(1) == yb).sum())
    loss_sum, correct = group.sum(loss_sum, correct)

    metrics: dict[str, Any] = {
        "epoch": task.epoch,
        "train_samples": seen,
        "train_loss": loss_sum / seen if seen and status != "diverged" else None,
        "train_accuracy": correct / seen if seen and status != "diverged" else None,
        "val_samples": 0,
        "val_loss": None,
        "val_accuracy": None,
    }
    if status == "ok":
        t0 = time.perf_counter()
        val_loss, val_acc, val_seen = evaluate(step_model, x_val, y_val, batch, autocast, task.deadline, group)
        sync()
        phases["eval"] += time.perf_counter() - t0
        complete = val_seen == x_val.shape[0]
        metrics.update(
            val_loss=val_loss if complete else None,
            val_accuracy=val_acc if complete else None,
            val_samples=val_seen,
        )
        if not complete:
            status = "deadline"

    t0 = time.perf_counter()
    state = opt_state = None
    if status in ("ok", "deadline"):
        state = to_bytes({k: v.detach().cpu() for k, v in model.state_dict().items()})
        opt_state = to_bytes(_cpu(optimizer.state_dict()))
    phases["other"] += time.perf_counter() - t0
    ops_train = round(train_ops * seen)
    ops_eval = round(eval_ops * metrics["val_samples"])
    t_end = time.time()
    metrics.update(ops=ops_train + ops_eval, seconds=t_end - t_start)
    return EpochResult(
        trial_id=task.trial_id,
        epoch=task.epoch,
        status=status,
        worker=worker,
        t_start=t_start,
        t_end=t_end,
        reason="non-finite training loss" if status == "diverged" else None,
        metrics=metrics,
        ops_train=ops_train,
        ops_eval=ops_eval,
        ops_per_sample={"train": train_ops, "eval": eval_ops},
        phase_seconds=phases,
        params=params,
        device=str(device),
        state=state,
        opt_state=opt_state,
    )


@torch.no_grad()
def evaluate(model, x, y, batch: int, autocast, deadline: float, group: Group = SINGLE) -> tuple[float, float, int]:
    """Mean loss, accuracy and samples seen on (x, y), over all ranks; stops at the deadline."""
    model.eval()
    loss_sum, correct, seen = 0.0, 0, 0
    for i in range(0, x.shape[0], batch):
        if group.any(time.time() >= deadline):
            break
        xb, yb = x[i : i + batch][group.rank :: group.world], y[i : i + batch][group.rank :: group.world]
        if xb.is_cuda:
            xb = xb.contiguous(memory_format=torch.channels_last)
        with autocast:
            logits = model(xb)
        loss_sum += float(F.cross_entropy(logits.float(), yb, reduction="sum"))
        correct += int((logits.argmax(1) == yb).sum())
        seen += yb.shape[0]
    model.train()
    loss_sum, correct, seen = group.sum(loss_sum, correct, seen)
    correct, seen = int(correct), int(seen)
    if seen == 0:
        return float("nan"), 0.0, 0
    return loss_sum / seen, correct / seen, seen


def make_optimizer(model: torch.nn.Module, hp: dict[str, Any]) -> torch.optim.Optimizer:
    name = hp.get("optimizer", "sgd")
    if name == "sgd":
        return torch.optim.SGD(
            model.parameters(), lr=hp["lr"], momentum=hp.get("momentum", 0.9), weight_decay=hp.get("weight_decay", 0.0)
        )
    if name == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=hp["lr"], weight_decay=hp.get("weight_decay", 0.0))
    raise ValueError(f"unknown optimizer {name!r}")


def learning_rate(hp: dict[str, Any], epochs: int, progress: float) -> float:
    """The learning rate at ``progress`` epochs into a trial of ``epochs``.

    cosine: lr/2 · (1 + cos(π · progress/epochs)); step: lr, ÷10 at 50 % and
    again at 75 % of the trial.
    """
    frac = min(max(progress / epochs, 0.0), 1.0)
    if hp.get("schedule", "cosine") == "cosine":
        return hp["lr"] * 0.5 * (1.0 + math.cos(math.pi * frac))
    return hp["lr"] * (0.1 ** ((frac >= 0.5) + (frac >= 0.75)))


def set_lr(optimizer: torch.optim.Optimizer, hp: dict[str, Any], epochs: int, progress: float) -> None:
    lr = learning_rate(hp, epochs, progress)
    for group in optimizer.param_groups:
        group["lr"] = lr


def resolve_device(name: str) -> torch.device:
    """``auto``: this worker's GPU if there is one, else the CPU.

    A worker sees its GPUs through ``CUDA_VISIBLE_DEVICES``; local workers
    share the node's GPUs by worker index.
    """
    if name == "cpu" or (name == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' was asked for but CUDA is not available")
    return torch.device("cuda", worker_index() % torch.cuda.device_count())


_OPS_CACHE: dict[tuple[str, int, float], tuple[float, float]] = {}


def ops_per_sample(spec, batch: int, dropout: float) -> tuple[float, float]:
    """Operations per sample: (training step, evaluation forward), cached per architecture.

    Counted at the trial's batch size; the training step includes the loss
    and the backward pass, the evaluation pass is the model in eval mode.
    """
    key = (spec.content_hash(), batch, dropout)
    if key not in _OPS_CACHE:
        from aihpc.counting import count_ops

        model = spec.build()
        _set_dropout(model, dropout)
        x = torch.zeros((batch, *spec.input_shape))
        y = torch.zeros(batch, dtype=torch.long)
        train = count_ops(model, (x,), train=True, target=y).total / batch
        infer = count_ops(model, (x,), train=False).total / batch
        _OPS_CACHE[key] = (train, infer)
    return _OPS_CACHE[key]


@functools.lru_cache(maxsize=4)
def _dataset(ref: DataRef):
    from aihpc.data import load_dataset

    return load_dataset(ref.name, path=ref.path, seed=ref.seed, **ref.options_dict())


@functools.lru_cache(maxsize=4)
def device_tensors(ref: DataRef, device: str) -> tuple[torch.Tensor, ...]:
    """The data set's normalised train and validation tensors on ``device`` (cached per worker)."""
    data = _dataset(ref)
    x_train, y_train = data.tensors("train")
    x_val, y_val = data.tensors("val")
    return tuple(t.to(device) for t in (x_train, y_train.long(), x_val, y_val.long()))


def _set_dropout(model: torch.nn.Module, p: float) -> None:
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = p


def _cpu(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cpu(v) for v in obj)
    return obj


def _synchronizer(device: torch.device):
    if device.type == "cuda":
        return functools.partial(torch.cuda.synchronize, device)
    return lambda: None


def _worker_name() -> str:
    try:
        from distributed import get_worker

        return str(get_worker().name)
    except (ImportError, ValueError):
        return f"{socket.gethostname()}:{os.getpid()}"


def worker_index() -> int:
    try:
        return int(_worker_name().rsplit("-", 1)[-1])
    except ValueError:
        return 0
