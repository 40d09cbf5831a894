"""Percentile bootstrap of backend.analysis.bootstrap against a plain scipy loop."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from radconcord.backend.analysis.bootstrap import (
    bootstrap_correlations,
    bootstrap_many,
    draw_resamples,
    percentile_interval,
)


def _loop(x, y, rows):
    taus, rhos = [], []
    for row in rows:
        xs, ys = x[row], y[row]
        m = np.isfinite(xs) & np.isfinite(ys)
        taus.append(stats.kendalltau(xs[m], ys[m]).statistic)
        rhos.append(stats.spearmanr(xs[m], ys[m]).statistic)
    return np.array(taus), np.array(rhos)


def _q(values):
    values = values[np.isfinite(values)]
    return np.quantile(values, [0.025, 0.975])


@pytest.fixture
def data():
    rng = np.random.default_rng(2024)
    n = 40
    y = -rng.integers(0, 6, n).astype(float)
    xs = np.stack([np.round(y + rng.normal(size=n), 1), rng.normal(size=n)])
    xs[1, 3] = np.nan
    return xs, y


def test_percentile_ci_matches_plain_loop_with_same_draws(data):
    """Reference: a Python loop of scipy.stats.kendalltau/spearmanr over the resamples drawn by
    numpy default_rng(seed).integers(0, n, (B, n)), then numpy.quantile at 2.5/97.5 %;
    abs tolerance 1e-12."""
    xs, y = data
    n, b, seed = y.size, 300, 17
    res = bootstrap_correlations(xs, y, resamples=b, seed=seed)
    rows = np.random.default_rng(seed).integers(0, n, size=(b, n))
    for k in range(2):
        taus, rhos = _loop(xs[k], y, rows)
        assert res.kendall_ci[k] == pytest.approx(_q(taus), abs=1e-12)
        assert res.spearman_ci[k] == pytest.approx(_q(rhos), abs=1e-12)
        m = np.isfinite(xs[k])
        assert res.kendall[k] == pytest.approx(stats.kendalltau(xs[k][m], y[m]).statistic)
        assert res.n[k] == m.sum()
    assert (res.resamples, res.seed) == (b, seed)


def test_cluster_bootstrap_matches_plain_loop(data):
    """Cluster bootstrap (whole clusters drawn) vs a scipy loop over the expanded pair indices
    of the same draws (numpy default_rng(seed) over clusters); abs tolerance 1e-12."""
    xs, y = data
    clusters = np.repeat(np.arange(10), 4)[::-1]  # labels need not be sorted
    draws = draw_resamples(y.size, 200, seed=5, clusters=clusters)
    assert np.array_equal(draws.indices,
                          np.random.default_rng(5).integers(0, 10, size=(200, 10)))
    res = bootstrap_correlations(xs, y, draws=draws)
    rows = [draws.pair_indices(b) for b in range(200)]
    assert all(r.size == 40 for r in rows)  # equal cluster sizes
    taus, rhos = _loop(xs[0], y, rows)
    assert res.kendall_ci[0] == pytest.approx(_q(taus), abs=1e-12)
    assert res.spearman_ci[0] == pytest.approx(_q(rhos), abs=1e-12)


def test_seeded_and_reproducible(data):
    xs, y = data
    a = bootstrap_correlations(xs, y, resamples=100, seed=1)
    b = bootstrap_correlations(xs, y, resamples=100, seed=1)
    c = bootstrap_correlations(xs, y, resamples=100, seed=2)
    assert np.array_equal(a.kendall_ci, b.kendall_ci)
    assert not np.array_equal(a.kendall_ci, c.kendall_ci)


@pytest.mark.filterwarnings("ignore::scipy.stats.ConstantInputWarning")
def test_degenerate_resamples_are_counted_and_skipped():
    """With 3 points many resamples are constant: tau undefined there (scipy gives NaN); they
    are left out of the quantiles, as the loop reference does with np.isfinite."""
    x = np.array([1.0, 2.0, 3.0])
    y = np.array([1.0, 3.0, 2.0])
    res = bootstrap_correlations(x, y, resamples=200, seed=0)
    rows = np.random.default_rng(0).integers(0, 3, size=(200, 3))
    taus, _ = _loop(x, y, rows)
    assert res.n_degenerate[0] == np.isnan(taus).sum() > 0
    assert res.kendall_ci[0] == pytest.approx(_q(taus), abs=1e-12)


def test_no_resamples_gives_nan_interval(data):
    xs, y = data
    res = bootstrap_correlations(xs, y, resamples=0)
    assert np.all(np.isnan(res.kendall_ci)) and res.resamples == 0
    assert np.isfinite(res.kendall).all()


def test_percentile_interval_matches_numpy_quantile():
    """Reference: numpy.quantile(linear) at (0.05, 0.95) for level 0.9; exact."""
    s = np.random.default_rng(0).normal(size=(500, 3))
    s[0, 1] = np.nan
    out = percentile_interval(s, 0.9)
    assert out[0] == pytest.approx(np.quantile(s[:, 0], [0.05, 0.95]))
    assert out[1] == pytest.approx(np.quantile(s[1:, 1], [0.05, 0.95]))
    with pytest.raises(ValueError):
        percentile_interval(s, 1.5)


def test_bad_arguments():
    with pytest.raises(ValueError):
        draw_resamples(5, 0)
    with pytest.raises(ValueError):
        draw_resamples(5, 10, clusters=[1, 2])


def test_many_targets_equal_separate_calls(data):
    """bootstrap_many on (T, n) targets equals T separate bootstrap_correlations calls with
    the same seed (exact: same draws, same arithmetic up to 1e-12)."""
    xs, y = data
    rng = np.random.default_rng(8)
    targets = np.stack([y, -rng.integers(0, 3, y.size).astype(float), rng.normal(size=y.size)])
    targets[2, 0] = np.nan
    many = bootstrap_many(xs, targets, resamples=150, seed=4)
    for t in range(3):
        one = bootstrap_correlations(xs, targets[t], resamples=150, seed=4)
        assert many[t].kendall == pytest.approx(one.kendall, abs=1e-12)
        assert many[t].kendall_ci == pytest.approx(one.kendall_ci, abs=1e-12)
        assert many[t].spearman_ci == pytest.approx(one.spearman_ci, abs=1e-12)
        assert many[t].n.tolist() == one.n.tolist()
    m = np.isfinite(xs[0]) & np.isfinite(targets[2])
    assert many[2].kendall[0] == pytest.approx(
        stats.kendalltau(xs[0][m], targets[2][m]).statistic, abs=1e-12)
