"""Paired comparisons of metrics (backend.analysis.paired_tests) and the varying-target bootstrap
(backend.analysis.stats.rank_correlations_varying_target) against plain loops and hand
computations: scipy.stats.kendalltau / spearmanr per resample, Holm and Benjamini-Hochberg
written out by hand, Williams' T2 from its formula (Steiger 1980).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from radconcord.backend.analysis.bootstrap import draw_resamples
from radconcord.backend.analysis.paired_tests import (
    adjust_pvalues,
    bootstrap_pvalues,
    holm,
    paired_tests_section,
    williams_test,
)
from radconcord.backend.analysis.stats import (
    rank_correlations_batch,
    rank_correlations_varying_target,
)


def _data(n: int = 30, k: int = 4, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Oriented metrics of decreasing quality with ties and a missing value; integer target."""
    rng = np.random.default_rng(seed)
    errors = rng.poisson(2.0, n).astype(float)
    x = np.round(-errors[None, :] * np.linspace(1.0, 0.2, k)[:, None]
                 + rng.normal(size=(k, n)), 1)
    x[2, 4] = np.nan
    return x, -errors


def test_varying_target_matches_scipy_loop():
    """tau-b and rho with a different target in each resample, NaN dropped (1e-12)."""
    x, _ = _data(n=25, k=3)
    rng = np.random.default_rng(0)
    y = rng.poisson(2.0, (40, 25)).astype(float)
    draws = draw_resamples(25, 40, seed=3)
    tau, rho = rank_correlations_varying_target(x, y, draws.weights)
    for b in range(40):
        idx = draws.pair_indices(b)
        for k in range(3):
            xs, ys = x[k, idx], y[b, idx]
            ok = np.isfinite(xs)
            assert tau[b, k] == pytest.approx(stats.kendalltau(xs[ok], ys[ok]).statistic,
                                              abs=1e-12)
            assert rho[b, k] == pytest.approx(stats.spearmanr(xs[ok], ys[ok]).statistic,
                                              abs=1e-12)
    # With one target repeated it equals the shared-target code exactly.
    y0 = y[0]
    t1, r1 = rank_correlations_batch(x, y0, draws.weights)
    t2, r2 = rank_correlations_varying_target(x, np.tile(y0, (40, 1)), draws.weights)
    np.testing.assert_allclose(t2, t1, atol=1e-12)
    np.testing.assert_allclose(r2, r1, atol=1e-12)
    with pytest.raises(ValueError, match="finite wherever"):
        bad = y.copy()
        bad[0, int(np.flatnonzero(draws.weights[0])[0])] = np.nan
        rank_correlations_varying_target(x, bad, draws.weights)


def test_pairwise_ci_and_p_match_plain_loop():
    """Same resamples for both metrics: d_b = tau_b(A) - tau_b(B) from scipy per resample;
    CI = np.quantile of the finite d_b; p = min(1, 2 min(1 + #(d<=0), 1 + #(d>=0)) / (B+1));
    Holm over the 6 pairs (hand); tau_diff = scipy tau(A) - tau(B)."""
    x, y = _data()
    keys = ["m0", "m1", "m2", "m3"]
    draws = draw_resamples(30, 300, seed=4)
    tau0 = np.array([stats.kendalltau(x[k][np.isfinite(x[k])], y[np.isfinite(x[k])]).statistic
                     for k in range(4)])
    reps, _ = rank_correlations_batch(x, y, draws.weights, spearman=False)
    section = paired_tests_section(keys, tau0, reps, x, y, unit="pair", correction="holm")
    assert (section["unit"], section["correction"], section["resamples"]) == ("pair", "holm", 300)
    assert list(section["pairs"]) == ["m0|m1", "m0|m2", "m0|m3", "m1|m2", "m1|m3", "m2|m3"]

    loop = np.empty((300, 4))
    for b in range(300):
        idx = draws.pair_indices(b)
        for k in range(4):
            xs, ys = x[k, idx], y[idx]
            ok = np.isfinite(xs)
            loop[b, k] = stats.kendalltau(xs[ok], ys[ok]).statistic
    raw = []
    for name, entry in section["pairs"].items():
        a, b = (keys.index(s) for s in name.split("|"))
        d = loop[:, a] - loop[:, b]
        d = d[np.isfinite(d)]
        assert entry["tau_diff"] == pytest.approx(tau0[a] - tau0[b], abs=1e-12)
        assert entry["ci95"] == pytest.approx(list(np.quantile(d, [0.025, 0.975])), abs=1e-12)
        p = min(1.0, 2 * min(1 + np.sum(d <= 0), 1 + np.sum(d >= 0)) / (d.size + 1))
        assert entry["p"] == pytest.approx(p, abs=1e-15)
        raw.append(p)
    # Holm by hand: sorted p times (m - rank), running maximum, capped at 1.
    order = np.argsort(raw, kind="stable")
    adj = np.empty(6)
    running = 0.0
    for rank, q in enumerate(order):
        running = max(running, min(1.0, (6 - rank) * raw[q]))
        adj[q] = running
    got = [e["p_adjusted"] for e in section["pairs"].values()]
    assert got == pytest.approx(list(adj), abs=1e-15)
    # The best metric beats the worst clearly on this data.
    assert section["pairs"]["m0|m3"]["tau_diff"] > 0
    assert section["pairs"]["m0|m3"]["ci95"][0] > 0


