"""The adjudication queue rule: which rated pairs the raters disagree on beyond the lead's rule.

Pure functions over the raters' counts of one pair (no database). A pair is put in the queue
when at least two raters completed it and either

* the range rule is on (``significant_range > 0``) and the largest minus the smallest total of
  clinically significant errors over its raters is at least ``significant_range``, or
* the category 1/2 rule is on and the raters disagree on whether there is any clinically
  significant error in category 1 (or in category 2): some raters count one, some none.

The reason is kept in words, e.g. ``"significant errors range 0-3 (>= 2)"`` or
``"category 1 significant: 1 of 3 raters"``, so the adjudicator and the export say why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

#: Categories checked by the category 1/2 rule (1: false finding, 2: omission of a finding).
RULE_CATEGORIES = (1, 2)

Counts = Mapping[tuple[int, bool], int]


def significant_total(counts: Counts) -> int:
    """Total clinically significant errors of one rater's counts (missing cells are 0)."""
    return sum(int(n) for (_, significant), n in counts.items() if significant)


def queue_reason(
    rater_counts: Sequence[Counts], *, significant_range: int, category_12: bool
) -> str | None:
    """Why a pair goes to adjudication, or ``None`` when it does not.

    Args:
        rater_counts: The counts of every rater who completed the pair, ``{(category,
            significant): n}``; a missing cell is 0 (an all-zero completed pair is ``{}``).
        significant_range: The range rule's threshold; 0 turns the rule off.
        category_12: Whether the category 1/2 significance rule is on.

    Returns:
        The reasons in words joined by ``"; "``, or ``None``.
    """
    if len(rater_counts) < 2:
        return None
    reasons: list[str] = []
    if significant_range > 0:
        totals = [significant_total(c) for c in rater_counts]
        lo, hi = min(totals), max(totals)
        if hi - lo >= significant_range:
            reasons.append(f"significant errors range {lo}-{hi} (>= {significant_range})")
    if category_12:
        for category in RULE_CATEGORIES:
            has = sum(1 for c in rater_counts if int(c.get((category, True), 0)) > 0)
            if 0 < has < len(rater_counts):
                reasons.append(f"category {category} significant: {has} of"
                               f" {len(rater_counts)} raters")
    return "; ".join(reasons) or None


__all__ = ["RULE_CATEGORIES", "queue_reason", "significant_total"]
