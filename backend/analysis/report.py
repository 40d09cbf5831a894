"""``correlate``: every agreement statistic of one study as one JSON-able dict.

Layout (DESIGN.md "correlate" plus the sections beside ``metrics``)::

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
     "pairwise": {"unit", "correction", "resamples", "level", "p_method", "williams_method",
                  "pairs": {"A|B": {"tau_diff", "ci95", "p", "p_adjusted", "williams_t",
                                    "williams_p", "williams_n"}}},
     "systems": {...see systems.systems_json...}}

and every ``metrics`` entry carries ``pct_of_ceiling`` (``|tau| / ceiling tau`` as a fraction,
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
comparison of every two metrics (pairwise.py) resample by ``unit``: ``"pair"``, ``"case"`` or
``"rater_pair"`` (pairs, then the raters inside each drawn pair, with
``default_rng((seed, 1))``); ``unit`` defaults to ``cluster``. When the unit draws like
``cluster`` does (pair and rater_pair draw pairs), they use the main section's resamples, so
the pairwise differences are differences of the taus whose intervals ``metrics`` shows. The
systems section (systems.py) runs on the rated pairs with ``permutations`` permutations.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

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
    UNITS,
    human_ceiling,
    pct_of_ceiling,
    resampled_rater_means,
)
from radconcord.backend.analysis.data import (
    N_CATEGORIES,
    AnalysisInputError,
    MetricColumn,
    StudyRatings,
    expand_metric_names,
    load_metric_columns,
    load_ratings,
)
from radconcord.backend.analysis.failure_modes import DEFAULT_FDR, failure_mode_tests
from radconcord.backend.analysis.pairwise import CORRECTIONS, pairwise_section
from radconcord.backend.analysis.refit import RADCLIQ_INPUTS, refit
from radconcord.backend.analysis.stats import (
    kendall_tau_b,
    orient,
    rank_correlations_batch,
    rank_correlations_varying_target,
    to_json_safe,
)
from radconcord.backend.analysis.systems import DEFAULT_PERMUTATIONS, systems_json
from radconcord.backend.metrics import registry
from radconcord.backend.types import CATEGORIES
from radconcord.db.session import Database

logger = logging.getLogger(__name__)

CLUSTERS = ("pair", "case")
MIN_REFIT_PAIRS = 10

# Published Kendall tau-b on ReXVal total errors (METRICS.md). ``key`` is our closest output
# key; the papers do not publish every setting behind their numbers.
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


def _f(value: Any) -> float | None:
    """A JSON-safe float: NaN and infinities become ``None``."""
    if value is None:
        return None
    v = float(value)
    return v if math.isfinite(v) else None


def _ci(row: NDArray[np.float64]) -> list[float | None]:
    return [_f(row[0]), _f(row[1])]


def _correlation_entries(
    keys: Sequence[str], result: CorrelationBootstrap
) -> dict[str, dict[str, Any]]:
    return {
        key: {
            "kendall_tau_b": _f(result.kendall[k]),
            "kendall_ci95": _ci(result.kendall_ci[k]),
            "spearman": _f(result.spearman[k]),
            "spearman_ci95": _ci(result.spearman_ci[k]),
            "n": int(result.n[k]),
        }
        for k, key in enumerate(keys)
    }


def _bootstrap_subset(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    subset: NDArray[np.int64],
    *,
    resamples: int,
    seed: int,
    clusters: NDArray[Any] | None,
    level: float,
) -> CorrelationBootstrap:
    """Correlations on a subset of pairs, with its own resamples drawn from the same seed."""
    sub_clusters = None if clusters is None else clusters[subset]
    return bootstrap_correlations(
        x[:, subset], y[subset], resamples=resamples if subset.size else 0, seed=seed,
        clusters=sub_clusters, level=level,
    )


def _refit_section(
    ratings: StudyRatings,
    columns: dict[str, MetricColumn],
    target_mean: NDArray[np.float64],
    *,
    seed: int,
) -> dict[str, Any]:
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
    return out


def correlate_study(
    db: Database,
    *,
    study_name: str,
    metrics: Sequence[str] | None = None,
    significant_only: bool = False,
    bootstrap: int = 1000,
    seed: int = 0,
    cluster: str = "pair",
    level: float = DEFAULT_LEVEL,
    fdr: float = DEFAULT_FDR,
    unit: str | None = None,
    correction: str = "holm",
    permutations: int = DEFAULT_PERMUTATIONS,
    progress: Callable[[int, int, str], None] | None = None,
    counts: str = "raw",
) -> dict[str, Any]:
    """Correlate every metric of a study with its radiologists; see the module docstring.

    Args:
        db: The database.
        study_name: Study name.
        metrics: Output keys or family names; ``None`` takes every key scored on the study.
        significant_only: Target the clinically significant errors instead of all errors.
        bootstrap: Resamples for the percentile intervals (0: no intervals).
        seed: Seed of the resampling and of the refit's folds.
        cluster: ``"pair"`` resamples pairs; ``"case"`` resamples cases with all their pairs.
        level: Interval coverage.
        fdr: False discovery rate of the failure-mode tests.
        unit: Resampling unit of the ceiling and pairwise sections (``"pair"``, ``"case"``
            or ``"rater_pair"``); ``None`` takes ``cluster``.
        correction: Multiple-comparison correction over the pairwise matrix (``"holm"`` or
            ``"bh"``).
        permutations: Permutations of the systems section's randomization tests.
        progress: Called as ``progress(done, total, section)`` as each section of the report
            is finished (the bootstrap of a large study takes a while).
        counts: ``"raw"`` (raters' mean) or ``"adjudicated"`` (consensus counts replace the
            raters' mean of adjudicated pairs; per-rater, agreement and ceiling sections stay
            on the raters' own counts). See :func:`backend.analysis.data.load_ratings`.

    Raises:
        AnalysisInputError: unknown study, no scores, fewer than 2 rated pairs, bad option.
    """
    sections = ("data", "metrics and categories", "raters", "sources", "agreement",
                "ceiling", "pairwise", "systems", "refit")

    def step(name: str) -> None:
        if progress is not None:
            progress(sections.index(name) + 1, len(sections), name)

    if cluster not in CLUSTERS:
        raise AnalysisInputError(f"cluster must be one of {CLUSTERS}, got '{cluster}'")
    unit = cluster if unit is None else unit
    if unit not in UNITS:
        raise AnalysisInputError(f"unit must be one of {UNITS}, got '{unit}'")
    if correction not in CORRECTIONS:
        raise AnalysisInputError(f"correction must be one of {CORRECTIONS}, got '{correction}'")
    if permutations < 1:
        raise AnalysisInputError(f"permutations must be >= 1, got {permutations}")
    if bootstrap < 0:
        raise AnalysisInputError(f"bootstrap must be >= 0, got {bootstrap}")
    target = "significant" if significant_only else "total"
    ratings = load_ratings(db, study_name, counts=counts)
    keys = expand_metric_names(metrics) if metrics else None
    if keys is not None and not keys:
        raise AnalysisInputError("no metric named")
    columns = load_metric_columns(db, ratings, keys)
    if not columns:
        raise AnalysisInputError(
            f"study '{study_name}' has no metric scores (python -m backend score --study"
            f" {study_name} --metrics ...)"
        )
    extra = [k for k in RADCLIQ_INPUTS if k not in columns]
    refit_columns = {**columns, **load_metric_columns(db, ratings, extra, required=False)}

    target_mean = ratings.mean_errors(target)
    rated = np.flatnonzero(np.isfinite(target_mean))
    if rated.size < 2:
        raise AnalysisInputError(
            f"study '{study_name}' has {rated.size} rated pair(s); correlations need at least 2"
            " (a pair counts once a rater completed it)"
        )
    step("data")
    metric_keys = list(columns)
    x_all = np.stack([orient(columns[k].values, columns[k].higher_is_better)
                      for k in metric_keys])
    x = x_all[:, rated]
    cases = np.asarray(ratings.cases, dtype=object)
    clusters = cases[rated] if cluster == "case" else None
    draws: Resamples | None = (
        draw_resamples(rated.size, bootstrap, seed, clusters) if bootstrap > 0 else None
    )

    # The total and the six categories share the resamples and the work on the metrics.
    category_means = {
        str(c): ratings.mean_errors(target, c) for c in range(1, N_CATEGORIES + 1)
    }
    targets = np.stack([-target_mean[rated]] + [-v[rated] for v in category_means.values()])
    main, *by_category = bootstrap_many(x, targets, resamples=0, seed=seed, level=level,
                                        draws=draws)
    metric_section: dict[str, Any] = {}
    for k, key in enumerate(metric_keys):
        col = columns[key]
        metric_section[key] = {
            "kendall_tau_b": _f(main.kendall[k]),
            "kendall_ci95": _ci(main.kendall_ci[k]),
            "spearman": _f(main.spearman[k]),
            "spearman_ci95": _ci(main.spearman_ci[k]),
            "higher_is_better": col.higher_is_better,
            "signature": col.signature,
            "signature_hash": col.signature_hash,
            "family": col.family,
            "n": int(main.n[k]),
            "n_signatures": col.n_signatures,
            "n_degenerate_resamples": int(main.n_degenerate[k]) if draws else 0,
            # Values computed elsewhere and imported from a file (import-scores): where
            # they came from; null for a metric this app computed.
            "imported": col.imported.as_json() if col.imported is not None else None,
        }

    per_category: dict[str, Any] = {}
    for (label, y_c), res in zip(category_means.items(), by_category, strict=True):
        per_category[label] = {
            "name": CATEGORIES[int(label)],
            "mean_errors": _f(y_c[rated].mean()),
            "metrics": _correlation_entries(metric_keys, res),
        }

    step("metrics and categories")
    per_rater: dict[str, Any] = {}
    rater_errors = ratings.rater_errors(target)
    for r, name in enumerate(ratings.raters):
        e_r = rater_errors[r]
        subset = np.flatnonzero(np.isfinite(e_r))
        others = np.delete(rater_errors, r, axis=0)
        n_others = np.isfinite(others).sum(axis=0)
        other_mean = np.where(n_others > 0, np.nansum(others, axis=0) / np.maximum(n_others, 1),
                              np.nan)
        shared = np.isfinite(e_r) & np.isfinite(other_mean)
        res = _bootstrap_subset(x_all, -e_r, subset, resamples=bootstrap, seed=seed,
                                clusters=cases if cluster == "case" else None, level=level)
        per_rater[name] = {
            "n_pairs": int(subset.size),
            "mean_errors": _f(e_r[subset].mean()) if subset.size else None,
            "kendall_vs_other_raters": _f(kendall_tau_b(e_r[shared], other_mean[shared]))
            if shared.sum() >= 2 else None,
            "n_shared_pairs": int(shared.sum()),
            "metrics": _correlation_entries(metric_keys, res),
        }

    step("raters")
    per_source: dict[str, Any] = {}
    sources = np.asarray(ratings.sources, dtype=object)
    for src in sorted(set(ratings.sources)):
        subset = rated[sources[rated] == src]
        res = _bootstrap_subset(x_all, -target_mean, subset, resamples=bootstrap, seed=seed,
                                clusters=cases if cluster == "case" else None, level=level)
        per_source[src] = {
            "n_pairs": int(subset.size),
            "mean_errors": _f(target_mean[subset].mean()) if subset.size else None,
            "metrics": _correlation_entries(metric_keys, res),
        }

    step("sources")
    agreement = {
        "target": target,
        "raters": list(ratings.raters),
        "total": agreement_summary(rater_errors),
        "per_category": {
            str(c): agreement_summary(ratings.rater_errors(target, c))
            for c in range(1, N_CATEGORIES + 1)
        },
    }
    failure = failure_mode_tests({**category_means, "total": target_mean},
                                 list(ratings.sources), fdr=fdr)
    failure["target"] = target

    published = {
        "dataset": "ReXVal, Kendall tau-b vs total errors",
        "note": "values as published; their exact settings are not all published. 'key' is"
                " our closest output key and 'ours' our value on this study (if scored).",
        "entries": [
            {"paper": paper, "metric": name, "key": key, "kendall_tau_b": tau,
             "ours": metric_section.get(key, {}).get("kendall_tau_b") if key else None}
            for paper, name, key, tau in PUBLISHED
        ],
    }

    step("agreement")
    # Ceiling and pairwise: the main resamples when the unit draws the same way.
    unit_draws = draws
    if draws is not None and (unit == "case") != (cluster == "case"):
        unit_draws = draw_resamples(rated.size, bootstrap, seed,
                                    cases[rated] if unit == "case" else None)
    rated_rater_errors = rater_errors[:, rated]
    ceiling = human_ceiling(
        rated_rater_errors, ratings.raters,
        category_errors={str(c): ratings.rater_errors(target, c)[:, rated]
                         for c in range(1, N_CATEGORIES + 1)},
        draws=unit_draws, unit=unit, seed=seed, level=level,
    )
    ceiling_tau = ceiling.kendall if ceiling is not None else None
    for entry in metric_section.values():
        entry["pct_of_ceiling"] = pct_of_ceiling(entry["kendall_tau_b"], ceiling_tau)

    step("ceiling")
    replicates: NDArray[np.float64] | None = None
    if unit_draws is not None:
        if unit == "rater_pair":
            y_b = resampled_rater_means(rated_rater_errors, unit_draws.count,
                                        np.random.default_rng((seed, 1)))
            replicates, _ = rank_correlations_varying_target(
                x, -y_b, unit_draws.weights, spearman=False)
        elif unit_draws is draws:
            replicates = main.kendall_replicates
        else:
            replicates, _ = rank_correlations_batch(x, -target_mean[rated], unit_draws.weights,
                                                    spearman=False)
    pairwise = pairwise_section(metric_keys, main.kendall, replicates, x, -target_mean[rated],
                                unit=unit, correction=correction, level=level)

    step("pairwise")
    corpus_keys = [
        k for k in metric_keys
        if k in registry.KEY_TO_FAMILY and registry.corpus_dependent(registry.KEY_TO_FAMILY[k])
    ]
    try:
        systems = systems_json(
            np.stack([columns[k].values[rated] for k in metric_keys], axis=1), metric_keys,
            [columns[k].higher_is_better for k in metric_keys], target_mean[rated],
            list(np.asarray(ratings.sources, dtype=object)[rated]), list(cases[rated]),
            resamples=bootstrap, permutations=permutations, seed=seed, level=level,
            corpus_dependent=corpus_keys,
        )
    except ValueError as exc:
        raise AnalysisInputError(f"systems section of study '{study_name}': {exc}") from exc
    step("systems")

    report = {
        "study": ratings.study,
        "target": target,
        "n_pairs": int(rated.size),
        "n_pairs_in_study": ratings.n_pairs,
        "n_raters": len(ratings.raters),
        "counts": ratings.counts_mode,
        "n_adjudicated": ratings.n_adjudicated,
        "seed": seed,
        "resamples": draws.count if draws is not None else 0,
        "cluster": cluster,
        "level": level,
        "metrics": metric_section,
        "per_category": per_category,
        "per_rater": per_rater,
        "per_source": per_source,
        "agreement": agreement,
        "failure_modes": failure,
        "radcliq_refit": _refit_section(ratings, refit_columns, target_mean, seed=seed),
        "published": published,
        "unit": unit,
        "correction": correction,
        "ceiling": ceiling.as_json() if ceiling is not None else None,
        "pairwise": pairwise,
        "systems": systems,
    }
    step("refit")
    return to_json_safe(report)
