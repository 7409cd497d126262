"""Observe candidates on tasks: the predictors (untrained) and the truth (briefly trained).

Shared by calibration (which fits the matcher on observations) and
validation (which judges it on held-out ones).  Model ``seed`` s of a
candidate is initialised with torch seed ``base_seed + s`` and trained on
minibatches drawn from the same seed, so an observation is reproducible.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aihpc.base.errors import DataError
from aihpc.recommend.candidates import Candidate, builtin
from aihpc.recommend.families import TaskSpec
from aihpc.recommend.scoring import CandidateScore, score_candidates, task_complexity
from aihpc.recommend.tasks import STEPS, Task, train_briefly
from aihpc.records.kinds_recommend import (
    CalibrationData,
    ComplexityRecord,
    ObservationRecord,
    ObservedCandidateRecord,
    ValidationData,
)

#: The two candidate sets studied: sizes that differ widely, and about one size.
SETS = ("small", "matched")


@dataclass(frozen=True)
class Observation:
    """One candidate set on one task: predictors and accuracies (candidates x seeds)."""

    task: str
    candidate_set: str
    complexity: ComplexityRecord
    scores: tuple[CandidateScore, ...]
    accuracy: np.ndarray  # (candidates, seeds)
    family: str = ""
    input_shape: tuple[int, int, int] = (0, 0, 0)

    def to_record(self) -> ObservationRecord:
        return ObservationRecord(
            task=self.task,
            family=self.family,
            input_shape=self.input_shape,
            candidate_set=self.candidate_set,
            complexity=self.complexity,
            candidates=tuple(
                ObservedCandidateRecord(**s.fields(), accuracy=tuple(float(a) for a in acc))
                for s, acc in zip(self.scores, self.accuracy, strict=True)
            ),
        )


def observation_from_record(record: ObservationRecord) -> Observation:
    """The inverse of :meth:`Observation.to_record` (as read back from a result file)."""
    return Observation(
        record.task,
        record.candidate_set,
        record.complexity,
        tuple(CandidateScore.from_record(c) for c in record.candidates),
        np.array([c.accuracy for c in record.candidates], dtype=float),
        record.family,
        record.input_shape,
    )


def observe(
    task: Task,
    set_name: str,
    *,
    seeds: int,
    steps: int = STEPS,
    base_seed: int = 0,
    limit: int | None = None,
    family: str = "",
) -> Observation:
    """Score and train every candidate of ``set_name`` (the first ``limit``) on ``task``."""
    candidates: list[Candidate] = builtin(set_name, task.input_shape, task.num_classes)[:limit]
    cx = task_complexity(task, base_seed)
    scores = score_candidates(task, candidates, base_seed)
    acc = np.zeros((len(candidates), seeds))
    for i, c in enumerate(candidates):
        for s in range(seeds):
            acc[i, s] = train_briefly(c.build(base_seed + s), task, base_seed + s, steps=steps)
    return Observation(task.name, set_name, cx, tuple(scores), acc, family, task.input_shape)


def _observe_spec(
    spec: TaskSpec, sets: tuple[str, ...], seeds: int, steps: int, base_seed: int, limit: int | None
) -> list[Observation]:
    """Build one task and observe every candidate set on it (in a worker process, one torch
    thread)."""
    import torch

    torch.set_num_threads(1)
    task = spec.build()
    return [
        observe(
            task,
            name,
            seeds=seeds,
            steps=steps,
            base_seed=base_seed,
            limit=limit,
            family=spec.family,
        )
        for name in sets
    ]


def observe_all(
    specs: list[TaskSpec],
    *,
    seeds: int,
    steps: int = STEPS,
    base_seed: int = 0,
    limit: int | None = None,
    workers: int = 1,
    sets: tuple[str, ...] = SETS,
    progress: Callable[[str], None] | None = None,
) -> list[Observation]:
    """Observe every candidate set on every task, ``workers`` tasks at a time (one torch thread
    each); the largest inputs first.  The observations are in the order of ``specs`` and do not
    depend on ``workers`` (every training is seeded on its own)."""
    import time
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from multiprocessing import get_context

    start, done = time.perf_counter(), {}
    order = sorted(range(len(specs)), key=lambda i: -specs[i].cost)
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        futures = {
            pool.submit(_observe_spec, specs[i], sets, seeds, steps, base_seed, limit): i
            for i in order
        }
        for future in as_completed(futures):
            i = futures[future]
            done[i] = future.result()
            if progress is not None:
                progress(
                    f"{len(done)}/{len(specs)} tasks: "
                    f"{specs[i].name} ({specs[i].family}) observed, "
                    f"{time.perf_counter() - start:.0f} s"
                )
    return [o for i in range(len(specs)) for o in done[i]]


def read_calibration(path: Path) -> CalibrationData:
    """The data of the ``recommend-calibration`` result file at ``path``."""
    from aihpc.records.files import CalibrationFile, read_result_file

    document = read_result_file(path, "recommend-calibration")
    assert isinstance(document, CalibrationFile)  # read_result_file checked its kind
    return document.data


def read_validation(path: Path) -> ValidationData:
    """The data of the ``recommend-validation`` result file at ``path``."""
    from aihpc.records.files import ValidationFile, read_result_file

    document = read_result_file(path, "recommend-validation")
    assert isinstance(document, ValidationFile)  # read_result_file checked its kind
    return document.data


def observations_of(records: Sequence[ObservationRecord], path: Path) -> list[Observation]:
    """The observations a result file at ``path`` holds; DataError if it holds none."""
    if not records:
        raise DataError(f"{path} holds no observations")
    return [observation_from_record(o) for o in records]


#: The result of the ``calibrate`` run that made the shipped matcher: its observations.
SHIPPED_CALIBRATION = "calibration.json"


def shipped_calibration() -> list[Observation]:
    """The observations the shipped matcher was fitted on (validation refits them)."""
    from importlib import resources

    from aihpc.records.codec import decode
    from aihpc.records.files import CalibrationFile

    text = (
        resources.files("aihpc.recommend")
        .joinpath("data", SHIPPED_CALIBRATION)
        .read_text(encoding="utf-8")
    )
    document = decode(text, CalibrationFile, f"the shipped {SHIPPED_CALIBRATION}")
    return [observation_from_record(o) for o in document.data.observations]
