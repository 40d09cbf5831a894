"""Seeded percentile bootstrap of rank correlations, vectorised over resamples.

Resamples are drawn once with ``numpy.random.default_rng(seed).integers(0, U, size=(B, U))``
over the ``U`` resampling units: the pairs themselves, or clusters of pairs (a case, a study)
when ``clusters`` is given, in which case every pair of a drawn cluster enters the resample.
The same index matrix is used for every metric, so metrics are compared on the same resamples
(a paired bootstrap). Each resample is summarised by per-pair multiplicities and evaluated by
:mod:`backend.analysis.stats` in a few matrix products; there is no loop over resamples.

The interval is the percentile interval: ``numpy.nanquantile`` at ``(1 - level) / 2`` and
``(1 + level) / 2`` with linear interpolation. Degenerate resamples (constant metric or target:
tau undefined) are left out of the quantiles and counted in ``n_degenerate``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from radconcord.backend.analysis.stats import counts_from_indices, rank_correlations_batch

DEFAULT_RESAMPLES = 1000
DEFAULT_LEVEL = 0.95


@dataclass(frozen=True)
class Resamples:
    """A batch of bootstrap resamples.

    Attributes:
        indices: ``(B, U)`` drawn unit indices (the exact draws, for reproduction).
        weights: ``(B, n)`` multiplicity of each pair in each resample.
        unit_of_pair: ``(n,)`` unit index of each pair (``arange(n)`` without clusters).
        seed: Seed given to ``numpy.random.default_rng``.
    """

    indices: NDArray[np.int64]
    weights: NDArray[np.float64]
    unit_of_pair: NDArray[np.int64]
    seed: int

    @property
    def count(self) -> int:
        """Number of resamples ``B``."""
        return int(self.indices.shape[0])

    def pair_indices(self, b: int) -> NDArray[np.int64]:
        """Pair indices of resample ``b`` (for plain-loop checks; clusters expanded)."""
        members = [np.flatnonzero(self.unit_of_pair == u) for u in self.indices[b]]
        return np.concatenate(members) if members else np.zeros(0, dtype=np.int64)


def draw_resamples(
    n: int, resamples: int = DEFAULT_RESAMPLES, seed: int = 0, clusters: ArrayLike | None = None
) -> Resamples:
    """Draw ``resamples`` bootstrap resamples of ``n`` pairs.

    Args:
        n: Number of pairs.
        resamples: Number of resamples ``B`` (>= 1).
        seed: Seed of ``numpy.random.default_rng``; recorded in results.
        clusters: Optional ``(n,)`` labels; clusters are drawn with replacement instead of
            pairs (cluster bootstrap, e.g. by case or by study).
    """
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    if n < 1:
        raise ValueError("cannot bootstrap an empty sample")
    if clusters is None:
        unit_of_pair = np.arange(n, dtype=np.int64)
    else:
        labels = np.asarray(clusters)
        if labels.shape != (n,):
            raise ValueError(f"clusters must have shape ({n},), got {labels.shape}")
        _, unit_of_pair = np.unique(labels, return_inverse=True)
        unit_of_pair = unit_of_pair.astype(np.int64).ravel()
    n_units = int(unit_of_pair.max()) + 1
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, n_units, size=(resamples, n_units))
    unit_weights = counts_from_indices(indices, n_units)
    return Resamples(
        indices=indices,
        weights=unit_weights[:, unit_of_pair],
        unit_of_pair=unit_of_pair,
        seed=seed,
    )


def percentile_interval(
    samples: ArrayLike, level: float = DEFAULT_LEVEL
) -> NDArray[np.float64]:
    """Percentile interval of each column of ``samples`` (NaN rows ignored per column).

    Args:
        samples: ``(B, K)`` bootstrap replicates.
        level: Coverage, e.g. 0.95.

    Returns:
        ``(K, 2)`` array ``[lo, hi]``; NaN where a column has no finite replicate.
    """
    arr = np.asarray(samples, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[:, None]
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    q = [(1.0 - level) / 2.0, (1.0 + level) / 2.0]
    out = np.full((arr.shape[1], 2), np.nan)
    for k in range(arr.shape[1]):
        col = arr[:, k]
        col = col[np.isfinite(col)]
        if col.size:
            out[k] = np.quantile(col, q)
    return out


@dataclass(frozen=True)
class CorrelationBootstrap:
    """Point estimates and percentile intervals for K metrics against one target.

    Attributes:
        kendall: ``(K,)`` tau-b on the original sample.
        spearman: ``(K,)`` rho on the original sample.
        kendall_ci: ``(K, 2)`` percentile interval (NaN when ``resamples == 0``).
        spearman_ci: ``(K, 2)`` percentile interval.
        n: ``(K,)`` pairs with both values present.
        n_degenerate: ``(K,)`` resamples where tau was undefined.
        resamples: ``B``.
        seed: The seed used.
        level: The interval coverage.
        kendall_replicates: ``(B, K)`` tau of each metric on each resample (for paired
            comparisons of metrics on the same resamples); ``None`` without resamples.
    """

    kendall: NDArray[np.float64]
    spearman: NDArray[np.float64]
    kendall_ci: NDArray[np.float64]
    spearman_ci: NDArray[np.float64]
    n: NDArray[np.int64]
    n_degenerate: NDArray[np.int64]
    resamples: int
    seed: int
    level: float
    kendall_replicates: NDArray[np.float64] | None = None


def bootstrap_correlations(
    x: ArrayLike,
    y: ArrayLike,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    clusters: ArrayLike | None = None,
    level: float = DEFAULT_LEVEL,
    draws: Resamples | None = None,
) -> CorrelationBootstrap:
    """Kendall tau-b and Spearman of each row of ``x`` with ``y``, with bootstrap intervals.

    Both inputs must already be oriented (higher = better; negate error counts).

    Args:
        x: ``(K, n)`` or ``(n,)`` metric values, NaN where missing.
        y: ``(n,)`` target.
        resamples: Number of resamples; 0 skips the intervals (they come back NaN).
        seed: Seed of ``numpy.random.default_rng``.
        clusters: Optional ``(n,)`` cluster labels for a cluster bootstrap.
        level: Interval coverage.
        draws: Pre-drawn resamples (to share them between several calls); overrides
            ``resamples``, ``seed`` and ``clusters``.
    """
    yv = np.asarray(y, dtype=np.float64)
    if yv.ndim != 1:
        raise ValueError(f"y must be one-dimensional, got shape {yv.shape}")
    return bootstrap_many(x, yv[None, :], resamples=resamples, seed=seed, clusters=clusters,
                          level=level, draws=draws)[0]


def bootstrap_many(
    x: ArrayLike,
    targets: ArrayLike,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    clusters: ArrayLike | None = None,
    level: float = DEFAULT_LEVEL,
    draws: Resamples | None = None,
) -> list[CorrelationBootstrap]:
    """:func:`bootstrap_correlations` for several targets on the same resamples.

    The work on ``x`` (ranks, sign matrices) is shared between targets, which makes e.g. the
    total plus six per-category targets much cheaper than seven separate calls.

    Args:
        x: ``(K, n)`` or ``(n,)`` metric values, NaN where missing.
        targets: ``(T, n)`` targets.
        resamples: Number of resamples; 0 skips the intervals (they come back NaN).
        seed: Seed of ``numpy.random.default_rng``.
        clusters: Optional ``(n,)`` cluster labels for a cluster bootstrap.
        level: Interval coverage.
        draws: Pre-drawn resamples; overrides ``resamples``, ``seed`` and ``clusters``.

    Returns:
        One result per target, in order.
    """
    ys = np.asarray(targets, dtype=np.float64)
    if ys.ndim != 2:
        raise ValueError(f"targets must be (T, n), got shape {ys.shape}")
    xs = np.asarray(x, dtype=np.float64)
    if xs.ndim == 1:
        xs = xs[None, :]
    n_targets, n = ys.shape
    k = xs.shape[0]
    tau0, rho0 = rank_correlations_batch(xs, ys)
    assert tau0 is not None and rho0 is not None
    counts = (np.isfinite(xs)[None, :, :] & np.isfinite(ys)[:, None, :]).sum(axis=2)
    if draws is None and resamples > 0 and n > 0:
        draws = draw_resamples(n, resamples, seed, clusters)
    if draws is None:
        nan_ci = np.full((k, 2), np.nan)
        return [
            CorrelationBootstrap(
                kendall=tau0[t, 0], spearman=rho0[t, 0], kendall_ci=nan_ci.copy(),
                spearman_ci=nan_ci.copy(), n=counts[t].astype(np.int64),
                n_degenerate=np.zeros(k, dtype=np.int64), resamples=0, seed=seed, level=level,
            )
            for t in range(n_targets)
        ]
    if draws.weights.shape[1] != n:
        raise ValueError(f"draws cover {draws.weights.shape[1]} pairs, data has {n}")
    tau_b, rho_b = rank_correlations_batch(xs, ys, draws.weights)
    assert tau_b is not None and rho_b is not None
    return [
        CorrelationBootstrap(
            kendall=tau0[t, 0],
            spearman=rho0[t, 0],
            kendall_ci=percentile_interval(tau_b[t], level),
            spearman_ci=percentile_interval(rho_b[t], level),
            n=counts[t].astype(np.int64),
            n_degenerate=(~np.isfinite(tau_b[t])).sum(axis=0).astype(np.int64),
            resamples=draws.count,
            seed=draws.seed,
            level=level,
            kendall_replicates=tau_b[t],
        )
        for t in range(n_targets)
    ]
