"""``correlate``: every agreement statistic of one study as one JSON-able dict.

The core: :func:`correlate` takes a study's arrays (:class:`backend.analysis.data.StudyRatings`
and its :class:`backend.analysis.data.MetricColumn` s, read by
:mod:`backend.services.evaluation.study_data`) and returns the typed
:class:`backend.analysis.correlation.CorrelationReport`, whose ``to_json()`` is this layout;
:func:`correlate_metrics` is the ``metrics`` numbers on plain arrays (the Python API's
``radconcord.correlate``). Nothing here reads the database.

Layout of the JSON (the sections beside ``metrics``)::

    {"study", "target", "n_pairs", "seed", "resamples", "cluster", "level", "n_raters",
     "n_pairs_in_study", "counts", "n_adjudicated",
     "metrics": {KEY: {"kendall_tau_b", "kendall_ci95": [lo, hi], "spearman",
                       "spearman_ci95", "higher_is_better", "signature", "signature_hash",
                       "family", "n", "n_signatures", "n_degenerate_resamples",
                       "imported": null | {"description", "source", "file_name",
                                           "file_sha256", "n_pairs", "n_missing",
                                           "imported_at", "imported_by", "signature"}}},
     "per_category": {"1".."6": {"name", "mean_errors",
                                 "metrics": {KEY: {"kendall_tau_b", "kendall_ci95",
                                                   "spearman", "spearman_ci95", "n"}}}},
     "per_rater": {USER: {"n_pairs", "mean_errors", "kendall_vs_other_raters",
                          "n_shared_pairs", "metrics": {...}}},
     "per_source": {SOURCE: {"n_pairs", "mean_errors", "metrics": {...}}},
     "agreement": {"target", "raters", "total": {"krippendorff_alpha_interval",
                   "krippendorff_alpha_ratio", "icc2_1", "icc2_k", "icc_k", "icc_n_pairs",
                   "n_pairs_pairable", "n_ratings"}, "per_category": {"1".."6": {...}}},
     "failure_modes": {...see failure_modes.failure_mode_tests...},
     "radcliq_refit": {"available": bool, ...},
     "published": {"dataset", "note", "entries": [{"paper", "metric", "key",
                                                   "kendall_tau_b", "ours"}]},
     "unit", "correction",
     "ceiling": null | {"kendall_tau_b", "kendall_ci95", "spearman", "spearman_ci95",
                        "per_rater": {USER: tau}, "per_rater_spearman", "n_shared_pairs",
                        "per_category": {"1".."6": tau}, "per_category_spearman",
                        "n_raters", "unit", "resamples"},
     "paired_tests": {"unit", "correction", "resamples", "level", "p_method",
                      "williams_method",
                      "pairs": {"A|B": {"tau_diff", "ci95", "p", "p_adjusted", "williams_t",
                                        "williams_p", "williams_n"}}},
     "pairwise": the same section as "paired_tests" (old key, kept for one release),
     "systems": {...see systems.systems_json...},
     "coverage": {"fully_rated_only", "n_pairs_under_rated", "n_pairs_left_out"}}

and every ``metrics`` entry carries ``pct_of_ceiling`` (``tau / ceiling tau`` as a fraction,
null without a positive ceiling).

Every correlation orients the metric so that higher means better (lower-is-better keys are
negated) and negates the radiologists' error count, so a positive tau means agreement. A key
imported from a file (``import-scores``, family ``external``) enters every section like a
computed one, with the direction its latest import recorded, and its ``imported`` entry says
where the values came from. The
target per pair is the mean over the counted raters (data.py says which ratings count) of the
total errors, or of the clinically significant errors with ``significant_only``. Pairs no
rater counted are left out (``n_pairs`` counts the rest). Every section is bootstrapped with the
same seed; the main and per-category sections share one set of resamples, per-rater and
per-source sections draw their own from the same seed over their own pairs. ``cluster="case"``
resamples whole cases (pairs sharing a reference are not independent). The refit section is
always present; ``available`` is false (with a ``reason``) when one of its four inputs is not
scored on the study. NaN values become ``null``.

The ceiling (ceiling.py: leave-one-rater-out agreement, >= 3 raters) and the paired
comparison of every two metrics (the paired tests, pairwise.py; JSON key ``paired_tests``,
also written as ``pairwise`` for one release) resample by ``unit``: ``"pair"``, ``"case"`` or
``"rater_pair"`` (pairs, then the raters inside each drawn pair, with
``default_rng((seed, 1))``); ``unit`` defaults to ``cluster``. When the unit draws like
``cluster`` does (pair and rater_pair draw pairs), they use the main section's resamples, so
the paired differences are differences of the taus whose intervals ``metrics`` shows. The
systems section (systems.py) runs on the rated pairs with ``permutations`` permutations.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from radconcord.backend.analysis.agreement import agreement_summary
from radconcord.backend.analysis.bootstrap import (
    DEFAULT_LEVEL,
    CorrelationBootstrap,
    Resamples,
    bootstrap_correlations,
    bootstrap_many,
    draw_resamples,
)
from radconcord.backend.analysis.ceiling import (
    human_ceiling,
    pct_of_ceiling,
    resampled_rater_means,
)
from radconcord.backend.analysis.correlation import (
    CLUSTERS,
    CategorySection,
    CorrelationEntry,
    CorrelationOptions,
    CorrelationReport,
    MetricEntry,
    PublishedEntry,
    PublishedSection,
    RaterSection,
    SourceSection,
)
from radconcord.backend.analysis.data import (
    N_CATEGORIES,
    AnalysisInputError,
    MetricColumn,
    StudyRatings,
)
from radconcord.backend.analysis.failure_modes import failure_mode_tests
from radconcord.backend.analysis.paired_tests import paired_tests_section
from radconcord.backend.analysis.refit import RADCLIQ_INPUTS, refit
from radconcord.backend.analysis.stats import (
    kendall_tau_b,
    orient,
    rank_correlations_batch,
    rank_correlations_varying_target,
    to_json_safe,
)
from radconcord.backend.analysis.systems import systems_json
from radconcord.backend.metrics import registry
from radconcord.backend.types import CATEGORIES

logger = logging.getLogger(__name__)

__all__ = ["CLUSTERS", "MIN_REFIT_PAIRS", "PUBLISHED", "SECTIONS", "MetricCorrelations",
           "correlate", "correlate_metrics"]

MIN_REFIT_PAIRS = 10
#: The steps ``progress(done, total, section)`` names, in order.
SECTIONS = ("data", "metrics and categories", "raters", "sources", "agreement",
            "ceiling", "paired tests", "systems", "refit")

# Published Kendall tau-b on ReXVal total errors; the first column names the paper. ``key`` is
# our closest output key; the papers do not publish every setting behind their numbers.
PUBLISHED: tuple[tuple[str, str, str | None, float], ...] = (
    ("ER2Score paper", "BLEU-4", "bleu4", 0.345),
    ("ER2Score paper", "ROUGE-L", "rougeL", 0.491),
    ("ER2Score paper", "METEOR", "meteor", 0.464),
    ("ER2Score paper", "CIDEr", "cider", 0.499),
    ("ER2Score paper", "BERTScore", "bertscore_f", 0.507),
    ("ER2Score paper", "RadGraph F1", "radgraph_combined", 0.516),
    ("ER2Score paper", "s_emb", "semb", 0.494),
    ("ER2Score paper", "RadCliQ-v1", "radcliq_v1", 0.631),
    ("ER2Score paper", "GREEN", "green", 0.640),
    ("RadCliQ paper", "BERTScore", "bertscore_f", 0.500),
    ("RadCliQ paper", "RadGraph", "radgraph_combined", 0.463),
    ("RadCliQ paper", "BLEU", "bleu2_radcliq", 0.459),
    ("RadCliQ paper", "CheXbert", "semb", 0.457),
    ("RadCliQ paper", "RadCliQ", "radcliq_v0", 0.522),
    ("VLScore paper", "VLScore", "vlscore", 0.718),
    # No family of ours computes CREPE (its weights are the authors'): shown, never ranked.
    ("CREPE paper (Cho et al., EMNLP 2025)", "CREPE", None, 0.786),
)

Progress = Callable[[int, int, str], None]


def _f(value: Any) -> float | None:  # noqa: ANN401 - any number
    """A JSON-safe float: NaN and infinities become ``None``."""
    if value is None:
        return None
    v = float(value)
    return v if math.isfinite(v) else None


def _ci(row: NDArray[np.float64]) -> tuple[float | None, float | None]:
    return (_f(row[0]), _f(row[1]))


def _entries(keys: Sequence[str], result: CorrelationBootstrap) -> dict[str, CorrelationEntry]:
    return {
        key: CorrelationEntry(
            kendall_tau_b=_f(result.kendall[k]), kendall_ci95=_ci(result.kendall_ci[k]),
            spearman=_f(result.spearman[k]), spearman_ci95=_ci(result.spearman_ci[k]),
            n=int(result.n[k]))
        for k, key in enumerate(keys)
    }


def draws_for(n: int, bootstrap: int, seed: int,
              clusters: NDArray[Any] | None) -> Resamples | None:
    """The resamples of ``n`` rated pairs (by cluster when given); ``None`` for 0 resamples."""
    return draw_resamples(n, bootstrap, seed, clusters) if bootstrap > 0 else None


# ------------------------------------------------------------------------------ metrics only


@dataclass(frozen=True)
class MetricCorrelations:
    """Every key against one target (the ``metrics`` numbers without a study).

    Attributes:
        keys: Output keys, in the order of the arrays.
        kendall, spearman: ``(k,)`` point estimates (NaN where undefined).
        kendall_ci, spearman_ci: ``(k, 2)`` percentile intervals (NaN without resamples).
        n: ``(k,)`` pairs used per key.
        higher_is_better: Direction of each key.
        n_pairs: Pairs with a target.
        resamples: Resamples drawn (0: none).
        cluster: ``"pair"`` or ``"case"``.
        seed, level: As given.
    """

    keys: tuple[str, ...]
    kendall: NDArray[np.float64]
    kendall_ci: NDArray[np.float64]
    spearman: NDArray[np.float64]
    spearman_ci: NDArray[np.float64]
    n: NDArray[np.int64]
    higher_is_better: tuple[bool, ...]
    n_pairs: int
    resamples: int
    cluster: str
    seed: int
    level: float


def correlate_metrics(
    scores: Mapping[str, ArrayLike],
    errors: ArrayLike,
    *,
    higher_is_better: Mapping[str, bool],
    bootstrap: int = 1000,
    seed: int = 0,
    cases: ArrayLike | None = None,
    level: float = DEFAULT_LEVEL,
    progress: Progress | None = None,
) -> MetricCorrelations:
    """Kendall tau-b and Spearman of each key against per-pair error counts.

    The ``metrics`` section's computation on plain arrays: each key oriented so that higher
    is better, errors negated, pairs with a NaN target left out, percentile intervals from
    ``bootstrap`` resamples drawn with ``seed`` (by case when ``cases`` is given).

    Args:
        scores: ``key -> (n,)`` values.
        errors: ``(n,)`` errors per pair (NaN: not rated).
        higher_is_better: Direction of every key.
        bootstrap: Resamples (0: intervals NaN).
        seed: Seed of the resampling.
        cases: ``(n,)`` case label per pair.
        level: Interval coverage.
        progress: ``progress(done, total, key)`` after each key.

    Raises:
        AnalysisInputError: fewer than 2 pairs with a target.
        ValueError: values that are not numbers.
    """
    keys = list(scores)
    target = np.asarray(errors, dtype=np.float64)
    rated = np.flatnonzero(np.isfinite(target))
    if rated.size < 2:
        raise AnalysisInputError(
            f"{rated.size} pair(s) have ratings; correlations need at least 2")
    x = np.stack([orient(np.asarray(scores[k], dtype=np.float64), higher_is_better[k])
                  for k in keys])[:, rated]
    clusters = None if cases is None else np.asarray(cases, dtype=object)[rated]
    draws = draws_for(rated.size, bootstrap, seed, clusters)
    # One key at a time on the same resamples: identical values to one batched call at the
    # same speed (each key's work is its own), and a progress step per key.
    parts = []
    for i, key in enumerate(keys):
        (part,) = bootstrap_many(x[i : i + 1], -target[rated][None, :], resamples=0, seed=seed,
                                 level=level, draws=draws)
        parts.append(part)
        if progress is not None:
            progress(i + 1, len(keys), key)
    return MetricCorrelations(
        keys=tuple(keys),
        kendall=np.concatenate([p.kendall for p in parts]),
        kendall_ci=np.concatenate([p.kendall_ci for p in parts]),
        spearman=np.concatenate([p.spearman for p in parts]),
        spearman_ci=np.concatenate([p.spearman_ci for p in parts]),
        n=np.concatenate([np.asarray(p.n, dtype=np.int64) for p in parts]),
        higher_is_better=tuple(bool(higher_is_better[k]) for k in keys),
        n_pairs=int(rated.size), resamples=draws.count if draws else 0,
        cluster="case" if cases is not None else "pair", seed=seed, level=level,
    )


# ------------------------------------------------------------------------------ the study


@dataclass(frozen=True)
class _Inputs:
    """What every section shares: the target, the rated pairs, the oriented metrics."""

    keys: list[str]
    target_mean: NDArray[np.float64]
    rated: NDArray[np.int64]
    x_all: NDArray[np.float64]
    x: NDArray[np.float64]
    cases: NDArray[Any]
    clusters: NDArray[Any] | None
    draws: Resamples | None
    category_means: dict[str, NDArray[np.float64]]


def _inputs(ratings: StudyRatings, scores: Mapping[str, MetricColumn],
            options: CorrelationOptions) -> _Inputs:
    target_mean = ratings.mean_errors(options.target)
    rated = np.flatnonzero(np.isfinite(target_mean))
    if rated.size < 2:
        raise AnalysisInputError(
            f"study '{ratings.study}' has {rated.size} rated pair(s); correlations need at"
            " least 2 (a pair counts once a rater completed it)"
        )
    keys = list(scores)
    x_all = np.stack([orient(scores[k].values, scores[k].higher_is_better) for k in keys])
    cases = np.asarray(ratings.cases, dtype=object)
    clusters = cases[rated] if options.cluster == "case" else None
    return _Inputs(
        keys=keys, target_mean=target_mean, rated=rated, x_all=x_all, x=x_all[:, rated],
        cases=cases, clusters=clusters,
        draws=draws_for(rated.size, options.bootstrap, options.seed, clusters),
        category_means={str(c): ratings.mean_errors(options.target, c)
                        for c in range(1, N_CATEGORIES + 1)},
    )


def _metric_entry(key: str, col: MetricColumn, main: CorrelationBootstrap, k: int,
                  resampled: bool) -> MetricEntry:
    return MetricEntry(
        key=key, kendall_tau_b=_f(main.kendall[k]), kendall_ci95=_ci(main.kendall_ci[k]),
        spearman=_f(main.spearman[k]), spearman_ci95=_ci(main.spearman_ci[k]),
        higher_is_better=col.higher_is_better, signature=col.signature,
        signature_hash=col.signature_hash, family=col.family, n=int(main.n[k]),
        n_signatures=col.n_signatures,
        n_degenerate_resamples=int(main.n_degenerate[k]) if resampled else 0,
        # Values computed elsewhere and imported from a file (import-scores): where they
        # came from; None for a metric this app computed.
        imported=col.imported.as_json() if col.imported is not None else None,
    )


def _metrics_and_categories(
    inp: _Inputs, scores: Mapping[str, MetricColumn], options: CorrelationOptions
) -> tuple[dict[str, MetricEntry], dict[str, CategorySection], CorrelationBootstrap]:
    """The total and the six categories share the resamples and the work on the metrics."""
    rated = inp.rated
    targets = np.stack([-inp.target_mean[rated]]
                       + [-v[rated] for v in inp.category_means.values()])
    main, *by_category = bootstrap_many(inp.x, targets, resamples=0, seed=options.seed,
                                        level=options.level, draws=inp.draws)
    metrics = {key: _metric_entry(key, scores[key], main, k, inp.draws is not None)
               for k, key in enumerate(inp.keys)}
    per_category = {
        label: CategorySection(name=CATEGORIES[int(label)], mean_errors=_f(y_c[rated].mean()),
                               metrics=_entries(inp.keys, res))
        for (label, y_c), res in zip(inp.category_means.items(), by_category, strict=True)
    }
    return metrics, per_category, main


def _subset_entries(inp: _Inputs, y: NDArray[np.float64], subset: NDArray[np.int64],
                    options: CorrelationOptions) -> dict[str, CorrelationEntry]:
    """Correlations on a subset of pairs, with its own resamples drawn from the same seed."""
    clusters = inp.cases[subset] if options.cluster == "case" else None
    res = bootstrap_correlations(
        inp.x_all[:, subset], y[subset], resamples=options.bootstrap if subset.size else 0,
        seed=options.seed, clusters=clusters, level=options.level,
    )
    return _entries(inp.keys, res)


def _per_rater(inp: _Inputs, ratings: StudyRatings,
               options: CorrelationOptions) -> dict[str, RaterSection]:
    out: dict[str, RaterSection] = {}
    rater_errors = ratings.rater_errors(options.target)
    for r, name in enumerate(ratings.raters):
        e_r = rater_errors[r]
        subset = np.flatnonzero(np.isfinite(e_r))
        others = np.delete(rater_errors, r, axis=0)
        n_others = np.isfinite(others).sum(axis=0)
        other_mean = np.where(n_others > 0, np.nansum(others, axis=0) / np.maximum(n_others, 1),
                              np.nan)
        shared = np.isfinite(e_r) & np.isfinite(other_mean)
        out[name] = RaterSection(
            n_pairs=int(subset.size),
            mean_errors=_f(e_r[subset].mean()) if subset.size else None,
            kendall_vs_other_raters=_f(kendall_tau_b(e_r[shared], other_mean[shared]))
            if shared.sum() >= 2 else None,
            n_shared_pairs=int(shared.sum()),
            metrics=_subset_entries(inp, -e_r, subset, options),
        )
    return out


def _per_source(inp: _Inputs, ratings: StudyRatings,
                options: CorrelationOptions) -> dict[str, SourceSection]:
    out: dict[str, SourceSection] = {}
    sources = np.asarray(ratings.sources, dtype=object)
    for src in sorted(set(ratings.sources)):
        subset = inp.rated[sources[inp.rated] == src]
        out[src] = SourceSection(
            n_pairs=int(subset.size),
            mean_errors=_f(inp.target_mean[subset].mean()) if subset.size else None,
            metrics=_subset_entries(inp, -inp.target_mean, subset, options),
        )
    return out


def _agreement(ratings: StudyRatings, target: str) -> dict[str, Any]:
    return to_json_safe({
        "target": target,
        "raters": list(ratings.raters),
        "total": agreement_summary(ratings.rater_errors(target)),
        "per_category": {
            str(c): agreement_summary(ratings.rater_errors(target, c))
            for c in range(1, N_CATEGORIES + 1)
        },
    })


def _failure_modes(inp: _Inputs, ratings: StudyRatings,
                   options: CorrelationOptions) -> dict[str, Any]:
    failure = failure_mode_tests({**inp.category_means, "total": inp.target_mean},
                                 list(ratings.sources), fdr=options.fdr)
    failure["target"] = options.target
    return to_json_safe(failure)


def _published(metrics: Mapping[str, MetricEntry]) -> PublishedSection:
    return PublishedSection(
        dataset="ReXVal, Kendall tau-b vs total errors",
        note="values as published; their exact settings are not all published. 'key' is"
             " our closest output key and 'ours' our value on this study (if scored).",
        entries=tuple(
            PublishedEntry(paper=paper, metric=name, key=key, kendall_tau_b=tau,
                           ours=metrics[key].kendall_tau_b if key in metrics else None)
            for paper, name, key, tau in PUBLISHED
        ),
    )


def _unit_draws(inp: _Inputs, options: CorrelationOptions) -> Resamples | None:
    """The ceiling's and paired tests' resamples: the main ones when the unit draws alike."""
    unit = options.resolved_unit
    if inp.draws is None or (unit == "case") == (options.cluster == "case"):
        return inp.draws
    return draw_resamples(inp.rated.size, options.bootstrap, options.seed,
                          inp.cases[inp.rated] if unit == "case" else None)


def _ceiling(inp: _Inputs, ratings: StudyRatings, options: CorrelationOptions,
             unit_draws: Resamples | None) -> dict[str, Any] | None:
    target, rated = options.target, inp.rated
    ceiling = human_ceiling(
        ratings.rater_errors(target)[:, rated], ratings.raters,
        category_errors={str(c): ratings.rater_errors(target, c)[:, rated]
                         for c in range(1, N_CATEGORIES + 1)},
        draws=unit_draws, unit=options.resolved_unit, seed=options.seed, level=options.level,
    )
    return to_json_safe(ceiling.as_json()) if ceiling is not None else None


def _paired_tests(inp: _Inputs, ratings: StudyRatings, options: CorrelationOptions,
                  main: CorrelationBootstrap, unit_draws: Resamples | None) -> dict[str, Any]:
    """Every two metrics compared on the same resamples (``pairwise.paired_tests_section``)."""
    unit, y = options.resolved_unit, -inp.target_mean[inp.rated]
    replicates: NDArray[np.float64] | None = None
    if unit_draws is not None:
        if unit == "rater_pair":
            y_b = resampled_rater_means(ratings.rater_errors(options.target)[:, inp.rated],
                                        unit_draws.count,
                                        np.random.default_rng((options.seed, 1)))
            replicates, _ = rank_correlations_varying_target(
                inp.x, -y_b, unit_draws.weights, spearman=False)
        elif unit_draws is inp.draws:
            replicates = main.kendall_replicates
        else:
            replicates, _ = rank_correlations_batch(inp.x, y, unit_draws.weights,
                                                    spearman=False)
    return to_json_safe(paired_tests_section(inp.keys, main.kendall, replicates, inp.x, y,
                                         unit=unit, correction=options.correction,
                                         level=options.level))


def _systems(inp: _Inputs, ratings: StudyRatings, scores: Mapping[str, MetricColumn],
             options: CorrelationOptions) -> dict[str, Any]:
    rated, keys = inp.rated, inp.keys
    corpus_keys = [
        k for k in keys
        if k in registry.KEY_TO_FAMILY and registry.corpus_dependent(registry.KEY_TO_FAMILY[k])
    ]
    try:
        return to_json_safe(systems_json(
            np.stack([scores[k].values[rated] for k in keys], axis=1), keys,
            [scores[k].higher_is_better for k in keys], inp.target_mean[rated],
            list(np.asarray(ratings.sources, dtype=object)[rated]), list(inp.cases[rated]),
            resamples=options.bootstrap, permutations=options.permutations,
            seed=options.seed, level=options.level, corpus_dependent=corpus_keys,
        ))
    except ValueError as exc:
        raise AnalysisInputError(f"systems section of study '{ratings.study}': {exc}") from exc


def _refit_section(ratings: StudyRatings, columns: Mapping[str, MetricColumn],
                   target_mean: NDArray[np.float64], *, seed: int) -> dict[str, Any]:
    missing = [k for k in RADCLIQ_INPUTS if k not in columns]
    if missing:
        return {"available": False, "reason": f"not scored on this study: {', '.join(missing)}",
                "columns": list(RADCLIQ_INPUTS)}
    x = np.stack([columns[k].values for k in RADCLIQ_INPUTS], axis=1)
    rows = np.flatnonzero(np.all(np.isfinite(x), axis=1) & np.isfinite(target_mean))
    if rows.size < MIN_REFIT_PAIRS:
        return {"available": False,
                "reason": f"only {rows.size} rated pairs have all inputs"
                          f" (need {MIN_REFIT_PAIRS})",
                "columns": list(RADCLIQ_INPUTS)}
    groups = np.asarray(ratings.cases, dtype=object)[rows]
    # Pairs of one case share the reference: keep them in one fold when there are enough cases.
    use_groups = np.unique(groups).size >= 5
    result = refit(
        x[rows], target_mean[rows], RADCLIQ_INPUTS, seed=seed,
        groups=groups if use_groups else None,
    )
    out: dict[str, Any] = {"available": True, **result.as_dict()}
    out["signatures"] = {k: columns[k].signature for k in RADCLIQ_INPUTS}
    return to_json_safe(out)


def correlate(
    ratings: StudyRatings,
    scores: Mapping[str, MetricColumn],
    options: CorrelationOptions | None = None,
    *,
    refit_inputs: Mapping[str, MetricColumn] | None = None,
    progress: Progress | None = None,
) -> CorrelationReport:
    """Correlate every metric of a study with its radiologists; see the module docstring.

    Arrays in (a study's counted ratings and its metric columns, as
    :mod:`backend.services.evaluation.study_data` loads them), a typed report out; nothing is read
    or
    written.

    Args:
        ratings: Pairs and counted ratings.
        scores: ``key -> `` column of each metric to correlate (at least one), in output
            order.
        options: The settings (default :class:`CorrelationOptions`).
        refit_inputs: Columns of the RadCliQ refit's inputs (default: those in ``scores``).
        progress: Called as ``progress(done, total, section)`` as each section of
            :data:`SECTIONS` is finished.

    Raises:
        AnalysisInputError: a bad option, no metric, fewer than 2 rated pairs.
    """
    options = options or CorrelationOptions()
    options.validate()
    if not scores:
        raise AnalysisInputError(f"study '{ratings.study}' has no metric scores")
    under_rated = int(ratings.under_rated().sum())
    if options.fully_rated_only and under_rated:
        ratings = ratings.only_fully_rated()
    coverage = {"fully_rated_only": bool(options.fully_rated_only),
                "n_pairs_under_rated": under_rated,
                "n_pairs_left_out": under_rated if options.fully_rated_only else 0}

    def step(name: str) -> None:
        if progress is not None:
            progress(SECTIONS.index(name) + 1, len(SECTIONS), name)

    inp = _inputs(ratings, scores, options)
    step("data")
    metrics, per_category, main = _metrics_and_categories(inp, scores, options)
    step("metrics and categories")
    per_rater = _per_rater(inp, ratings, options)
    step("raters")
    per_source = _per_source(inp, ratings, options)
    step("sources")
    agreement = _agreement(ratings, options.target)
    failure = _failure_modes(inp, ratings, options)
    published = _published(metrics)
    step("agreement")
    unit_draws = _unit_draws(inp, options)
    ceiling = _ceiling(inp, ratings, options, unit_draws)
    ceiling_tau = None if ceiling is None else ceiling.get("kendall_tau_b")
    metrics = {k: replace(m, pct_of_ceiling=_f(pct_of_ceiling(m.kendall_tau_b, ceiling_tau)))
               for k, m in metrics.items()}
    step("ceiling")
    paired = _paired_tests(inp, ratings, options, main, unit_draws)
    step("paired tests")
    systems = _systems(inp, ratings, scores, options)
    step("systems")
    refit_section = _refit_section(ratings, refit_inputs if refit_inputs is not None else scores,
                                   inp.target_mean, seed=options.seed)
    report = CorrelationReport(
        study=ratings.study, target=options.target, n_pairs=int(inp.rated.size),
        n_pairs_in_study=ratings.n_pairs, n_raters=len(ratings.raters),
        counts=ratings.counts_mode, n_adjudicated=ratings.n_adjudicated, seed=options.seed,
        resamples=inp.draws.count if inp.draws is not None else 0, cluster=options.cluster,
        level=options.level, metrics=metrics, per_category=per_category, per_rater=per_rater,
        per_source=per_source, agreement=agreement, failure_modes=failure,
        radcliq_refit=refit_section, published=published, unit=options.resolved_unit,
        correction=options.correction, ceiling=ceiling, paired_tests=paired, systems=systems,
        coverage=coverage,
    )
    step("refit")
    return report
