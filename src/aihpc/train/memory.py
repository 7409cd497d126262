"""The host memory one epoch of a trial takes on its worker, estimated before the trial is sent.

A worker's process is restarted by its nanny once its resident memory passes
its limit (:mod:`aihpc.launch.memory`), so the master sends a trial only where
this estimate, added to what the worker already holds, fits.  The estimate
follows the trainer (:mod:`aihpc.train.trainer`, :mod:`aihpc.train.weights`)
step by step, in bytes of float32 (4 per value):

``loading``
    its starting weights: a file read whole and unpickled (two copies of the
    model and optimizer state it holds, a child's parent's or its own last
    epoch's), and a child's morphed weights and optimizer state beside them
    (``RunConfig.carry_optimizer``: counted whether it is on or not); a
    fresh network is initialised on the host (one copy of its parameters).
``model``
    where it trains on the CPU: its parameters, their gradients and the
    optimizer's state (SGD with momentum one value per parameter, AdamW
    two); on a GPU these are the device's.
``activations``
    on the CPU: :data:`ACTIVATION_FACTOR` × the tensors a training step keeps
    for its backward pass (:func:`saved_bytes`): their gradients flow back
    beside them, and the allocator keeps what the step freed.
``snapshot``
    the copy of the weights and optimizer state the epoch writes (a clone on
    the CPU; pinned memory on a GPU, which torch's caching host allocator
    rounds up to powers of two: :data:`PINNED_ROUNDING`).
``trainer``
    what a worker's first epoch loads besides the model (the trainer's and
    the counter's code, the kernels' libraries): :data:`TRAINER_BYTES`.

The peak is ``trainer`` plus the largest phase: loading, or the model with
the larger of its activations and its snapshot (the allocator reuses what
one phase freed for the next).  With ``procs`` processes per trial, each
process holds its own, at its share of the batch.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any

from aihpc.records.trial import Hyperparameters
from aihpc.tasks import Arch, Task

FLOAT = 4  # bytes of a float32 value: weights, gradients, optimizer state, CPU activations
#: Activations on the CPU, as a multiple of the tensors a step saves for its backward pass.
ACTIVATION_FACTOR = 2.0
#: Pinned host memory, as a multiple of the bytes asked: each block rounded up to a power of two.
PINNED_ROUNDING = 2.0
#: What a worker's first epoch loads besides the trial's own tensors.
TRAINER_BYTES = 256 * 2**20

_SAVED: OrderedDict[tuple[str, str, int], int] = OrderedDict()
_SAVED_KEPT = 256  # (architecture, batch) pairs whose saved bytes the master keeps


@dataclass(frozen=True)
class TrialMemory:
    """A trial-epoch's host memory by part, in bytes (the module docstring); ``peak`` what its
    worker must hold for it at once."""

    loading: int
    model: int
    activations: int
    snapshot: int
    trainer: int
    procs: int = 1

    @property
    def peak(self) -> int:
        """Every process's largest phase, and the trainer's own."""
        phase = max(self.loading, self.model + max(self.activations, self.snapshot))
        return self.procs * (self.trainer + phase)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "peak": self.peak}


def optimizer_values(hparams: Hyperparameters) -> int:
    """Values of optimizer state per parameter: AdamW's two moments, SGD's momentum (if any)."""
    if hparams.optimizer == "adamw":
        return 2
    return 1 if hparams.momentum > 0 else 0


def trial_memory(
    task: Task,
    arch: Arch,
    hparams: Hyperparameters,
    device_kind: str,
    start_params: int | None,
    procs: int = 1,
) -> TrialMemory:
    """The host memory of one epoch of a trial of ``arch`` and ``hparams`` trained on
    ``device_kind`` ("cpu" or "cuda") by ``procs`` processes.

    ``start_params``: the parameters of the weights it starts from (its
    parent's for a child's first epoch, its own for a later one); None for a
    network initialised afresh.
    """
    params = arch.num_params()
    state = (1 + optimizer_values(hparams)) * params * FLOAT  # weights and optimizer state
    if start_params is None:
        loading = params * FLOAT
    else:
        start_state = (1 + optimizer_values(hparams)) * start_params * FLOAT
        loading = 2 * start_state + (state if start_params != params else 0)
    cpu = device_kind == "cpu"
    batch = math.ceil(hparams.batch_size / procs)
    return TrialMemory(
        loading=loading,
        model=state + params * FLOAT if cpu else 0,
        activations=round(ACTIVATION_FACTOR * saved_bytes(task, arch, batch)) if cpu else 0,
        snapshot=state if cpu else round(PINNED_ROUNDING * state),
        trainer=TRAINER_BYTES,
        procs=procs,
    )


def saved_bytes(task: Task, arch: Arch, batch: int) -> int:
    """Bytes of the tensors one training step at ``batch`` keeps for its backward pass, on the
    CPU: the forward pass and its loss run on fake tensors (torch's ``FakeTensorMode``: no
    memory taken, the CPU's kernels chosen, as its attention's), each tensor autograd saves
    counted once by its storage, the parameters left out.  Kept per architecture and batch."""
    key = (task.name, arch.content_hash(), batch)
    if key not in _SAVED:
        _SAVED[key] = _fake_step(task, arch, batch)
        while len(_SAVED) > _SAVED_KEPT:
            _SAVED.popitem(last=False)
    _SAVED.move_to_end(key)
    return _SAVED[key]


def _fake_step(task: Task, arch: Arch, batch: int) -> int:
    import torch
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode

    saved: dict[int, int] = {}
    with FakeTensorMode():
        model = task.model(arch)
        params = {p.untyped_storage()._cdata for p in model.parameters()}

        def keep(t: torch.Tensor) -> torch.Tensor:
            storage = t.untyped_storage()
            if storage._cdata not in params:
                saved[storage._cdata] = storage.nbytes()
            return t

        dtype = task.staging_dtype(torch.device("cpu"))
        x = torch.zeros((batch, *task.sample_shape(arch)), dtype=dtype)
        y = torch.zeros(batch, dtype=torch.long)
        with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
            xb, yb = task.inputs_and_targets(x, y)
            logits = model(xb)
            F.cross_entropy(logits.flatten(0, -2), yb.flatten())
    return sum(saved.values())
