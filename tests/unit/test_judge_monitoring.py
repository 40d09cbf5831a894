"""Monitoring of pairwise raters (backend/analysis/judge_monitoring.py) against hand counts.

Four raters judge twelve comparisons (numbers 1-12, done in that order):

* r1 answers "A is better" (4, 2) every time;
* r2 and r3 answer A (4, 3) on the odd-numbered comparisons and B (2, 4) on the even ones;
* r4 does only 1-4: B, A, tie, B.

Agreement with the others' plurality (a split is a tie), worked out in the comments below.
"""

from __future__ import annotations

import datetime as dt
import math

import pytest
from scipy import stats

from radconcord.backend.analysis import judge_monitoring as jm

T0 = dt.datetime(2026, 1, 5, 9, 0, tzinfo=dt.UTC)
ANSWER = {"A": (4, 2), "B": (2, 4), "tie": (3, 3)}


def _rater(name, prefs, ratings=None):
    done = []
    for number, p in enumerate(prefs, start=1):
        a, b = ratings[p] if ratings else ANSWER[p]
        done.append(jm.Judged(number, T0 + dt.timedelta(minutes=number), p, a, b))
    return jm.JudgeInput(rater=name, done=done, assigned=12)


ALTERNATING = ["A", "B"] * 6
RATERS = [
    _rater("r1", ["A"] * 12),
    _rater("r2", ALTERNATING, {"A": (4, 3), "B": (2, 4)}),
    _rater("r3", ALTERNATING, {"A": (4, 3), "B": (2, 4)}),
    _rater("r4", ["B", "A", "tie", "B"]),
]


def test_counts_side_bias_and_runs_by_hand():
    got = {m.rater: m for m in jm.monitor_judges(RATERS)}
    r1, r2, r4 = got["r1"], got["r2"], got["r4"]
    assert (r1.n_a, r1.n_b, r1.n_tie, r1.share_a) == (12, 0, 0, 1.0)
    # Exact binomial, two-sided: P(12 of 12) + P(0 of 12) = 2 / 2**12.
    assert r1.side_p == pytest.approx(2 / 2**12)
    assert r2.side_p == pytest.approx(1.0) and r2.share_a == 0.5
    assert (r4.n_a, r4.n_b, r4.n_tie) == (1, 2, 1)
    assert r4.side_p == pytest.approx(stats.binomtest(1, 3).pvalue)
    assert r1.same_run == 12 and r1.same_run_comparisons == tuple(range(1, 13))
    assert r1.straight_lining
    assert (r2.same_run, r2.same_run_comparisons, r2.straight_lining) == (1, (1,), False)
    assert r1.flags[0] == ("side bias: chose A in 12 of 12 decided comparisons (binomial "
                           "p = 0.00049; which candidate is A is random)")
    assert r1.flags[1] == ("straight-lining: the same answer 12 times in a row (comparisons "
                           "1, 2, 3, 4, 5, 6, 7, ..., 12)")
    # r4 decided 3: too few to call a side bias whatever the p-value.
    assert not any(f.startswith("side bias") for f in r4.flags)


def test_agreement_with_the_others_by_hand():
    got = {m.rater: m for m in jm.monitor_judges(RATERS)}
    # r1 (A): 1 others A,A,B -> A yes; 2 B,B,A -> B no; 3 A,A,tie -> A yes; 4 B,B,B -> B no;
    # 5-12 r2 = r3: odd A (4 yes), even B (4 no): 6 of 12.
    assert (got["r1"].shared, got["r1"].agreement) == (12, 0.5)
    # r2: 1 A,A,B -> A yes; 2 A,B,A -> A no; 3 A,A,tie yes; 4 A,B,B -> B yes; 5-12 odd
    # A,A -> A yes (4), even A,B split -> tie no (4): 7 of 12. r3 the same.
    assert got["r2"].agreement == pytest.approx(7 / 12)
    assert got["r3"].agreement == pytest.approx(7 / 12)
    # r4: 1 B vs A no; 2 A vs (A,B,B) B no; 3 tie vs A no; 4 B vs (A,B,B) B yes: 1 of 4.
    assert (got["r4"].shared, got["r4"].agreement) == (4, 0.25)
    # Robust z: median 0.5417, MAD 0.0417 (x 1.4826); r4 is (0.25 - 0.5417) / 0.0618.
    med = (0.5 + 7 / 12) / 2
    scale = 1.4826 * (7 / 12 - med)
    assert got["r4"].agreement_z == pytest.approx((0.25 - med) / scale)
    assert got["r4"].flags == (
        f"agreement with the others 0.25 is far below the other raters' (robust z "
        f"{(0.25 - med) / scale:.1f})",)
    assert got["r2"].flags == () and math.isfinite(got["r2"].agreement_z)


def test_too_few_shared_comparisons_and_empty_input():
    few = jm.monitor_judges([_rater("a", ["A", "B"]), _rater("b", ["A", "A"])])
    assert math.isnan(few[0].agreement)
    assert few[0].agreement_note == "2 comparison(s) shared with other raters (needs 3)"
    assert math.isnan(few[0].agreement_z)  # fewer than three raters with a value
    nothing = jm.monitor_judges([jm.JudgeInput("idle", [], 5)])[0]
    assert (nothing.done, nothing.same_run, nothing.same_run_comparisons) == (0, 0, ())
    assert math.isnan(nothing.side_p) and math.isnan(nothing.share_a)
    assert jm.monitor_judges([]) == []


def test_completion_order_not_number_order_makes_a_run():
    # Done as 3, 1, 2 in time: the answers A, A, B in completion order run 2 long (3, 1).
    done = [jm.Judged(1, T0 + dt.timedelta(minutes=2), "A", 4, 2),
            jm.Judged(2, T0 + dt.timedelta(minutes=3), "B", 2, 4),
            jm.Judged(3, T0 + dt.timedelta(minutes=1), "A", 4, 2)]
    assert jm.longest_same_run(done) == (3, 1)


def test_imported_sides_are_left_out_of_the_side_test():
    """RadPref's A is its C1: a rater choosing it every time says nothing about position,
    so only the comparisons whose sides were drawn at random are tested."""
    imported = [jm.Judged(n, T0 + dt.timedelta(minutes=n), "A", 4, 2, random_side=False)
                for n in range(1, 13)]
    drawn = [jm.Judged(n, T0 + dt.timedelta(minutes=n), p, 3, 3)
             for n, p in zip(range(13, 17), "ABAB", strict=True)]
    (only,) = jm.monitor_judges([jm.JudgeInput("rp", imported + drawn, 16)])
    assert (only.n_a, only.n_b, only.side_decided, only.share_a) == (14, 2, 4, 0.5)
    assert only.side_p == pytest.approx(1.0)
    assert not any(f.startswith("side bias") for f in only.flags)
    (none,) = jm.monitor_judges([jm.JudgeInput("rp", imported, 12)])
    assert none.side_decided == 0 and math.isnan(none.side_p)
