"""The adjudication queue rule (backend/analysis/adjudication.py), checked by hand computation."""

from __future__ import annotations

from radconcord.backend.analysis.adjudication import queue_reason, significant_total


def test_significant_total_counts_only_significant_cells():
    # 2 + 1 significant; the 5 not-significant errors do not count.
    assert significant_total({(1, True): 2, (3, True): 1, (3, False): 5}) == 3
    assert significant_total({}) == 0


def test_range_rule_by_hand():
    # Significant totals 3, 1, 0: range 0-3 = 3 >= 2 -> queued; >= 4 -> not.
    raters = [{(3, True): 3}, {(3, True): 1}, {(4, False): 2}]
    assert queue_reason(raters, significant_range=2, category_12=False) == (
        "significant errors range 0-3 (>= 2)")
    assert queue_reason(raters, significant_range=3, category_12=False) == (
        "significant errors range 0-3 (>= 3)")
    assert queue_reason(raters, significant_range=4, category_12=False) is None
    # 0 turns the rule off, however far apart the raters are.
    assert queue_reason(raters, significant_range=0, category_12=False) is None


def test_category_12_rule_by_hand():
    # One rater of three counts a significant category-1 error, nobody one of category 2.
    raters = [{(1, True): 1}, {}, {(1, False): 4}]
    assert queue_reason(raters, significant_range=0, category_12=True) == (
        "category 1 significant: 1 of 3 raters")
    # Everyone counts one (in different numbers): no disagreement on "any".
    agree = [{(2, True): 1}, {(2, True): 3}]
    assert queue_reason(agree, significant_range=0, category_12=True) is None
    # Category 2 disagreement, and both rules at once (totals 2 and 0: range 2).
    both = [{(2, True): 2}, {(5, False): 1}]
    assert queue_reason(both, significant_range=2, category_12=True) == (
        "significant errors range 0-2 (>= 2); category 2 significant: 1 of 2 raters")
    # Not-significant disagreement in category 1 is not the rule's business.
    assert queue_reason([{(1, False): 1}, {}], significant_range=0, category_12=True) is None


def test_fewer_than_two_raters_never_queued():
    assert queue_reason([{(1, True): 9}], significant_range=1, category_12=True) is None
    assert queue_reason([], significant_range=1, category_12=True) is None
    # Two all-zero completed pairs agree.
    assert queue_reason([{}, {}], significant_range=1, category_12=True) is None
