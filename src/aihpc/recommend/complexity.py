"""How hard a classification task is, measured from the data alone (no network trained).

Every measure runs on a bounded, class-stratified sample (:data:`MAX_SAMPLES`
points by default) so it stays fast on large data sets; images are
flattened to vectors of ``C*H*W`` features.

* **F1**, maximum Fisher discriminant ratio (Ho & Basu 2002, "Complexity
  measures of supervised classification problems", IEEE TPAMI 24(3); the
  multi-class form of Lorena et al. 2019, "How complex is your
  classification problem?", ACM Comput. Surv. 52(5), sec. 3.1)::

      r_j = sum_k n_k (mu_kj - mu_j)^2 / sum_k sum_{i in k} (x_ij - mu_kj)^2,   F1 = max_j r_j

  Larger is easier (one feature separates the classes well).  Features
  with zero within-class scatter and non-zero between-class scatter are
  capped at :data:`F1_CAP`; features constant overall score 0.
* **N1**, fraction of points on the class boundary (Ho & Basu 2002): build
  the Euclidean minimum spanning tree of the points; N1 = (points incident
  to an edge joining two classes) / n.  Larger is harder.
* **N3**, leave-one-out error of the 1-nearest-neighbour classifier
  (Ho & Basu 2002).  Larger is harder.
* **T2**, samples per dimension, n / d (Lorena et al. 2019, sec. 3.5).
  Measured on the whole training split (not the sample).  Smaller is harder.
* **probe_error**, 1 - 3-fold cross-validated accuracy of a linear
  (ridge) classifier on random-convolution features: :data:`PROBE_FILTERS`
  seeded Gaussian 3x3 filters, ReLU, average pooled to at most 4x4 (the
  "random features" view of a CNN's capacity on the task, as in Jarrett et
  al. 2009, "What is the best multi-stage architecture for object
  recognition?", ICCV, who found random filters with rectification and
  pooling surprisingly strong).  Larger is harder.

All inputs are NumPy arrays; nothing here imports torch.
"""

from __future__ import annotations

import numpy as np

from aihpc.base.errors import DataError
from aihpc.records.kinds_recommend import ComplexityRecord

#: Points the sample-based measures (F1, N1, N3, probe) use at most.
MAX_SAMPLES = 1000
#: F1 of a feature whose classes do not vary inside but differ between them.
F1_CAP = 1e6
#: Random 3x3 filters of the probe.
PROBE_FILTERS = 32
#: Fewest samples and samples per class a task needs to be measured.
MIN_SAMPLES = 20
MIN_PER_CLASS = 2


def check_task(labels: np.ndarray, name: str = "data set") -> None:
    """DataError unless ``labels`` has >= MIN_SAMPLES points, >= 2 classes, >= 2 per class."""
    labels = np.asarray(labels)
    classes, counts = np.unique(labels, return_counts=True)
    if labels.shape[0] < MIN_SAMPLES:
        raise DataError(
            f"{name} has {labels.shape[0]} training samples; recommending needs >= {MIN_SAMPLES}"
        )
    if classes.shape[0] < 2:
        raise DataError(
            f"{name} has one class ({classes[0] if classes.size else 'none'}); "
            f"recommending needs >= 2"
        )
    if counts.min() < MIN_PER_CLASS:
        k = int(classes[np.argmin(counts)])
        raise DataError(
            f"{name}: class {k} has {int(counts.min())} training sample(s); "
            f"recommending needs >= {MIN_PER_CLASS} per class"
        )


def stratified_sample(labels: np.ndarray, size: int, seed: int) -> np.ndarray:
    """Sorted indices of at most ``size`` points, classes in proportion (each keeps >= 1)."""
    labels = np.asarray(labels)
    n = labels.shape[0]
    if n <= size:
        return np.arange(n)
    rng = np.random.default_rng(seed)
    chosen = []
    for k in np.unique(labels):
        members = np.flatnonzero(labels == k)
        take = max(1, int(round(size * members.shape[0] / n)))
        chosen.append(rng.choice(members, size=min(take, members.shape[0]), replace=False))
    return np.sort(np.concatenate(chosen))


def fisher_f1(x: np.ndarray, y: np.ndarray) -> float:
    """Maximum Fisher discriminant ratio over the features (multi-class form)."""
    x = np.asarray(x, dtype=np.float64).reshape(len(y), -1)
    mu = x.mean(axis=0)
    between = np.zeros(x.shape[1])
    within = np.zeros(x.shape[1])
    for k in np.unique(y):
        xk = x[y == k]
        mk = xk.mean(axis=0)
        between += xk.shape[0] * (mk - mu) ** 2
        within += ((xk - mk) ** 2).sum(axis=0)
    ratio = np.zeros_like(between)
    ok = within > 1e-12
    ratio[ok] = between[ok] / within[ok]
    ratio[~ok & (between > 1e-12)] = F1_CAP
    return float(min(ratio.max(), F1_CAP))


def _distances(x: np.ndarray) -> np.ndarray:
    sq = (x * x).sum(axis=1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * x @ x.T, 0.0)
    np.fill_diagonal(d2, 0.0)
    distances: np.ndarray = np.sqrt(d2)
    return distances


