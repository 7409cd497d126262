"""How accurate any classifier can be on the synthetic data set: its ceiling.

The synthetic data set's generative model is known (see
:mod:`aihpc.tasks.image.data.synthetic`), so its ceiling — the Bayes accuracy — can be
bounded from below by a classifier that *knows* the model: the class
prototypes, the shifts, and that a sample is a scaled prototype plus a weaker
overlay of one other class, an offset and pixel noise.  No learner can beat
the Bayes classifier, and this oracle is a classifier, so

    oracle accuracy  <=  ceiling  <=  1.

Where the oracle reaches about 99 % the ceiling is known to about a point;
where the distractor overlay makes samples genuinely ambiguous (difficulty
above about 0.62, when its weight can approach the label's own) the oracle
drops and the interval widens, and the oracle is then the best estimate of
the ceiling we have.

The oracle (template matching by least squares, i.e. maximum likelihood
under Gaussian pixel noise with the nuisance parameters profiled out): for
each shift ``s`` and each ordered pair ``(k, j)`` of the ``TOP`` classes
whose single template fits best at that shift, fit

    z = c_k * P_k,s + c_j * P_j,s + c_0 + residual,     z = (x_raw - 0.5) / 0.25

by least squares; a pair is admissible when ``c_k >= c_j`` (the overlay is
never stronger than the label's own prototype at the default difficulties);
single-template fits are admissible too.  The label is ``k`` of the
admissible fit with the smallest residual.  It reads the raw, un-normalised
images (normalisation is an invertible per-channel map and changes nothing).
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from aihpc.base.errors import DataError

if TYPE_CHECKING:
    from aihpc.tasks.image.data.base import ImageData
    from aihpc.tasks.image.data.synthetic import SyntheticGenerator

#: Classes whose single-template fit is best that enter the pairwise fits.
TOP = 6
#: Validation samples the oracle classifies: the split's first ones, which are
#: as random a sample as any (samples are independent draws); at most
#: MAX_SAMPLES, fewer where one sample costs more than BUDGET / MAX_SAMPLES
#: arithmetic operations (large images, many classes), never fewer than
#: MIN_SAMPLES.  The default CPU workload takes under a second, the GPU
#: default about 5 s.  Where even MIN_SAMPLES would cost more than
#: MAX_COST operations (e.g. 3x224x224 with hundreds of classes), the
#: ceiling is not estimated.
MAX_SAMPLES = 2000
MIN_SAMPLES = 100
BUDGET = 2e10
MAX_COST = 2e11
#: Confidence level of the interval on the oracle's accuracy.
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Ceiling:
    """The ceiling estimate of a data set, as recorded in results.json."""

    oracle_accuracy: (
        float  # accuracy of the model-aware classifier on ``samples`` validation samples
    )
    low: float  # lower end of the Clopper-Pearson interval of ``oracle_accuracy``
    high: float  # upper end
    samples: int
    method: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def synthetic_ceiling(data: ImageData, max_samples: int = MAX_SAMPLES) -> Ceiling:
    """The oracle's accuracy on the validation split of a synthetic ``ImageData``.

    Raises DataError for any other data set (its generative model is unknown).
    """
    split = data.val
    generator = getattr(split, "generator", None)
    if data.name != "synthetic" or generator is None:
        raise DataError(
            f"a ceiling can be estimated only for the synthetic data set, got {data.name!r}"
        )
    n = min(
        len(split), int(max_samples), max(MIN_SAMPLES, int(BUDGET / _cost_per_sample(generator)))
    )
    positions = np.arange(n, dtype=np.int64)
    predicted = oracle_predict(generator, split.raw(positions))
    correct = int((predicted == split.label(positions)).sum())
    low, high = clopper_pearson(correct, n, CONFIDENCE)
    return Ceiling(
        oracle_accuracy=correct / n,
        low=low,
        high=high,
        samples=n,
        method="least-squares template matching with the true prototypes, shifts and overlay "
        f"(top {TOP} classes per shift); the ceiling lies between this accuracy and 1",
    )


def task_description(data: ImageData) -> dict[str, Any]:
    """What results.json records about the task: the data set, and its ceiling where it is known.

    ``ceiling`` is ``None`` for data sets whose generative model is unknown
    (every one but ``synthetic``), and for synthetic ones too large to
    estimate it cheaply (see ``MAX_COST``).
    """
    generator = getattr(data.val, "generator", None)
    if data.name != "synthetic" or generator is None:
        return {"description": data.describe(), "generator": None, "ceiling": None}
    affordable = MIN_SAMPLES * _cost_per_sample(generator) <= MAX_COST
    return {
        "description": data.describe(),
        "generator": generator.describe(),
        "ceiling": synthetic_ceiling(data).to_dict() if affordable else None,
    }


def _cost_per_sample(generator: SyntheticGenerator) -> float:
    """Arithmetic operations the oracle spends on one sample: projections and pairwise fits per
    shift."""
    c, h, w = generator.shape
    shifts = (2 * generator.margin + 1) ** 2
    result: float = shifts * (2 * c * h * w * generator.num_classes + 60 * TOP * TOP)
    return result


def oracle_predict(generator: SyntheticGenerator, raw: np.ndarray, top: int = TOP) -> np.ndarray:
    """Labels the model-aware classifier gives raw images ``(n, C, H, W)``."""
    n = raw.shape[0]
    z = ((raw.reshape(n, -1).astype(np.float64)) - 0.5) / 0.25
    dim = z.shape[1]
    zz, zs = (z * z).sum(1), z.sum(1)
    rows = np.arange(n)
    best_rss = np.full(n, np.inf)
    best = np.zeros(n, dtype=np.int64)
    top = min(top, generator.num_classes)
    for templates in generator.shifted_templates():
        gram, sums = templates @ templates.T, templates.sum(1)
        proj = z @ templates.T  # (n, K)
        # One template and an offset: the fit's residual for every class.
        det = gram.diagonal() * dim - sums * sums
        c1 = (proj * dim - zs[:, None] * sums) / det
        c0 = (zs[:, None] - c1 * sums) / dim
        rss1 = zz[:, None] - c1 * proj - c0 * zs[:, None]
        cand = np.argsort(rss1, axis=1)[:, :top]
        k0 = cand[:, 0]
        _keep_better(best_rss, best, rss1[rows, k0], k0, np.ones(n, dtype=bool))
        for a, b in itertools.permutations(range(top), 2):
            k, j = cand[:, a], cand[:, b]
            lhs = np.empty((n, 3, 3))
            lhs[:, 0, 0], lhs[:, 1, 1], lhs[:, 2, 2] = gram[k, k], gram[j, j], dim
            lhs[:, 0, 1] = lhs[:, 1, 0] = gram[k, j]
            lhs[:, 0, 2] = lhs[:, 2, 0] = sums[k]
            lhs[:, 1, 2] = lhs[:, 2, 1] = sums[j]
            rhs = np.stack([proj[rows, k], proj[rows, j], zs], axis=1)
            coef = np.linalg.solve(lhs, rhs[..., None])[..., 0]
            rss = zz - (coef * rhs).sum(1)
            _keep_better(best_rss, best, rss, k, coef[:, 0] >= coef[:, 1])
    return best


def _keep_better(
    best_rss: np.ndarray,
    best: np.ndarray,
    rss: np.ndarray,
    label: np.ndarray,
    admissible: np.ndarray,
) -> None:
    better = admissible & (rss < best_rss)
    best_rss[better] = rss[better]
    best[better] = label[better]


def clopper_pearson(successes: int, trials: int, confidence: float) -> tuple[float, float]:
    """The exact (Clopper-Pearson) binomial confidence interval of ``successes / trials``."""
    from scipy.stats import beta

    alpha = 1.0 - confidence
    low = 0.0 if successes == 0 else float(beta.ppf(alpha / 2, successes, trials - successes + 1))
    high = (
        1.0
        if successes == trials
        else float(beta.ppf(1 - alpha / 2, successes + 1, trials - successes))
    )
    return low, high
