"""The human ceiling: how well one radiologist agrees with the others.

For a study with at least :data:`MIN_RATERS` counted raters, each rater ``r`` is compared with
the mean of the *other* raters (leave one rater out): Kendall tau-b and Spearman between
``r``'s error counts and the others' mean count, over the pairs both have (``r`` counted the
pair and at least one other rater did). The ceiling is the mean of these per-rater values
over the raters whose value is defined. A metric cannot be expected to agree with the
radiologists much better than a radiologist does, so a metric's tau is also reported as a
share of the ceiling tau (``pct_of_ceiling = tau / ceiling``, a fraction, null when the
ceiling is missing or not positive).

Intervals: percentile bootstrap with the resamples of the metrics (the same draws, so a
metric's interval and the ceiling's are comparable). Resampling units (``unit``):

* ``"pair"``: pairs with replacement;
* ``"case"``: cases (all pairs of one reference together) with replacement;
* ``"rater_pair"``: two-stage; pairs with replacement, then, inside each drawn pair, the
  raters entering the mean with replacement among those who counted the pair (drawn with
  ``numpy.random.default_rng((seed, 1))``). The left-out rater stays fixed in the ceiling.

Each resample's ceiling is the mean over raters of that resample's per-rater tau; a resample
in which any rater's tau is undefined (constant counts) is left out of the quantiles.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from radconcord.backend.analysis.bootstrap import DEFAULT_LEVEL, Resamples, percentile_interval
from radconcord.backend.analysis.stats import (
    rank_correlations_batch,
    rank_correlations_varying_target,
)

MIN_RATERS = 3
UNITS = ("pair", "case", "rater_pair")
# Sub-seed of the rater draws inside pairs (the pair draws use the plain seed).
RATER_STREAM = 1

__all__ = [
    "MIN_RATERS",
    "UNITS",
    "CeilingResult",
    "human_ceiling",
    "others_mean",
    "pct_of_ceiling",
    "resampled_rater_means",
]


def others_mean(errors: ArrayLike, rater: int) -> NDArray[np.float64]:
    """Mean count of every rater but ``rater`` per pair (NaN where no other rater counted it).

    Args:
        errors: ``(R, n)`` counts per rater, NaN where a rater did not count a pair.
        rater: Row left out.
    """
    e = np.asarray(errors, dtype=np.float64)
    others = np.delete(e, rater, axis=0)
    n_others = np.isfinite(others).sum(axis=0)
    total = np.where(np.isfinite(others), others, 0.0).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n_others > 0, total / np.maximum(n_others, 1), np.nan)


def resampled_rater_means(
    errors: ArrayLike, resamples: int, rng: np.random.Generator, exclude: int | None = None
) -> NDArray[np.float64]:
    """Per pair, the mean over raters drawn with replacement among those who counted it.

    The second stage of the ``rater_pair`` bootstrap: a pair counted by ``m`` raters gets
    ``m`` draws from them in every resample. Vectorised over resamples and pairs.

    Args:
        errors: ``(R, n)`` counts, NaN where a rater did not count a pair.
        resamples: Number of resamples ``B``.
        rng: Generator of the draws.
        exclude: A rater left out of every mean (the leave-one-out ceiling), or ``None``.

    Returns:
        ``(B, n)`` means; NaN for a pair no (remaining) rater counted.
    """
    e = np.asarray(errors, dtype=np.float64)
    if exclude is not None:
        e = np.delete(e, exclude, axis=0)
    n_raters, n = e.shape
    ok = np.isfinite(e)
    m = ok.sum(axis=0)  # (n,)
    # Counted values of each pair packed to the front of its column.
    order = np.argsort(~ok, axis=0, kind="stable")
    packed = np.take_along_axis(np.where(ok, e, 0.0), order, axis=0)  # (R, n)
    draws = np.floor(rng.random((resamples, n_raters, n)) * np.maximum(m, 1)).astype(np.int64)
    picked = packed[draws, np.arange(n)[None, None, :]]  # (B, R, n)
    used = np.arange(n_raters)[None, :, None] < m[None, None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(m > 0, np.where(used, picked, 0.0).sum(axis=1) / np.maximum(m, 1),
                        np.nan)


@dataclass(frozen=True)
class CeilingResult:
    """Leave-one-rater-out agreement (see the module docstring).

    Attributes:
        raters: Rater names, in the order of the per-rater arrays.
        per_rater_kendall: ``(R,)`` tau-b of each rater against the others' mean.
        per_rater_spearman: ``(R,)`` Spearman likewise.
        n_shared: ``(R,)`` pairs entering each rater's value.
        kendall: Mean of the defined per-rater taus (the ceiling).
        spearman: Mean of the defined per-rater rhos.
        kendall_ci: ``(2,)`` percentile interval (NaN without resamples).
        spearman_ci: ``(2,)`` percentile interval.
        kendall_replicates: ``(B,)`` ceiling of each resample (empty without resamples).
        per_category_kendall: Category label -> ceiling tau on that category's counts.
        per_category_spearman: Category label -> ceiling rho.
        n_raters: Raters whose tau is defined (entering the mean).
        unit: Resampling unit.
        resamples: ``B``.
    """

    raters: tuple[str, ...]
    per_rater_kendall: NDArray[np.float64]
    per_rater_spearman: NDArray[np.float64]
    n_shared: NDArray[np.int64]
    kendall: float
    spearman: float
    kendall_ci: NDArray[np.float64]
    spearman_ci: NDArray[np.float64]
    kendall_replicates: NDArray[np.float64]
    per_category_kendall: dict[str, float]
    per_category_spearman: dict[str, float]
    n_raters: int
    unit: str
    resamples: int

    def as_json(self) -> dict[str, Any]:
        """The ``ceiling`` section of the correlate JSON (NaN left for the caller to map)."""
        return {
            "kendall_tau_b": self.kendall,
            "kendall_ci95": [float(self.kendall_ci[0]), float(self.kendall_ci[1])],
            "spearman": self.spearman,
            "spearman_ci95": [float(self.spearman_ci[0]), float(self.spearman_ci[1])],
            "per_rater": dict(zip(self.raters, self.per_rater_kendall.tolist(), strict=True)),
            "per_rater_spearman": dict(zip(self.raters, self.per_rater_spearman.tolist(),
                                           strict=True)),
            "n_shared_pairs": dict(zip(self.raters, self.n_shared.tolist(), strict=True)),
            "per_category": dict(self.per_category_kendall),
            "per_category_spearman": dict(self.per_category_spearman),
            "n_raters": self.n_raters,
            "unit": self.unit,
            "resamples": self.resamples,
        }


def _point(errors: NDArray[np.float64]) -> tuple[NDArray, NDArray, NDArray]:
    """Per-rater tau, rho and shared-pair count against the others' mean (no resampling)."""
    n_r = errors.shape[0]
    tau = np.full(n_r, np.nan)
    rho = np.full(n_r, np.nan)
    shared_n = np.zeros(n_r, dtype=np.int64)
    for r in range(n_r):
        om = others_mean(errors, r)
        shared = np.isfinite(errors[r]) & np.isfinite(om)
        shared_n[r] = int(shared.sum())
        if shared_n[r] >= 2:
            t, s = rank_correlations_batch(errors[r, shared], om[shared])
            assert t is not None and s is not None
            tau[r], rho[r] = t[0, 0], s[0, 0]
    return tau, rho, shared_n


