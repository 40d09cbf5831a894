"""When a statistic is worth showing as a number: minimum n and undefined values (pure).

Every page that shows an agreement statistic asks :func:`judge` what to print: the number,
``"n too small"`` (greyed: below the documented minimum the number would mislead), or
``"n/a (no variance)"`` (the statistic is undefined, e.g. every rater gave 0 in a category, so
ICC and tau divide by zero) instead of an empty cell or a missing bar.

The minimums (issue 24, "numbers a reviewer can trust on sight"):

:data:`MIN_PAIRS` = 10 pairs for a pair-level statistic (Kendall tau-b, Spearman, the human
    ceiling, ICC, Krippendorff's alpha, a paired tau difference). With fewer than 10 pairs a
    Kendall tau must exceed about 0.5 in magnitude before a two-sided permutation test at 0.05
    tells it from 0 (n = 8: 0.57; n = 10: 0.47; n = 12: 0.42), and the percentile bootstrap
    draws from so few distinct values that its interval covers most of [-1, 1]: a value such
    as 0.667 from 3 pairs says nothing about the metric. Ten is a floor, not a target: Koo &
    Li (2016) recommend at least 30 items for a reliability study.
:data:`MIN_SYSTEMS` = 5 systems for a system-level Kendall tau. With ``S`` systems a random
    ranking matches the radiologists' exactly with probability ``1 / S!``; with 4 or fewer
    even a perfect tau = 1 has a two-sided exact p of at least ``2 / 4! = 0.083``, and with 3
    systems tau takes only the values -1, -1/3, 1/3 and 1. The tau is still shown (it is the
    only system-level number there is), with its interval and a warning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Minimum pairs behind a pair-level statistic before it is shown as a number.
MIN_PAIRS = 10
#: Fewer systems than this: a system-level tau carries a warning (see the module docstring).
MIN_SYSTEMS = 5
#: What a page prints instead of a number below the minimum n (drawn greyed).
N_TOO_SMALL = "n too small"
#: What a page prints for an undefined statistic (no variance on a side).
NO_VARIANCE = "n/a (no variance)"
#: What a page prints when there is nothing to compute at all (no pair with two values).
NO_DATA = "n/a (no data)"

#: ``Judged.state`` values.
SHOWN, TOO_SMALL, UNDEFINED, EMPTY = "value", "n_too_small", "no_variance", "no_data"


@dataclass(frozen=True)
class Judged:
    """A statistic as a page should show it.

    Attributes:
        state: :data:`SHOWN`, :data:`TOO_SMALL`, :data:`UNDEFINED` or :data:`EMPTY`.
        value: The number when shown, else ``None``.
        n: The n behind it.
        min_n: The minimum it was judged against.
    """

    state: str
    value: float | None
    n: int
    min_n: int

    @property
    def shown(self) -> bool:
        """Whether the number may be shown."""
        return self.state == SHOWN

    def text(self, digits: int = 3) -> str:
        """The number rounded, or :data:`N_TOO_SMALL` / :data:`NO_VARIANCE` /
        :data:`NO_DATA`."""
        if self.state == SHOWN and self.value is not None:
            return f"{self.value:.{digits}f}"
        return {TOO_SMALL: N_TOO_SMALL, UNDEFINED: NO_VARIANCE}.get(self.state, NO_DATA)


def judge(value: float | None, n: int | None, min_n: int = MIN_PAIRS) -> Judged:
    """What to show for a statistic computed from ``n`` units.

    Below ``min_n`` (and at least 1 unit) the statistic is "n too small", whether or not it
    was defined; at or above it an undefined value (``None`` or NaN) is "no variance"; no
    unit at all is "no data".

    Args:
        value: The statistic (``None``/NaN: undefined).
        n: Units behind it (pairs, systems); ``None`` counts as 0.
        min_n: The minimum (:data:`MIN_PAIRS` or :data:`MIN_SYSTEMS`).
    """
    count = int(n or 0)
    defined = value is not None and math.isfinite(float(value))
    if count <= 0 and not defined:
        return Judged(EMPTY, None, count, min_n)
    if count < min_n:
        return Judged(TOO_SMALL, None, count, min_n)
    if not defined:
        return Judged(UNDEFINED, None, count, min_n)
    return Judged(SHOWN, float(value), count, min_n)  # type: ignore[arg-type]


__all__ = ["EMPTY", "MIN_PAIRS", "MIN_SYSTEMS", "NO_DATA", "NO_VARIANCE", "N_TOO_SMALL",
           "SHOWN", "TOO_SMALL", "UNDEFINED", "Judged", "judge"]
