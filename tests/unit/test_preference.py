"""Pairwise preference statistics (backend/analysis/preference.py) against hand computations.

Every expected number is worked out in the comments from the small arrays written here; the
bootstrap interval is checked against a plain loop over the same ``default_rng(seed)`` draws.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from radconcord.backend.analysis import preference as pref

NAN = float("nan")


def test_preference_from_votes_plurality_and_split_is_tie():
    votes = [["A", "A", "B"], ["A", "B"], ["tie", "A", "tie"], [], [None], ["B"], ["A", "tie"]]
    got = pref.preference_from_votes(votes)
    # 2A vs 1B -> A; 1A 1B split -> tie; 2 ties beat 1 A -> tie; nothing -> NaN; 1B -> B;
    # 1A 1 tie split -> tie.
    np.testing.assert_array_equal(got, [1, 0, 0, NAN, NAN, -1, 0])


def test_preference_from_votes_names_a_bad_answer():
    with pytest.raises(ValueError, match="comparison 1: preference must be A, B or tie"):
        pref.preference_from_votes([["A"], ["left"]])


def test_preference_from_mean_ratings():
    got = pref.preference_from_ratings([4.0, 3.0, 2.5, NAN], [3.0, 3.0, 4.0, 1.0])
    np.testing.assert_array_equal(got, [1, 0, -1, NAN])


A_VALUES = [0.9, 0.2, 0.5, 0.4, 0.7, NAN]
B_VALUES = [0.1, 0.3, 0.5, 0.6, 0.1, 0.2]
PREFS = [1, 1, -1, 0, -1, 1]


def test_pairwise_agreement_by_hand():
    # comparison 0: metric A>B, raters A -> 1; 1: A<B, raters A -> 0; 2: metric tie -> 0.5;
    # 3: raters tie -> excluded; 4: metric A>B, raters B -> 0; 5: metric missing -> left out.
    res = pref.pairwise_agreement(A_VALUES, B_VALUES, PREFS, resamples=0)
    assert res.value == pytest.approx(1.5 / 4)
    assert (res.n_comparisons, res.n_ties_excluded, res.n_missing, res.n_metric_ties) == (
        4, 1, 1, 1)
    assert math.isnan(res.ci_low) and math.isnan(res.ci_high)
    # Lower is better: every decided comparison flips, the metric tie stays 0.5.
    low = pref.pairwise_agreement(A_VALUES, B_VALUES, PREFS, higher_is_better=False,
                                  resamples=0)
    assert low.value == pytest.approx(2.5 / 4)


def test_pairwise_agreement_interval_matches_a_plain_loop():
    res = pref.pairwise_agreement(A_VALUES, B_VALUES, PREFS, resamples=300, seed=7)
    kept = np.array([1.0, 0.0, 0.5, 0.0])  # the scored comparisons, in order
    idx = np.random.default_rng(7).integers(0, 4, size=(300, 4))
    means = [kept[row].mean() for row in idx]
    lo, hi = np.quantile(means, [0.025, 0.975])
    assert (res.ci_low, res.ci_high) == (pytest.approx(lo, abs=1e-12),
                                         pytest.approx(hi, abs=1e-12))
    assert (res.resamples, res.seed, res.level) == (300, 7, 0.95)


# References of the six comparisons above: the scored ones (0, 1, 2, 4) belong to "r1",
# "r1", "r2", "r3"; comparison 3 (raters' tie) and 5 (missing) are dropped with their labels.
CLUSTERS = ["r1", "r1", "r2", "r2", "r3", "r3"]


def test_clustered_interval_matches_a_plain_loop_over_references():
    """The references are drawn with replacement (np.unique order: r1, r2, r3), and a
    replicate is the mean score over the comparisons of the drawn references."""
    res = pref.pairwise_agreement(A_VALUES, B_VALUES, PREFS, resamples=300, seed=7,
                                  clusters=CLUSTERS)
    assert res.value == pytest.approx(1.5 / 4) and res.n_clusters == 3
    scores = {0: [1.0, 0.0], 1: [0.5], 2: [0.0]}  # r1, r2, r3
    idx = np.random.default_rng(7).integers(0, 3, size=(300, 3))
    means = [np.mean([x for u in row for x in scores[u]]) for row in idx]
    lo, hi = np.quantile(means, [0.025, 0.975])
    assert (res.ci_low, res.ci_high) == (pytest.approx(lo, abs=1e-12),
                                         pytest.approx(hi, abs=1e-12))


def test_one_comparison_per_reference_is_the_plain_bootstrap():
    plain = pref.pairwise_agreement(A_VALUES, B_VALUES, PREFS, resamples=300, seed=7)
    own = pref.pairwise_agreement(A_VALUES, B_VALUES, PREFS, resamples=300, seed=7,
                                  clusters=list(range(6)))
    assert (own.ci_low, own.ci_high, own.value) == (plain.ci_low, plain.ci_high, plain.value)
    assert plain.n_clusters == own.n_clusters == 4


def test_comparisons_that_share_a_reference_widen_the_interval():
    """Ten references, three comparisons each, scored alike within a reference (the three
    comparisons of one reference's candidates tend to agree): drawing comparisons as if
    independent gives an interval too narrow; drawing references does not."""
    rng = np.random.default_rng(0)
    per_ref = rng.integers(0, 2, size=10).astype(float)  # 1: the metric agrees on it
    prefs = np.ones(30)
    a = np.repeat(np.where(per_ref == 1, 1.0, 0.0), 3)
    b = np.full(30, 0.5)
    refs = np.repeat(np.arange(10), 3)
    naive = pref.pairwise_agreement(a, b, prefs, resamples=2000, seed=1)
    clustered = pref.pairwise_agreement(a, b, prefs, resamples=2000, seed=1, clusters=refs)
    assert naive.value == clustered.value == per_ref.mean()
    assert (clustered.ci_high - clustered.ci_low) > 1.4 * (naive.ci_high - naive.ci_low)
    with pytest.raises(ValueError, match=r"clusters must have shape \(30,\)"):
        pref.pairwise_agreement(a, b, prefs, clusters=refs[:5])


def test_pairwise_agreement_constant_metric_is_one_half():
    res = pref.pairwise_agreement([1, 1, 1], [1, 1, 1], [1, -1, 1], resamples=0)
    assert res.value == 0.5 and res.n_metric_ties == 3


def test_pairwise_agreement_empty_and_shape_errors():
    res = pref.pairwise_agreement([1.0], [2.0], [0.0], resamples=50)
    assert math.isnan(res.value) and res.n_comparisons == 0 and res.n_ties_excluded == 1
    with pytest.raises(ValueError, match="one length"):
        pref.pairwise_agreement([1.0, 2.0], [1.0], [1.0])
    with pytest.raises(ValueError, match="resamples must be >= 0"):
        pref.pairwise_agreement([1.0], [2.0], [1.0], resamples=-1)


def test_kendall_tau_b_rating_by_hand():
    # x = 1,2,3,4 vs y = 1,3,2,4: five concordant pairs, one discordant (2,3): (5-1)/6.
    tau, n = pref.kendall_tau_b_rating([1, 2, 3, 4, NAN], [1, 3, 2, 4, 5])
    assert (tau, n) == (pytest.approx(4 / 6), 4)
    # A tie in y (first two): 5 concordant, 0 discordant, tau_b = 5 / sqrt(6 * 5).
    tau, _ = pref.kendall_tau_b_rating([1, 2, 3, 4], [1, 1, 2, 3])
    assert tau == pytest.approx(5 / math.sqrt(30))
    # Lower is better: negated, so agreement still reads positive.
    tau, _ = pref.kendall_tau_b_rating([4, 3, 2, 1], [1, 3, 2, 4], higher_is_better=False)
    assert tau == pytest.approx(4 / 6)


def test_kendall_tau_b_rating_undefined_cases():
    tau, n = pref.kendall_tau_b_rating([1, 1, 1], [1, 2, 3])
    assert math.isnan(tau) and n == 3
    tau, n = pref.kendall_tau_b_rating([1, NAN], [2, 3])
    assert math.isnan(tau) and n == 1
