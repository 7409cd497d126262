"""Measure a task and its candidates: everything the matcher reads, nothing trained.

:func:`score_candidates` gives, per candidate, its parameters, its training
operations per sample (forward + cross-entropy + backward, from
:func:`aihpc.count_ops`) and the five zero-cost proxies of
:mod:`aihpc.recommend.proxies` on one seeded minibatch of the task.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from aihpc.recommend.candidates import Candidate
from aihpc.recommend.complexity import measure
from aihpc.recommend.proxies import score_all
from aihpc.recommend.tasks import Task
from aihpc.records.kinds_recommend import CandidateScoreRecord, ComplexityRecord

#: Samples in the proxies' minibatch (NASWOT's kernel is this size).
PROXY_BATCH = 64


@dataclass(frozen=True)
class CandidateScore:
    """What is known of one candidate on one task before any training."""

    name: str
    source: str
    detail: str
    params: int
    ops_per_sample: float
    proxies: dict[str, float]

    def fields(self) -> dict[str, Any]:
        """The fields of a :class:`CandidateScoreRecord` (a ranked or observed candidate's
        record holds them too); a proxy that failed (not finite) is None."""
        return {
            "name": self.name,
            "source": self.source,
            "detail": self.detail,
            "params": self.params,
            "ops_per_sample": self.ops_per_sample,
            "proxies": {k: (v if math.isfinite(v) else None) for k, v in self.proxies.items()},
        }

    @classmethod
    def from_record(cls, record: CandidateScoreRecord) -> CandidateScore:
        """The inverse of :meth:`fields` (a proxy that failed read back as NaN)."""
        return cls(
            record.name,
            record.source,
            record.detail,
            record.params,
            record.ops_per_sample,
            {k: math.nan if v is None else v for k, v in record.proxies.items()},
        )


def task_complexity(task: Task, seed: int = 0) -> ComplexityRecord:
    """The complexity measures of the task's training split (bounded sample)."""
    return measure(
        task.x_train.numpy(),
        task.y_train.numpy(),
        seed=seed,
        name=task.name,
        num_samples=task.num_samples,
    )


def proxy_batch(task: Task, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded random minibatch of the training split."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.randperm(len(task.y_train), generator=g)[:PROXY_BATCH]
    return task.x_train[idx], task.y_train[idx]


def ops_per_sample(model: torch.nn.Module, shape: tuple[int, ...]) -> float:
    """Training operations (forward + loss + backward) per sample, counted at batch 2."""
    from aihpc.counting import count_ops

    return count_ops(model, (2, *shape), train=True).total / 2


def score_candidates(
    task: Task, candidates: list[Candidate], seed: int = 0
) -> list[CandidateScore]:
    """Parameters, operations and proxies of every candidate (models built with ``seed``)."""
    x, y = proxy_batch(task, seed)
    out = []
    for c in candidates:
        model = c.build(seed)
        out.append(
            CandidateScore(
                name=c.name,
                source=c.source,
                detail=c.detail,
                params=int(sum(p.numel() for p in model.parameters())),
                ops_per_sample=float(ops_per_sample(model, task.input_shape)),
                proxies=score_all(model, x, y, seed),
            )
        )
    return out
