"""Failure modes: Benjamini-Hochberg and one-sided Welch t-tests between sources."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from radconcord.backend.analysis.failure_modes import (
    benjamini_hochberg,
    failure_mode_tests,
    source_means,
)


def test_bh_hand_worked():
    """Hand-worked: p = (0.01, 0.04, 0.03, 0.005), m = 4; sorted 0.005, 0.01, 0.03, 0.04 scale
    to 0.02, 0.02, 0.04, 0.04 (step-up minimum keeps them); at FDR 0.03 only the first two."""
    adj, rej = benjamini_hochberg([0.01, 0.04, 0.03, 0.005], fdr=0.03)
    assert adj == pytest.approx([0.02, 0.04, 0.04, 0.02], abs=1e-15)
    assert rej.tolist() == [True, False, False, True]


@pytest.mark.parametrize("seed", [0, 1])
def test_bh_matches_scipy_false_discovery_control(seed):
    """Reference: scipy.stats.false_discovery_control(method='bh'); abs 1e-12."""
    rng = np.random.default_rng(seed)
    p = np.concatenate([rng.uniform(size=40), rng.uniform(0, 0.01, size=10)])
    adj, rej = benjamini_hochberg(p, fdr=0.1)
    ref = stats.false_discovery_control(p, method="bh")
    assert adj == pytest.approx(ref, abs=1e-12)
    assert rej.tolist() == (ref <= 0.1).tolist()


def test_bh_leaves_nan_out_of_the_family():
    """NaN p-values stay NaN/unrejected and do not count in m (scipy on the finite ones)."""
    p = np.array([0.01, np.nan, 0.02, 0.5])
    adj, rej = benjamini_hochberg(p)
    ref = stats.false_discovery_control(p[[0, 2, 3]])
    assert adj[[0, 2, 3]] == pytest.approx(ref)
    assert np.isnan(adj[1]) and not rej[1]
    with pytest.raises(ValueError):
        benjamini_hochberg([0.5], fdr=0)
    with pytest.raises(ValueError):
        benjamini_hochberg([1.5])


def _study():
    rng = np.random.default_rng(9)
    sources = np.array(["a"] * 30 + ["b"] * 25 + ["c"] * 20)
    lam = np.where(sources == "b", 2.0, np.where(sources == "c", 0.5, 1.0))
    cat1 = rng.poisson(lam).astype(float)
    cat2 = rng.poisson(1.0, sources.size).astype(float)
    cat1[3] = np.nan  # an unrated pair
    return {"1": cat1, "2": cat2, "total": cat1 + cat2}, sources


def test_welch_one_sided_tests_match_scipy():
    """Reference: scipy.stats.ttest_ind(equal_var=False, alternative='greater') per category
    and ordered source pair, then false_discovery_control over all of them; rel 1e-12."""
    per_cat, sources = _study()
    out = failure_mode_tests(per_cat, sources, fdr=0.05)
    assert out["sources"] == ["a", "b", "c"] and out["test"] == "welch"
    assert len(out["tests"]) == 3 * 6
    raw = []
    for t in out["tests"]:
        v = per_cat[t["category"]]
        ga = v[(sources == t["greater"]) & np.isfinite(v)]
        gb = v[(sources == t["less"]) & np.isfinite(v)]
        ref = stats.ttest_ind(ga, gb, equal_var=False, alternative="greater")
        assert t["p"] == pytest.approx(ref.pvalue, rel=1e-12)
        assert t["t"] == pytest.approx(ref.statistic, rel=1e-12)
        assert t["mean_greater"] == pytest.approx(ga.mean())
        raw.append(ref.pvalue)
    ref_adj = stats.false_discovery_control(raw)
    assert [t["p_adjusted"] for t in out["tests"]] == pytest.approx(ref_adj, abs=1e-12)
    # The planted effect: b makes more category-1 errors than c.
    b_over_c = next(t for t in out["tests"]
                    if (t["category"], t["greater"], t["less"]) == ("1", "b", "c"))
    assert b_over_c["reject"]


def test_pooled_variant_matches_scipy():
    """Reference: scipy.stats.ttest_ind(equal_var=True, alternative='greater'); rel 1e-12."""
    per_cat, sources = _study()
    out = failure_mode_tests(per_cat, sources, equal_var=True)
    t = out["tests"][0]
    v = per_cat[t["category"]]
    ref = stats.ttest_ind(v[(sources == t["greater"]) & np.isfinite(v)],
                          v[(sources == t["less"]) & np.isfinite(v)], alternative="greater")
    assert out["test"] == "pooled" and t["p"] == pytest.approx(ref.pvalue, rel=1e-12)


def test_source_means_ignore_unrated_pairs():
    per_cat, sources = _study()
    means = source_means(per_cat, sources)
    v = per_cat["1"]
    assert means["a"]["1"] == pytest.approx(np.nanmean(v[sources == "a"]))
    assert means["a"]["n"] == 30 and means["c"]["n"] == 20


def test_constant_groups_give_undefined_tests_not_crashes():
    per_cat = {"1": np.zeros(6)}
    out = failure_mode_tests(per_cat, ["a", "a", "a", "b", "b", "b"])
    assert all(np.isnan(t["p"]) and not t["reject"] for t in out["tests"])
