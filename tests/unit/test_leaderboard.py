"""The benchmark's pure leaderboard (backend/analysis/leaderboard.py) on synthetic arrays.

Expected values come from scipy (Kendall tau-b), a plain Holm step-down written here, and the
project's bootstrap called directly with the documented draws (case clusters, one seed).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from radconcord.backend.analysis import leaderboard as lb
from radconcord.backend.analysis.bootstrap import bootstrap_correlations, draw_resamples
from radconcord.backend.analysis.ceiling import human_ceiling
from radconcord.backend.analysis.preference import kendall_tau_b_rating, pairwise_agreement

N_CASES = 15
SOURCES = ("gen-a", "gen-b", "gen-c")
RATERS = ("r1", "r2", "r3", "r4")


def _count_data(seed: int = 1, raters: tuple[str, ...] = RATERS) -> tuple[lb.CountData, dict]:
    rng = np.random.default_rng(seed)
    n = N_CASES * len(SOURCES)
    quality = rng.normal(size=n)
    total = np.clip(np.round(2 + quality[None, :] + rng.normal(0, 0.8, (len(raters), n))), 0, 9)
    significant = np.floor(total / 2)
    # The last rater skips every fifth pair; the first pair is rated by nobody.
    total[-1, ::5] = significant[-1, ::5] = np.nan
    total[:, 0] = significant[:, 0] = np.nan
    data = lb.CountData(
        pair_ids=tuple(f"p{i}" for i in range(n)),
        cases=tuple(f"case-{i // len(SOURCES)}" for i in range(n)),
        sources=tuple(SOURCES[i % len(SOURCES)] for i in range(n)),
        raters=raters, errors={"total": total, "significant": significant})
    good = -quality + rng.normal(0, 0.3, n)  # agrees (higher is better)
    errors_like = quality + rng.normal(0, 0.6, n)  # lower is better
    noise = rng.normal(size=n)
    return data, {"good": good, "errs": errors_like, "noise": noise}


def _metrics(values: dict) -> list[lb.MetricValues]:
    return [
        lb.MetricValues("good", "fam-good", values["good"], True, "good|v1", "h-good"),
        lb.MetricValues("errs", "fam-errs", values["errs"], False, "errs|v1", "h-errs"),
        lb.MetricValues("noise", "fam-noise", values["noise"], True, "noise|v1", "h-noise"),
    ]


def _holm(p: list[float]) -> list[float]:
    """Holm's step-down adjustment written out: sorted p times (m - i), running maximum."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def test_tau_and_interval_are_the_bootstrap_over_cases_of_the_oriented_metrics():
    data, values = _count_data()
    board = lb.count_board(data, _metrics(values), resamples=300, seed=7)
    mean = data.mean_errors("total")
    rated = np.flatnonzero(np.isfinite(mean))
    draws = draw_resamples(rated.size, 300, 7, np.asarray(data.cases, dtype=object)[rated])
    for row in board.targets["total"].rows:
        raw = values[row.key]
        x = raw if row.higher_is_better else -raw
        expected = stats.kendalltau(x[rated], -mean[rated], variant="b").statistic
        assert row.tau.value == pytest.approx(expected, abs=1e-12)
        direct = bootstrap_correlations(x[rated], -mean[rated], draws=draws)
        assert [row.tau.lo, row.tau.hi] == pytest.approx(list(direct.kendall_ci[0]), abs=1e-12)
        assert row.tau.n == rated.size
    # The lower-is-better metric is negated: it agrees, so its tau is positive.
    errs = next(r for r in board.targets["total"].rows if r.key == "errs")
    assert errs.tau.value > 0.3 and errs.higher_is_better is False


def test_significant_target_is_its_own_board():
    data, values = _count_data()
    board = lb.count_board(data, _metrics(values), resamples=0)
    sig = board.targets["significant"]
    assert not sig.headline and board.targets["total"].headline
    mean = data.mean_errors("significant")
    ok = np.isfinite(mean)
    good = next(r for r in sig.rows if r.key == "good")
    assert good.tau.value == pytest.approx(
        stats.kendalltau(values["good"][ok], -mean[ok], variant="b").statistic, abs=1e-12)
    assert math.isnan(good.tau.lo)  # no resamples, no interval


