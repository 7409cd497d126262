"""Train one epoch of one trial in this process (the worker's entry point,
which also trains data-parallel, is :mod:`aihpc.train.worker`).

An epoch reads as four named steps: :func:`prepare` (model, optimizer,
data), :func:`train_steps`, :func:`validate`, and :func:`snapshot` (the weights
written to the run's weight directory, see :mod:`aihpc.train.weights`).
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from aihpc.train.task import DataRef, EpochResult, EpochTask, WeightsRef
from aihpc.train.weights import file_name, save, starting_state

PHASES = ("data", "forward", "backward", "optimizer", "eval", "other")


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


class PhaseTimer:
    """Seconds spent in each of :data:`PHASES`; ``with timer("forward"): ...`` adds to one.

    On a GPU the device is synchronised at the end of each phase, so its
    queued kernels are charged to the phase that launched them.
    """

    def __init__(self, device: torch.device) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self._sync = functools.partial(torch.cuda.synchronize, device) if device.type == "cuda" else None

    @contextlib.contextmanager
    def __call__(self, phase: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if self._sync is not None:
                self._sync()
            self.seconds[phase] += time.perf_counter() - t0


@dataclass
class Setup:
    """Everything one epoch trains with, built from the task."""

    model: torch.nn.Module  # the bare model (its state is what the epoch returns)
    step_model: torch.nn.Module  # what the steps call: compiled and/or wrapped for data parallelism
    optimizer: torch.optim.Optimizer
    data: tuple[torch.Tensor, ...]  # x_train, y_train, x_val, y_val on the device
    batch: int
    train_ops: float  # operations per training sample
    eval_ops: float  # operations per evaluation sample
    num_params: int
    autocast: Any


@dataclass
class Progress:
    """What the training steps saw: samples, summed loss and correct predictions."""

    status: str = "ok"
    seen: int = 0
    loss_sum: float = 0.0
    correct: float = 0.0


def train_epoch(
    task: EpochTask, worker: str, t_start: float, group: Group = SINGLE, device: torch.device | None = None
) -> EpochResult:
    """One epoch in this process; with a ``group``, this rank's share of it.

    Each global batch of ``batch_size`` is split across the ranks; samples,
    losses and accuracies are summed over the ranks, so the result (and the
    operation count, made once from global samples) is the trial's.
    """
    if task.threads:
        torch.set_num_threads(task.threads)
    device = device or resolve_device(task.device)
    timer = PhaseTimer(device)
    with timer("other"):
        setup = prepare(task, device, group)
    progress = train_steps(task, setup, timer, group)
    metrics = train_metrics(task, progress)
    if progress.status == "ok":
        with timer("eval"):
            progress.status = validate(task, setup, group, metrics)
    with timer("other"):
        weights = snapshot(task, setup, group) if progress.status in ("ok", "deadline") else None
    ops_train = round(setup.train_ops * progress.seen)
    ops_eval = round(setup.eval_ops * metrics["val_samples"])
    t_end = time.time()
    metrics.update(ops=ops_train + ops_eval, seconds=t_end - t_start)
    return EpochResult(
        trial_id=task.trial_id, epoch=task.epoch, status=progress.status, worker=worker,
        t_start=t_start, t_end=t_end,
        reason="non-finite training loss" if progress.status == "diverged" else None,
        metrics=metrics, ops_train=ops_train, ops_eval=ops_eval,
        ops_per_sample={"train": setup.train_ops, "eval": setup.eval_ops},
        phase_seconds=timer.seconds, num_params=setup.num_params, device=str(device), weights=weights,
    )  # fmt: skip


def prepare(task: EpochTask, device: torch.device, group: Group) -> Setup:
    """Build the model from the task's architecture and weights, its optimizer, and the data."""
    from aihpc.nas.spec import ArchSpec

    spec = ArchSpec.from_dict(task.arch)
    hp = task.hparams
    batch = int(hp["batch_size"])
    dropout = float(hp.get("dropout", 0.0))
    state, opt_state = starting_state(task)
    torch.manual_seed(task.seed)
    model = spec.build()
    if state is not None:
        model.load_state_dict(state, strict=True)
    _set_dropout(model, dropout)
    train_ops, eval_ops = ops_per_sample(spec, batch, dropout)
    gpu = device.type == "cuda"
    model = model.to(device)
    if gpu:
        model = model.to(memory_format=torch.channels_last)
    optimizer = make_optimizer(model, hp)
    if opt_state is not None:
        optimizer.load_state_dict(opt_state)
    return Setup(
        model=model,
        step_model=group.wrap(torch.compile(model) if task.compile else model),
        optimizer=optimizer,
        data=device_tensors(task.data, str(device)),
        batch=batch,
        train_ops=train_ops,
        eval_ops=eval_ops,
        num_params=sum(p.numel() for p in model.parameters()),
        autocast=torch.autocast("cuda", dtype=torch.bfloat16) if gpu else contextlib.nullcontext(),
    )


