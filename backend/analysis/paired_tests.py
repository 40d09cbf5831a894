"""Is metric A better than metric B? Paired tests of the difference of their agreement.

Paired bootstrap. Every metric's Kendall tau-b with the radiologists is computed on the *same*
resamples (one ``(B, K)`` replicate matrix, :func:`backend.analysis.stats.rank_correlations_batch`
or, for the two-stage ``rater_pair`` unit, ``rank_correlations_varying_target``), so the
replicate difference ``d_b = tau_b(A) - tau_b(B)`` keeps the dependence between A and B (both
are correlated with the same target on the same pairs). For every pair of metrics:

* ``tau_diff = tau(A) - tau(B)`` on the original sample (metrics oriented, higher = better, so
  a positive difference means A agrees better);
* ``ci95``: percentile interval of ``d_b`` (linear interpolation, resamples where either tau
  is undefined left out);
* ``p``: two-sided bootstrap p-value of ``H0: tau(A) = tau(B)``,
  ``p = min(1, 2 * min(1 + #{d_b <= 0}, 1 + #{d_b >= 0}) / (B' + 1))`` over the ``B'`` defined
  resamples (the percentile-interval inversion: the smallest two-sided level at which the
  interval would contain 0; the ``+1`` keeps it from being 0 with finitely many resamples);
* ``p_adjusted``: Holm (family-wise error) or Benjamini-Hochberg (false discovery rate) over
  all metric pairs of the matrix.

Williams' test. For dependent correlations sharing one variable (the radiologists' target
``y``), Williams' T2 as recommended by Steiger (1980, Psychol. Bull. 87:245)::

    t = (r_yA - r_yB) * sqrt((n - 1)(1 + r_AB)
                             / (2 (n - 1)/(n - 3) |R| + rbar^2 (1 - r_AB)^3)),
    |R| = 1 - r_yA^2 - r_yB^2 - r_AB^2 + 2 r_yA r_yB r_AB,  rbar = (r_yA + r_yB) / 2,

with ``n - 3`` degrees of freedom, two-sided. It is computed on Spearman's rho (Pearson on the
ranks, re-ranked on the ``n`` pairs where A, B and the target are all present), so it is an
approximation (the test assumes normality); ``None`` where it does not apply (``n < 4``, an
undefined correlation, or a non-positive variance term).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats as sp_stats

from radconcord.backend.analysis.bootstrap import DEFAULT_LEVEL

CORRECTIONS = ("holm", "bh")
WILLIAMS_LABEL = (
    "Williams' T2 for dependent correlations sharing the radiologists' target (Steiger 1980),"
    " on Spearman rho; two-sided, df = n - 3; approximate for rank correlations"
)
P_METHOD = (
    "paired bootstrap: p = min(1, 2 * min(1 + #(d <= 0), 1 + #(d >= 0)) / (B + 1)) over the B"
    " resamples where both taus are defined, d = tau(A) - tau(B) on the same resample"
)

__all__ = [
    "CORRECTIONS",
    "adjust_pvalues",
    "bootstrap_pvalues",
    "holm",
    "metric_pairs",
    "paired_tests_section",
    "williams_test",
]


def metric_pairs(k: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Index arrays ``(i, j)`` of all ``i < j`` among ``k`` metrics, row by row."""
    i, j = np.triu_indices(k, 1)
    return i.astype(np.int64), j.astype(np.int64)


def holm(pvalues: ArrayLike) -> NDArray[np.float64]:
    """Holm step-down adjusted p-values (NaN entries stay NaN; ``m`` counts the others).

    ``p_adj(i) = max_{j <= i} min(1, (m - j + 1) p_(j))`` over the sorted p-values.

    Args:
        pvalues: Raw p-values.
    """
    p = np.asarray(pvalues, dtype=np.float64).ravel()
    out = np.full(p.shape, np.nan)
    finite = np.flatnonzero(np.isfinite(p))
    m = finite.size
    if m:
        order = finite[np.argsort(p[finite], kind="stable")]
        scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
        out[order] = np.maximum.accumulate(scaled)
    return out


