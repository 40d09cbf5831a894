"""Failure modes of candidate sources: which generator makes more errors of which kind.

For each error category (and the total) the per-pair error count (mean over raters) is
averaged by candidate source. Every ordered pair of sources ``(a, b)`` gets a one-sided
two-sample t-test of ``H1: mean_a > mean_b`` (``scipy.stats.ttest_ind(alternative="greater")``)
with Welch's unequal-variance form: sources differ in spread (a strong generator has many
zero-error pairs), and Welch keeps its level there while the pooled test does not. Pairs of
different sources often share a case, so the samples are not strictly independent; the test
is the field's usual screen, not a paired analysis.

All p-values of one call form one family and are adjusted with Benjamini-Hochberg
(:func:`benjamini_hochberg`, the step-up procedure of ``scipy.stats.false_discovery_control``
with ``method="bh"``). Tests whose p-value is undefined (both groups constant) are left out of
the family and never rejected.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import permutations
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

DEFAULT_FDR = 0.05


def benjamini_hochberg(
    pvalues: ArrayLike, fdr: float = DEFAULT_FDR
) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """Benjamini-Hochberg adjusted p-values and rejections at false discovery rate ``fdr``.

    ``p_adj(i) = min_{j >= i} min(1, m p_(j) / j)`` over the sorted p-values; a hypothesis is
    rejected when ``p_adj <= fdr``. NaN p-values are excluded (``m`` counts the finite ones)
    and stay NaN / not rejected.

    Args:
        pvalues: Raw p-values.
        fdr: Target false discovery rate in (0, 1).
    """
    if not 0.0 < fdr < 1.0:
        raise ValueError(f"fdr must lie in (0, 1), got {fdr}")
    p = np.asarray(pvalues, dtype=np.float64).ravel()
    finite = np.isfinite(p)
    if np.any((p[finite] < 0) | (p[finite] > 1)):
        raise ValueError("p-values must lie in [0, 1]")
    adjusted = np.full(p.shape, np.nan)
    pf = p[finite]
    m = pf.size
    if m:
        order = np.argsort(pf)
        scaled = pf[order] * m / np.arange(1, m + 1)
        # Step-up: running minimum from the largest p-value down.
        stepped = np.minimum.accumulate(scaled[::-1])[::-1]
        out = np.empty(m)
        out[order] = np.minimum(stepped, 1.0)
        adjusted[finite] = out
    reject = np.zeros(p.shape, dtype=bool)
    reject[finite] = adjusted[finite] <= fdr
    return adjusted, reject


def source_means(
    per_category: Mapping[str, ArrayLike], sources: Sequence[str]
) -> dict[str, dict[str, float | int]]:
    """Mean error count per source and category.

    Args:
        per_category: ``category label -> (n,)`` per-pair counts (NaN for unrated pairs).
        sources: ``(n,)`` source label of each pair.

    Returns:
        ``source -> {category label: mean, "n": rated pairs}`` (sources sorted).
    """
    src = np.asarray(sources, dtype=object)
    out: dict[str, dict[str, float | int]] = {}
    for name in sorted(set(src.tolist())):
        mask = src == name
        row: dict[str, float | int] = {}
        n_rated = 0
        for label, values in per_category.items():
            v = np.asarray(values, dtype=np.float64)[mask]
            v = v[np.isfinite(v)]
            n_rated = max(n_rated, v.size)
            row[label] = float(v.mean()) if v.size else float("nan")
        row["n"] = n_rated
        out[name] = row
    return out


def failure_mode_tests(
    per_category: Mapping[str, ArrayLike],
    sources: Sequence[str],
    *,
    fdr: float = DEFAULT_FDR,
    equal_var: bool = False,
) -> dict[str, Any]:
    """Means by source and one-sided t-tests between sources, BH-adjusted.

    Args:
        per_category: ``category label -> (n,)`` per-pair error counts (NaN for unrated).
        sources: ``(n,)`` source label of each pair.
        fdr: False discovery rate of the Benjamini-Hochberg procedure.
        equal_var: ``False`` (default) for Welch's test, ``True`` for the pooled test.

    Returns:
        Plain data: ``{"sources", "means", "fdr", "test", "tests": [...]}``; each test is
        ``{"category", "greater", "less", "mean_greater", "mean_less", "t", "p",
        "p_adjusted", "reject", "n_greater", "n_less"}``.
    """
    from scipy import stats

    src = np.asarray(sources, dtype=object)
    names = sorted(set(src.tolist()))
    tests: list[dict[str, Any]] = []
    for label, values in per_category.items():
        v = np.asarray(values, dtype=np.float64)
        groups = {}
        for name in names:
            g = v[src == name]
            groups[name] = g[np.isfinite(g)]
        for a, b in permutations(names, 2):
            ga, gb = groups[a], groups[b]
            if ga.size < 2 or gb.size < 2:
                t_stat, p_val = float("nan"), float("nan")
            else:
                res = stats.ttest_ind(ga, gb, equal_var=equal_var, alternative="greater")
                t_stat, p_val = float(res.statistic), float(res.pvalue)
            tests.append(
                {
                    "category": label,
                    "greater": a,
                    "less": b,
                    "mean_greater": float(ga.mean()) if ga.size else float("nan"),
                    "mean_less": float(gb.mean()) if gb.size else float("nan"),
                    "n_greater": int(ga.size),
                    "n_less": int(gb.size),
                    "t": t_stat,
                    "p": p_val,
                }
            )
    adjusted, reject = benjamini_hochberg([t["p"] for t in tests], fdr) if tests else ([], [])
    for t, p_adj, rej in zip(tests, adjusted, reject, strict=True):
        t["p_adjusted"] = float(p_adj)
        t["reject"] = bool(rej)
    return {
        "sources": names,
        "means": source_means(per_category, sources),
        "fdr": fdr,
        "test": "welch" if not equal_var else "pooled",
        "alternative": "greater",
        "correction": "benjamini-hochberg",
        "tests": tests,
    }
