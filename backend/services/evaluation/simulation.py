"""Replay a fully rated study under the random and adaptive orders (admin only).

Each rating is one (rater, pair) of the study revealed in the strategy's order; at
checkpoints the CI width of the question (``all``: the widest Kendall tau-b CI over the
metrics; ``tau_diff:A,B``: the CI of tau(A) - tau(B)) is bootstrapped over the pairs rated so
far (see :mod:`backend.analysis.adaptive`), and ``abs_error`` is how far the interim estimate
lies from the full-data one (a CI can be narrow and still off: an adaptive order that picks
which pairs get more raters can make the interim CI narrower than the final one).
Seeds ``seed .. seed + seeds - 1`` order the raters' queues, so the curves' spread shows
the luck of one order. The CLI writes the curves as CSV (:func:`write_curves_csv`); the
``simulate_rating`` job returns them as JSON records with
:func:`backend.analysis.adaptive.savings_summary`.
"""

from __future__ import annotations

import csv
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from radconcord.backend.analysis import adaptive
from radconcord.backend.analysis.data import AnalysisInputError, StudyNotFound
from radconcord.backend.errors import InvalidInput, NotFound, require_admin
from radconcord.backend.types import Actor
from radconcord.db.session import Database

if TYPE_CHECKING:
    from radconcord.backend.services.jobs import JobView

log = logging.getLogger(__name__)

#: The job kind that runs :func:`simulate_study` on the worker.
KIND = "simulate_rating"
CSV_COLUMNS = ("strategy", "seed", "n_ratings", "ci_width", "abs_error", "quantity",
               "question")
STRATEGY_CHOICES = ("random", "adaptive", "both")
MAX_SEEDS = 1000
ProgressFn = Callable[[int, int, str], None]


