"""``aihpc recommend calibrate``: fit the matcher on briefly trained candidates.

Every candidate of both sets (:data:`aihpc.recommend.study.SETS`) is
scored (complexity + proxies) and trained for a fixed number of steps on
each calibration task (:func:`aihpc.recommend.tasks.calibration_tasks`);
the matcher (:func:`aihpc.recommend.matcher.fit`) then learns how the
features predict the accuracy reached.  Everything is seeded: the same
``seed`` and ``steps`` give the same matcher on the same software.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from aihpc.recommend.matcher import Matcher, features, fit
from aihpc.recommend.study import SETS, Observation, observe
from aihpc.recommend.tasks import STEPS, calibration_tasks


def design(observations: list[Observation]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Feature rows, mean accuracies and task ids (for cross-validation) of the observations."""
    rows, targets, groups = [], [], []
    names = sorted({o.task for o in observations})
    for o in observations:
        for s, acc in zip(o.scores, o.accuracy):
            rows.append(features(o.complexity, s))
            targets.append(float(np.mean(acc)))
            groups.append(names.index(o.task))
    return np.stack(rows), np.asarray(targets), np.asarray(groups)


def calibrate(*, seed: int = 0, steps: int = STEPS, seeds: int = 1, command: str = "",
              progress: Callable[[str], None] | None = None) -> tuple[Matcher, list[Observation]]:
    """Observe every calibration task with both candidate sets, then fit the matcher."""
    import torch

    import aihpc

    observations = [observe(task, name, seeds=seeds, steps=steps, base_seed=seed, progress=progress)
                    for task in calibration_tasks() for name in SETS]
    x, t, groups = design(observations)
    provenance = {"command": command, "seed": seed, "steps": steps, "seeds": seeds,
                  "tasks": sorted({o.task for o in observations}), "candidate_sets": list(SETS),
                  "rows": int(len(t)), "aihpc_version": aihpc.__version__,
                  "torch_version": torch.__version__}
    matcher, _ = fit(x, t, groups, provenance)
    return matcher, observations
