"""``correlate``: every agreement statistic of one study as one JSON-able dict.

Layout (DESIGN.md "correlate" plus the sections beside ``metrics``)::

    {"study", "target", "n_pairs", "seed", "resamples", "cluster", "level", "n_raters",
     "n_pairs_in_study",
     "metrics": {KEY: {"kendall_tau_b", "kendall_ci95": [lo, hi], "spearman",
                       "spearman_ci95", "higher_is_better", "signature", "signature_hash",
                       "family", "n", "n_signatures", "n_degenerate_resamples"}},
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
                                                   "kendall_tau_b", "ours"}]}}

Every correlation orients the metric so that higher means better (lower-is-better keys are
negated) and negates the radiologists' error count, so a positive tau means agreement. The
target per pair is the mean over the counted raters (data.py says which ratings count) of the
total errors, or of the clinically significant errors with ``significant_only``. Pairs no
rater counted are left out (``n_pairs`` counts the rest). Every section is bootstrapped with the
same seed; the main and per-category sections share one set of resamples, per-rater and
per-source sections draw their own from the same seed over their own pairs. ``cluster="case"``
resamples whole cases (pairs sharing a reference are not independent). The refit section is
always present; ``available`` is false (with a ``reason``) when one of its four inputs is not
scored on the study. NaN values become ``null``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from backend.analysis.agreement import agreement_summary
from backend.analysis.bootstrap import (
    DEFAULT_LEVEL,
    CorrelationBootstrap,
    Resamples,
    bootstrap_correlations,
    bootstrap_many,
    draw_resamples,
)
from backend.analysis.data import (
    N_CATEGORIES,
    AnalysisInputError,
    MetricColumn,
    StudyRatings,
    expand_metric_names,
    load_metric_columns,
    load_ratings,
)
from backend.analysis.failure_modes import DEFAULT_FDR, failure_mode_tests
from backend.analysis.refit import RADCLIQ_INPUTS, refit
from backend.analysis.stats import kendall_tau_b, orient
from backend.types import CATEGORIES
from db.session import Database

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


def to_json_safe(obj: Any) -> Any:  # noqa: ANN401 - any JSON-like structure
    """Recursively turn numpy values into Python ones and non-finite floats into ``None``.

    Args:
        obj: Nested dicts, lists, tuples, numpy arrays and scalars.
    """
    if isinstance(obj, dict):
        return {str(k): to_json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_json_safe(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return _f(obj)
    if isinstance(obj, np.ndarray):
        return to_json_safe(obj.tolist())
    return obj


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

    Raises:
        AnalysisInputError: unknown study, no scores, fewer than 2 rated pairs, bad option.
    """
    if cluster not in CLUSTERS:
        raise AnalysisInputError(f"cluster must be one of {CLUSTERS}, got '{cluster}'")
    if bootstrap < 0:
        raise AnalysisInputError(f"bootstrap must be >= 0, got {bootstrap}")
    target = "significant" if significant_only else "total"
    ratings = load_ratings(db, study_name)
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
        }

    per_category: dict[str, Any] = {}
    for (label, y_c), res in zip(category_means.items(), by_category, strict=True):
        per_category[label] = {
            "name": CATEGORIES[int(label)],
            "mean_errors": _f(y_c[rated].mean()),
            "metrics": _correlation_entries(metric_keys, res),
        }

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

    report = {
        "study": ratings.study,
        "target": target,
        "n_pairs": int(rated.size),
        "n_pairs_in_study": ratings.n_pairs,
        "n_raters": len(ratings.raters),
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
    }
    return to_json_safe(report)
