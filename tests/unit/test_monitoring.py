"""Rater monitoring, every number worked out by hand in the test: time-per-pair quartiles and
outlier pairs, drift, the longest all-zero run, agreement with the other raters, robust z
(MAD and its mean-absolute-deviation fallback) and the flags in words."""

from __future__ import annotations

import datetime as dt
import math

import pytest

from radconcord.backend.analysis import monitoring as mon
from radconcord.backend.analysis.monitoring import DoneItem, RaterInput

T0 = dt.datetime(2026, 11, 24, 9, 0, tzinfo=dt.UTC)


def item(pair: int, minute: float, seconds: float, total: float) -> DoneItem:
    return DoneItem(pair=pair, completed_at=T0 + dt.timedelta(minutes=minute),
                    seconds=seconds, total=total)


def test_time_stats_quartiles_and_outlier_pairs():
    """Timed seconds sorted: 2, 10, 12, 14, 16, 100 (pair 7 has no time). numpy's linear
    quartiles: Q1 at rank 1.25 = 10 + .25 * 2 = 10.5, median at 2.5 = 13, Q3 at 3.75 = 14 +
    .75 * 2 = 15.5; IQR 5, slow limit 15.5 + 3 * 5 = 30.5: pair 5 (100 s) is slow, pair 6
    (2 s) is fast, pair 7 (no time) is neither."""
    items = [item(p, p, s, 1) for p, s in
             [(1, 10), (2, 12), (3, 14), (4, 16), (5, 100), (6, 2), (7, 0)]]
    t = mon.time_stats(items)
    assert (t.q1, t.median, t.q3, t.iqr, t.slow_limit) == pytest.approx(
        (10.5, 13.0, 15.5, 5.0, 30.5))
    assert (t.slow_pairs, t.fast_pairs, t.timed, t.untimed) == ((5,), (6,), 6, 1)
    empty = mon.time_stats([item(1, 0, 0, 0)])
    assert math.isnan(empty.median) and empty.untimed == 1


def test_drift_thirds_and_zero_run():
    """Ten totals 1,1,2 | 3,0,0,5 | 4,6,2: thirds of 10 // 3 = 3 pairs; first mean 4/3,
    last mean 12/3 = 4."""
    k, first, last, note = mon.drift([1, 1, 2, 3, 0, 0, 5, 4, 6, 2])
    assert (k, note) == (3, "") and first == pytest.approx(4 / 3) and last == 4.0
    k, first, _, note = mon.drift([1, 2])
    assert k == 0 and math.isnan(first) and note == "needs at least 3 done pairs, got 2"
    assert mon.longest_zero_run([0, 0, 1, 0, 0, 0, 2, 0]) == (3, 3)
    assert mon.longest_zero_run([1, 2]) == (0, -1)
    assert mon.longest_zero_run([0, 0, 1, 0, 0]) == (2, 0)  # the earliest of equal runs


def test_agreement_with_others():
    """Shared pairs 1, 2, 3: own (0, 2, 4) vs others' mean (0.5, 1.5, 3): same order, rho 1;
    mean absolute difference (.5 + .5 + 1) / 3 = 2/3."""
    shared, rho, diff, note = mon.agreement_with_others(
        {1: 0, 2: 2, 3: 4, 4: 1}, {1: 0.5, 2: 1.5, 3: 3.0, 5: 9.0})
    assert (shared, note) == (3, "") and rho == pytest.approx(1.0)
    assert diff == pytest.approx(2 / 3)
    shared, rho, diff, note = mon.agreement_with_others({1: 1, 2: 1, 3: 1}, {1: 0, 2: 1, 3: 2})
    assert math.isnan(rho) and diff == pytest.approx(2 / 3)
    assert note == "Spearman undefined: this rater's totals are all equal"
    assert mon.agreement_with_others({1: 1}, {2: 1})[3] == "no pair done by another rater too"
    assert "at least 3 shared" in mon.agreement_with_others({1: 1, 2: 0}, {1: 1, 2: 0})[3]


