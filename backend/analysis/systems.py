"""Systems (candidate sources) ranked by the metrics and by the radiologists.

Input: one row per rated pair (a candidate report of one source for one case's reference):
metric values ``(n_pairs, n_metrics)`` (NaN where a pair is not scored), the radiologists'
errors per pair (the mean over raters of the total or significant errors; NaN where nobody
counted the pair), the pair's source and its case. Three results, all vectorised:

* Per source, the mean of each metric and of the human errors, each with a seeded percentile
  bootstrap interval over that source's pairs (cases are the resampling units, so repeated
  pairs of one case move together). NaN values are left out per metric.
* For each metric, the order of the sources by their mean (best first: descending for a
  higher-is-better metric, ascending for an error-like one) and the system-level Kendall
  tau-b between the metric's means (oriented, higher = better) and the negated human means
  (fewer errors = better), over the sources that have both. A positive tau means the metric
  ranks the systems as the radiologists do.
* For every two sources A and B, a paired approximate randomization test on every metric and
  on the human errors. Pairs of A and B are matched by case (same reference); pairs whose
  case the other source lacks are dropped and counted (``n_unmatched``), and a matched case
  missing a metric's value on either side is dropped for that metric only. When a source
  holds several pairs of one case, their values are averaged first. The statistic is the
  difference of means ``mean(A) - mean(B)`` in the metric's own units (errors: A's mean
  errors minus B's). Each permutation swaps A's and B's values within each matched case with
  probability 1/2, i.e. flips the sign of that case's difference; all permutations and all
  metrics are evaluated at once as ``signs (R, n) @ differences (n, K)``. The p-value is
  ``(count(|d*| >= |d|) + 1) / (R + 1)`` (two-sided, never 0; ``|d*| >= |d|`` with a relative
  tolerance of 1e-9 so that exact ties in floating point count as ties).

Corpus-level metrics: a per-pair value of a metric whose values depend on the whole scored set
(CIDEr's document frequencies, BERTScore with idf, calibrated scores) is randomized like any
other per-pair value. That is an approximation: df/idf were computed once over the scored set
and are not recomputed for each permutation (re-scoring would take hours for model metrics
and, for a swap within matched pairs, changes df/idf little since the set of texts is the
same). Corpus-only outputs (e.g. ``bleu4_corpus``) have no per-pair value, so they have no
per-source mean, ranking or test; they are named in the ``corpus_level`` text. A column with
no finite value at all is treated the same way.

Randomness: the bootstrap of every source uses ``default_rng(seed)`` over its own cases, and
the randomization of every source pair uses its own ``default_rng(seed)``, so a source's
interval and a pair's p-value do not depend on which other sources are present.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from radconcord.backend.analysis.bootstrap import DEFAULT_LEVEL, draw_resamples, percentile_interval
from radconcord.backend.analysis.stats import kendall_tau_b

#: Key of the human errors in ``randomization`` entries (beside the metric keys).
HUMAN_KEY = "human_errors"
DEFAULT_PERMUTATIONS = 1000
DEFAULT_RESAMPLES = 1000
# Relative tolerance of |d*| >= |d|: a permutation that reproduces |d| up to rounding counts.
_TIE_RTOL = 1e-9


def _f(value: float) -> float | None:
    """Float for JSON; NaN/inf -> None."""
    v = float(value)
    return v if math.isfinite(v) else None


def _ci(row: NDArray[np.float64]) -> list[float | None]:
    return [_f(row[0]), _f(row[1])]


def _validate(
    values: ArrayLike,
    keys: Sequence[str],
    higher_is_better: Sequence[bool],
    human: ArrayLike,
    sources: Sequence[str],
    cases: Sequence[str],
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.str_], NDArray[np.str_]]:
    """Arrays of the inputs, or one ValueError naming the argument and its shape."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 1 and len(keys) == 1:
        v = v[:, None]
    if v.ndim != 2:
        raise ValueError(f"systems: values must be (n_pairs, n_metrics), got shape {v.shape}")
    n, k = v.shape
    if len(keys) != k:
        raise ValueError(f"systems: {len(keys)} keys for {k} value columns")
    if len(set(keys)) != len(keys):
        dup = sorted({x for x in keys if list(keys).count(x) > 1})
        raise ValueError(f"systems: duplicate metric keys {dup}")
    if HUMAN_KEY in keys:
        raise ValueError(f"systems: '{HUMAN_KEY}' is reserved for the human errors")
    if len(higher_is_better) != k:
        raise ValueError(f"systems: {len(higher_is_better)} directions for {k} metric keys")
    h = np.asarray(human, dtype=np.float64)
    if h.shape != (n,):
        raise ValueError(f"systems: human must have shape ({n},), got {h.shape}")
    if len(sources) != n:
        raise ValueError(f"systems: {len(sources)} sources for {n} pairs")
    if len(cases) != n:
        raise ValueError(f"systems: {len(cases)} cases for {n} pairs")
    src = np.asarray([str(s) for s in sources], dtype=str)
    cas = np.asarray([str(c) for c in cases], dtype=str)
    return v, h, src, cas


