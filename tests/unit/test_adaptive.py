"""The adaptive order's rule and the replay, on small hand-made data (backend.analysis.adaptive)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from radconcord.backend.analysis import adaptive
from radconcord.backend.analysis.bootstrap import draw_resamples

NAN = np.nan


def test_parse_question_forms_and_errors():
    assert adaptive.parse_question("all") == adaptive.Question("all")
    assert adaptive.parse_question(None).text == "all"
    q = adaptive.parse_question("tau_diff: bleu4 , radcliq_v1")
    assert (q.kind, q.metrics, q.text, q.quantity) == (
        "tau_diff", ("bleu4", "radcliq_v1"), "tau_diff:bleu4,radcliq_v1", "tau_diff")
    for bad in ("tau_diff:bleu4", "tau_diff:a,a", "tau_diff:a,b,c", "max", "tau:a,b"):
        with pytest.raises(ValueError, match="expected 'all' or 'tau_diff:A,B'"):
            adaptive.parse_question(bad)


def _hand_priority(a, b, ratings, i):
    """The rule of the module docstring written as plain loops (tau_diff of a and b)."""
    r = [sum(1 for row in ratings if not math.isnan(row[j])) for j in range(len(a))]
    rated = [j for j in range(len(a)) if r[j] > 0]
    h = {j: -sum(row[j] for row in ratings if not math.isnan(row[j])) / r[j] for j in rated}
    devs, dof = 0.0, 0
    for j in rated:
        if r[j] >= 2:
            vals = [row[j] for row in ratings if not math.isnan(row[j])]
            m = sum(vals) / len(vals)
            devs += sum((v - m) ** 2 for v in vals)
            dof += len(vals) - 1
    s2 = devs / dof
    g = 0.0
    for j in rated:
        if j == i:
            continue
        w = (np.sign(a[i] - a[j]) - np.sign(b[i] - b[j])) / 2
        sigma = math.sqrt(s2 * (1 / r[i] + 1 / r[j]))
        d = (h[i] - h[j]) / sigma
        g += w * math.exp(-0.5 * d * d) / (math.sqrt(2 * math.pi) * sigma)
    g /= len(rated) - 1
    return g * g * s2 / (r[i] * (r[i] + 1))


def test_priority_matches_the_rule_by_hand():
    a = np.array([0.9, 0.1, 0.5, 0.3, 0.7])
    b = np.array([0.8, 0.4, 0.2, 0.6, 0.1])
    ratings = np.array([
        [1.0, 3.0, 2.0, NAN, NAN],
        [2.0, 4.0, NAN, 2.0, NAN],
        [1.0, NAN, NAN, 3.0, NAN],
    ])
    got = adaptive.adaptive_priority(np.stack([a, b]), ratings, question_kind="tau_diff")
    assert math.isinf(got[4])  # nobody rated it: coverage first
    for i in range(4):
        assert got[i] == pytest.approx(_hand_priority(a, b, ratings, i), rel=1e-12)
    assert np.all(got[:4] >= 0)


def test_pairs_both_metrics_order_alike_get_no_priority_for_tau_diff():
    # A and B rank every pair the same way: no pair can move tau(A) - tau(B).
    a = np.array([1.0, 2.0, 3.0, 4.0])
    ratings = np.array([[1.0, 2.0, 2.0, 5.0], [2.0, 2.0, 3.0, 4.0]])
    got = adaptive.adaptive_priority(np.stack([a, a * 10]), ratings, question_kind="tau_diff")
    assert np.allclose(got, 0.0)
    # With all taus as the question the same data do carry priority.
    assert adaptive.adaptive_priority(a, ratings, question_kind="all").max() > 0


def test_fewer_ratings_weigh_more_all_else_equal():
    # Pairs 1 and 2 have the same human mean and metric neighbourhood; pair 1 has one rating,
    # pair 2 three: one more rating shrinks pair 1's uncertainty more.
    x = np.array([[0.0, 1.0, 1.0, 2.0]])
    ratings = np.array([[3.0, 2.0, 2.0, 0.0], [2.0, NAN, 1.0, 0.0], [3.0, NAN, 3.0, 1.0]])
    got = adaptive.adaptive_priority(x, ratings, question_kind="all")
    assert got[1] > got[2] > 0


def test_all_uses_the_metric_with_the_widest_ci():
    h_err = np.array([[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], [0.0, 2.0, 1.0, 3.0, 5.0, 4.0]])
    good = -np.arange(6.0)  # agrees with the raters
    noisy = np.array([2.0, -1.0, 0.5, -3.0, 1.0, 0.0])
    weights = adaptive.question_weights(np.stack([good, noisy]), "all")
    assert adaptive.widest_weight(weights, h_err) == 1
    both = adaptive.adaptive_priority(np.stack([good, noisy]), h_err, question_kind="all")
    only_noisy = adaptive.adaptive_priority(noisy, h_err, question_kind="all")
    np.testing.assert_allclose(both, only_noisy)


def test_order_pairs_unrated_first_then_priority_then_seeded_draw():
    prio = np.array([0.5, np.inf, 0.5, 2.0, np.inf, 0.0])
    draws = np.array([0.9, 0.7, 0.1, 0.5, 0.2, 0.3])
    assert adaptive.order_pairs(prio, draws).tolist() == [4, 1, 3, 2, 0, 5]


def test_tiebreak_draws_are_seeded_and_stable():
    a = adaptive.tiebreak_draws(3, "ra", [0, 1, 2, 7])
    np.testing.assert_array_equal(a, adaptive.tiebreak_draws(3, "ra", [0, 1, 2, 7]))
    assert a[3] == adaptive.tiebreak_draws(3, "ra", [7])[0]  # per position, not per call
    assert not np.array_equal(a, adaptive.tiebreak_draws(4, "ra", [0, 1, 2, 7]))
    assert not np.array_equal(a, adaptive.tiebreak_draws(3, "rb", [0, 1, 2, 7]))
    assert np.all((a >= 0) & (a < 1))


def test_ci_width_matches_a_scipy_loop():
    rng = np.random.default_rng(1)
    n = 15
    human = -rng.integers(0, 6, size=n).astype(float)
    a = human + rng.normal(size=n)
    b = rng.normal(size=n)
    res = draw_resamples(n, 50, 9)
    ta, tb = [], []
    for k in range(50):
        idx = res.pair_indices(k)
        ta.append(stats.kendalltau(a[idx], human[idx]).statistic)
        tb.append(stats.kendalltau(b[idx], human[idx]).statistic)
    ta, tb = np.array(ta), np.array(tb)
    lo, hi = np.quantile(ta - tb, [0.025, 0.975])
    got = adaptive.question_ci_width(np.stack([a, b]), human, question_kind="tau_diff",
                                     resamples=50, seed=9)
    assert got == pytest.approx(hi - lo, abs=1e-12)
    widths = [np.subtract(*np.quantile(t, [0.975, 0.025])) for t in (ta, tb)]
    got_all = adaptive.question_ci_width(np.stack([a, b]), human, question_kind="all",
                                         resamples=50, seed=9)
    assert got_all == pytest.approx(max(widths), abs=1e-12)
    assert math.isnan(adaptive.question_ci_width(a[:2], human[:2], question_kind="all"))


def _study(n=24, raters=4, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=n)
    ratings = rng.poisson(np.exp(0.7 * q) * 2, size=(raters, n)).astype(float)
    metrics = np.stack([-q + rng.normal(scale=s, size=n) for s in (0.3, 1.0)])
    return metrics, ratings


def test_replay_reveals_every_rating_once_and_ends_at_the_same_width():
    metrics, ratings = _study()
    ratings[0, :5] = NAN  # not assigned to rater 0: never revealed
    out = {s: adaptive.simulate(metrics, ratings, strategy=s, seed=2, question_kind="tau_diff",
                                checkpoints=8, resamples=60)
           for s in adaptive.STRATEGIES}
    total = int(np.isfinite(ratings).sum())
    for res in out.values():
        assert res.n_ratings[-1] == total and np.all(np.diff(res.n_ratings) > 0)
        pairs = {tuple(p) for p in res.reveals.tolist()}
        assert len(pairs) == total == len(res.reveals)
        assert pairs == {(k, j) for k, j in zip(*np.nonzero(np.isfinite(ratings)), strict=True)}
        # Raters take turns: each of the first rounds reveals one rating per rater.
        assert res.reveals[:4, 0].tolist() == [0, 1, 2, 3]
    # Same data and bootstrap seed at the end: the same width, the full-data estimate.
    assert out["random"].ci_width[-1] == out["adaptive"].ci_width[-1]
    assert out["random"].abs_error[-1] == 0.0 == out["adaptive"].abs_error[-1]
    # The interim error is |interim tau_diff - final tau_diff|, checked at the first point.
    res = out["random"]
    first = res.reveals[: res.n_ratings[0]]
    seen = np.full_like(ratings, np.nan)
    seen[first[:, 0], first[:, 1]] = ratings[first[:, 0], first[:, 1]]
    cols = np.isfinite(seen).any(axis=0)

    def diff(m, h):
        return (stats.kendalltau(m[0], h).statistic - stats.kendalltau(m[1], h).statistic)

    everyone = np.isfinite(ratings).any(axis=0)
    final = diff(metrics[:, everyone], -np.nanmean(ratings[:, everyone], axis=0))
    interim = diff(metrics[:, cols], -np.nanmean(seen[:, cols], axis=0))
    assert res.abs_error[0] == pytest.approx(abs(interim - final), abs=1e-12)


def test_adaptive_replay_covers_every_pair_before_any_second_rating():
    metrics, ratings = _study(n=20, raters=3)
    res = adaptive.simulate(metrics, ratings, strategy="adaptive", seed=0, checkpoints=4,
                            resamples=20)
    first = res.reveals[:20, 1]
    assert sorted(first.tolist()) == list(range(20))
    rnd = adaptive.simulate(metrics, ratings, strategy="random", seed=0, checkpoints=4,
                            resamples=20)
    assert len(set(rnd.reveals[:20, 1].tolist())) < 20  # random queues overlap early


def test_replay_is_deterministic_and_seeded():
    metrics, ratings = _study()
    a = adaptive.simulate(metrics, ratings, strategy="adaptive", seed=5, checkpoints=6,
                          resamples=30)
    b = adaptive.simulate(metrics, ratings, strategy="adaptive", seed=5, checkpoints=6,
                          resamples=30)
    np.testing.assert_array_equal(a.reveals, b.reveals)
    np.testing.assert_array_equal(a.ci_width, b.ci_width)
    c = adaptive.simulate(metrics, ratings, strategy="random", seed=6, checkpoints=6,
                          resamples=30)
    d = adaptive.simulate(metrics, ratings, strategy="random", seed=5, checkpoints=6,
                          resamples=30)
    assert not np.array_equal(c.reveals, d.reveals)
    with pytest.raises(ValueError, match="strategy must be one of"):
        adaptive.simulate(metrics, ratings, strategy="greedy", seed=0)


def test_savings_summary_on_hand_curves():
    n = np.array([10, 20, 30, 40])
    rnd = np.array([0.8, 0.6, 0.5, 0.4])
    ada = np.array([0.6, 0.45, 0.41, 0.4])
    s = adaptive.savings_summary(n, rnd, ada, tolerance=0.05)
    assert s["final_random_ci_width"] == 0.4 and s["target_ci_width"] == pytest.approx(0.42)
    assert (s["random_ratings_to_target"], s["adaptive_ratings_to_target"],
            s["saved_to_target"]) == (40, 30, 10)
    # random has 0.6 at 20 ratings (half), adaptive reaches 0.6 at 10.
    half = [p for p in s["at_random_checkpoints"] if p["random_ratings"] == 20][0]
    assert (half["adaptive_ratings"], half["saved"]) == (10, 10)
    # An adaptive order that does not help is reported as such (negative saving).
    worse = adaptive.savings_summary(n, ada, rnd, tolerance=0.05)
    assert worse["saved_to_target"] == -10


def test_savings_ignore_an_early_dip_of_a_noisy_curve():
    n = np.array([3, 10, 20, 30])
    rnd = np.array([0.9, 0.7, 0.5, 0.4])
    ada = np.array([0.3, 0.6, 0.41, 0.4])  # a 3-pair bootstrap can look narrow by chance
    s = adaptive.savings_summary(n, rnd, ada)
    assert s["adaptive_ratings_to_target"] == 20 and s["saved_to_target"] == 10


def test_missing_metric_values_sit_at_the_median(recwarn):
    w = adaptive.question_weights(np.array([[1.0, np.nan, 3.0], [np.nan] * 3]), "tau_diff")
    # Row A: the missing pair ties the median (2.0 vs 1 and 3); row B all missing: no order.
    np.testing.assert_array_equal(w[0], np.array([[0, -1, -1], [1, 0, -1], [1, 1, 0]]) / 2)
    assert not [x for x in recwarn if issubclass(x.category, RuntimeWarning)]