def snapshot(task: EpochTask, setup: Setup, group: Group) -> WeightsRef | None:
    """Write the weights and optimizer state the epoch ends with (rank 0 alone); returns their reference."""
    if group.rank != 0:
        return None
    model = {k: v.detach().cpu() for k, v in setup.model.state_dict().items()}
    name = file_name(task.trial_id, task.epoch, task.attempt)
    return save(Path(task.weights_dir), name, model, _cpu(setup.optimizer.state_dict()))


def train_steps(task: EpochTask, setup: Setup, timer: PhaseTimer, group: Group) -> Progress:
    """The epoch's training steps, in a seeded order; stops at the deadline or a non-finite loss."""
    x_train, y_train = setup.data[0], setup.data[1]
    batch, model, optimizer = setup.batch, setup.step_model, setup.optimizer
    steps = math.ceil(x_train.shape[0] / batch)
    gen = torch.Generator().manual_seed(task.seed * 1_000_003 + task.epoch)
    order = torch.randperm(x_train.shape[0], generator=gen)
    progress = Progress()
    model.train()
    for i in range(steps):
        if group.any(time.time() >= task.deadline):
            progress.status = "deadline"
            break
        idx = order[i * batch : (i + 1) * batch]
        global_batch = idx.shape[0]
        if global_batch < group.world:  # a last batch too small to give every rank a sample
            break
        with timer("data"):
            idx = idx[group.rank :: group.world].to(x_train.device)
            xb, yb = _channels_last(x_train[idx]), y_train[idx]
        with timer("forward"):
            set_lr(optimizer, task.hparams, task.epochs, (task.epoch - 1) + i / steps)
            with setup.autocast:
                logits = model(xb)
                loss = F.cross_entropy(logits, yb)
        with timer("backward"):
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
        with timer("optimizer"):
            optimizer.step()
        progress.seen += global_batch
        loss_value = float(loss.detach())
        if group.any(not math.isfinite(loss_value)):
            progress.status = "diverged"
            break
        progress.loss_sum += loss_value * yb.shape[0]
        progress.correct += int((logits.detach().argmax(1) == yb).sum())
    progress.loss_sum, progress.correct = group.sum(progress.loss_sum, progress.correct)
    return progress


def train_metrics(task: EpochTask, progress: Progress) -> dict[str, Any]:
    """The epoch's metrics from its training steps (validation still to come)."""
    seen, ok = progress.seen, progress.seen and progress.status != "diverged"
    return {
        "epoch": task.epoch,
        "train_samples": seen,
        "train_loss": progress.loss_sum / seen if ok else None,
        "train_accuracy": progress.correct / seen if ok else None,
        "val_samples": 0,
        "val_loss": None,
        "val_accuracy": None,
    }


def validate(task: EpochTask, setup: Setup, group: Group, metrics: dict[str, Any]) -> str:
    """Evaluate on the validation split into ``metrics``; "deadline" if it was cut short, else "ok"."""
    x_val, y_val = setup.data[2], setup.data[3]
    val_loss, val_acc, val_seen = evaluate(setup.step_model, x_val, y_val, setup.batch, setup.autocast,
                                           task.deadline, group)  # fmt: skip
    complete = val_seen == x_val.shape[0]
    metrics.update(
        val_loss=val_loss if complete else None,
        val_accuracy=val_acc if complete else None,
        val_samples=val_seen,
    )
    return "ok" if complete else "deadline"


@torch.no_grad()
def evaluate(model, x, y, batch: int, autocast, deadline: float, group: Group = SINGLE) -> tuple[float, float, int]:
    """Mean loss, accuracy and samples seen on (x, y), over all ranks; stops at the deadline."""
    model.eval()
    loss_sum, correct, seen = 0.0, 0, 0
    for i in range(0, x.shape[0], batch):
        if group.any(time.time() >= deadline):
            break
        xb = _channels_last(x[i : i + batch][group.rank :: group.world])
        yb = y[i : i + batch][group.rank :: group.world]
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


def _channels_last(x: torch.Tensor) -> torch.Tensor:
    """Images in the memory layout convolutions run fastest in on GPUs (a no-op on CPU)."""
    return x.contiguous(memory_format=torch.channels_last) if x.is_cuda else x


def worker_name() -> str:
    """This worker's Dask name, or host:pid outside Dask."""
    try:
        from distributed import get_worker

        return str(get_worker().name)
    except (ImportError, ValueError):
        return f"{socket.gethostname()}:{os.getpid()}"


def worker_index() -> int:
    try:
        return int(worker_name().rsplit("-", 1)[-1])
    except ValueError:
        return 0
