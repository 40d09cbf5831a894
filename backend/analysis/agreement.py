"""Inter-rater agreement on error counts: Krippendorff's alpha and ICC(2,1) / ICC(2,k).

Inputs are reliability matrices ``(raters, units)`` with NaN where a rater did not rate a unit
(a pair). Krippendorff's alpha uses every unit with at least two ratings (missing ratings are
part of its design). The ICC needs a complete block; see :func:`icc_from_reliability`.

References:
- Krippendorff, K. (2011). Computing Krippendorff's alpha-reliability. (coincidence matrix,
  interval and ratio difference functions).
- Shrout, P. E. & Fleiss, J. L. (1979). Intraclass correlations: uses in assessing rater
  reliability. Psychological Bulletin 86(2), 420-428 (case 2: two-way random effects,
  absolute agreement; ICC(2,1) single rater, ICC(2,k) mean of k raters).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

LEVELS = ("interval", "ratio")


def _delta(values: NDArray[np.float64], level: str) -> NDArray[np.float64]:
    """Squared difference function between every pair of distinct values."""
    a, b = values[:, None], values[None, :]
    if level == "interval":
        return (a - b) ** 2
    if level == "ratio":
        s = a + b
        with np.errstate(invalid="ignore", divide="ignore"):
            d = ((a - b) / np.where(s == 0, 1.0, s)) ** 2
        # Two zero counts agree perfectly: 0/0 is defined as 0 difference.
        return np.where(s == 0, 0.0, d)
    raise ValueError(f"level must be one of {LEVELS}, got {level!r}")


def krippendorff_alpha(reliability: ArrayLike, level: str = "interval") -> float:
    """Krippendorff's alpha for interval or ratio data with missing ratings.

    Args:
        reliability: ``(raters, units)`` values, NaN where missing.
        level: ``"interval"`` or ``"ratio"`` (ratio needs non-negative values).

    Returns:
        alpha; NaN when fewer than two pairable values exist or every pairable value is the
        same (expected disagreement 0: alpha is undefined).
    """
    data = np.asarray(reliability, dtype=np.float64)
    if data.ndim != 2:
        raise ValueError(f"reliability data must be 2-D (raters, units), got {data.shape}")
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    present = np.isfinite(data)
    if level == "ratio" and np.any(data[present] < 0):
        raise ValueError("ratio alpha needs non-negative values")
    m_u = present.sum(axis=0)
    pairable = m_u >= 2
    if not pairable.any():
        return float("nan")
    data, present, m_u = data[:, pairable], present[:, pairable], m_u[pairable]
    values, inverse = np.unique(data[present], return_inverse=True)
    # counts[u, c]: how many raters gave value c to unit u.
    unit_idx = np.nonzero(present)[1]
    counts = np.zeros((data.shape[1], values.size))
    np.add.at(counts, (unit_idx, inverse.ravel()), 1.0)
    scaled = counts / (m_u - 1.0)[:, None]
    coincidence = scaled.T @ counts - np.diag(scaled.sum(axis=0))
    n_c = coincidence.sum(axis=1)
    n = n_c.sum()
    delta = _delta(values, level)
    observed = float((coincidence * delta).sum())
    expected = float((n_c[:, None] * n_c[None, :] * delta).sum())
    if expected == 0.0:
        return float("nan")
    return 1.0 - (n - 1.0) * observed / expected


@dataclass(frozen=True)
class IccResult:
    """ICC(2,1) and ICC(2,k) of a complete targets x judges block.

    Attributes:
        icc2_1: Single-rater reliability, absolute agreement.
        icc2_k: Reliability of the mean of the ``k`` raters.
        n_targets: Units in the block.
        k: Raters in the block.
        bms: Between-targets mean square.
        jms: Between-judges mean square.
        ems: Residual mean square.
    """

    icc2_1: float
    icc2_k: float
    n_targets: int
    k: int
    bms: float
    jms: float
    ems: float


def icc2(ratings: ArrayLike) -> IccResult:
    """Shrout & Fleiss ICC(2,1) and ICC(2,k) from a complete ``(targets, judges)`` matrix.

    ``ICC(2,1) = (BMS - EMS) / (BMS + (k-1) EMS + k (JMS - EMS) / n)`` and
    ``ICC(2,k) = (BMS - EMS) / (BMS + (JMS - EMS) / n)``.

    Args:
        ratings: ``(n targets, k judges)`` without missing values, n >= 2, k >= 2.

    Returns:
        The two coefficients (NaN when the denominator is 0, i.e. all ratings equal).
    """
    x = np.asarray(ratings, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2 or x.shape[1] < 2:
        raise ValueError(f"ICC needs at least 2 targets x 2 judges, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("ICC needs a complete matrix (no missing ratings)")
    n, k = x.shape
    grand = x.mean()
    ss_rows = k * ((x.mean(axis=1) - grand) ** 2).sum()
    ss_cols = n * ((x.mean(axis=0) - grand) ** 2).sum()
    ss_err = ((x - grand) ** 2).sum() - ss_rows - ss_cols
    bms = ss_rows / (n - 1)
    jms = ss_cols / (k - 1)
    ems = ss_err / ((n - 1) * (k - 1))
    d1 = bms + (k - 1) * ems + k * (jms - ems) / n
    dk = bms + (jms - ems) / n
    return IccResult(
        icc2_1=float((bms - ems) / d1) if d1 != 0 else float("nan"),
        icc2_k=float((bms - ems) / dk) if dk != 0 else float("nan"),
        n_targets=n,
        k=k,
        bms=float(bms),
        jms=float(jms),
        ems=float(ems),
    )


def complete_block(reliability: ArrayLike) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The largest complete block of a ``(raters, units)`` matrix with missing ratings.

    Units are grouped by the exact set of raters who rated them; the group with the most units
    (ties: more raters, then the earliest) among sets of at least two raters wins. When every
    rater rated every pair this is the whole matrix.

    Args:
        reliability: ``(raters, units)`` values, NaN where missing.

    Returns:
        ``(rater_indices, unit_indices)``; empty arrays when no unit has two ratings.
    """
    data = np.asarray(reliability, dtype=np.float64)
    present = np.isfinite(data)
    sets = [tuple(np.flatnonzero(present[:, u])) for u in range(data.shape[1])]
    tally = Counter(s for s in sets if len(s) >= 2)
    if not tally:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    first = {s: i for i, s in reversed(list(enumerate(sets)))}
    best = max(tally, key=lambda s: (tally[s], len(s), -first[s]))
    units = np.array([u for u, s in enumerate(sets) if s == best], dtype=np.int64)
    return np.array(best, dtype=np.int64), units


