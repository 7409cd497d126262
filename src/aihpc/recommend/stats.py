"""Pair signs and Kendall's tau-b, for the matcher's cross-validation and the validation tables."""

from __future__ import annotations

import numpy as np


def pair_signs(v: np.ndarray) -> np.ndarray:
    """sign(v_i - v_j) along the last axis, shape (..., n, n); -inf values tie with each other."""
    v = np.asarray(v, float)
    with np.errstate(invalid="ignore"):  # -inf - -inf: a tie
        signs: np.ndarray = np.nan_to_num(np.sign(v[..., :, None] - v[..., None, :]))
    return signs


def kendall_tau(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Kendall's tau-b along the last axis (any leading batch axes).

    tau-b = sum_{i<j} s_a s_b / sqrt(sum s_a^2 * sum s_b^2) with s = sign of
    pair differences (Kendall 1945, ties corrected).  A side without any
    order (all ties) gives 0, not NaN; -inf values tie with each other.
    """
    sa, sb = pair_signs(a), pair_signs(b)
    den = np.sqrt((sa * sa).sum((-1, -2)) * (sb * sb).sum((-1, -2)))
    tau: np.ndarray = np.divide(
        (sa * sb).sum((-1, -2)), den, out=np.zeros(den.shape), where=den > 0
    )
    return tau
