"""Intra-rater agreement: how well a rater agrees with themself on hidden repeats.

A repeat is a study pair shown a second time to the same rater (``Pair.kind == "repeat"``,
``repeat_of_id`` = the source pair), later in their order and not recognisable. For one rater
the inputs are the ``(6, 2)`` count grids of each source pair and of its repeat (index
``[category - 1, significant]``, as in :mod:`backend.analysis.data`); a repeat counts only
when the rater completed both showings (the service selects them).

Each *scope* reduces a grid to one count: ``total`` (all twelve cells), ``significant`` and
``insignificant`` (six cells each), ``category N`` (both significance levels of category N).
Per scope:

* **exact agreement**: the share of repeats whose two counts are identical;
* **ICC(2,1)**: two-way random effects, absolute agreement, single measurement (Shrout &
  Fleiss 1979, case 2), with the two showings as the two "judges" and the pairs as targets:
  ``(BMS - EMS) / (BMS + (k-1) EMS + k (JMS - EMS) / n)``, ``k = 2`` -- the formula
  pingouin's ``intraclass_corr`` reports as ICC2;
* **quadratic-weighted Cohen's kappa**: categories are the integer counts ``min..max`` of
  both showings, and the disagreement weight of counts ``i`` and ``j`` is ``(i - j)**2`` (the
  distance between the counts, not between their ranks among the values seen: scikit-learn's
  ``cohen_kappa_score(..., weights="quadratic")`` agrees when given every integer in that
  range as ``labels``). It equals Lin's concordance correlation with population moments.
* **mean absolute difference** between the two showings (in counts).

Undefined values are NaN with a reason in words, never an exception: fewer than two repeats,
or no variance (every count equal).

Besides the scopes, ``exact_all_cells`` is the share of repeats whose twelve cells are all
identical.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from radconcord.backend.analysis.agreement import icc2

N_CATEGORIES = 6
#: Scopes in display order.
SCOPES: tuple[str, ...] = ("total", "significant", "insignificant") + tuple(
    f"category {c}" for c in range(1, N_CATEGORIES + 1))
MIN_REPEATS = 2


def _grids(counts: ArrayLike, name: str) -> NDArray[np.float64]:
    """``(n, 6, 2)`` finite non-negative integer counts, or a ValueError naming ``name``."""
    grid = np.asarray(counts, dtype=np.float64)
    if grid.ndim == 2 and grid.shape == (N_CATEGORIES, 2):
        grid = grid[None]
    if grid.size == 0:
        return np.zeros((0, N_CATEGORIES, 2))
    if grid.ndim != 3 or grid.shape[1:] != (N_CATEGORIES, 2):
        raise ValueError(f"{name}: expected (n, 6, 2) count grids, got shape {grid.shape}")
    if not np.all(np.isfinite(grid)) or np.any(grid < 0) or np.any(grid != np.round(grid)):
        raise ValueError(f"{name}: counts must be non-negative whole numbers")
    return grid


def scope_values(counts: ArrayLike, scope: str) -> NDArray[np.float64]:
    """``(n,)`` counts of one scope from ``(n, 6, 2)`` grids.

    Args:
        counts: Count grids, ``[pair, category - 1, significant]``.
        scope: One of :data:`SCOPES`.

    Raises:
        ValueError: an unknown scope or malformed grids.
    """
    grid = _grids(counts, "counts")
    if scope == "total":
        return grid.sum(axis=(1, 2))
    if scope == "significant":
        return grid[:, :, 1].sum(axis=1)
    if scope == "insignificant":
        return grid[:, :, 0].sum(axis=1)
    if scope.startswith("category ") and scope in SCOPES:
        c = int(scope.split()[1])
        return grid[:, c - 1, :].sum(axis=1)
    raise ValueError(f"scope must be one of {', '.join(SCOPES)}; got {scope!r}")


def _pair_vectors(first: ArrayLike, second: ArrayLike
                  ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    a = np.asarray(first, dtype=np.float64).ravel()
    b = np.asarray(second, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"first and second showings differ in length: {a.size} vs {b.size}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("counts must be finite")
    return a, b


def exact_agreement(first: ArrayLike, second: ArrayLike) -> float:
    """Share of repeats whose two counts are identical (NaN when there are none).

    Args:
        first: ``(n,)`` counts at the first showing.
        second: ``(n,)`` counts at the repeat.
    """
    a, b = _pair_vectors(first, second)
    if a.size == 0:
        return float("nan")
    return float(np.mean(a == b))


def _no_variance(a: NDArray[np.float64], b: NDArray[np.float64]) -> str:
    values = np.unique(np.concatenate([a, b]))
    if values.size == 1:
        return f"every count is {values[0]:g} in both showings: no variance"
    return "no variance between pairs or between showings"


def icc_2_1(first: ArrayLike, second: ArrayLike) -> tuple[float, str]:
    """ICC(2,1) of the two showings (two-way random, absolute agreement, single measure).

    Args:
        first: ``(n,)`` counts at the first showing.
        second: ``(n,)`` counts at the repeat.

    Returns:
        ``(icc, reason)``: the reason is ``""`` when defined, else why it is NaN.
    """
    a, b = _pair_vectors(first, second)
    if a.size < MIN_REPEATS:
        return float("nan"), f"needs at least {MIN_REPEATS} repeats, got {a.size}"
    value = icc2(np.column_stack([a, b])).icc2_1
    if not math.isfinite(value):
        return float("nan"), _no_variance(a, b)
    return value, ""


def quadratic_kappa(first: ArrayLike, second: ArrayLike) -> tuple[float, str]:
    """Cohen's kappa with quadratic weights on the count distance (see the module docstring).

    ``kappa = 1 - sum(W * O) / sum(W * E)`` over the contingency table of counts
    ``min..max``, with ``O`` the observed proportions, ``E`` the product of the margins and
    ``W[i, j] = (i - j)**2``.

    Args:
        first: ``(n,)`` non-negative whole counts at the first showing.
        second: ``(n,)`` counts at the repeat.

    Returns:
        ``(kappa, reason)``: the reason is ``""`` when defined, else why it is NaN.
    """
    a, b = _pair_vectors(first, second)
    if a.size < MIN_REPEATS:
        return float("nan"), f"needs at least {MIN_REPEATS} repeats, got {a.size}"
    if np.any(a != np.round(a)) or np.any(b != np.round(b)):
        raise ValueError("kappa needs whole counts")
    low = int(min(a.min(), b.min()))
    levels = int(max(a.max(), b.max())) - low + 1
    observed = np.zeros((levels, levels))
    np.add.at(observed, (a.astype(np.int64) - low, b.astype(np.int64) - low), 1.0)
    observed /= a.size
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0))
    idx = np.arange(levels, dtype=np.float64)
    weights = (idx[:, None] - idx[None, :]) ** 2
    denominator = float((weights * expected).sum())
    if denominator == 0.0:
        return float("nan"), _no_variance(a, b)
    return 1.0 - float((weights * observed).sum()) / denominator, ""


@dataclass(frozen=True)
class ScopeAgreement:
    """Intra-rater agreement of one scope.

    Attributes:
        scope: One of :data:`SCOPES`.
        n: Repeats counted.
        exact: Share of repeats with identical counts (NaN when ``n == 0``).
        icc2_1: ICC(2,1) (NaN when undefined, see ``icc_note``).
        icc_note: Why the ICC is undefined (``""`` when it is defined).
        kappa: Quadratic-weighted kappa (NaN when undefined, see ``kappa_note``).
        kappa_note: Why kappa is undefined (``""`` when it is defined).
        mean_abs_diff: Mean absolute difference in counts (NaN when ``n == 0``).
    """

    scope: str
    n: int
    exact: float
    icc2_1: float
    icc_note: str
    kappa: float
    kappa_note: str
    mean_abs_diff: float


@dataclass(frozen=True)
class RaterIntraRater:
    """Intra-rater agreement of one rater (or of all raters pooled).

    Attributes:
        rater: Username (or a label for a pooled row).
        n_repeats: Repeats counted (both showings done).
        exact_all_cells: Share of repeats with all twelve cells identical (NaN when none).
        scopes: One entry per scope of :data:`SCOPES`, in that order.
    """

    rater: str
    n_repeats: int
    exact_all_cells: float
    scopes: tuple[ScopeAgreement, ...]

    def scope(self, name: str) -> ScopeAgreement:
        """The entry of scope ``name``."""
        for item in self.scopes:
            if item.scope == name:
                return item
        raise KeyError(f"no scope {name!r}; scopes: {', '.join(SCOPES)}")


def scope_agreement(scope: str, first: ArrayLike, second: ArrayLike) -> ScopeAgreement:
    """Every statistic of one scope from the two showings' ``(n,)`` counts.

    Args:
        scope: The scope's name (a label only).
        first: Counts at the first showing.
        second: Counts at the repeat.
    """
    a, b = _pair_vectors(first, second)
    icc, icc_note = icc_2_1(a, b)
    kappa, kappa_note = quadratic_kappa(a, b)
    if a.size == 0:
        icc_note = kappa_note = "no repeat done in both showings yet"
    return ScopeAgreement(
        scope=scope, n=int(a.size), exact=exact_agreement(a, b), icc2_1=icc,
        icc_note=icc_note, kappa=kappa, kappa_note=kappa_note,
        mean_abs_diff=float(np.mean(np.abs(a - b))) if a.size else float("nan"))


def rater_agreement(rater: str, first: ArrayLike | Sequence[ArrayLike],
                    second: ArrayLike | Sequence[ArrayLike]) -> RaterIntraRater:
    """Intra-rater agreement of one rater over their repeats, per scope.

    Args:
        rater: The rater's name (carried into the result).
        first: ``(n, 6, 2)`` count grids at the first showing (source pairs).
        second: ``(n, 6, 2)`` grids of the same pairs at the repeat, in the same order.

    Raises:
        ValueError: malformed grids or different numbers of first and second showings.
    """
    a = _grids(first, "first showing")
    b = _grids(second, "repeat")
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"{rater}: {a.shape[0]} first showings but {b.shape[0]} repeats")
    same = np.all(a == b, axis=(1, 2))
    return RaterIntraRater(
        rater=rater,
        n_repeats=int(a.shape[0]),
        exact_all_cells=float(np.mean(same)) if a.shape[0] else float("nan"),
        scopes=tuple(scope_agreement(scope, scope_values(a, scope), scope_values(b, scope))
                     for scope in SCOPES),
    )


__all__ = [
    "MIN_REPEATS",
    "SCOPES",
    "RaterIntraRater",
    "ScopeAgreement",
    "exact_agreement",
    "icc_2_1",
    "quadratic_kappa",
    "rater_agreement",
    "scope_agreement",
    "scope_values",
]