def test_robust_z():
    """(10, 12, 14, 100): median 13, deviations 3, 1, 1, 87, MAD 2, scale 1.4826 * 2;
    z(100) = 87 / 2.9652. (10, 10, 10, 40): MAD 0, so the scale is 1.2533 * mean absolute
    deviation 7.5 and z(40) = 30 / 9.39975."""
    z = mon.robust_z([10, 12, 14, 100])
    assert z[3] == pytest.approx(87 / 2.9652) and z[0] == pytest.approx(-3 / 2.9652)
    assert mon.robust_z([10, 10, 10, 40])[3] == pytest.approx(30 / (1.2533 * 7.5))
    assert all(math.isnan(v) for v in mon.robust_z([5, 5, 5, 5]))
    assert all(math.isnan(v) for v in mon.robust_z([1, 2, float("nan")]))  # 2 values only
    assert math.isnan(mon.robust_z([1, 2, float("nan"), 3])[2])


def _steady(name: str, seconds: float, totals: list[float]) -> RaterInput:
    done = [item(p + 1, p, seconds, t) for p, t in enumerate(totals)]
    return RaterInput(rater=name, done=done, assigned=len(done) + 2,
                      time_seconds=seconds * len(done) + 120)


def test_monitor_flags_a_fast_straight_liner():
    base = [1, 3, 0, 2, 4, 1, 2, 0, 3, 1, 2, 5]
    raters = [
        _steady("ann", 60, base),
        _steady("bob", 55, [t + (1 if i % 3 == 0 else 0) for i, t in enumerate(base)]),
        _steady("cat", 65, [max(t - (1 if i % 4 == 0 else 0), 0) for i, t in enumerate(base)]),
        _steady("dan", 58, base[::-1]),
        # Zero from the 3rd to the 11th pair done, 2.5 s per pair.
        _steady("eve", 2.5, [1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3]),
    ]
    result = {r.rater: r for r in mon.monitor(raters)}
    eve = result["eve"]
    assert eve.zero_run == 9 and eve.zero_run_pairs == tuple(range(3, 12))
    assert eve.straight_lining and not result["ann"].straight_lining
    assert eve.fast_pairs == tuple(range(1, 13))
    assert eve.median_seconds == 2.5
    # done per hour: 12 pairs / ((12 * 2.5 + 120) / 3600 h) = 12 * 3600 / 150 = 288
    assert eve.done_per_hour == pytest.approx(288.0)
    measures = {o.measure for o in eve.outliers}
    assert "time_per_pair" in measures
    time_flag = next(o for o in eve.outliers if o.measure == "time_per_pair")
    # median times of the others 55, 58, 60, 65 -> median 59; all five: 2.5, 55, 58, 60, 65
    # -> median 58, deviations 55.5, 3, 0, 2, 7 -> MAD 3, z = (2.5 - 58) / (1.4826 * 3)
    assert time_flag.z == pytest.approx((2.5 - 58) / (1.4826 * 3))
    assert "median time per pair 2.5 s is far below the other raters' (median 59 s" in \
        time_flag.reason
    assert eve.flags[0] == ("straight-lining: 9 consecutive all-zero pairs (in completion "
                            "order: pairs 3, 4, 5, 6, 7, 8, 9, ..., 11; flagged from 8)")
    assert any("12 pairs done in under 3 s" in f for f in eve.flags)
    assert result["ann"].flags == ()
    # drift of ann: thirds of 12 are 4 pairs: (1+3+0+2)/4 = 1.5 and (3+1+2+5)/4 = 2.75
    assert (result["ann"].drift_first, result["ann"].drift_last) == (1.5, 2.75)
    assert result["ann"].drift == pytest.approx(1.25)
    assert result["ann"].shared_pairs == 12 and math.isfinite(result["ann"].spearman)


def test_monitor_orders_by_completion_and_handles_empty_raters():
    # Done out of pair order: completion order decides the run and the drift.
    done = [item(5, 0, 30, 0), item(1, 1, 30, 0), item(3, 2, 30, 0), item(2, 3, 30, 4)]
    r = mon.monitor([RaterInput("x", done, 4, 120), RaterInput("y", [], 3, 0.0)],
                    straight_run=3)
    assert r[0].zero_run_pairs == (5, 1, 3) and r[0].straight_lining
    assert "(in completion order: pairs 5, 1, 3; flagged from 3)" in r[0].flags[0]
    assert r[0].drift_first == 0 and r[0].drift_last == 4
    y = r[1]
    assert y.done == 0 and math.isnan(y.done_per_hour) and math.isnan(y.median_seconds)
    assert y.drift_note and y.agreement_note and y.flags == ()
    with pytest.raises(ValueError, match="listed twice: x"):
        mon.monitor([RaterInput("x", [], 0, 0), RaterInput("x", [], 0, 0)])
    with pytest.raises(ValueError, match="straight_run"):
        mon.monitor([], straight_run=1)