def icc_from_reliability(reliability: ArrayLike) -> IccResult | None:
    """ICC(2,1)/(2,k) on the largest complete block (see :func:`complete_block`).

    Args:
        reliability: ``(raters, units)`` values, NaN where missing.

    Returns:
        The result, or ``None`` when the block has fewer than 2 units or 2 raters.
    """
    raters, units = complete_block(reliability)
    if raters.size < 2 or units.size < 2:
        return None
    data = np.asarray(reliability, dtype=np.float64)
    return icc2(data[np.ix_(raters, units)].T)


def agreement_summary(reliability: ArrayLike) -> dict[str, float | int | None]:
    """Alpha (interval, ratio) and ICC(2,1)/(2,k) of one reliability matrix, as plain data.

    Args:
        reliability: ``(raters, units)`` error counts, NaN where missing.
    """
    data = np.asarray(reliability, dtype=np.float64)
    present = np.isfinite(data)
    icc = icc_from_reliability(data)
    return {
        "krippendorff_alpha_interval": krippendorff_alpha(data, "interval"),
        "krippendorff_alpha_ratio": krippendorff_alpha(data, "ratio"),
        "n_pairs_pairable": int((present.sum(axis=0) >= 2).sum()),
        "n_ratings": int(present.sum()),
        "icc2_1": None if icc is None else icc.icc2_1,
        "icc2_k": None if icc is None else icc.icc2_k,
        "icc_k": None if icc is None else icc.k,
        "icc_n_pairs": None if icc is None else icc.n_targets,
    }


def icc_interval(reliability: ArrayLike, *, resamples: int = 1000, seed: int = 0,
                 level: float = 0.95) -> dict[str, Any]:
    """ICC(2,1) and ICC(2,k) of the largest complete block with percentile bootstrap intervals.

    The block is :func:`complete_block`'s; its pairs (units) are resampled with replacement
    (``numpy.random.default_rng(seed)``), the raters kept. A resample whose ICC is undefined
    (no variance) is left out of the interval. Pure: arrays in, plain data out.

    Args:
        reliability: ``(raters, units)`` values, NaN where missing.
        resamples: Bootstrap resamples (0: no intervals).
        seed: Seed of the resampling.
        level: Interval coverage.

    Returns:
        ``{"icc2_1", "icc2_1_ci95": [lo, hi], "icc2_k", "icc2_k_ci95", "n_pairs", "k"}``;
        ``None`` where undefined (``n_pairs`` 0 without a block of 2 units and 2 raters).
    """
    data = np.asarray(reliability, dtype=np.float64)
    raters, units = complete_block(data)
    out: dict[str, Any] = {"icc2_1": None, "icc2_1_ci95": [None, None], "icc2_k": None,
                           "icc2_k_ci95": [None, None], "n_pairs": int(units.size),
                           "k": int(raters.size)}
    if raters.size < 2 or units.size < 2:
        out["n_pairs"] = int(units.size) if raters.size >= 2 else 0
        return out
    block = data[np.ix_(raters, units)].T
    point = icc2(block)
    out["icc2_1"] = point.icc2_1 if math.isfinite(point.icc2_1) else None
    out["icc2_k"] = point.icc2_k if math.isfinite(point.icc2_k) else None
    if resamples <= 0:
        return out
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, block.shape[0], size=(resamples, block.shape[0]))
    boot = np.array([[r.icc2_1, r.icc2_k] for r in (icc2(block[d]) for d in draws)])
    tail = (1.0 - level) / 2.0
    for col, name in ((0, "icc2_1_ci95"), (1, "icc2_k_ci95")):
        vals = boot[:, col][np.isfinite(boot[:, col])]
        if vals.size:
            lo, hi = np.quantile(vals, [tail, 1.0 - tail])
            out[name] = [float(lo), float(hi)]
    return out