def _bh(pvalues: ArrayLike) -> NDArray[np.float64]:
    """Benjamini-Hochberg step-up adjusted p-values (NaN entries stay NaN)."""
    p = np.asarray(pvalues, dtype=np.float64).ravel()
    out = np.full(p.shape, np.nan)
    finite = np.flatnonzero(np.isfinite(p))
    m = finite.size
    if m:
        order = finite[np.argsort(p[finite], kind="stable")]
        scaled = p[order] * m / np.arange(1, m + 1)
        out[order] = np.minimum(1.0, np.minimum.accumulate(scaled[::-1])[::-1])
    return out


def adjust_pvalues(pvalues: ArrayLike, correction: str) -> NDArray[np.float64]:
    """Holm (``"holm"``) or Benjamini-Hochberg (``"bh"``) adjustment over all given p-values.

    Args:
        pvalues: Raw p-values (NaN: not tested, excluded from ``m``).
        correction: ``"holm"`` or ``"bh"``.

    Raises:
        ValueError: for another correction.
    """
    if correction == "holm":
        return holm(pvalues)
    if correction == "bh":
        return _bh(pvalues)
    raise ValueError(f"correction must be one of {CORRECTIONS}, got '{correction}'")


def bootstrap_pvalues(diffs: ArrayLike) -> NDArray[np.float64]:
    """Two-sided paired-bootstrap p-value of each column of ``diffs`` (see module docstring).

    Args:
        diffs: ``(B, P)`` replicate differences; NaN marks an undefined resample.

    Returns:
        ``(P,)`` p-values, NaN for a column without a defined resample.
    """
    d = np.asarray(diffs, dtype=np.float64)
    if d.ndim == 1:
        d = d[:, None]
    ok = np.isfinite(d)
    n_ok = ok.sum(axis=0)
    le = (ok & (d <= 0)).sum(axis=0)
    ge = (ok & (d >= 0)).sum(axis=0)
    p = np.minimum(1.0, 2.0 * (np.minimum(le, ge) + 1.0) / (n_ok + 1.0))
    return np.where(n_ok > 0, p, np.nan)