def minimum_spanning_edges(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Edges (parent, child) of a minimum spanning tree of the dense distance matrix ``d``.

    Prim's algorithm, O(n^2) with one vectorised pass per added point (ties:
    the lowest index), started at point 0.
    """
    n = d.shape[0]
    in_tree = np.zeros(n, dtype=bool)
    in_tree[0] = True
    best = d[0].copy()
    parent = np.zeros(n, dtype=np.int64)
    rows, cols = [], []
    for _ in range(n - 1):
        cand = np.where(in_tree, np.inf, best)
        j = int(np.argmin(cand))
        rows.append(int(parent[j]))
        cols.append(j)
        in_tree[j] = True
        closer = d[j] < best
        best = np.where(closer, d[j], best)
        parent = np.where(closer, j, parent)
    return np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)


def boundary_n1(x: np.ndarray, y: np.ndarray) -> float:
    """Fraction of points joined to another class by an edge of the minimum spanning tree."""
    x = np.asarray(x, dtype=np.float64).reshape(len(y), -1)
    y = np.asarray(y)
    rows, cols = minimum_spanning_edges(_distances(x))
    cross = y[rows] != y[cols]
    on_boundary = np.zeros(len(y), dtype=bool)
    on_boundary[rows[cross]] = True
    on_boundary[cols[cross]] = True
    return float(on_boundary.mean())


def nn_error_n3(x: np.ndarray, y: np.ndarray) -> float:
    """Leave-one-out error of the 1-nearest-neighbour classifier (ties: the lower index)."""
    x = np.asarray(x, dtype=np.float64).reshape(len(y), -1)
    d = _distances(x)
    np.fill_diagonal(d, np.inf)
    nearest = np.argmin(d, axis=1)
    return float(np.mean(y[nearest] != y))


def random_conv_features(x: np.ndarray, filters: int = PROBE_FILTERS, seed: int = 0) -> np.ndarray:
    """ReLU(random 3x3 conv, 'same' padding) average-pooled to at most 4x4, flattened."""
    import torch
    import torch.nn.functional as F

    images = torch.as_tensor(np.asarray(x, dtype=np.float32))
    gen = torch.Generator().manual_seed(seed)
    c = images.shape[1]
    weight = torch.randn(filters, c, 3, 3, generator=gen) / (9 * c) ** 0.5
    with torch.no_grad():
        out = F.relu(F.conv2d(images, weight, padding=1))
        out = F.adaptive_avg_pool2d(out, (min(4, out.shape[2]), min(4, out.shape[3])))
    return out.flatten(1).double().numpy()


def ridge_cv_error(
    feats: np.ndarray, y: np.ndarray, folds: int = 3, alpha: float = 1.0, seed: int = 0
) -> float:
    """1 - k-fold CV accuracy of ridge regression on one-hot targets (argmax decides).

    Features are standardised on each training fold; the fit is the closed
    form W = (X^T X + alpha I)^-1 X^T T with an unpenalised intercept
    (centred X and T).  Folds are class-stratified, drawn from ``seed``.
    """
    y = np.asarray(y)
    rng = np.random.default_rng(seed)
    fold_of = np.empty(len(y), dtype=np.int64)
    for k in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == k))
        fold_of[members] = np.arange(len(members)) % folds
    targets = np.eye(int(y.max()) + 1)[y]
    correct = 0
    for f in range(folds):
        tr, te = fold_of != f, fold_of == f
        mu, sd = feats[tr].mean(0), feats[tr].std(0)
        sd[sd < 1e-12] = 1.0
        xt, xe = (feats[tr] - mu) / sd, (feats[te] - mu) / sd
        tmean = targets[tr].mean(0)
        w = np.linalg.solve(xt.T @ xt + alpha * np.eye(xt.shape[1]), xt.T @ (targets[tr] - tmean))
        correct += int(np.sum(np.argmax(xe @ w + tmean, axis=1) == y[te]))
    return float(1.0 - correct / len(y))


def probe_error(x: np.ndarray, y: np.ndarray, seed: int = 0) -> float:
    """1 - 3-fold CV accuracy of a ridge classifier on :func:`random_conv_features`."""
    folds = int(min(3, np.bincount(y).min()))
    return ridge_cv_error(random_conv_features(x, seed=seed), y, folds=folds, seed=seed)


def measure(
    x: np.ndarray,
    y: np.ndarray,
    *,
    max_samples: int = MAX_SAMPLES,
    seed: int = 0,
    name: str = "data set",
    num_samples: int | None = None,
) -> ComplexityRecord:
    """All measures of images ``x`` (N, C, H, W) with labels ``y`` (N,), on a bounded sample.

    ``num_samples``: training samples of the whole data set, for T2, when
    ``x`` is already a sample of it (default: ``len(y)``).
    """
    y = np.asarray(y, dtype=np.int64)
    check_task(y, name)
    idx = stratified_sample(y, max_samples, seed)
    xs = np.asarray(x, dtype=np.float64)[idx]
    _, ys = np.unique(y[idx], return_inverse=True)
    flat = xs.reshape(len(ys), -1)
    dim = flat.shape[1]
    return ComplexityRecord(
        f1=fisher_f1(flat, ys),
        n1=boundary_n1(flat, ys),
        n3=nn_error_n3(flat, ys),
        t2=float((num_samples or y.shape[0]) / dim),
        probe_error=probe_error(xs, ys, seed=seed),
        num_samples=int(num_samples or y.shape[0]),
        sample_size=int(len(ys)),
        num_classes=int(np.unique(y).shape[0]),
        dimension=int(dim),
    )
