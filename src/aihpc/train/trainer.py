"""Train one epoch of one trial in this process (the worker's entry point,
which also trains data-parallel, is :mod:`aihpc.train.worker`).

An epoch reads as four named steps: :func:`prepare` (model, optimizer,
data), :func:`train_steps`, :func:`snapshot` (the weights written to the
run's weight directory by a background thread while the next step runs,
see :mod:`aihpc.train.weights`) and :func:`validate`.
Phases are timed by events read once per epoch (:mod:`aihpc.train.timing`;
nothing waits for the device inside the training loop): ``data`` (the wait
for the next batch: gathered on the device, or streamed, see
:mod:`aihpc.train.feed`), ``forward`` (model and loss), ``backward``,
``optimizer`` (the step), ``eval`` (validation forward passes), ``compile``
(the first pass of a model compiled region by region, :mod:`aihpc.train.regions` and
:mod:`aihpc.tasks.language.regions`, compilation included) and ``other`` (model build, weight
loading, operation counting, and any wait for the weight file).

Every batch a trial trains on has the same shape, so that cuDNN's autotuner
(and a compiled model) sees one shape per architecture: training leaves out
the epoch's last, partial batch (its samples are neither trained on nor
counted; the order changes every epoch, so no sample is always left out),
and on a GPU the last evaluation batch is padded to full size (only real
samples are scored).  Each training batch goes through its task's
:meth:`~aihpc.tasks.base.Task.augment` (the image task's random shifts), with
random numbers seeded by the trial, the epoch and the rank, on the device;
validation batches are read as they are.

A worker keeps the model and optimizer of the epoch it last finished on its
device (:class:`Resident`); the next epoch of the same trial, if it comes to
the same worker, starts from them instead of rebuilding the model and
reading the weight file back, which holds the same state (the file is still
written every epoch: any worker may get the next epoch).

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
import math
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from aihpc.machine.devices import resolve_device
from aihpc.records.messages import EpochResult, EpochStatus, EpochTask, WeightsRef
from aihpc.tasks import Arch, Task
from aihpc.train import feed
from aihpc.train.evaluation import channels_last, evaluate, loss_sums
from aihpc.train.group import SINGLE, Group
from aihpc.train.optim import make_optimizer, set_dropout, set_lr, step_position
from aihpc.train.sample_ops import count_ops_per_sample
from aihpc.train.staging import Staged, stage
from aihpc.train.step_model import step_model_for, use_compile_cache
from aihpc.train.timing import PhaseTimer, timer_for
from aihpc.train.weights import SnapshotWriter, State, file_name, load_optimizer, starting_state

# Steps between the checks that read a value back from the device (a
# non-finite loss; the deadline agreed between data-parallel ranks).  Each
# read waits for the queued work, so on a GPU it is done once every
# CHECK_EVERY steps, not after every step; on the CPU, where nothing is
# queued, after every step as before.  A loss that turns non-finite is thus
# caught within CHECK_EVERY steps on a GPU (the steps after it still count:
# they were run).
CHECK_EVERY = {"cpu": 1, "cuda": 16}


@dataclass
class Setup:
    """Everything one epoch trains with, built from the task."""

    kind: Task  # the run's task (aihpc.tasks): its data's batches, its model's targets
    spec: Arch  # the trial's architecture
    model: torch.nn.Module  # the bare model (its state is what the epoch returns)
    step_model: torch.nn.Module  # what the steps call: compiled and/or wrapped for data parallelism
    optimizer: torch.optim.Optimizer
    data: Staged  # the data set as this worker staged it
    device: torch.device
    batch: int
    train_ops: float  # operations per training sample
    eval_ops: float  # operations per evaluation sample
    num_params: int
    # bfloat16 autocast on a GPU (unless step_model computes in bfloat16 itself), else nothing
    autocast: contextlib.AbstractContextManager[object]
    compiled: bool  # step_model runs compiled regions (aihpc.train.regions)
    pad_eval: bool  # evaluation batches padded to full size (one shape: GPU, compiled)
    # modes ("train", "eval") the compiled model has not run yet: their first pass compiles
    fresh: set[str]
    # compiled regions the model's first passes call, in all their modes
    regions_needed: int = 0
    # a compiled model's regions compiled before its first pass (None: not compiled, or counted)
    compiled_before: int | None = None


@dataclass
class Resident:
    """The model and optimizer an epoch ended with, kept on this worker's device for the next epoch.

    ``weights`` is the file the epoch wrote from them; a task that starts
    from exactly that file (and trains on the same device, compiled the
    same way) starts from these objects instead.
    """

    weights: WeightsRef
    device: str
    setup: Setup


_RESIDENT: Resident | None = None
_WRITER = SnapshotWriter()  # this worker's background writer of weight files


@dataclass
class Progress:
    """What the training steps saw: samples, summed loss, correct predictions and targets (a
    label per image, a token per token of a language model's windows)."""

    status: EpochStatus = EpochStatus.OK
    seen: int = 0
    loss_sum: float = 0.0
    correct: float = 0.0
    targets: float = 0.0


def train_epoch(
    kind: Task,
    task: EpochTask,
    worker: str,
    t_start: float,
    group: Group = SINGLE,
    device: torch.device | None = None,
) -> EpochResult:
    """One epoch of ``kind``'s trial in this process; with a ``group``, this rank's share of it.

    Each global batch of ``batch_size`` is split across the ranks; samples,
    losses and accuracies are summed over the ranks, so the result (and the
    operation count, made once from global samples) is the trial's.
    """
    if task.threads:
        torch.set_num_threads(task.threads)
    device = device or resolve_device(task.device)
    # on a GPU, the worker's device is the current one: its stream carries the timing events
    with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
        return _train_epoch(kind, task, worker, t_start, group, device)


def _train_epoch(
    kind: Task, task: EpochTask, worker: str, t_start: float, group: Group, device: torch.device
) -> EpochResult:
    timer = timer_for(device)
    with timer("other"):
        setup = prepare(kind, task, device, group)
    progress = train_steps(task, setup, timer, group)
    metrics = train_metrics(task, progress)
    writing = None
    # the weights are final: written while validation runs
    if progress.status in (EpochStatus.OK, EpochStatus.DEADLINE):
        with timer("other"):
            writing = snapshot(task, setup, group)
    if progress.status == EpochStatus.OK:
        progress.status = validate(task, setup, timer, group, metrics)
    with timer("other"):
        weights = writing.result() if writing is not None else None
    keep_resident(setup, device, group, weights)
    metrics.update(compiled_regions(setup))
    model_flops = setup.kind.model_flops(setup.spec, progress.seen)
    if model_flops is not None:  # the task's papers' convention, beside the counted operations
        metrics["model_flops"] = model_flops
    phase_seconds = timer.seconds()  # the epoch's one wait for the device's timing events
    ops_train = round(setup.train_ops * progress.seen)
    ops_eval = round(setup.eval_ops * metrics["val_samples"])
    t_end = time.time()
    metrics.update(ops=ops_train + ops_eval, seconds=t_end - t_start)
    return EpochResult(
        trial_id=task.trial_id,
        epoch=task.epoch,
        status=progress.status,
        worker=worker,
        t_start=t_start,
        t_end=t_end,
        reason="non-finite training loss" if progress.status == EpochStatus.DIVERGED else None,
        metrics=metrics,
        ops_train=ops_train,
        ops_eval=ops_eval,
        ops_per_sample={"train": setup.train_ops, "eval": setup.eval_ops},
        phase_seconds=phase_seconds,
        num_params=setup.num_params,
        device=str(device),
        weights=weights,
    )


def prepare(kind: Task, task: EpochTask, device: torch.device, group: Group) -> Setup:
    """The model, optimizer and data the epoch trains with: kept from the last epoch, or built.

    Compiled where the task says (``compile``), else by the task's default for the device kind
    (:attr:`aihpc.tasks.base.Task.compile_auto`), but a model built afresh whose regions are not
    all compiled yet runs eager where its deadline leaves no room to compile them
    (:func:`aihpc.train.step_model.room_to_compile`)."""
    auto = kind.compile_auto.get(device.type, False)
    compiled = auto if task.compile is None else bool(task.compile)
    setup = take_resident(task, device, compiled, group)
    if setup is None:
        if compiled:  # every rank alike: none compiles where one has no room
            compiled = not group.any(not _room_to_compile(task, kind))
        setup = build(kind, task, device, group, compiled)
    # the epoch's random draws (dropout) from its own seed, alike for a kept and a rebuilt model
    torch.manual_seed(task.seed * 1_000_003 + task.epoch)
    return setup


def _room_to_compile(task: EpochTask, kind: Task) -> bool:
    from aihpc.train.regions import default_cache
    from aihpc.train.step_model import room_to_compile

    return room_to_compile(kind, kind.arch(task.arch), default_cache(), task.deadline - time.time())


def take_resident(
    task: EpochTask, device: torch.device, compiled: bool, group: Group
) -> Setup | None:
    """The kept model and optimizer if ``task`` starts from the weights they hold, else None.

    Taken, not shared: an epoch that fails leaves nothing kept, so a retry
    never starts from a half-trained model.  Data-parallel ranks (a worker's
    rank pool, :mod:`aihpc.train.ranks`) each keep theirs, under the
    reference rank 0 wrote, so all of them decide alike.
    """
    global _RESIDENT
    kept, _RESIDENT = _RESIDENT, None
    if kept is None or task.start is None or task.start != kept.weights:
        return None
    if kept.device != str(device) or kept.setup.compiled != compiled:
        return None
    return kept.setup


def keep_resident(
    setup: Setup, device: torch.device, group: Group, weights: WeightsRef | None
) -> None:
    global _RESIDENT
    # rank 0 alone wrote them: every rank keeps its state under their name
    weights = group.first(weights)
    if weights is not None:
        _RESIDENT = Resident(weights, str(device), setup)


def compiled_regions(setup: Setup) -> dict[str, int]:
    """After a compiled model's first epoch on this worker: the regions its passes needed
    (training and evaluation) and how many of them were compiled rather than served from the
    cache (``regions_needed``, ``regions_compiled``; nothing otherwise)."""
    if setup.compiled_before is None or setup.fresh:
        return {}
    from aihpc.train.regions import default_cache

    compiled = default_cache().stats().compiled - setup.compiled_before
    setup.compiled_before = None  # counted once, with the epoch that built the model
    return {"regions_needed": setup.regions_needed, "regions_compiled": compiled}


def build(kind: Task, task: EpochTask, device: torch.device, group: Group, compiled: bool) -> Setup:
    """Build the model from the task's architecture and weights, its optimizer, and the data."""
    spec = kind.arch(task.arch)
    hp = task.hparams
    batch = hp.batch_size
    dropout = hp.dropout
    state, opt_state = starting_state(kind, task)
    model = build_model(kind, spec, state, task.seed, device)
    set_dropout(model, dropout)
    train_ops, eval_ops = count_ops_per_sample(kind, spec, batch, dropout)
    gpu = device.type == "cuda"
    if gpu:
        # Module.to takes memory_format (as Tensor.to does); torch's stub does not list it
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        # a trial's batches all have one shape: cuDNN times its algorithms once, keeps the fastest
        torch.backends.cudnn.benchmark = True
    optimizer = make_optimizer(model, hp)
    if opt_state is not None:
        load_optimizer(optimizer, model, opt_state)
    compiled_before = None
    if compiled:
        from aihpc.train.regions import default_cache

        use_compile_cache(task.data.stage_dir)
        compiled_before = default_cache().stats().compiled
    steps = step_model_for(kind, model, optimizer, device, group.world, compiled)
    return Setup(
        kind=kind,
        spec=spec,
        model=model,
        step_model=group.wrap(steps.module),
        optimizer=optimizer,
        data=stage(kind, task.data, str(device)),
        device=device,
        batch=batch,
        train_ops=train_ops,
        eval_ops=eval_ops,
        num_params=sum(p.numel() for p in model.parameters()),
        autocast=steps.autocast,
        compiled=compiled,
        pad_eval=compiled or gpu,
        fresh=set(steps.compiled_modes),
        regions_needed=steps.regions_needed,
        compiled_before=compiled_before,
    )


def build_model(
    kind: Task, spec: Arch, state: State | None, seed: int, device: torch.device
) -> torch.nn.Module:
    """The trial's network on ``device``, built once.

    With weights to start from, it is built on the meta device (nothing
    allocated or initialised) and takes the weights' tensors as its own.
    A fresh network is initialised on the host from ``seed``, so that it is
    the same on every device (a child of a parent without weights replays
    that initialisation, :func:`aihpc.train.weights.morphed_state`).
    """
    if state is None:
        torch.manual_seed(seed)
        return kind.model(spec).to(device)
    with torch.device("meta"):
        model = kind.model(spec)
    model.load_state_dict(state, strict=True, assign=True)
    return model.to(device)


def snapshot(task: EpochTask, setup: Setup, group: Group) -> Future[WeightsRef] | None:
    """Start writing the weights and optimizer state the epoch ends with (rank 0 alone).

    Returns the write's future (its result is the file's reference); the
    state is copied before this returns, so training may go on.
    """
    if group.rank != 0:
        return None
    name = file_name(task.trial_id, task.epoch, task.attempt)
    return _WRITER.start(
        Path(task.weights_dir), name, setup.model.state_dict(), setup.optimizer.state_dict()
    )


def train_steps(task: EpochTask, setup: Setup, timer: PhaseTimer, group: Group) -> Progress:
    """The epoch's training steps (its task's ``share`` of them), in a seeded order; stops at the
    deadline or a non-finite loss.

    Losses and correct predictions are summed on the device and read back
    every ``CHECK_EVERY`` steps only.  Every step trains a full batch (one
    shape): the samples of the last, partial batch are neither trained on
    nor counted, unless the split is smaller than one batch.
    """
    batch, model, optimizer, device = setup.batch, setup.step_model, setup.optimizer, setup.device
    n = len(setup.data.train)
    steps = max(1, int(setup.kind.epoch_samples(task.data, n) // batch * task.share))
    epoch_seed = task.seed * 1_000_003 + task.epoch
    order = torch.randperm(n, generator=torch.Generator().manual_seed(epoch_seed))
    augment_gen = torch.Generator(device).manual_seed(epoch_seed * 1024 + group.rank)
    batches = feed.train_batches(
        setup.data.train, order, batch, steps, group.rank, group.world, device
    )
    check_every = CHECK_EVERY.get(device.type, 1)
    positions = task.positions()
    sums = torch.zeros(3, dtype=torch.float64, device=device)  # loss × targets, correct, targets
    progress = Progress()
    model.train()
    for i in range(steps):
        check = i % check_every == 0 or i == steps - 1
        if (check or group.world == 1) and group.any(time.time() >= task.deadline):
            progress.status = EpochStatus.DEADLINE
            break
        phase = _phases(setup, "train")
        with timer(phase("data")):
            xb, yb, global_batch = next(batches)
            xb = setup.kind.augment(xb, task.data, augment_gen)
            xb, yb = setup.kind.inputs_and_targets(channels_last(xb), yb)
        if global_batch < group.world:  # a batch too small to give every rank a sample
            break
        with timer(phase("forward")):
            set_lr(optimizer, task.hparams, step_position(*positions, i, steps))
            with setup.autocast:
                logits = model(xb)
                loss = F.cross_entropy(logits.flatten(0, -2), yb.flatten())
        with timer(phase("backward")):
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        with timer(phase("optimizer")):
            if setup.kind.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(setup.model.parameters(), setup.kind.grad_clip)
            optimizer.step()
        setup.fresh.discard("train")
        progress.seen += global_batch
        sums += loss_sums(logits.detach(), yb)
        if check and group.any(not math.isfinite(float(sums[0]))):
            progress.status = EpochStatus.DIVERGED
            break
    progress.loss_sum, progress.correct, progress.targets = group.sum(*sums.tolist())
    return progress


def _phases(setup: Setup, mode: str) -> Callable[[str], str]:
    """Phase names for a pass in ``mode``: all ``compile`` on a compiled model's first pass."""
    if mode in setup.fresh:
        return lambda phase: "compile"
    return lambda phase: phase


def train_metrics(task: EpochTask, progress: Progress) -> dict[str, Any]:
    """The epoch's metrics from its training steps (validation still to come), with the
    learning-rate schedule's positions its steps went between (the rate of a step is
    :func:`aihpc.train.optim.learning_rate` of the trial's hyperparameters at
    :func:`aihpc.train.optim.step_position`)."""
    seen, ok = progress.seen, progress.seen and progress.status != EpochStatus.DIVERGED
    targets = progress.targets or 1.0
    schedule_from, schedule_to = task.positions()
    return {
        "epoch": task.epoch,
        "schedule_from": schedule_from,
        "schedule_to": schedule_to,
        "train_samples": seen,
        "train_loss": progress.loss_sum / targets if ok else None,
        "train_accuracy": progress.correct / targets if ok else None,
        "val_samples": 0,
        "val_loss": None,
        "val_accuracy": None,
    }


def validate(
    task: EpochTask, setup: Setup, timer: PhaseTimer, group: Group, metrics: dict[str, Any]
) -> EpochStatus:
    """Evaluate on the validation split into ``metrics``; "deadline" if cut short, else "ok"."""
    val = setup.data.val
    first = _phases(setup, "eval")("eval")
    setup.fresh.discard("eval")
    batches = feed.eval_batches(val, setup.batch, group.rank, group.world, setup.device)
    full = len(range(group.rank, setup.batch, group.world)) if setup.pad_eval else None
    val_loss, val_acc, val_seen = evaluate(
        setup.step_model,
        batches,
        setup.autocast,
        task.deadline,
        group,
        timer=timer,
        first_phase=first,
        pad_to=full,
        inputs_and_targets=setup.kind.inputs_and_targets,
    )
    complete = val_seen == len(val)
    metrics.update(
        val_loss=val_loss if complete else None,
        val_accuracy=val_acc if complete else None,
        val_samples=val_seen,
    )
    return EpochStatus.OK if complete else EpochStatus.DEADLINE