def _mean_defined(values: NDArray[np.float64]) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else float("nan")


def human_ceiling(
    errors: ArrayLike,
    raters: Sequence[str],
    *,
    category_errors: Mapping[str, ArrayLike] | None = None,
    draws: Resamples | None = None,
    unit: str = "pair",
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
) -> CeilingResult | None:
    """Leave-one-rater-out Kendall tau-b and Spearman, averaged over raters, with intervals.

    Args:
        errors: ``(R, n)`` counts per rater over the analysed pairs (NaN: not counted).
        raters: ``R`` rater names.
        category_errors: Optional label -> ``(R, n)`` counts of one category (point values).
        draws: Resamples over the ``n`` pairs (by pair or by case, as ``unit`` says; for
            ``"rater_pair"`` drawn by pair); ``None`` gives no intervals.
        unit: ``"pair"``, ``"case"`` or ``"rater_pair"`` (recorded; see module docstring).
        seed: Seed of the run; the rater draws of ``"rater_pair"`` use ``(seed, 1)``.
        level: Interval coverage.

    Returns:
        The result, or ``None`` with fewer than :data:`MIN_RATERS` raters.

    Raises:
        ValueError: a bad unit or shapes that do not match.
    """
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, got '{unit}'")
    e = np.asarray(errors, dtype=np.float64)
    if e.ndim != 2 or e.shape[0] != len(raters):
        raise ValueError(f"errors must be ({len(raters)}, n), got shape {e.shape}")
    if e.shape[0] < MIN_RATERS:
        return None
    n_r, n = e.shape
    tau, rho, shared_n = _point(e)
    defined = np.isfinite(tau)
    nan2 = np.full(2, np.nan)
    kendall_ci, spearman_ci = nan2.copy(), nan2.copy()
    replicates = np.zeros(0)
    n_res = 0
    if draws is not None and defined.any():
        if draws.weights.shape[1] != n:
            raise ValueError(f"draws cover {draws.weights.shape[1]} pairs, data has {n}")
        n_res = draws.count
        rng = np.random.default_rng((seed, RATER_STREAM))
        tau_b = np.full((n_res, n_r), np.nan)
        rho_b = np.full((n_res, n_r), np.nan)
        for r in np.flatnonzero(defined):
            om = others_mean(e, r)
            shared = np.isfinite(e[r]) & np.isfinite(om)
            w = draws.weights[:, shared]
            if unit == "rater_pair":
                y_b = resampled_rater_means(e[:, shared], n_res, rng, exclude=int(r))
                t, s = rank_correlations_varying_target(e[r, shared], y_b, w)
            else:
                t, s = rank_correlations_batch(e[r, shared], om[shared], w)
            assert t is not None and s is not None
            tau_b[:, r], rho_b[:, r] = t[:, 0], s[:, 0]
        # NaN in any defined rater makes the resample's mean NaN: left out of the quantiles.
        replicates = tau_b[:, defined].mean(axis=1)
        kendall_ci = percentile_interval(replicates, level)[0]
        spearman_ci = percentile_interval(rho_b[:, defined].mean(axis=1), level)[0]
    per_cat_tau: dict[str, float] = {}
    per_cat_rho: dict[str, float] = {}
    for label, values in (category_errors or {}).items():
        ce = np.asarray(values, dtype=np.float64)
        if ce.shape != e.shape:
            raise ValueError(f"category {label}: errors must have shape {e.shape}")
        ct, cr, _ = _point(ce)
        per_cat_tau[str(label)] = _mean_defined(ct)
        per_cat_rho[str(label)] = _mean_defined(cr)
    return CeilingResult(
        raters=tuple(raters),
        per_rater_kendall=tau,
        per_rater_spearman=rho,
        n_shared=shared_n,
        kendall=_mean_defined(tau),
        spearman=_mean_defined(rho),
        kendall_ci=kendall_ci,
        spearman_ci=spearman_ci,
        kendall_replicates=replicates,
        per_category_kendall=per_cat_tau,
        per_category_spearman=per_cat_rho,
        n_raters=int(defined.sum()),
        unit=unit,
        resamples=n_res,
    )


def pct_of_ceiling(tau: float | None, ceiling: float | None) -> float | None:
    """``tau / ceiling`` as a fraction; ``None`` without a positive ceiling or a tau.

    The tau is oriented (positive: the metric agrees with the raters), so a metric that
    ranks pairs against the raters gets a negative share: ``|tau|`` would have shown a
    BLEU of tau -0.21 as 27 % of the ceiling, as if it were on the way to it.

    Args:
        tau: A metric's Kendall tau-b (oriented).
        ceiling: The ceiling tau.
    """
    if tau is None or ceiling is None or not np.isfinite(tau) or not np.isfinite(ceiling):
        return None
    if ceiling <= 0:
        return None
    return float(tau) / float(ceiling)