def test_a_contrarian_is_flagged_for_low_agreement_and_a_large_difference():
    """Four raters give totals 0..5 on six shared pairs, one gives 5..0. For each of the four
    the others' mean is (3x + (5 - x)) / 4, increasing: rho 1, mean |diff| 0.75; for the
    contrarian rho -1 and mean |diff| (5+3+1+1+3+5)/6 = 3. rho: median 1, MAD 0, mean
    absolute deviation 2/5, z = -2 / (1.2533 * 0.4); |diff|: median 0.75, mean absolute
    deviation 2.25/5, z = 2.25 / (1.2533 * 0.45). Agreement is flagged only when low and the
    difference only when high, so the four get no flag."""
    up = [0, 1, 2, 3, 4, 5]
    raters = [_steady(n, 40, up) for n in ("a", "b", "c", "d")]
    raters.append(_steady("e", 40, up[::-1]))
    result = {r.rater: r for r in mon.monitor(raters)}
    e = result["e"]
    assert e.spearman == pytest.approx(-1.0) and e.abs_diff == pytest.approx(3.0)
    z = {o.measure: o.z for o in e.outliers}
    # Drift too: (4 + 5) / 2 - (0 + 1) / 2 = 4 for the four, -4 for e; mean absolute
    # deviation 8/5 -> z = -8 / (1.2533 * 1.6), flagged on either side.
    assert z == pytest.approx({"agreement": -2 / (1.2533 * 0.4),
                               "abs_diff": 2.25 / (1.2533 * 0.45),
                               "drift": -8 / (1.2533 * 1.6)})
    assert ("agreement with the other raters (Spearman) -1.00 is far below the other raters' "
            "(median 1.00; robust z -4.0)") in e.flags
    assert all(result[n].flags == () for n in "abcd")


def test_high_agreement_and_a_small_difference_are_no_warning():
    """Rater e follows the consensus order 0..7 while four raters are noisy: e's Spearman is
    far above the others' (robust z > 3) and its mean |diff| far below (z < -3), neither of
    which is a reason to look at e."""
    noisy = {"a": [3, 1, 0, 7, 2, 6, 4, 5], "b": [1, 4, 2, 0, 6, 3, 7, 5],
             "c": [5, 0, 3, 2, 1, 7, 6, 4], "d": [2, 3, 0, 4, 7, 1, 5, 6]}
    raters = [_steady(n, 40, t) for n, t in noisy.items()]
    raters.append(_steady("e", 40, list(range(8))))
    result = mon.monitor(raters)
    assert mon.robust_z([r.spearman for r in result])[4] > 3
    assert mon.robust_z([r.abs_diff for r in result])[4] < -3
    assert {o.measure for o in result[4].outliers} == {"drift"}  # 0..7 does rise


def test_untimed_ratings_skip_the_floors_but_keep_every_other_check():
    """Constructed demo ratings all carry one completion instant and no time on task: as a
    rater's work that is a bot's pace, as constructed ratings it says nothing about pace."""
    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    done = [DoneItem(pair=i + 1, completed_at=at, seconds=0.0, total=0.0) for i in range(8)]
    floors = mon.Floors(min_seconds=10, min_seconds_film=20, max_per_hour=180)
    timed, untimed = mon.monitor(
        [RaterInput(rater="script", done=done, assigned=8, time_seconds=0.0),
         RaterInput(rater="constructed", done=done, assigned=8, time_seconds=0.0,
                    timed=False)], floors=floors)
    assert any("implausible pace" in f for f in timed.flags)
    assert not any("implausible" in f for f in untimed.flags)
    assert math.isnan(untimed.max_pace_per_hour)
    # Straight-lining is about the counts, not the clock: still flagged for both.
    assert any(f.startswith("straight-lining") for f in untimed.flags)
    assert any(f.startswith("straight-lining") for f in timed.flags)