def test_ceiling_is_leave_one_rater_out_on_the_same_draws_and_the_share_uses_it():
    data, values = _count_data()
    board = lb.count_board(data, _metrics(values), resamples=200, seed=3)
    tb = board.targets["total"]
    mean = data.mean_errors("total")
    rated = np.flatnonzero(np.isfinite(mean))
    draws = draw_resamples(rated.size, 200, 3, np.asarray(data.cases, dtype=object)[rated])
    expected = human_ceiling(data.errors["total"][:, rated], RATERS, draws=draws, unit="case",
                             seed=3)
    assert tb.ceiling.value == pytest.approx(expected.kendall, abs=1e-12)
    assert [tb.ceiling.lo, tb.ceiling.hi] == pytest.approx(list(expected.kendall_ci), abs=1e-12)
    # Each rater against the others' mean, by scipy.
    e = data.errors["total"]
    for r, name in enumerate(RATERS):
        rest = np.delete(e, r, axis=0)
        n_rest = np.isfinite(rest).sum(axis=0)
        others = np.where(n_rest > 0, np.nansum(rest, axis=0) / np.maximum(n_rest, 1), np.nan)
        ok = np.isfinite(e[r]) & np.isfinite(others)
        assert tb.ceiling.per_rater[name] == pytest.approx(
            stats.kendalltau(e[r, ok], others[ok], variant="b").statistic, abs=1e-12)
    for row in tb.rows:
        assert row.pct_of_ceiling == pytest.approx(row.tau.value / tb.ceiling.value)


def test_fewer_than_three_raters_has_no_ceiling_and_says_why():
    data, values = _count_data(raters=("r1", "r2"))
    tb = lb.count_board(data, _metrics(values), resamples=50).targets["total"]
    assert tb.ceiling is None and "needs 3" in tb.ceiling_reason
    assert all(r.pct_of_ceiling is None for r in tb.rows)
    assert lb.board_json(lb.count_board(data, _metrics(values), resamples=0))[
        "targets"]["total"]["ceiling"] == {"value": None, "reason": tb.ceiling_reason}


def test_paired_test_against_the_best_is_holm_corrected_over_the_others():
    data, values = _count_data()
    board = lb.count_board(data, _metrics(values), resamples=400, seed=11)
    tb = board.targets["total"]
    ranked = [r for r in tb.rows if r.status == "ranked"]
    assert tb.best == ranked[0].key and ranked[0].vs_best is None
    others = ranked[1:]
    assert len(others) == 2
    # p from the replicate differences, as the documented formula says.
    mean = data.mean_errors("total")
    rated = np.flatnonzero(np.isfinite(mean))
    draws = draw_resamples(rated.size, 400, 11, np.asarray(data.cases, dtype=object)[rated])

    def replicates(key: str) -> np.ndarray:
        x = values[key] if key != "errs" else -values[key]
        return bootstrap_correlations(x[rated], -mean[rated], draws=draws).kendall_replicates[:, 0]

    best = replicates(tb.best)
    raw = []
    for row in others:
        d = best - replicates(row.key)
        d = d[np.isfinite(d)]
        p = min(1.0, 2 * min(1 + np.sum(d <= 0), 1 + np.sum(d >= 0)) / (d.size + 1))
        raw.append(p)
        assert row.vs_best.p == pytest.approx(p)
        assert row.vs_best.diff == pytest.approx(ranked[0].tau.value - row.tau.value)
        assert row.vs_best.best == tb.best
    for row, adjusted in zip(others, _holm(raw), strict=True):
        assert row.vs_best.p_holm == pytest.approx(adjusted)


def test_ranks_ties_share_and_undefined_or_unavailable_metrics_are_na_with_reason():
    data, values = _count_data()
    n = len(data.pair_ids)
    metrics = _metrics(values) + [
        lb.MetricValues("twin", "fam-good", values["good"].copy(), True, "good|v1"),
        lb.MetricValues("flat", "fam-flat", np.ones(n), True, "flat|v1"),
        lb.MetricValues("lonely", "fam-l", np.where(np.arange(n) == 3, 1.0, np.nan), True, "l"),
    ]
    na = [lb.NotAvailable("vlscore", "vlscore", "needs images: rexval has none")]
    board = lb.count_board(data, metrics, unavailable=na, resamples=50)
    for tb in board.targets.values():
        rows = {r.key: r for r in tb.rows}
        assert rows["good"].rank == rows["twin"].rank  # equal values share a rank
        assert rows["flat"].status == "n/a" and rows["flat"].rank is None
        assert "constant" in rows["flat"].reason
        assert rows["lonely"].status == "n/a" and "1 rated item" in rows["lonely"].reason
        assert rows["vlscore"].status == "n/a"
        assert rows["vlscore"].reason == "needs images: rexval has none"
        # n/a rows come after every ranked one.
        statuses = [r.status for r in tb.rows]
        assert statuses == sorted(statuses, key=lambda s: s != "ranked")
        assert tb.best in ("good", "twin")
    assert lb.rank_values({"a": 0.5, "b": 0.7, "c": 0.5, "d": float("nan")}) == {
        "b": 1, "a": 2, "c": 2, "d": None}