def source_means(
    columns: NDArray[np.float64],
    cases: NDArray[np.str_],
    *,
    resamples: int,
    seed: int,
    level: float = DEFAULT_LEVEL,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.int64]]:
    """Column means of one source's pairs with percentile bootstrap intervals.

    Cases are the resampling units (``draw_resamples(n, resamples, seed, clusters=cases)``),
    so several pairs of one case enter a resample together; with one pair per case this is
    the plain pair bootstrap. NaN values are left out per column. All resamples and columns
    are two matrix products.

    Args:
        columns: ``(n, K)`` values of the source's pairs, NaN where missing.
        cases: ``(n,)`` case of each pair.
        resamples: Bootstrap resamples ``B``; 0 leaves the intervals NaN.
        seed: Seed of ``numpy.random.default_rng``.
        level: Interval coverage.

    Returns:
        ``(K,)`` means, ``(K, 2)`` intervals and ``(K,)`` counts of finite values.
    """
    means, ci, counts, _ = source_means_replicates(columns, cases, resamples=resamples,
                                                   seed=seed, level=level)
    return means, ci, counts


def source_means_replicates(
    columns: NDArray[np.float64],
    cases: NDArray[np.str_],
    *,
    resamples: int,
    seed: int,
    level: float = DEFAULT_LEVEL,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.int64], NDArray[np.float64]]:
    """:func:`source_means` and its ``(B, K)`` bootstrap means (``(0, K)`` without resamples),
    which the system-level tau's interval reuses (no further random draws)."""
    n, k = columns.shape
    finite = np.isfinite(columns)
    counts = finite.sum(axis=0)
    filled = np.where(finite, columns, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = filled.sum(axis=0) / counts
    ci = np.full((k, 2), np.nan)
    boot = np.zeros((0, k))
    if resamples > 0 and n > 0:
        w = draw_resamples(n, resamples, seed, clusters=cases).weights
        with np.errstate(invalid="ignore", divide="ignore"):
            boot = (w @ filled) / (w @ finite.astype(np.float64))
        ci = percentile_interval(boot, level)
    return means, ci, counts.astype(np.int64), boot


def system_tau_replicates(metric: NDArray[np.float64], human: NDArray[np.float64]
                          ) -> NDArray[np.float64]:
    """Kendall tau-b per row of ``(B, S)`` oriented metric means against ``(B, S)`` negated
    human means (higher = better on both sides), vectorised over the rows.

    ``tau_b = sum sign(dx) sign(dy) / sqrt(sum sign(dx)^2 sum sign(dy)^2)`` over the source
    pairs; NaN where a side is constant (or a row has a NaN).
    """
    i, j = np.triu_indices(metric.shape[1], k=1)
    sx = np.sign(metric[:, i] - metric[:, j])
    sy = np.sign(human[:, i] - human[:, j])
    with np.errstate(invalid="ignore", divide="ignore"):
        return (sx * sy).sum(axis=1) / np.sqrt((sx**2).sum(axis=1) * (sy**2).sum(axis=1))


def paired_randomization(
    diffs: NDArray[np.float64], *, permutations: int, seed: int
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.int64]]:
    """Paired approximate randomization of the mean difference, for K columns at once.

    Swapping the two systems' values of a matched pair flips the sign of its difference, so
    one ``(R, n)`` matrix of random signs (``default_rng(seed).integers(0, 2, (R, n))``,
    1 -> +1, 0 -> -1) times the ``(n, K)`` differences (NaN as 0) gives every permuted sum;
    each column's count of finite pairs is fixed under swapping.

    Args:
        diffs: ``(n, K)`` per-pair differences A - B, NaN where a side is missing.
        permutations: ``R`` (>= 1).
        seed: Seed of ``numpy.random.default_rng``.

    Returns:
        ``(K,)`` observed mean differences, ``(K,)`` p-values ``(c + 1) / (R + 1)`` (NaN
        for a column without a finite pair) and ``(K,)`` pair counts.
    """
    if permutations < 1:
        raise ValueError(f"systems: permutations must be >= 1, got {permutations}")
    n, k = diffs.shape
    finite = np.isfinite(diffs)
    counts = finite.sum(axis=0)
    filled = np.where(finite, diffs, 0.0)
    rng = np.random.default_rng(seed)
    signs = rng.integers(0, 2, size=(permutations, n)).astype(np.float64) * 2.0 - 1.0
    observed_sum = filled.sum(axis=0)
    permuted_sum = signs @ filled
    # Compare sums, not means: the count is the same on both sides of the inequality.
    thresh = np.abs(observed_sum) * (1.0 - _TIE_RTOL)
    exceed = (np.abs(permuted_sum) >= thresh).sum(axis=0)
    p = (exceed + 1.0) / (permutations + 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        d = observed_sum / counts
    p = np.where(counts > 0, p, np.nan)
    return d, p, counts.astype(np.int64)


def _case_table(
    columns: NDArray[np.float64], cases: NDArray[np.str_]
) -> tuple[NDArray[np.str_], NDArray[np.int64], NDArray[np.float64]]:
    """Sorted cases of one source, each pair's case index, per-case column means (NaN out)."""
    uniq, inv = np.unique(cases, return_inverse=True)
    inv = inv.ravel()
    finite = np.isfinite(columns)
    sums = np.zeros((uniq.size, columns.shape[1]))
    cnts = np.zeros((uniq.size, columns.shape[1]))
    np.add.at(sums, inv, np.where(finite, columns, 0.0))
    np.add.at(cnts, inv, finite.astype(np.float64))
    with np.errstate(invalid="ignore", divide="ignore"):
        return uniq, inv.astype(np.int64), sums / cnts


def _unmatched(
    columns: NDArray[np.float64],
    case_of_pair: NDArray[np.int64],
    matched_cases: NDArray[np.int64],
    diffs: NDArray[np.float64],
    n_cases: int,
) -> NDArray[np.int64]:
    """Per column, this source's pairs with a value whose case is not in the tested set.

    A case is tested for a column when the other source has it and both per-case values are
    finite (``diffs`` finite), so this counts pairs dropped for lack of a partner.
    """
    tested = np.zeros((n_cases, columns.shape[1]), dtype=bool)
    tested[matched_cases] = np.isfinite(diffs)
    return (np.isfinite(columns) & ~tested[case_of_pair]).sum(axis=0).astype(np.int64)


def _order(means: NDArray[np.float64], names: Sequence[str], descending: bool) -> list[str]:
    """Sources with a finite mean, best first; ties by name."""
    idx = [i for i in range(len(names)) if math.isfinite(means[i])]
    sign = -1.0 if descending else 1.0
    return [names[i] for i in sorted(idx, key=lambda i: (sign * means[i], names[i]))]


def _corpus_text(
    keys: Sequence[str], skipped: Sequence[str], corpus_dependent: Collection[str],
    permutations: int,
) -> str:
    text = (
        "Per-pair values of corpus-dependent metrics (e.g. CIDEr's document frequencies,"
        " BERTScore with idf) are randomized like any other per-pair value; this is an"
        " approximation: their df/idf come from the whole scored set and are not recomputed"
        f" in each of the {permutations} permutations."
    )
    named = [k for k in keys if k in corpus_dependent and k not in skipped]
    if named:
        text += " Corpus-dependent keys here: " + ", ".join(named) + "."
    if skipped:
        text += (" Skipped (no per-pair value, e.g. corpus-only aggregates such as"
                 " bleu4_corpus): " + ", ".join(skipped) + ".")
    return text


def systems_json(
    values: np.ndarray,
    keys: Sequence[str],
    higher_is_better: Sequence[bool],
    human: np.ndarray,
    sources: Sequence[str],
    cases: Sequence[str],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
    corpus_dependent: Collection[str] = (),
) -> dict[str, Any]:
    """The ``systems`` section of the correlate JSON (see the module docstring).

    Args:
        values: ``(n_pairs, n_metrics)`` metric values as stored (not oriented), NaN where
            a pair is not scored.
        keys: Metric key of each column.
        higher_is_better: Direction of each column.
        human: ``(n_pairs,)`` radiologists' errors per pair (mean over raters; total or
            significant), NaN where no rater counted the pair.
        sources: Candidate source of each pair.
        cases: Case (reference) of each pair; pairs of two sources are matched by it.
        resamples: Bootstrap resamples of the per-source intervals (0: intervals null).
        permutations: Permutations of each randomization test (>= 1).
        seed: Seed of the bootstrap and of the randomization (recorded by the caller).
        level: Interval coverage.
        corpus_dependent: Keys whose per-pair values depend on the whole scored set, named in
            the ``corpus_level`` text.

    Returns:
        ``{"sources": {src: {"n", "human_mean", "human_ci95", "metrics": {key: {"mean",
        "ci95"}}}}, "ranking": {key: {"kendall_tau", "metric_order", "kendall_ci95",
        "n_systems"}}, "human_order",
        "randomization": {"A|B": {key or "human_errors": {"diff", "p", "n_pairs",
        "n_unmatched"}}}, "permutations", "corpus_level"}``; NaN becomes ``None``. ``A|B``
        has A before B in sorted order; ``kendall_tau`` is null with fewer than 2 sources
        having both means (or a constant side).

    Raises:
        ValueError: shapes that do not match, duplicate or reserved keys, bad counts.
    """
    v, h, src, cas = _validate(values, keys, higher_is_better, human, sources, cases)
    if resamples < 0:
        raise ValueError(f"systems: resamples must be >= 0, got {resamples}")
    if permutations < 1:
        raise ValueError(f"systems: permutations must be >= 1, got {permutations}")
    keys = [str(x) for x in keys]
    hib = [bool(x) for x in higher_is_better]
    has_values = np.isfinite(v).any(axis=0) if v.size else np.zeros(len(keys), dtype=bool)
    skipped = [key for key, ok in zip(keys, has_values, strict=True) if not ok]
    used = np.flatnonzero(has_values)
    # Human errors travel as one more column through the same vectorised code.
    table = np.column_stack([v[:, used], h])
    used_keys = [keys[i] for i in used]
    names = sorted(set(src.tolist()))

    means = np.full((len(names), table.shape[1]), np.nan)
    boots = np.full((resamples, len(names), table.shape[1]), np.nan)
    section_sources: dict[str, Any] = {}
    for s, name in enumerate(names):
        rows = np.flatnonzero(src == name)
        m, ci, _, boot = source_means_replicates(table[rows], cas[rows], resamples=resamples,
                                                 seed=seed, level=level)
        means[s] = m
        if boot.shape[0]:
            boots[:, s, :] = boot
        metrics_entry = {key: {"mean": _f(m[j]), "ci95": _ci(ci[j])}
                         for j, key in enumerate(used_keys)}
        section_sources[name] = {
            "n": int(rows.size),
            "human_mean": _f(m[-1]),
            "human_ci95": _ci(ci[-1]),
            "metrics": metrics_entry,
        }

    human_means = means[:, -1]
    ranking: dict[str, Any] = {}
    for j, key in enumerate(used_keys):
        hb = hib[int(used[j])]
        col = means[:, j]
        both = np.isfinite(col) & np.isfinite(human_means)
        tau: float | None = None
        if both.sum() >= 2:
            oriented = col[both] if hb else -col[both]
            tau = _f(kendall_tau_b(oriented, -human_means[both]))
        ci95: list[float | None] = [None, None]
        if tau is not None and resamples > 0:
            b_col = boots[:, both, j]
            reps = system_tau_replicates(b_col if hb else -b_col, -boots[:, both, -1])
            reps = reps[np.isfinite(reps)]
            if reps.size:
                ci95 = _ci(percentile_interval(reps[:, None], level)[0])
        ranking[key] = {"kendall_tau": tau, "metric_order": _order(col, names, descending=hb),
                        "kendall_ci95": ci95, "n_systems": int(both.sum())}

    tables = {name: _case_table(table[src == name], cas[src == name]) for name in names}
    randomization: dict[str, Any] = {}
    for a in range(len(names)):
        for b in range(a + 1, len(names)):
            (cases_a, inv_a, vals_a), (cases_b, inv_b, vals_b) = tables[names[a]], tables[names[b]]
            _, ia, ib = np.intersect1d(cases_a, cases_b, assume_unique=True,
                                       return_indices=True)
            diffs = vals_a[ia] - vals_b[ib]
            d, p, cnt = paired_randomization(diffs, permutations=permutations, seed=seed)
            unmatched = (_unmatched(table[src == names[a]], inv_a, ia, diffs, cases_a.size)
                         + _unmatched(table[src == names[b]], inv_b, ib, diffs, cases_b.size))
            randomization[f"{names[a]}|{names[b]}"] = {
                key: {"diff": _f(d[j]), "p": _f(p[j]), "n_pairs": int(cnt[j]),
                      "n_unmatched": int(unmatched[j])}
                for j, key in enumerate([*used_keys, HUMAN_KEY])
            }

    return {
        "sources": section_sources,
        "ranking": ranking,
        "human_order": _order(human_means, names, descending=False),
        "randomization": randomization,
        "permutations": int(permutations),
        "corpus_level": _corpus_text(keys, skipped, corpus_dependent, permutations),
    }
