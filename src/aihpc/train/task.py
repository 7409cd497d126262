"""What the master sends a worker, and what comes back.

The unit of work is one *epoch* of one trial.  A trial of E epochs is E tasks
in sequence, each starting from the weights and optimizer state the previous
one returned, so a worker that dies mid-trial loses only the unfinished epoch:
the master sends that epoch again.  A task carries everything it needs; the
worker keeps nothing between tasks but caches of pure functions of the task
(the loaded data set, the operation count of an architecture).
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class DataRef:
    """Which data set to train on; the worker loads (and caches) it."""

    name: str
    path: str | None = None
    options: tuple[tuple[str, Any], ...] = ()
    seed: int = 0

    def options_dict(self) -> dict[str, Any]:
        return dict(self.options)


@dataclass(frozen=True)
class EpochTask:
    """Train ``trial_id`` for epoch ``epoch`` (1-based) of ``epochs``.

    ``state`` and ``opt_state`` are ``torch.save`` bytes of the model's and
    optimizer's state dicts (``None``: fresh initialisation from ``seed``).
    ``deadline`` is an absolute ``time.time()``: training stops there, and the
    samples processed until then still count.
    """

    trial_id: int
    epoch: int
    epochs: int
    arch: dict[str, Any]
    hparams: dict[str, Any]
    data: DataRef
    deadline: float
    seed: int
    state: bytes | None = None
    opt_state: bytes | None = None
    device: str = "auto"
    threads: int | None = None
    procs: int = 1  # processes (GPUs) training this epoch data-parallel
    compile: bool = False
    attempt: int = 1


@dataclass
class EpochResult:
    """The outcome of one :class:`EpochTask`.

    ``status``: ``ok`` (epoch trained and evaluated), ``deadline`` (stopped by
    the run's deadline; partial work counted, no evaluation unless finished),
    ``diverged`` (a NaN or infinite loss), ``failed`` (an exception; ``reason``
    says which in one line, ``traceback`` in full).  Operations are those
    actually performed: samples processed times the counted operations per
    sample.
    """

    trial_id: int
    epoch: int
    status: str
    worker: str
    t_start: float
    t_end: float
    reason: str | None = None
    traceback: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    ops_train: int = 0
    ops_eval: int = 0
    ops_per_sample: dict[str, float] = field(default_factory=dict)
    phase_seconds: dict[str, float] = field(default_factory=dict)
    params: int = 0
    device: str = "cpu"
    state: bytes | None = None
    opt_state: bytes | None = None

    @property
    def ops(self) -> int:
        return self.ops_train + self.ops_eval


def to_bytes(obj: Any) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def from_bytes(data: bytes) -> Any:
    import torch

    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
