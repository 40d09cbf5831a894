"""Rank correlations (Kendall tau-b, Spearman) vectorised over bootstrap resamples.

A bootstrap resample of ``n`` points drawn with replacement is fully described by the
multiplicity ``w_i`` of each original point (how often it was drawn). Every statistic here is
written as a function of those weights, so that a whole batch of resamples is a few matrix
products instead of a Python loop:

- Kendall tau-b. With ``Sx[i, j] = sign(x_i - x_j)`` and ``Sy`` likewise, the resampled
  concordant-minus-discordant count is ``w' (Sx * Sy) w / 2``; the number of pairs not tied in
  x is ``(sum(w)^2 - sum over tie groups of (group weight)^2) / 2`` (copies of one point are
  tied in both x and y, and tau-b leaves pairs tied in both out of every term). So
  ``tau_b = w'(Sx*Sy)w / sqrt(untied_x * untied_y)``, which is scipy's
  ``(P - Q) / sqrt((P + Q + T) (P + Q + U))`` exactly, ties included.
- Spearman. The average rank of point ``i`` inside the resample is
  ``#below + (#equal + 1) / 2`` counted with multiplicities (a cumulative sum over the sorted
  values); Spearman is the Pearson correlation of those ranks with each point weighted by
  ``w_i`` (``scipy.stats.spearmanr`` on the resampled arrays).

Cost: one sort per metric, O(B n) for ranks and ties, and O(B n^2) flops for the Kendall
numerator, done as one stacked BLAS call for all metrics sharing a missing-value pattern (many
small multithreaded calls are slow on a busy machine). Integer weights make float32 products
exact, so float32 BLAS is used then. Memory is bounded per chunk of metrics
(:data:`CHUNK_ELEMENTS`). Missing values (NaN) are dropped pairwise per metric and target, as
``nan_policy='omit'`` would.

Orientation: correlations are computed between a metric oriented so that higher means better
(:func:`orient`) and the negated radiologist error count, so a positive value means agreement.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

# Elements of the stacked per-chunk arrays (~256 MiB in float64); larger studies run in chunks.
CHUNK_ELEMENTS = 2**25

__all__ = [
    "counts_from_indices",
    "kendall_tau_b",
    "kendall_tau_b_batch",
    "orient",
    "rank_correlations_batch",
    "rank_correlations_varying_target",
    "spearman",
    "spearman_batch",
]


def orient(values: ArrayLike, higher_is_better: bool) -> NDArray[np.float64]:
    """Return ``values`` as floats, negated when the metric is lower-is-better.

    Args:
        values: Per-pair metric values (NaN allowed).
        higher_is_better: The metric's direction.
    """
    arr = np.asarray(values, dtype=np.float64)
    return arr.copy() if higher_is_better else -arr


def _sign_matrix(x: NDArray[np.float64]) -> NDArray[np.float64]:
    """``S[i, j] = sign(x_i - x_j)``, 0 where either value is NaN."""
    with np.errstate(invalid="ignore"):
        s = np.sign(x[:, None] - x[None, :])
    s[np.isnan(s)] = 0.0
    return s


def _weighted_ranks(
    v: NDArray[np.float64], wt: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Average ranks of ``v`` inside each weighted resample, and the tie term.

    Args:
        v: ``(n,)`` finite values.
        wt: ``(n, B)`` multiplicities (points along rows: row gathers and sums along axis 0
            are the fast direction for C-ordered arrays).

    Returns:
        ``ranks`` ``(n, B)``: ``#below + (#equal + 1) / 2`` counted with multiplicities, and
        ``ties`` ``(B,)``: ``sum over tie groups of (group weight)^2``, so that the number of
        ordered pairs not tied is ``sum(w)^2 - ties``. O(n B) after one sort.
    """
    order = np.argsort(v, kind="stable")
    vs = v[order]
    new_group = np.r_[True, vs[1:] != vs[:-1]]
    starts = np.flatnonzero(new_group)
    group_of_sorted = np.cumsum(new_group) - 1
    group_w = np.add.reduceat(wt[order], starts, axis=0)
    below = np.cumsum(group_w, axis=0)
    below -= group_w
    group_rank = below + 0.5 * (group_w + 1.0)
    ranks = np.empty_like(wt)
    ranks[order] = group_rank[group_of_sorted]
    return ranks, np.einsum("gb,gb->b", group_w, group_w)

