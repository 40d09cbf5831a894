"""RadCliQ refit on a study's own ratings, run as a ``refit_radcliq`` job (admin only).

The refit itself (``backend.analysis.refit``: StandardScaler + LinearRegression on
radgraph_combined, bertscore_f, semb and bleu2_radcliq, cross-validated Kendall tau-b of
the out-of-fold predictions) is the ``radcliq_refit`` section of ``correlate``. What makes it
a long task is its inputs: three of the four need models (RadGraph, BERTScore, CheXbert).
:func:`refit_study` first scores the study's pairs with the four inputs through the score
cache (on the worker, with its warm metric pool; already cached pairs cost nothing and load
no model), then computes the refit with ``correlate`` (no bootstrap). Pages queue it with
:func:`enqueue_refit` and draw :func:`refit_study`'s JSON, the job's result.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from radconcord.backend.analysis.data import AnalysisInputError, StudyNotFound
from radconcord.backend.errors import InvalidInput, NotFound, ServiceError, require_admin
from radconcord.backend.services.repo import get_study
from radconcord.backend.types import Actor
from radconcord.db.session import Database

if TYPE_CHECKING:
    from radconcord.backend.scoring.runner import MetricPool
    from radconcord.backend.services.jobs import JobView

#: The job kind that runs :func:`refit_study` on the worker.
KIND = "refit_radcliq"
ProgressFn = Callable[[int, int, str], None]


def _rated_pairs(db: Database, study_name: str, significant_only: bool) -> int:
    from radconcord.backend.services.evaluation.study_data import load_ratings

    try:
        ratings = load_ratings(db, study_name)
    except StudyNotFound as exc:
        raise NotFound(str(exc)) from exc
    target = ratings.mean_errors("significant" if significant_only else "total")
    return sum(1 for v in target.tolist() if math.isfinite(v))


def enqueue_refit(
    db: Database,
    actor: Actor,
    *,
    study_name: str,
    significant_only: bool = False,
    seed: int = 0,
    score_missing: bool = True,
    device: str | None = None,
) -> JobView:
    """Check a refit request and queue it as a ``refit_radcliq`` job for the worker.

    Args:
        db: The database.
        actor: Must be an admin.
        study_name: Study whose ratings are the target.
        significant_only: Fit the clinically significant errors instead of all errors.
        seed: Seed of the cross-validation folds.
        score_missing: Score the four inputs on the study's pairs first (else use only
            what is cached).
        device: Only a worker on this device may run it (``None``: any worker).

    Returns:
        The queued job.

    Raises:
        PermissionDenied: not an admin.
        NotFound: no such study.
        InvalidInput: fewer rated pairs than the refit needs.
    """
    from radconcord.backend.analysis.report import MIN_REFIT_PAIRS
    from radconcord.backend.services import jobs

    require_admin(actor)
    with db.read() as s:
        get_study(s, study_name)
    rated = _rated_pairs(db, study_name, significant_only)
    if rated < MIN_REFIT_PAIRS:
        raise InvalidInput(f"study '{study_name}' has {rated} rated pair(s); the refit needs "
                           f"at least {MIN_REFIT_PAIRS}")
    params = {"study": study_name, "significant_only": bool(significant_only),
              "seed": int(seed), "score_missing": bool(score_missing)}
    return jobs.enqueue_job(db, actor, kind=KIND, params=params, study_name=study_name,
                            device=device)


def refit_study(
    db: Database,
    actor: Actor,
    *,
    study_name: str,
    significant_only: bool = False,
    seed: int = 0,
    score_missing: bool = True,
    device: str = "auto",
    progress: ProgressFn | None = None,
    pool: MetricPool | None = None,
) -> dict[str, Any]:
    """Score the RadCliQ inputs (when asked) and refit RadCliQ on the study's ratings.

    Runs the metrics in the calling process: the worker's ``refit_radcliq`` kind calls it.

    Args:
        db: The database (also the score cache).
        actor: Must be an admin.
        study_name: Study whose ratings are the target.
        significant_only: Fit the clinically significant errors instead of all errors.
        seed: Seed of the cross-validation folds.
        score_missing: Score the four inputs on the study's pairs first.
        device: Device for the input metrics.
        progress: ``progress(done, total, message)`` while scoring; it may raise to stop
            (scores already stored stay in the cache).
        pool: Warm metric instances to reuse (the worker's).

    Returns:
        ``{"study", "target", "n_pairs", "refit": {...the correlate section...},
        "inputs": {key: {"kendall_tau_b", "n", "signature"}}, "unavailable": {family:
        reason}, "scored": {family: {"computed", "cached"}}}``; ``refit["available"]`` is
        false, with a ``reason``, when an input is missing or too few pairs are rated.

    Raises:
        PermissionDenied: not an admin.
        NotFound: no such study.
        InvalidInput: nothing rated.
        ServiceError: an input metric failed while scoring.
    """
    from radconcord.backend.analysis.refit import RADCLIQ_INPUTS
    from radconcord.backend.scoring.jobs import study_pairs
    from radconcord.backend.scoring.runner import MetricFailed, ScoringError, score
    from radconcord.backend.services.evaluation.correlation import correlate_study

    require_admin(actor)
    with db.read() as s:
        study_id = get_study(s, study_name).id
    unavailable: dict[str, str] = {}
    scored: dict[str, dict[str, int]] = {}
    if score_missing:
        pairs = study_pairs(db, study_id)
        try:
            table = score(pairs, list(RADCLIQ_INPUTS), db=db, device=device,
                          skip_unavailable=True, progress=progress, pool=pool)
        except ScoringError as exc:
            raise InvalidInput(str(exc)) from None
        except MetricFailed as exc:
            raise ServiceError(str(exc)) from exc
        unavailable = dict(table.unavailable)
        scored = {f: {"computed": r.computed, "cached": r.cached}
                  for f, r in table.families.items() if not r.unavailable}
    if progress is not None:
        progress(0, 0, "refitting")
    target = "significant" if significant_only else "total"
    base: dict[str, Any] = {"study": study_name, "target": target, "seed": seed,
                            "unavailable": unavailable, "scored": scored}
    try:
        report = correlate_study(db, study_name=study_name, metrics=None,
                                 significant_only=significant_only, bootstrap=0, seed=seed)
    except StudyNotFound as exc:
        raise NotFound(str(exc)) from exc
    except AnalysisInputError as exc:
        # No score at all yet, or fewer than two rated pairs: no refit, and why.
        return {**base, "n_pairs": 0, "inputs": {},
                "refit": {"available": False, "reason": str(exc),
                          "columns": list(RADCLIQ_INPUTS)}}
    inputs = {
        key: {"kendall_tau_b": m["kendall_tau_b"], "n": m["n"], "signature": m["signature"]}
        for key, m in report["metrics"].items() if key in RADCLIQ_INPUTS
    }
    return {**base, "n_pairs": report["n_pairs"], "inputs": inputs,
            "refit": report["radcliq_refit"]}