def test_reported_figures_sit_beside_ours_and_never_change_a_rank():
    data, values = _count_data()
    reported = [lb.Reported("noise", "Noise-paper", 0.99, "Some paper", "cards/noise.md"),
                lb.Reported(None, "Not ours", 0.95, "Other paper")]
    plain = lb.count_board(data, _metrics(values), resamples=0)
    with_rep = lb.count_board(data, _metrics(values), reported=reported, resamples=0)
    tb = with_rep.targets["total"]
    assert [(r.key, r.rank) for r in tb.rows] == [
        (r.key, r.rank) for r in plain.targets["total"].rows]
    noise = next(r for r in tb.rows if r.key == "noise")
    assert noise.rank == 3  # a reported 0.99 does not lift it
    assert [r.reported.metric for r in tb.reported] == ["Noise-paper", "Not ours"]
    assert tb.reported[0].ours == pytest.approx(noise.tau.value)
    assert tb.reported[1].ours is None
    assert with_rep.targets["significant"].reported == ()  # reported against total errors
    block = lb.board_json(with_rep)["targets"]["total"]
    assert all(r["status"] == "reported" and r["rank"] is None for r in block["reported"])
    assert {r["key"] for r in block["rows"]} == {"good", "errs", "noise"}


def test_per_source_is_correlates_subset_bootstrap():
    data, values = _count_data()
    board = lb.count_board(data, _metrics(values), resamples=100, seed=5)
    mean = data.mean_errors("total")
    rated = np.flatnonzero(np.isfinite(mean))
    sources = np.asarray(data.sources)
    cases = np.asarray(data.cases, dtype=object)
    for src in SOURCES:
        n, rows = board.targets["total"].per_source[src]
        subset = rated[sources[rated] == src]
        assert n == subset.size
        for row in rows:
            x = values[row.key] if row.key != "errs" else -values[row.key]
            res = bootstrap_correlations(x[subset], -mean[subset], resamples=100, seed=5,
                                         clusters=cases[subset])
            assert row.tau.value == pytest.approx(res.kendall[0], abs=1e-12)
            assert [row.tau.lo, row.tau.hi] == pytest.approx(list(res.kendall_ci[0]), abs=1e-12)


def test_too_few_rated_pairs_is_an_input_error():
    data, values = _count_data()
    empty = {t: np.full_like(e, np.nan) for t, e in data.errors.items()}
    bare = lb.CountData(data.pair_ids, data.cases, data.sources, data.raters, empty)
    with pytest.raises(lb.LeaderboardInputError, match="0 rated pair"):
        lb.count_board(bare, _metrics(values))
    with pytest.raises(lb.LeaderboardInputError, match="shape"):
        lb.CountData(data.pair_ids, data.cases, data.sources, ("only-one",), data.errors)


def _preference_data(seed: int = 2) -> tuple[lb.PreferenceData, np.ndarray]:
    rng = np.random.default_rng(seed)
    n_cases, raters = 20, ("a1", "a2", "a3")
    m = 2 * n_cases
    quality = rng.normal(size=m)
    ratings = np.clip(np.round(3 + quality[None, :] + rng.normal(0, 0.7, (3, m))), 1, 5)
    ratings[2, :6] = np.nan  # the third annotator skipped three cases
    mean = np.nanmean(ratings, axis=0)
    a = np.arange(0, m, 2)
    data = lb.PreferenceData(
        candidate_ids=tuple(f"c{i}" for i in range(m)),
        references=tuple(f"ref-{i // 2}" for i in range(m)),
        sources=tuple("gen-x" if i % 2 else "gen-y" for i in range(m)), raters=raters,
        ratings=ratings, candidate_mean=mean, comparison_a=a, comparison_b=a + 1,
        comparison_mean_a=mean[a], comparison_mean_b=mean[a + 1])
    return data, quality + rng.normal(0, 0.5, m)