@dataclass(frozen=True)
class SimulationOutput:
    """The curves of every (strategy, seed) and how many ratings adaptive saves."""

    study: str
    question: str
    quantity: str
    strategies: tuple[str, ...]
    seeds: tuple[int, ...]
    n_pairs: int
    n_raters: int
    n_ratings: int
    metrics: tuple[str, ...]
    resamples: int
    # One record per (strategy, seed, checkpoint), keys as CSV_COLUMNS.
    records: list[dict[str, Any]] = field(default_factory=list)
    # savings_summary of the mean curves; None unless both strategies ran.
    summary: dict[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        """The job result: settings, ``curves`` (the records) and ``savings``."""
        return {
            "study": self.study, "question": self.question, "quantity": self.quantity,
            "strategies": list(self.strategies), "seeds": list(self.seeds),
            "n_pairs": self.n_pairs, "n_raters": self.n_raters, "n_ratings": self.n_ratings,
            "metrics": list(self.metrics), "resamples": self.resamples,
            "curves": self.records, "savings": self.summary,
        }


def check_request(strategy: str, seeds: int, question: str | None) -> adaptive.Question:
    """Validate the settings shared by the CLI, the service and the job.

    Raises:
        InvalidInput: an unknown strategy, a seed count out of 1..MAX_SEEDS, a bad question.
    """
    if strategy not in STRATEGY_CHOICES:
        raise InvalidInput(f"strategy: must be one of {', '.join(STRATEGY_CHOICES)}, "
                           f"got {strategy!r}")
    if isinstance(seeds, bool) or not isinstance(seeds, int) or not 1 <= seeds <= MAX_SEEDS:
        raise InvalidInput(f"seeds: must be an integer 1-{MAX_SEEDS}, got {seeds!r}")
    try:
        return adaptive.parse_question(question)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None


def _inputs(db: Database, study_name: str, question: adaptive.Question,
            significant_only: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[str, ...]]:
    """(oriented metrics (M, n), ratings (R, n), positions, keys) over the rated pairs."""
    from radconcord.backend.analysis.stats import orient
    from radconcord.backend.services.evaluation.study_data import load_metric_columns, load_ratings

    try:
        ratings = load_ratings(db, study_name)
        keys = None if question.kind == "all" else list(question.metrics)
        columns = load_metric_columns(db, ratings, keys)
    except StudyNotFound as exc:
        raise NotFound(str(exc)) from exc
    except AnalysisInputError as exc:
        raise InvalidInput(str(exc)) from exc
    if not columns:
        raise InvalidInput(f"study '{study_name}' has no metric scores to simulate with "
                           f"(score it first: python -m backend score --study {study_name})")
    errors = ratings.rater_errors("significant" if significant_only else "total")
    rated = np.isfinite(errors).any(axis=0)
    if rated.sum() < 3:
        raise InvalidInput(f"study '{study_name}' has {int(rated.sum())} rated pair(s); "
                           "the simulation needs at least 3")
    order = list(columns)
    oriented = np.stack([orient(columns[k].values, columns[k].higher_is_better)
                         for k in order])
    keep = [k for k, r in enumerate(errors) if np.isfinite(r[rated]).any()]
    return (oriented[:, rated], errors[np.ix_(keep, np.flatnonzero(rated))],
            ratings.positions[rated], tuple(order))


def _mean_over_seeds(rows: list[np.ndarray]) -> np.ndarray:
    """Mean over seeds of each checkpoint, NaN where no seed has a value (no warning)."""
    arr = np.asarray(rows, dtype=np.float64)
    ok = np.isfinite(arr)
    n = ok.sum(axis=0)
    return np.where(n > 0, np.where(ok, arr, 0.0).sum(axis=0) / np.maximum(n, 1), np.nan)


def simulate_study(
    db: Database,
    actor: Actor,
    *,
    study_name: str,
    strategy: str = "both",
    seeds: int = 20,
    question: str | None = "all",
    seed: int = 0,
    resamples: int = 200,
    checkpoints: int = 25,
    significant_only: bool = False,
    progress: ProgressFn | None = None,
) -> SimulationOutput:
    """Replay the study's ratings under the strategies, ``seeds`` times each.

    Args:
        db: The database.
        actor: Must be an admin.
        study_name: A study with (ideally all) ratings in.
        strategy: ``"random"``, ``"adaptive"`` or ``"both"``.
        seeds: How many seeds (``seed .. seed + seeds - 1``).
        question: ``"all"`` or ``"tau_diff:A,B"``.
        seed: The first seed.
        resamples: Bootstrap resamples per checkpoint.
        checkpoints: About how many points per curve.
        significant_only: Use the clinically significant errors as the target.
        progress: ``(done, total, message)`` after each replay.

    Raises:
        PermissionDenied: not an admin.
        NotFound: no such study.
        InvalidInput: bad settings, no scores, fewer than 3 rated pairs.
    """
    require_admin(actor)
    q = check_request(strategy, seeds, question)
    if not isinstance(resamples, int) or resamples < 10:
        raise InvalidInput(f"resamples: must be an integer >= 10, got {resamples!r}")
    oriented, ratings, positions, keys = _inputs(db, study_name, q, significant_only)
    strategies = adaptive.STRATEGIES if strategy == "both" else (strategy,)
    seed_list = tuple(range(int(seed), int(seed) + seeds))
    records: list[dict[str, Any]] = []
    curves: dict[str, list[adaptive.SimulationResult]] = {s: [] for s in strategies}
    total = len(strategies) * len(seed_list)
    done = 0
    for strat in strategies:
        for sd in seed_list:
            res = adaptive.simulate(oriented, ratings, strategy=strat, seed=sd,
                                    question_kind=q.kind, positions=positions,
                                    checkpoints=checkpoints, resamples=resamples)
            curves[strat].append(res)
            records.extend(
                {"strategy": strat, "seed": sd, "n_ratings": int(n),
                 "ci_width": None if not math.isfinite(w) else float(w),
                 "abs_error": None if not math.isfinite(e) else float(e),
                 "quantity": q.quantity, "question": q.text}
                for n, w, e in zip(res.n_ratings, res.ci_width, res.abs_error, strict=True)
            )
            done += 1
            if progress is not None:
                progress(done, total, f"{strat} order, seed {sd}")
    summary = None
    if len(strategies) == 2:
        n_r = curves["random"][0].n_ratings
        summary = adaptive.savings_summary(
            n_r, _mean_over_seeds([c.ci_width for c in curves["random"]]),
            _mean_over_seeds([c.ci_width for c in curves["adaptive"]]),
            random_error=_mean_over_seeds([c.abs_error for c in curves["random"]]),
            adaptive_error=_mean_over_seeds([c.abs_error for c in curves["adaptive"]]))
    n_ratings = int(np.isfinite(ratings).sum())
    log.info("simulated %s on %s: %d replays", q.text, study_name, total)
    return SimulationOutput(
        study=study_name, question=q.text, quantity=q.quantity, strategies=strategies,
        seeds=seed_list, n_pairs=int(ratings.shape[1]), n_raters=int(ratings.shape[0]),
        n_ratings=n_ratings, metrics=keys, resamples=resamples, records=records,
        summary=summary,
    )


def write_curves_csv(path: Path, output: SimulationOutput) -> Path:
    """Write the curves (columns :data:`CSV_COLUMNS`) atomically; returns the path."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for rec in output.records:
            writer.writerow({**rec, **{k: "" if rec[k] is None else repr(rec[k])
                                       for k in ("ci_width", "abs_error")}})
    tmp.replace(path)
    return path


def enqueue_simulation(
    db: Database,
    actor: Actor,
    *,
    study_name: str,
    strategy: str = "both",
    seeds: int = 20,
    question: str | None = "all",
    seed: int = 0,
    resamples: int = 200,
    significant_only: bool = False,
) -> JobView:
    """Check a simulation request and queue it as a ``simulate_rating`` job.

    Raises:
        PermissionDenied: not an admin.
        NotFound: no such study.
        InvalidInput: bad settings, or a study the simulation cannot run on.
    """
    from radconcord.backend.services import jobs

    require_admin(actor)
    q = check_request(strategy, seeds, question)
    _inputs(db, study_name, q, significant_only)  # fail now, not on the worker
    params = {"study": study_name, "strategy": strategy, "seeds": seeds, "question": q.text,
              "seed": int(seed), "resamples": int(resamples),
              "significant_only": bool(significant_only)}
    return jobs.enqueue_job(db, actor, kind=KIND, params=params, study_name=study_name)