def _as_2d(x: ArrayLike, n: int, name: str) -> NDArray[np.float64]:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != n:
        raise ValueError(f"{name} must have shape (K, {n}) or ({n},), got {np.shape(x)}")
    return arr


def _weights_2d(weights: ArrayLike | None, n: int) -> NDArray[np.float64]:
    if weights is None:
        return np.ones((1, n))
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim == 1:
        w = w[None, :]
    if w.ndim != 2 or w.shape[1] != n:
        raise ValueError(f"weights must have shape (B, {n}) or ({n},), got {np.shape(weights)}")
    if np.any(w < 0):
        raise ValueError("weights must be non-negative resample counts")
    return w


def counts_from_indices(indices: ArrayLike, n: int) -> NDArray[np.float64]:
    """Turn resample index arrays into per-point multiplicities.

    Args:
        indices: ``(B, m)`` integer indices into ``range(n)`` (one row per resample).
        n: Number of original points.

    Returns:
        ``(B, n)`` float array; row ``b`` counts how often each point appears in resample ``b``.
    """
    idx = np.asarray(indices)
    if idx.ndim == 1:
        idx = idx[None, :]
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"resample indices must lie in [0, {n})")
    b = idx.shape[0]
    flat = (idx + (np.arange(b) * n)[:, None]).ravel()
    return np.bincount(flat, minlength=b * n).reshape(b, n).astype(np.float64)