def test_preference_board_agreement_excludes_rater_ties_and_tau_uses_the_mean_rating():
    data, metric = _preference_data()
    values = [lb.MetricValues("m", "fam", metric, True, "m|v1"),
              lb.MetricValues("m_neg", "fam2", -metric, False, "n|v1")]
    board = lb.preference_board(data, values, resamples=300, seed=4)
    prefs = np.sign(data.comparison_mean_a - data.comparison_mean_b)
    ties = int(np.sum(prefs == 0))
    assert board.n_ties == ties and board.n_judged == prefs.size
    refs = np.asarray(data.references, dtype=object)[data.comparison_a]
    expected = pairwise_agreement(metric[data.comparison_a], metric[data.comparison_b], prefs,
                                  resamples=300, seed=4, clusters=refs)
    row = next(r for r in board.rows if r.key == "m")
    assert row.agreement.value == pytest.approx(expected.value)
    assert (row.agreement.lo, row.agreement.hi) == pytest.approx((expected.ci_low,
                                                                  expected.ci_high))
    assert row.agreement.n == prefs.size - ties and row.n_ties_excluded == ties
    # By hand: the share of untied comparisons where the metric orders the pair as the raters.
    untied = prefs != 0
    hand = np.mean(np.sign(metric[data.comparison_a] - metric[data.comparison_b])[untied]
                   == prefs[untied])
    assert row.agreement.value == pytest.approx(hand)
    tau, n = kendall_tau_b_rating(metric, data.candidate_mean)
    assert row.tau_rating.value == pytest.approx(tau, abs=1e-12) and row.tau_rating.n == n
    assert row.tau_rating.lo <= row.tau_rating.value <= row.tau_rating.hi
    # The lower-is-better twin is oriented into the same numbers.
    twin = next(r for r in board.rows if r.key == "m_neg")
    assert twin.agreement.value == pytest.approx(row.agreement.value)
    assert twin.tau_rating.value == pytest.approx(row.tau_rating.value)
    assert twin.rank == row.rank == 1
    assert board.ceiling is not None and board.ceiling.n_raters == 3


def test_preference_na_rows_and_json_are_safe():
    data, metric = _preference_data()
    empty = np.full_like(metric, np.nan)
    board = lb.preference_board(
        data, [lb.MetricValues("m", "fam", metric, True, "s"),
               lb.MetricValues("gone", "fam", empty, True, "s")],
        unavailable=[lb.NotAvailable("vlscore", "vlscore", "needs images: radpref has none")],
        resamples=20)
    rows = {r.key: r for r in board.rows}
    assert rows["gone"].status == "n/a" and "undefined" in rows["gone"].reason
    assert rows["vlscore"].reason == "needs images: radpref has none"
    block = lb.board_json(board)
    text = json.dumps(block, allow_nan=False)  # NaN became null
    assert '"rank": null' in text
    csv = lb.csv_rows([{"name": "radpref", "board": block}])
    na = [r for r in csv if r["key"] == "vlscore"]
    assert {r["statistic"] for r in na} == {"pairwise_agreement", "kendall_tau_b"}
    assert all(r["status"] == "n/a" and r["reason"] == "needs images: radpref has none"
               for r in na)


def test_csv_rows_hold_ranked_na_reported_and_per_source_rows():
    data, values = _count_data()
    board = lb.count_board(
        data, _metrics(values), resamples=30,
        unavailable=[lb.NotAvailable("green", "green", "unavailable here: no weights")],
        reported=[lb.Reported("good", "Good", 0.6, "A paper", "backend/metrics/cards/g.md")])
    rows = lb.csv_rows([{"name": "rexval", "board": lb.board_json(board)}])
    assert set(rows[0]) == set(lb.CSV_COLUMNS)
    pooled = [r for r in rows if r["scope"] == "pooled" and r["target"] == "total"]
    assert [r["status"] for r in pooled] == ["ranked"] * 3 + ["n/a", "reported"]
    assert pooled[3]["reason"] == "unavailable here: no weights"
    assert pooled[4]["rank"] is None and pooled[4]["source"] == (
        "A paper (backend/metrics/cards/g.md)")
    assert {r["scope"] for r in rows} == {"pooled"} | {f"source:{s}" for s in SOURCES}
    assert pooled[1]["p_holm_vs_best"] is not None and pooled[0]["vs_best"] is None


def test_protocol_names_the_headline_and_the_rules():
    text = " ".join(lb.PROTOCOL)
    for needle in ("Headline", "pooled", "significant", "per candidate type",
                   "bootstrap over cases", "leave one rater out", "Holm", "ties", "reported",
                   "n/a", "negated", "references"):
        assert needle in text, needle
