"""``aihpc recommend calibrate``: fit the matcher on briefly trained candidates.

Every candidate of both sets (:data:`aihpc.recommend.study.SETS`) is
scored (complexity + proxies) and trained for a fixed number of steps on
each calibration task (:func:`aihpc.recommend.families.calibration_tasks`),
``workers`` tasks at a time; the matcher (:func:`aihpc.recommend.matcher.fit`)
then learns how the features predict the accuracy reached, its penalty and
interval cross-validated over the task families.  Everything is seeded:
the same ``seed`` and ``steps`` give the same observations and the same
matcher on the same software, whatever the number of workers.
:func:`fit_observations` refits from saved observations without training.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from aihpc.base.errors import DataError
from aihpc.recommend.families import calibration_tasks
from aihpc.recommend.matcher import Matcher, features, fit
from aihpc.recommend.study import (
    SETS,
    Observation,
    observations_of,
    observe_all,
    read_calibration,
)
from aihpc.recommend.tasks import STEPS
from aihpc.records.kinds_recommend import MatcherRecord


def design(observations: list[Observation]) -> tuple[np.ndarray, ...]:
    """Feature rows, mean accuracies, class counts, family ids and observation (task) ids."""
    rows, targets, classes, groups, tasks = [], [], [], [], []
    names = sorted({o.family for o in observations})
    for k, o in enumerate(observations):
        for s, acc in zip(o.scores, o.accuracy, strict=True):
            rows.append(features(o.complexity, s))
            targets.append(float(np.mean(acc)))
            classes.append(o.complexity.num_classes)
            groups.append(names.index(o.family))
            tasks.append(k)
    return tuple(np.asarray(v) for v in (np.stack(rows), targets, classes, groups, tasks))


def fit_observations(observations: list[Observation], provenance: dict[str, Any]) -> Matcher:
    """The matcher fitted on ``observations`` (at least two families, for cross-validation)."""
    families = sorted({o.family for o in observations})
    if len(families) < 2:
        raise DataError(f"calibration needs observations of >= 2 task families, got {families}")
    x, t, classes, groups, tasks = design(observations)
    provenance = {
        **provenance,
        "families": families,
        "tasks": sorted({o.task for o in observations}),
        "rows": int(len(t)),
    }
    return fit(x, t, classes, groups, tasks, provenance)


def calibrate(
    *,
    seed: int = 0,
    steps: int = STEPS,
    seeds: int = 1,
    workers: int = 1,
    command: str = "",
    progress: Callable[[str], None] | None = None,
) -> tuple[Matcher, list[Observation]]:
    """Observe every calibration task with both candidate sets, then fit the matcher."""
    import torch

    import aihpc

    observations = observe_all(
        calibration_tasks(),
        seeds=seeds,
        steps=steps,
        base_seed=seed,
        workers=workers,
        progress=progress,
    )
    provenance = {
        "command": command,
        "seed": seed,
        "steps": steps,
        "seeds": seeds,
        "candidate_sets": list(SETS),
        "aihpc_version": aihpc.__version__,
        "torch_version": torch.__version__,
    }
    return fit_observations(observations, provenance), observations


def refit(path: Path, command: str) -> tuple[Matcher, list[Observation]]:
    """The matcher fitted again on the observations of a saved calibration result (no
    training); its provenance keeps the original's and adds ``refit``: the command."""
    data = read_calibration(path)
    observations = observations_of(data.observations, path)
    provenance = {**data.matcher.provenance.to_dict(), "refit": command}
    return fit_observations(observations, provenance), observations


def format_matcher(matcher: MatcherRecord, path: Path) -> str:
    """What a calibration found, in words: its data, penalties, their cross-validated quality."""
    prov, (within, between), (low, high) = matcher.provenance, matcher.alpha, matcher.residuals
    tau = prov.cv_tau_by_within_alpha[str(within)]
    mae = 100 * prov.cv_mae_by_between_alpha[str(between)]
    return (
        f"matcher: {prov.rows} rows from {len(prov.tasks)} tasks of "
        f"{len(prov.families)} families; leave one family out: within-task penalty "
        f"{within:g} (Kendall tau {tau:+.2f}), between-task penalty {between:g} (mean "
        f"absolute error {mae:.1f} accuracy points); logit residuals {low:+.2f}..{high:+.2f} "
        f"give the 80 % interval\nmatcher file: {path}"
    )
