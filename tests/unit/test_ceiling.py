"""The human ceiling (backend.analysis.ceiling) against scipy.stats.kendalltau / spearmanr.

Every expected value is recomputed here with a plain loop over raters and resamples; the
resamples are the same ``draw_resamples`` draws (their indices are the documented
``default_rng(seed).integers`` draws, checked in test_bootstrap.py).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import stats

from radconcord.backend.analysis.bootstrap import draw_resamples
from radconcord.backend.analysis.ceiling import (
    human_ceiling,
    others_mean,
    pct_of_ceiling,
    resampled_rater_means,
)

RATERS = ("a", "b", "c", "d")


def _errors(seed: int = 7, n: int = 18) -> np.ndarray:
    """Four raters, Poisson counts driven by a shared pair difficulty, some pairs missing."""
    rng = np.random.default_rng(seed)
    quality = rng.normal(size=n)
    e = rng.poisson(np.exp(0.7 * quality)[None, :] * np.ones((4, 1))).astype(float)
    e[3, ::3] = np.nan  # rater d skipped every third pair
    e[2, 5] = np.nan
    e[[0, 1, 3], 9] = np.nan  # pair 9: only rater c, so c has no "others" there
    return e


def _loo(e: np.ndarray, r: int) -> tuple[np.ndarray, np.ndarray]:
    """Rater r's counts and the others' nanmean, on the pairs both have (plain numpy)."""
    others = np.delete(e, r, axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a pair nobody else counted
        om = np.nanmean(others, axis=0)
    shared = np.isfinite(e[r]) & np.isfinite(om)
    return e[r, shared], om[shared]


def test_point_values_match_scipy_per_rater_and_mean():
    """per_rater = kendalltau(rater, mean of the others) over shared pairs; the ceiling is
    the mean of those (the issue's definition); Spearman and per-category likewise."""
    e = _errors()
    cat = np.where(np.isfinite(e), np.floor(e / 2), np.nan)
    res = human_ceiling(e, RATERS, category_errors={"1": cat}, draws=None)
    assert res is not None
    taus, rhos = [], []
    for r, name in enumerate(RATERS):
        x, y = _loo(e, r)
        tau = stats.kendalltau(x, y).statistic
        rho = stats.spearmanr(x, y).statistic
        assert res.per_rater_kendall[r] == pytest.approx(tau, abs=1e-12), name
        assert res.per_rater_spearman[r] == pytest.approx(rho, abs=1e-12), name
        assert res.n_shared[r] == x.size
        taus.append(tau)
        rhos.append(rho)
    assert res.n_shared[2] == 18 - 2  # pair 5 missing, pair 9 has no other rater
    assert res.kendall == pytest.approx(np.mean(taus), abs=1e-12)
    assert res.spearman == pytest.approx(np.mean(rhos), abs=1e-12)
    cat_taus = [stats.kendalltau(*_loo(cat, r)).statistic for r in range(4)]
    assert res.per_category_kendall["1"] == pytest.approx(np.mean(cat_taus), abs=1e-12)
    out = res.as_json()
    assert set(out) >= {"kendall_tau_b", "kendall_ci95", "spearman", "spearman_ci95",
                        "per_rater", "per_rater_spearman", "per_category", "n_raters", "unit"}
    assert out["per_rater"]["b"] == pytest.approx(taus[1])
    assert (out["n_raters"], out["unit"], out["resamples"]) == (4, "pair", 0)
    assert np.isnan(out["kendall_ci95"]).all()


@pytest.mark.parametrize("unit", ["pair", "case"])
def test_bootstrap_interval_matches_plain_loop(unit):
    """CI = quantiles of the per-resample mean over raters of scipy's tau (1e-12)."""
    e = _errors(seed=3, n=20)
    clusters = np.arange(20) // 2 if unit == "case" else None
    draws = draw_resamples(20, 150, seed=5, clusters=clusters)
    res = human_ceiling(e, RATERS, draws=draws, unit=unit, seed=5)
    assert res is not None and res.resamples == 150 and res.unit == unit
    reps = []
    for b in range(draws.count):
        idx = draws.pair_indices(b)
        eb = e[:, idx]
        reps.append(np.mean([stats.kendalltau(*_loo(eb, r)).statistic for r in range(4)]))
    reps = np.array(reps)
    np.testing.assert_allclose(res.kendall_replicates, reps, atol=1e-12)
    lo, hi = np.quantile(reps[np.isfinite(reps)], [0.025, 0.975])
    assert res.kendall_ci == pytest.approx([lo, hi], abs=1e-12)
    assert lo <= res.kendall <= hi


def test_resampled_rater_means_is_the_documented_draw():
    """Per pair with m counted raters: m draws floor(u * m) among them (u the generator's
    uniforms, shape (B, R, n)), averaged; a pair with one rater keeps its value."""
    e = _errors(seed=11, n=10)
    got = resampled_rater_means(e, 30, np.random.default_rng(9))
    u = np.random.default_rng(9).random((30, 4, 10))
    for b in range(30):
        for i in range(10):
            vals = e[:, i][np.isfinite(e[:, i])]
            m = vals.size
            picks = [vals[int(np.floor(u[b, k, i] * m))] for k in range(m)]
            assert got[b, i] == pytest.approx(np.mean(picks), abs=1e-12)
    assert np.all(got[:, 9] == e[2, 9])
    loo = resampled_rater_means(e, 5, np.random.default_rng(0), exclude=2)
    assert np.isnan(loo[:, 9]).all()  # only rater c counted pair 9


def test_rater_pair_unit_matches_plain_loop():
    """rater_pair: pairs drawn as for 'pair', the others' mean re-drawn inside each pair
    with default_rng((seed, 1)) rater by rater; tau per resample vs scipy (1e-12)."""
    e = _errors(seed=4, n=16)
    draws = draw_resamples(16, 60, seed=2)
    res = human_ceiling(e, RATERS, draws=draws, unit="rater_pair", seed=2)
    assert res is not None
    rng = np.random.default_rng((2, 1))
    per_rater = np.zeros((60, 4))
    for r in range(4):
        shared = np.isfinite(e[r]) & np.isfinite(others_mean(e, r))
        y_b = resampled_rater_means(e[:, shared], 60, rng, exclude=r)
        for b in range(60):
            counts = draws.weights[b, shared].astype(int)
            x = np.repeat(e[r, shared], counts)
            y = np.repeat(y_b[b], counts)
            per_rater[b, r] = stats.kendalltau(x, y).statistic
    np.testing.assert_allclose(res.kendall_replicates, per_rater.mean(axis=1), atol=1e-12)
    # The point value does not depend on the unit.
    plain = human_ceiling(e, RATERS)
    assert plain is not None and res.kendall == pytest.approx(plain.kendall, abs=1e-15)


def test_fewer_than_three_raters_gives_none_and_bad_input_is_named():
    e = _errors()[:2]
    assert human_ceiling(e, RATERS[:2]) is None
    with pytest.raises(ValueError, match="unit must be one of"):
        human_ceiling(_errors(), RATERS, unit="rater")
    with pytest.raises(ValueError, match=r"errors must be \(3, n\)"):
        human_ceiling(_errors(), RATERS[:3])


def test_pct_of_ceiling():
    assert pct_of_ceiling(0.3, 0.6) == pytest.approx(0.5)
    # A metric ranking pairs against the raters is below zero, not half-way to the ceiling.
    assert pct_of_ceiling(-0.3, 0.6) == pytest.approx(-0.5)
    assert pct_of_ceiling(0.3, None) is None
    assert pct_of_ceiling(0.3, 0.0) is None
    assert pct_of_ceiling(None, 0.5) is None
