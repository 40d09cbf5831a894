"""Rank correlations of backend.analysis.stats against scipy.stats."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from radconcord.backend.analysis.stats import (
    counts_from_indices,
    kendall_tau_b,
    kendall_tau_b_batch,
    orient,
    rank_correlations_batch,
    spearman,
    spearman_batch,
)


def _datasets():
    rng = np.random.default_rng(7)
    y_int = rng.integers(0, 6, 60).astype(float)
    yield "heavy ties", rng.integers(0, 4, 60).astype(float), y_int
    yield "continuous", rng.normal(size=60), rng.normal(size=60)
    yield "rounded", np.round(rng.normal(size=80) + 0.2 * rng.integers(0, 5, 80), 1), \
        rng.integers(0, 5, 80).astype(float)
    yield "tiny", np.array([1.0, 2.0, 2.0, 3.0]), np.array([1.0, 1.0, 2.0, 2.0])
    yield "reversed", np.arange(10.0), -np.arange(10.0)


@pytest.mark.parametrize("name,x,y", list(_datasets()), ids=[d[0] for d in _datasets()])
def test_tau_b_and_spearman_match_scipy(name, x, y):
    """Reference: scipy.stats.kendalltau (tau-b, ties) and scipy.stats.spearmanr; abs 1e-12."""
    assert kendall_tau_b(x, y) == pytest.approx(stats.kendalltau(x, y).statistic, abs=1e-12)
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)


def test_nan_pairs_are_omitted_like_scipy():
    """Reference: scipy.stats.kendalltau / spearmanr on the NaN-free pairs; abs 1e-12."""
    rng = np.random.default_rng(3)
    x = rng.integers(0, 5, 50).astype(float)
    y = rng.integers(0, 5, 50).astype(float)
    x[[1, 7, 9]] = np.nan
    y[[2, 7]] = np.nan
    m = np.isfinite(x) & np.isfinite(y)
    assert kendall_tau_b(x, y) == pytest.approx(stats.kendalltau(x[m], y[m]).statistic,
                                                 abs=1e-12)
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x[m], y[m]).statistic, abs=1e-12)


def test_constant_input_is_nan_like_scipy():
    """scipy returns NaN for a constant sample; so do we (no crash, no fake 0)."""
    x = np.ones(10)
    y = np.arange(10.0)
    assert np.isnan(stats.kendalltau(x, y).statistic)
    assert np.isnan(kendall_tau_b(x, y))
    assert np.isnan(spearman(x, y))
    assert np.isnan(kendall_tau_b([1.0], [2.0]))


def test_batch_over_resample_indices_matches_scipy_loop():
    """Every resample of a (B=40, K=3) batch vs scipy on x[idx], y[idx]; abs 1e-12."""
    rng = np.random.default_rng(11)
    n = 50
    y = rng.integers(0, 7, n).astype(float)
    xs = np.stack([
        np.round(rng.normal(size=n) - 0.3 * y, 1),
        rng.integers(0, 3, n).astype(float),
        rng.normal(size=n),
    ])
    xs[2, [4, 5]] = np.nan
    idx = rng.integers(0, n, size=(40, n))
    tau, rho = rank_correlations_batch(xs, y, counts_from_indices(idx, n))
    for b in range(idx.shape[0]):
        for k in range(3):
            xb, yb = xs[k, idx[b]], y[idx[b]]
            m = np.isfinite(xb)
            assert tau[b, k] == pytest.approx(stats.kendalltau(xb[m], yb[m]).statistic,
                                              abs=1e-12)
            assert rho[b, k] == pytest.approx(stats.spearmanr(xb[m], yb[m]).statistic,
                                              abs=1e-12)


def test_fractional_weights_use_the_float64_path():
    """Non-integer weights (exactness of float32 not guaranteed) give the same answers as
    integer weights scaled by the same factor; tau-b is scale-invariant in the weights."""
    rng = np.random.default_rng(5)
    n = 30
    x, y = rng.normal(size=n), rng.integers(0, 4, n).astype(float)
    w = rng.integers(0, 3, size=(4, n)).astype(float)
    assert kendall_tau_b_batch(x, y, w * 0.5) == pytest.approx(kendall_tau_b_batch(x, y, w),
                                                              abs=1e-12)
    assert spearman_batch(x, y, w * 0.5) == pytest.approx(spearman_batch(x, y, w), abs=1e-12)


def test_counts_from_indices():
    idx = np.array([[0, 0, 2], [1, 2, 2]])
    assert counts_from_indices(idx, 3).tolist() == [[2, 0, 1], [0, 1, 2]]
    with pytest.raises(ValueError):
        counts_from_indices(np.array([[3]]), 3)


def test_orientation_makes_agreement_positive():
    """An error-predicting metric (lower is better) that tracks errors exactly gets tau = 1
    once oriented and compared with negated errors; a quality score gets tau = 1 unflipped."""
    errors = np.array([0.0, 1.0, 3.0, 2.0, 5.0])
    predicted_errors = errors * 2 + 1
    quality = -errors
    assert kendall_tau_b(orient(predicted_errors, False), -errors) == pytest.approx(1.0)
    assert kendall_tau_b(orient(quality, True), -errors) == pytest.approx(1.0)
    assert kendall_tau_b(orient(predicted_errors, True), -errors) == pytest.approx(-1.0)


def test_shape_errors():
    with pytest.raises(ValueError):
        rank_correlations_batch(np.zeros((2, 3)), np.zeros(4))
    with pytest.raises(ValueError):
        rank_correlations_batch(np.zeros(3), np.zeros(3), -np.ones((1, 3)))


def test_chunked_metrics_and_mixed_missing_patterns(monkeypatch):
    """Force one metric per chunk and mix NaN patterns across metrics and targets: results
    equal scipy.stats.kendalltau / spearmanr per resample (abs 1e-12)."""
    import radconcord.backend.analysis.stats as st

    monkeypatch.setattr(st, "CHUNK_ELEMENTS", 1)
    rng = np.random.default_rng(21)
    n = 30
    ys = rng.integers(0, 4, size=(2, n)).astype(float)
    ys[1, 0] = np.nan
    xs = rng.normal(size=(4, n))
    xs[1, 5] = np.nan
    xs[3, :] = np.round(xs[3, :])
    idx = rng.integers(0, n, size=(6, n))
    tau, rho = rank_correlations_batch(xs, ys, counts_from_indices(idx, n))
    assert tau.shape == rho.shape == (2, 6, 4)
    for t in range(2):
        for b in range(6):
            for k in range(4):
                xb, yb = xs[k, idx[b]], ys[t, idx[b]]
                m = np.isfinite(xb) & np.isfinite(yb)
                assert tau[t, b, k] == pytest.approx(
                    stats.kendalltau(xb[m], yb[m]).statistic, abs=1e-12)
                assert rho[t, b, k] == pytest.approx(
                    stats.spearmanr(xb[m], yb[m]).statistic, abs=1e-12)