def test_holm_and_bh_by_hand():
    p = [0.01, 0.04, 0.03, 0.005, np.nan]
    # Holm: sorted 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> running max 0.06.
    np.testing.assert_allclose(holm(p), [0.03, 0.06, 0.06, 0.02, np.nan])
    # BH: 0.005*4/1=0.02, 0.01*4/2=0.02, 0.03*4/3=0.04, 0.04*4/4=0.04; running min from top.
    np.testing.assert_allclose(adjust_pvalues(p, "bh"), [0.02, 0.04, 0.04, 0.02, np.nan])
    np.testing.assert_allclose(adjust_pvalues([0.6, 0.5], "holm"), [1.0, 1.0])
    with pytest.raises(ValueError, match="correction must be one of"):
        adjust_pvalues(p, "bonferroni")


def test_bootstrap_pvalue_by_hand():
    d = np.array([[-1.0], [0.5], [1.0], [2.0], [np.nan]])
    # 4 defined; #(d<=0) = 1, #(d>=0) = 3 -> p = 2 * (1 + 1) / (4 + 1) = 0.8.
    assert bootstrap_pvalues(d)[0] == pytest.approx(0.8)
    # All replicates positive: 2 * 1 / (B + 1).
    assert bootstrap_pvalues(np.ones((99, 1)))[0] == pytest.approx(0.02)
    assert np.isnan(bootstrap_pvalues(np.full((3, 1), np.nan))[0])


def test_williams_by_hand_and_on_spearman():
    """Williams' T2 from the formula (Steiger 1980) on given numbers, then on the Spearman
    correlations of a data set (scipy.stats.spearmanr on the complete rows)."""
    r12, r13, r23, n = 0.5, 0.3, 0.4, 50
    det = 1 - r12**2 - r13**2 - r23**2 + 2 * r12 * r13 * r23
    rbar = (r12 + r13) / 2
    t = (r12 - r13) * math.sqrt((n - 1) * (1 + r23)
                                / (2 * (n - 1) / (n - 3) * det + rbar**2 * (1 - r23) ** 3))
    p = 2 * stats.t.sf(abs(t), n - 3)
    got_t, got_p = williams_test(r12, r13, r23, n)
    assert float(got_t) == pytest.approx(t, rel=1e-12)
    assert float(got_p) == pytest.approx(p, rel=1e-12)
    assert np.isnan(williams_test(0.5, 0.3, 0.4, 3)[1])  # df = 0: does not apply

    x, y = _data(n=40, k=3, seed=8)
    section = paired_tests_section(["a", "b", "c"], np.zeros(3), None, x, y, unit="case",
                               correction="bh")
    entry = section["pairs"]["a|c"]  # c has the missing value: 39 complete rows
    ok = np.isfinite(x[0]) & np.isfinite(x[2])
    r_ya = stats.spearmanr(y[ok], x[0, ok]).statistic
    r_yc = stats.spearmanr(y[ok], x[2, ok]).statistic
    r_ac = stats.spearmanr(x[0, ok], x[2, ok]).statistic
    ref_t, ref_p = williams_test(r_ya, r_yc, r_ac, ok.sum())
    assert entry["williams_n"] == 39
    assert entry["williams_t"] == pytest.approx(float(ref_t), rel=1e-10)
    assert entry["williams_p"] == pytest.approx(float(ref_p), rel=1e-10)
    # Without resamples: no interval or bootstrap p, Williams still there.
    assert np.isnan(entry["p"]) and np.isnan(entry["ci95"]).all()
    assert section["resamples"] == 0
    assert section["williams_method"].startswith("Williams' T2")


def test_pairwise_bad_input_is_named():
    x, y = _data()
    with pytest.raises(ValueError, match="correction must be one of"):
        paired_tests_section(["a", "b", "c", "d"], np.zeros(4), None, x, y, unit="pair",
                         correction="fdr")
    with pytest.raises(ValueError, match="pairwise: expected tau"):
        paired_tests_section(["a", "b"], np.zeros(2), None, x, y, unit="pair")