def rank_correlations_batch(
    x: ArrayLike,
    y: ArrayLike,
    weights: ArrayLike | None = None,
    *,
    kendall: bool = True,
    spearman: bool = True,
) -> tuple[NDArray[np.float64] | None, NDArray[np.float64] | None]:
    """Kendall tau-b and Spearman of every row of ``x`` against ``y`` for every resample.

    Args:
        x: ``(K, n)`` or ``(n,)`` values (already oriented); NaN marks a missing value.
        y: ``(n,)`` target, or ``(T, n)`` several targets sharing the work on ``x``
            (already oriented); NaN marks a missing value.
        weights: ``(B, n)`` resample multiplicities (see :func:`counts_from_indices`);
            ``None`` means the original sample once.
        kendall: Compute Kendall tau-b.
        spearman: Compute Spearman's rho.

    Returns:
        ``(tau, rho)``, each ``(B, K)`` for a 1-D ``y`` or ``(T, B, K)`` for a 2-D one
        (``None`` when not requested). A resample whose values are constant in x or y gives
        NaN, as scipy does.
    """
    yv = np.asarray(y, dtype=np.float64)
    if yv.ndim not in (1, 2):
        raise ValueError(f"y must be (n,) or (T, n), got shape {yv.shape}")
    single = yv.ndim == 1
    ys = yv[None, :] if single else yv
    n_targets, n = ys.shape
    xs = _as_2d(x, n, "x")
    w = _weights_2d(weights, n)
    n_res, k_metrics = w.shape[0], xs.shape[0]
    tau = np.full((n_targets, n_res, k_metrics), np.nan) if kendall else None
    rho = np.full((n_targets, n_res, k_metrics), np.nan) if spearman else None
    # Products of {-1, 0, 1} with integer multiplicities are integers below 2**24, so a
    # float32 matmul is exact here and twice as fast; the quadratic form sums in float64.
    exact32 = float(w.sum(axis=1).max(initial=0.0)) < 2**24 and bool(np.all(w == np.round(w)))
    mm_dtype = np.float32 if exact32 else np.float64
    w_t = np.ascontiguousarray(w.T)  # (n, B): points along rows, see _weighted_ranks
    # Group (target, metric) combinations by their pattern of valid points: within a group
    # the weights, the target's ranks and one stacked matmul are shared. Few large BLAS calls
    # instead of one per metric matter: small multithreaded calls are slow on a busy machine.
    x_ok = np.isfinite(xs)
    y_ok = np.isfinite(ys)
    groups: dict[bytes, list[tuple[int, int]]] = {}
    for t in range(n_targets):
        for k in range(k_metrics):
            valid = x_ok[k] & y_ok[t]
            if valid.sum() >= 2:
                groups.setdefault(valid.tobytes(), []).append((t, k))
    for key, combos in groups.items():
        idx = np.flatnonzero(np.frombuffer(key, dtype=bool))
        m = idx.size
        wk = w_t[idx]
        wk_mm = wk.astype(mm_dtype)
        total = wk.sum(axis=0)
        mean = 0.5 * (total + 1.0)
        combo_set = set(combos)
        metrics_here = sorted({k for _, k in combos})
        targets_here = sorted({t for t, _ in combos})
        y_side = {}
        for t in targets_here:
            ry, y_ties = _weighted_ranks(ys[t, idx], wk)
            dy = ry - mean
            y_side[t] = (total**2 - y_ties, dy, np.einsum("nb,nb,nb->b", wk, dy, dy))
        # Bound the stacked matrices (metrics x points x (points + resamples)) per chunk.
        chunk = max(1, int(CHUNK_ELEMENTS // (m * (m + n_res))))
        for start in range(0, len(metrics_here), chunk):
            ks = metrics_here[start : start + chunk]
            sxs = np.stack([_sign_matrix(xs[k, idx]) for k in ks]) if tau is not None else None
            x_side = [_weighted_ranks(xs[k, idx], wk) for k in ks]
            x_untied = np.stack([total**2 - ties for _, ties in x_side])  # (C, B)
            dxs = [rx - mean for rx, _ in x_side]
            for t in targets_here:
                sel = [c for c, k in enumerate(ks) if (t, k) in combo_set]
                if not sel:
                    continue
                cols = [ks[c] for c in sel]
                y_untied, dy, vy = y_side[t]
                with np.errstate(invalid="ignore", divide="ignore"):
                    if tau is not None:
                        # The only O(n^2) term: concordant minus discordant weighted pairs;
                        # sx * sy is symmetric, so M w for all resamples is M @ W'.
                        sy = _sign_matrix(ys[t, idx])
                        assert sxs is not None
                        stacked = (sxs[sel] * sy).reshape(len(sel) * m, m).astype(mm_dtype)
                        conc = (stacked @ wk_mm).reshape(len(sel), m, n_res)
                        num = np.einsum("cnb,nb->cb", conc.astype(np.float64), wk)
                        denom = np.sqrt(x_untied[sel] * y_untied)
                        val = np.where(denom > 0, num / np.where(denom > 0, denom, 1.0), np.nan)
                        tau[t][:, cols] = np.clip(val, -1.0, 1.0).T
                    if rho is not None:
                        for c, k in zip(sel, cols, strict=True):
                            dx = dxs[c]
                            cov = np.einsum("nb,nb,nb->b", wk, dx, dy)
                            vx = np.einsum("nb,nb,nb->b", wk, dx, dx)
                            denom = np.sqrt(vx * vy)
                            val = np.where(denom > 0, cov / np.where(denom > 0, denom, 1.0),
                                           np.nan)
                            rho[t][:, k] = np.clip(val, -1.0, 1.0)
    if single:
        return (None if tau is None else tau[0]), (None if rho is None else rho[0])
    return tau, rho


def rank_correlations_varying_target(
    x: ArrayLike,
    y: ArrayLike,
    weights: ArrayLike,
    *,
    kendall: bool = True,
    spearman: bool = True,
) -> tuple[NDArray[np.float64] | None, NDArray[np.float64] | None]:
    """Kendall tau-b and Spearman of every row of ``x`` against a target that changes per resample.

    :func:`rank_correlations_batch` shares one target between all resamples. A two-stage
    bootstrap (pairs, then the raters inside each drawn pair) changes the target itself in
    every resample, so here ``y`` has one row per resample. With ``S`` the sign matrices and
    ``W = w w'`` the pair weights of resample ``b``:

    - ``tau_b = sum(Sx * Sy * W) / sqrt(sum(|Sx| * W) * sum(|Sy| * W))`` (the same identity as
      :func:`rank_correlations_batch`: ``sum(|S| * W)`` counts the weighted untied pairs).
    - The weighted average rank of point ``i`` is ``(sum(w) + 1) / 2 + (S w)_i / 2``, so the
      centred ranks are ``S w / 2`` and Spearman is their ``w``-weighted Pearson correlation.

    A missing metric value (NaN) gets weight 0 for that metric, which drops it pairwise as
    ``nan_policy='omit'`` would. Cost O(B n^2 K) in a few stacked BLAS calls per chunk of
    resamples (bounded by :data:`CHUNK_ELEMENTS`).

    Args:
        x: ``(K, n)`` or ``(n,)`` oriented values; NaN marks a missing value.
        y: ``(B, n)`` oriented target of each resample; must be finite wherever the
            resample's weight is positive.
        weights: ``(B, n)`` resample multiplicities.
        kendall: Compute Kendall tau-b.
        spearman: Compute Spearman's rho.

    Returns:
        ``(tau, rho)``, each ``(B, K)`` (``None`` when not requested); NaN where a resample is
        constant in x or y.
    """
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 2:
        raise ValueError(f"weights must be (B, n), got shape {w.shape}")
    n_res, n = w.shape
    ys = np.asarray(y, dtype=np.float64)
    if ys.shape != (n_res, n):
        raise ValueError(f"y must have shape ({n_res}, {n}), got {ys.shape}")
    if np.any(w < 0):
        raise ValueError("weights must be non-negative resample counts")
    if np.any(~np.isfinite(ys) & (w > 0)):
        raise ValueError("y must be finite wherever a resample draws the point")
    xs = _as_2d(x, n, "x")
    k_metrics = xs.shape[0]
    tau = np.full((n_res, k_metrics), np.nan) if kendall else None
    rho = np.full((n_res, k_metrics), np.nan) if spearman else None
    ys = np.where(np.isfinite(ys), ys, 0.0)
    x_ok = np.isfinite(xs)
    groups: dict[bytes, list[int]] = {}
    for k in range(k_metrics):
        if x_ok[k].sum() >= 2:
            groups.setdefault(x_ok[k].tobytes(), []).append(k)
    sx_all = {k: _sign_matrix(xs[k]) for ks in groups.values() for k in ks}
    chunk = max(1, int(CHUNK_ELEMENTS // (3 * n * n)))
    # As in rank_correlations_batch: integer multiplicities keep every product below 2**24
    # an exact integer, so float32 BLAS is exact and about twice as fast.
    exact32 = float(w.sum(axis=1).max(initial=0.0)) < 2**12 and bool(np.all(w == np.round(w)))
    mm_dtype = np.float32 if exact32 else np.float64
    prepared = []
    for key, ks in groups.items():
        sx = np.stack([sx_all[k] for k in ks]).astype(mm_dtype)  # (G, n, n)
        sx_flat = sx.reshape(len(ks), n * n)
        prepared.append((np.frombuffer(key, dtype=bool), ks, sx, sx_flat, np.abs(sx_flat)))
    for start in range(0, n_res, chunk):
        sl = slice(start, min(start + chunk, n_res))
        # Comparisons, not differences: no (C, n, n) float64 temporary, and ties stay exact.
        gt = ys[sl, :, None] > ys[sl, None, :]
        sy = gt.astype(mm_dtype)
        sy -= gt.transpose(0, 2, 1)  # sign(y_i - y_j), (C, n, n)
        for valid, ks, sx, sx_flat, ax_flat in prepared:
            wg = (w[sl] * valid).astype(mm_dtype)  # a missing metric value weighs nothing
            with np.errstate(invalid="ignore", divide="ignore"):
                if tau is not None:
                    ww = wg[:, :, None] * wg[:, None, :]
                    wsy = ww * sy
                    # Sums of at most sum(w)^2 < 2**24 integers: exact in float32.
                    num = (wsy.reshape(-1, n * n) @ sx_flat.T).astype(np.float64)  # (C, G)
                    untied_x = (ww.reshape(-1, n * n) @ ax_flat.T).astype(np.float64)
                    np.abs(wsy, out=wsy)
                    untied_y = wsy.reshape(-1, n * n).sum(axis=1, dtype=np.float64)
                    denom = np.sqrt(untied_x * untied_y[:, None])
                    val = np.where(denom > 0, num / np.where(denom > 0, denom, 1.0), np.nan)
                    tau[sl, ks] = np.clip(val, -1.0, 1.0)
                if rho is not None:
                    w64 = wg.astype(np.float64)
                    dy = np.matmul(sy, wg[:, :, None])[:, :, 0].astype(np.float64)  # 2 x rank
                    dx = (sx.reshape(len(ks) * n, n) @ wg.T).reshape(len(ks), n, -1)
                    dx = dx.transpose(2, 0, 1).astype(np.float64)  # (C, G, n)
                    cov = np.einsum("cgi,ci,ci->cg", dx, dy, w64)
                    vx = np.einsum("cgi,cgi,ci->cg", dx, dx, w64)
                    vy = np.einsum("ci,ci,ci->c", dy, dy, w64)
                    denom = np.sqrt(vx * vy[:, None])
                    val = np.where(denom > 0, cov / np.where(denom > 0, denom, 1.0), np.nan)
                    rho[sl, ks] = np.clip(val, -1.0, 1.0)
    return tau, rho


def kendall_tau_b_batch(
    x: ArrayLike, y: ArrayLike, weights: ArrayLike | None = None
) -> NDArray[np.float64]:
    """Kendall tau-b, ``(B, K)``; see :func:`rank_correlations_batch`.

    Args:
        x: ``(K, n)`` or ``(n,)`` oriented metric values.
        y: ``(n,)`` oriented target.
        weights: ``(B, n)`` resample multiplicities or ``None``.
    """
    tau, _ = rank_correlations_batch(x, y, weights, kendall=True, spearman=False)
    assert tau is not None
    return tau


def spearman_batch(
    x: ArrayLike, y: ArrayLike, weights: ArrayLike | None = None
) -> NDArray[np.float64]:
    """Spearman's rho, ``(B, K)``; see :func:`rank_correlations_batch`.

    Args:
        x: ``(K, n)`` or ``(n,)`` oriented metric values.
        y: ``(n,)`` oriented target.
        weights: ``(B, n)`` resample multiplicities or ``None``.
    """
    _, rho = rank_correlations_batch(x, y, weights, kendall=False, spearman=True)
    assert rho is not None
    return rho


def kendall_tau_b(x: ArrayLike, y: ArrayLike) -> float:
    """Kendall tau-b of two samples (NaN pairs omitted), as ``scipy.stats.kendalltau``.

    Args:
        x: Values of the first variable.
        y: Values of the second variable, aligned with ``x``.
    """
    xv = np.asarray(x, dtype=np.float64)
    return float(kendall_tau_b_batch(xv, y)[0, 0])


def spearman(x: ArrayLike, y: ArrayLike) -> float:
    """Spearman's rho with average ranks for ties (NaN pairs omitted), as ``spearmanr``.

    Args:
        x: Values of the first variable.
        y: Values of the second variable, aligned with ``x``.
    """
    xv = np.asarray(x, dtype=np.float64)
    return float(spearman_batch(xv, y)[0, 0])


def to_json_safe(obj: Any) -> Any:  # noqa: ANN401 - any JSON-like structure
    """Recursively turn numpy values into Python ones and non-finite floats into ``None``.

    The one JSON form of every analysis result (correlate's report, the leaderboard).

    Args:
        obj: Nested mappings, lists, tuples, numpy arrays and scalars.
    """
    if isinstance(obj, Mapping):
        return {str(k): to_json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_json_safe(obj.tolist())
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        value = float(obj)
        return value if math.isfinite(value) else None
    return obj
