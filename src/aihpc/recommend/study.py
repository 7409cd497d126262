"""Observe candidates on tasks: the predictors (untrained) and the truth (briefly trained).

Shared by calibration (which fits the matcher on observations) and
validation (which judges it on held-out ones).  Model ``seed`` s of a
candidate is initialised with torch seed ``base_seed + s`` and trained on
minibatches drawn from the same seed, so an observation is reproducible.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aihpc.recommend.candidates import Candidate, builtin
from aihpc.recommend.complexity import Complexity
from aihpc.recommend.scoring import CandidateScore, score_candidates, task_complexity
from aihpc.recommend.tasks import STEPS, Task, train_briefly

#: The two candidate sets studied: sizes that differ widely, and about one size.
SETS = ("small", "matched")


@dataclass(frozen=True)
class Observation:
    """One candidate set on one task: predictors and accuracies (candidates x seeds)."""

    task: str
    candidate_set: str
    complexity: Complexity
    scores: tuple[CandidateScore, ...]
    accuracy: np.ndarray  # (candidates, seeds)

    def to_dict(self) -> dict:
        return {"task": self.task, "candidate_set": self.candidate_set,
                "complexity": self.complexity.to_dict(),
                "candidates": [{**s.to_dict(), "accuracy": [float(a) for a in acc]}
                               for s, acc in zip(self.scores, self.accuracy)]}


def observation_from_dict(d: dict) -> Observation:
    """Inverse of :meth:`Observation.to_dict` (as read back from a validation result file)."""
    from aihpc.errors import ConfigError

    try:
        scores = tuple(CandidateScore(c["name"], c["source"], c["detail"], int(c["params"]),
                                      float(c["ops_per_sample"]),
                                      {k: float("nan") if v is None else float(v)
                                       for k, v in c["proxies"].items()})
                       for c in d["candidates"])
        acc = np.array([[float(a) for a in c["accuracy"]] for c in d["candidates"]])
        return Observation(str(d["task"]), str(d["candidate_set"]), Complexity(**d["complexity"]),
                           scores, acc)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"malformed observation in the result file ({exc!r})") from None


def observe(task: Task, set_name: str, *, seeds: int, steps: int = STEPS, base_seed: int = 0,
            limit: int | None = None,
            progress: Callable[[str], None] | None = None) -> Observation:
    """Score and train every candidate of ``set_name`` (the first ``limit``) on ``task``."""
    candidates: list[Candidate] = builtin(set_name, task.input_shape, task.num_classes)[:limit]
    cx = task_complexity(task, base_seed)
    scores = score_candidates(task, candidates, base_seed)
    acc = np.zeros((len(candidates), seeds))
    for i, c in enumerate(candidates):
        for s in range(seeds):
            acc[i, s] = train_briefly(c.build(base_seed + s), task, base_seed + s, steps=steps)
        if progress is not None:
            progress(f"{task.name} / {set_name} / {c.name}: accuracy "
                     f"{', '.join(f'{a:.3f}' for a in acc[i])}")
    return Observation(task.name, set_name, cx, tuple(scores), acc)