def williams_test(
    r_ya: ArrayLike, r_yb: ArrayLike, r_ab: ArrayLike, n: ArrayLike
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Williams' T2 (Steiger 1980) for ``r_ya`` vs ``r_yb`` sharing ``y``; vectorised.

    Args:
        r_ya: Correlation of the target with A.
        r_yb: Correlation of the target with B.
        r_ab: Correlation of A with B.
        n: Observations behind the three correlations.

    Returns:
        ``(t, p)``: the statistic (df ``n - 3``) and its two-sided p-value; NaN where the
        test does not apply.
    """
    r1, r2, r3 = (np.asarray(v, dtype=np.float64) for v in (r_ya, r_yb, r_ab))
    nn = np.asarray(n, dtype=np.float64)
    det = 1.0 - r1**2 - r2**2 - r3**2 + 2.0 * r1 * r2 * r3
    rbar = 0.5 * (r1 + r2)
    with np.errstate(invalid="ignore", divide="ignore"):
        denom = 2.0 * (nn - 1.0) / (nn - 3.0) * det + rbar**2 * (1.0 - r3) ** 3
        t = (r1 - r2) * np.sqrt((nn - 1.0) * (1.0 + r3) / denom)
    ok = (nn >= 4) & np.isfinite(t) & (denom > 0) & (det >= 0)
    t = np.where(ok, t, np.nan)
    p = np.where(ok, 2.0 * sp_stats.t.sf(np.abs(np.where(ok, t, 0.0)), np.maximum(nn - 3, 1)),
                 np.nan)
    return t, p


def _spearman_williams(
    x: NDArray[np.float64], y: NDArray[np.float64], i: NDArray[np.int64], j: NDArray[np.int64]
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.int64]]:
    """Williams' test on Spearman rho for each metric pair ``(i, j)``.

    Pairs of metrics sharing the same set of complete rows share one rank matrix (normally
    there is one such set for the whole matrix).
    """
    t = np.full(i.size, np.nan)
    p = np.full(i.size, np.nan)
    n_used = np.zeros(i.size, dtype=np.int64)
    ok_x = np.isfinite(x)
    ok_y = np.isfinite(y)
    groups: dict[bytes, list[int]] = {}
    for q in range(i.size):
        rows = ok_x[i[q]] & ok_x[j[q]] & ok_y
        groups.setdefault(rows.tobytes(), []).append(q)
    for key, qs in groups.items():
        rows = np.frombuffer(key, dtype=bool)
        m = int(rows.sum())
        if m < 4:
            n_used[qs] = m
            continue
        involved = np.unique(np.r_[i[qs], j[qs]])
        ranks = sp_stats.rankdata(np.vstack([y[rows], x[np.ix_(involved, rows)]]), axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            corr = np.corrcoef(ranks)
        pos = {k: c + 1 for c, k in enumerate(involved)}
        a = np.array([pos[i[q]] for q in qs])
        b = np.array([pos[j[q]] for q in qs])
        tq, pq = williams_test(corr[0, a], corr[0, b], corr[a, b], np.full(len(qs), m))
        t[qs], p[qs], n_used[qs] = tq, pq, m
    return t, p, n_used


def paired_tests_section(
    keys: Sequence[str],
    tau: ArrayLike,
    replicates: ArrayLike | None,
    x: ArrayLike,
    y: ArrayLike,
    *,
    unit: str,
    correction: str = "holm",
    level: float = DEFAULT_LEVEL,
) -> dict[str, Any]:
    """The ``pairwise`` section of the correlate JSON for every pair of metrics.

    Args:
        keys: ``K`` metric keys.
        tau: ``(K,)`` Kendall tau-b of each metric on the original sample (oriented).
        replicates: ``(B, K)`` tau of each metric on the shared resamples, or ``None``
            (no intervals or bootstrap p-values).
        x: ``(K, n)`` oriented metric values (NaN: missing) for Williams' test.
        y: ``(n,)`` oriented target.
        unit: The resampling unit, recorded.
        correction: ``"holm"`` or ``"bh"`` over the matrix.
        level: Interval coverage.

    Returns:
        ``{"unit", "correction", "resamples", "level", "p_method", "williams_method",
        "pairs": {"A|B": {"tau_diff", "ci95", "p", "p_adjusted", "williams_t",
        "williams_p", "williams_n"}}}`` with A before B in ``keys`` order (NaN kept;
        the caller maps it to null).

    Raises:
        ValueError: an unknown correction or shapes that do not match.
    """
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {CORRECTIONS}, got '{correction}'")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    k = len(keys)
    t0 = np.asarray(tau, dtype=np.float64)
    xs = np.asarray(x, dtype=np.float64)
    yv = np.asarray(y, dtype=np.float64)
    if t0.shape != (k,) or xs.ndim != 2 or xs.shape[0] != k or yv.shape != (xs.shape[1],):
        raise ValueError(
            f"pairwise: expected tau ({k},), x ({k}, n) and y (n,), got {t0.shape},"
            f" {xs.shape}, {yv.shape}"
        )
    i, j = metric_pairs(k)
    diff0 = t0[i] - t0[j]
    n_pairs = i.size
    ci = np.full((n_pairs, 2), np.nan)
    p = np.full(n_pairs, np.nan)
    n_res = 0
    if replicates is not None:
        rep = np.asarray(replicates, dtype=np.float64)
        if rep.ndim != 2 or rep.shape[1] != k:
            raise ValueError(f"replicates must be (B, {k}), got {rep.shape}")
        n_res = rep.shape[0]
        if n_pairs and n_res:
            d = rep[:, i] - rep[:, j]
            p = bootstrap_pvalues(d)
            has = np.isfinite(d).any(axis=0)
            q = [(1.0 - level) / 2.0, (1.0 + level) / 2.0]
            if has.any():
                # nanquantile's linear interpolation over the defined resamples is
                # percentile_interval's, for all columns at once.
                ci[has] = np.nanquantile(d[:, has], q, axis=0).T
        p = np.where(np.isfinite(diff0), p, np.nan)
    p_adj = adjust_pvalues(p, correction)
    w_t, w_p, w_n = _spearman_williams(xs, yv, i, j)
    pairs = {
        f"{keys[a]}|{keys[b]}": {
            "tau_diff": diff0[q],
            "ci95": [ci[q, 0], ci[q, 1]],
            "p": p[q],
            "p_adjusted": p_adj[q],
            "williams_t": w_t[q],
            "williams_p": w_p[q],
            "williams_n": int(w_n[q]),
        }
        for q, (a, b) in enumerate(zip(i.tolist(), j.tolist(), strict=True))
    }
    return {
        "unit": unit,
        "correction": correction,
        "resamples": n_res,
        "level": level,
        "p_method": P_METHOD,
        "williams_method": WILLIAMS_LABEL,
        "pairs": pairs,
    }
