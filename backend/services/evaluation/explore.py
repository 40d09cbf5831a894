"""Dashboard and disagreement-explorer services: data version, per-pair table, pair view.

Admin only: these show metric scores, candidate sources and every rater's counts, which a
rater must never see. Per-pair values follow the selection rules of
``backend.analysis.data`` (which ratings count, which signature per key), so the explorer and
the scatter plots show exactly the numbers the correlations use.

Numbers a person reads: a *rating* is one rater's counts for one pair (twelve grid cells), and
the dashboard counts the ratings that enter the analysis (completed, or imported without an
assignment); pairs are numbered 1..N in study order (``PairRow.number``), the numbering the
raters see too.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from sqlalchemy import exists, func, select

from radconcord.backend.analysis.data import (
    N_CATEGORIES,
    AnalysisInputError,
    MetricColumn,
    StudyNotFound,
    StudyRatings,
)
from radconcord.backend.analysis.disagreement import DiffOp, rank_disagreements, word_diff
from radconcord.backend.errors import InvalidInput, NotFound, require_admin
from radconcord.backend.services.evaluation.study_data import load_metric_columns, load_ratings
from radconcord.backend.services.repo import get_study
from radconcord.backend.types import Actor
from radconcord.db.models import Assignment, MetricScore, Pair, Rating, Report, ScoreImport
from radconcord.db.session import Database

T = TypeVar("T")


def _analysis(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:  # noqa: ANN401
    try:
        return fn(*args, **kwargs)
    except StudyNotFound as exc:
        raise NotFound(str(exc)) from exc
    except AnalysisInputError as exc:
        raise InvalidInput(str(exc)) from exc


def _none(value: float) -> float | None:
    v = float(value)
    return v if math.isfinite(v) else None


def _iso(value: dt.datetime | None) -> str:
    return value.isoformat() if value is not None else ""


@dataclass(frozen=True)
class DataVersion:
    """A cheap fingerprint of what the study's statistics depend on.

    Any new or changed rating, completed or reopened pair, or new metric score changes it, so
    it serves as a cache key for the expensive correlations.

    Attributes:
        study: Study name.
        n_ratings: Ratings that count, one per rater and pair: completed assignments plus
            (rater, pair) ratings imported without an assignment (``backend.analysis.data``).
        n_rating_cells: Rating rows (grid cells, twelve per rating) of the study's pairs.
        ratings_updated: Latest rating change (ISO text, empty when none).
        n_completed: Completed assignments.
        completed_at: Latest completion (ISO text).
        n_assignments: Assignments (a reopened pair changes ``n_completed``).
        n_scores: Metric score rows joined to the study's pairs.
        scores_created: Latest score written (ISO text).
        imports: Score imports of the study and the latest one's time (a re-imported file
            writes no new score row but may change a key's direction).
    """

    study: str
    n_ratings: int
    n_rating_cells: int
    ratings_updated: str
    n_completed: int
    completed_at: str
    n_assignments: int
    n_scores: int
    scores_created: str
    imports: str = ""

    @property
    def token(self) -> str:
        """The fingerprint as one string."""
        return "|".join(str(v) for v in (
            self.study, self.n_ratings, self.n_rating_cells, self.ratings_updated,
            self.n_completed,
            self.completed_at, self.n_assignments, self.n_scores, self.scores_created,
            self.imports))


def data_version(db: Database, actor: Actor, *, study_name: str) -> DataVersion:
    """Counts and latest timestamps of the study's ratings, completions and scores (admin).

    Five aggregate queries; cheap enough to run every few seconds.

    Raises:
        PermissionDenied: for a non-admin.
        NotFound: unknown study.
    """
    require_admin(actor)
    with db.read() as s:
        sid = get_study(s, study_name).id
        n_ratings, r_updated = s.execute(
            select(func.count(Rating.id), func.max(Rating.updated_at))
            .join(Pair, Pair.id == Rating.pair_id)
            .where(Pair.study_id == sid)
        ).one()
        n_assign, n_done, done_at = s.execute(
            select(func.count(Assignment.id), func.count(Assignment.completed_at),
                   func.max(Assignment.completed_at))
            .where(Assignment.study_id == sid)
        ).one()
        # Ratings imported without an assignment count too (one per rater and pair).
        imported = (
            select(Rating.rater_id, Rating.pair_id)
            .join(Pair, Pair.id == Rating.pair_id)
            .where(Pair.study_id == sid, ~exists().where(
                Assignment.rater_id == Rating.rater_id, Assignment.pair_id == Rating.pair_id))
            .distinct()
            .subquery()
        )
        n_imported = s.scalar(select(func.count()).select_from(imported)) or 0
        hashes = select(Pair.input_hash).where(Pair.study_id == sid).scalar_subquery()
        n_scores, s_created = s.execute(
            select(func.count(MetricScore.id), func.max(MetricScore.created_at))
            .where(MetricScore.input_hash.in_(hashes))
        ).one()
        n_imports, imported_at = s.execute(
            select(func.count(ScoreImport.id), func.max(ScoreImport.imported_at))
            .where(ScoreImport.study_id == sid)
        ).one()
    return DataVersion(
        study=study_name, n_ratings=int(n_done) + int(n_imported),
        n_rating_cells=int(n_ratings), ratings_updated=_iso(r_updated),
        n_completed=int(n_done), completed_at=_iso(done_at), n_assignments=int(n_assign),
        n_scores=int(n_scores), scores_created=_iso(s_created),
        imports=f"{int(n_imports)}@{_iso(imported_at)}",
    )


@dataclass(frozen=True)
class PairRow:
    """One pair of the study with its raters' mean errors and every metric value.

    Attributes:
        pair_id: Database id.
        position: Position in the study (0-based storage order; people read ``number``).
        opaque_id: Id raters see.
        case: External case id.
        source: Candidate source.
        mean_errors: Mean over counted raters (None when nobody counted the pair).
        n_raters: Counted raters.
        values: ``key -> value`` (None where missing or undefined), raw (not oriented).
    """

    pair_id: int
    position: int
    opaque_id: str
    case: str
    source: str
    mean_errors: float | None
    n_raters: int
    values: dict[str, float | None]

    @property
    def number(self) -> int:
        """The pair's 1-based number in study order (what every page shows)."""
        return self.position + 1


@dataclass(frozen=True)
class PairTable:
    """Result of :func:`study_pairs`.

    Attributes:
        study: Study name.
        target: ``"total"`` or ``"significant"``.
        keys: Scored output keys (registry order).
        directions: ``key -> higher_is_better``.
        signatures: ``key -> signature`` of the values used.
        rows: Pairs in position order.
        imported: The keys whose values were imported from a file (``import-scores``).
    """

    study: str
    target: str
    keys: tuple[str, ...]
    directions: dict[str, bool]
    signatures: dict[str, str]
    rows: tuple[PairRow, ...]
    imported: tuple[str, ...] = ()


def _load(db: Database, study_name: str) -> tuple[StudyRatings, dict[str, MetricColumn]]:
    ratings = _analysis(load_ratings, db, study_name)
    columns = _analysis(load_metric_columns, db, ratings, None)
    return ratings, columns


def _table(ratings: StudyRatings, columns: dict[str, MetricColumn], target: str) -> PairTable:
    mean = ratings.mean_errors(target)
    per_pair = ratings.raters_per_pair()
    rows = tuple(
        PairRow(
            pair_id=int(ratings.pair_ids[i]),
            position=int(ratings.positions[i]),
            opaque_id=ratings.opaque_ids[i],
            case=ratings.cases[i],
            source=ratings.sources[i],
            mean_errors=_none(mean[i]),
            n_raters=int(per_pair[i]),
            values={k: _none(c.values[i]) for k, c in columns.items()},
        )
        for i in range(ratings.n_pairs)
    )
    return PairTable(
        study=ratings.study, target=target, keys=tuple(columns),
        directions={k: c.higher_is_better for k, c in columns.items()},
        signatures={k: c.signature for k, c in columns.items()}, rows=rows,
        imported=tuple(k for k, c in columns.items() if c.imported is not None),
    )


def study_pairs(
    db: Database, actor: Actor, *, study_name: str, significant_only: bool = False
) -> PairTable:
    """Every pair with its raters' mean errors and metric values (admin only).

    Args:
        db: The database.
        actor: Must be an admin.
        study_name: Study name.
        significant_only: Mean of the clinically significant errors instead of all.

    Raises:
        PermissionDenied: for a non-admin.
        NotFound: unknown study.
    """
    require_admin(actor)
    ratings, columns = _load(db, study_name)
    return _table(ratings, columns, "significant" if significant_only else "total")


@dataclass(frozen=True)
class Disagreement:
    """A pair's place in the disagreement ranking of one metric.

    Attributes:
        rank: 1 for the largest disagreement.
        pair: The pair (values of every key included).
        value: The chosen metric's raw value.
        metric_rank: Normalised rank of the oriented metric (0 worst, 1 best).
        rater_rank: Normalised rank of the negated mean errors (0 most errors, 1 fewest).
        score: ``|metric_rank - rater_rank|``.
    """

    rank: int
    pair: PairRow
    value: float | None
    metric_rank: float
    rater_rank: float
    score: float


@dataclass(frozen=True)
class DisagreementList:
    """Result of :func:`disagreements`.

    Attributes:
        study: Study name.
        key: Metric key ranked.
        higher_is_better: Its direction.
        signature: Signature of its values.
        target: ``"total"`` or ``"significant"``.
        n_ranked: Pairs with both a value and a counted rating.
        rows: Up to ``limit`` pairs, largest disagreement first.
        imported: Whether the key's values were imported from a file (``import-scores``).
    """

    study: str
    key: str
    higher_is_better: bool
    signature: str
    target: str
    n_ranked: int
    rows: tuple[Disagreement, ...]
    imported: bool = False


def disagreements(
    db: Database,
    actor: Actor,
    *,
    study_name: str,
    key: str,
    significant_only: bool = False,
    limit: int | None = 50,
) -> DisagreementList:
    """Pairs where ``key`` and the raters disagree most (admin only).

    See :mod:`backend.analysis.disagreement` for the ranking.

    Args:
        db: The database.
        actor: Must be an admin.
        study_name: Study name.
        key: Output key to rank.
        significant_only: Rank against the significant errors only.
        limit: Most pairs to return (``None``: all ranked pairs).

    Raises:
        PermissionDenied: for a non-admin.
        NotFound: unknown study.
        InvalidInput: ``key`` has no scores on the study, or a bad ``limit``.
    """
    from radconcord.backend.analysis.disagreement import normalised_ranks
    from radconcord.backend.analysis.stats import orient

    require_admin(actor)
    if limit is not None and limit < 1:
        raise InvalidInput(f"limit must be at least 1, got {limit}")
    target = "significant" if significant_only else "total"
    ratings, all_columns = _load(db, study_name)
    if key not in all_columns:
        # Raises with the message that tells how to score the key.
        _analysis(load_metric_columns, db, ratings, [key])
        raise InvalidInput(f"no scores for {key} on study '{study_name}'")
    col = all_columns[key]
    mean = ratings.mean_errors(target)
    order, scores = rank_disagreements(col.values, mean, higher_is_better=col.higher_is_better)
    both = np.isfinite(scores)
    metric_rank = np.full(ratings.n_pairs, np.nan)
    rater_rank = np.full(ratings.n_pairs, np.nan)
    metric_rank[both] = normalised_ranks(orient(col.values[both], col.higher_is_better))
    rater_rank[both] = normalised_ranks(-mean[both])
    table = _table(ratings, all_columns, target)
    ranked = [int(i) for i in order if both[i]]
    if limit is not None:
        ranked = ranked[:limit]
    rows = tuple(
        Disagreement(rank=r + 1, pair=table.rows[i], value=_none(col.values[i]),
                     metric_rank=float(metric_rank[i]), rater_rank=float(rater_rank[i]),
                     score=float(scores[i]))
        for r, i in enumerate(ranked)
    )
    return DisagreementList(study=study_name, key=key, higher_is_better=col.higher_is_better,
                            signature=col.signature, target=target, n_ranked=int(both.sum()),
                            rows=rows, imported=col.imported is not None)


@dataclass(frozen=True)
class RaterCounts:
    """One rater's counts for a pair.

    Attributes:
        rater: Username.
        counted: Whether the rating enters the analysis (completed, or imported).
        completed: Whether the rater's assignment is completed (None: no assignment).
        counts: ``(category, significant) -> count`` for categories 1-6.
        total: Sum over all cells.
        significant: Sum over the significant cells.
    """

    rater: str
    counted: bool
    completed: bool | None
    counts: dict[tuple[int, bool], int]
    total: int
    significant: int


@dataclass(frozen=True)
class MetricValue:
    """One metric key's value for a pair (``imported``: from a file, ``import-scores``)."""

    key: str
    value: float | None
    higher_is_better: bool
    signature: str
    imported: bool = False


@dataclass(frozen=True)
class EvidenceError:
    """One error a metric predicted for a pair, with the sentences that drove it.

    Attributes:
        category: ReXVal category 1-6.
        significant: Clinically significant or not.
        finding: The finding concerned (``None`` for a general comparison).
        reason: The metric's short explanation.
        reference: The reference sentence that drove it, if any.
        candidate: The candidate sentence that drove it, if any.
    """

    category: int
    significant: bool
    finding: str | None
    reason: str
    reference: str | None
    candidate: str | None


@dataclass(frozen=True)
class MetricEvidence:
    """Why a metric family scored a pair as it did (today: ``concord``).

    Attributes:
        family: The family.
        signature: The signature of the values shown beside it (the chosen one).
        variant: The family's variant, when it reports one (``rules``, ``gbm``, ``ce``).
        counts: The 12 counts the family gave, in ReXVal order (category 1 significant,
            category 1 insignificant, ...).
        errors: The errors found by sentence analysis. For ``rules`` they are the counts;
            for ``gbm`` they are the analysis the model's features came from, so a count
            may differ from them; ``ce`` gives none.
    """

    family: str
    signature: str
    variant: str | None
    counts: tuple[float, ...]
    errors: tuple[EvidenceError, ...]


def _sentence(part: Any) -> str | None:  # noqa: ANN401 - JSON from the score cache
    return str(part.get("text")) if isinstance(part, dict) and part.get("text") else None


def _evidence(details: Any, family: str, signature: str) -> MetricEvidence | None:  # noqa: ANN401
    """The evidence in a cached ``details`` object, or ``None`` when it carries none."""
    if not isinstance(details, dict) or not isinstance(details.get("errors"), list):
        return None
    errors = []
    for e in details["errors"]:
        if not isinstance(e, dict) or "category" not in e:
            continue
        errors.append(EvidenceError(
            category=int(e["category"]), significant=bool(e.get("significant")),
            finding=e.get("finding"), reason=str(e.get("reason") or ""),
            reference=_sentence(e.get("reference")), candidate=_sentence(e.get("candidate"))))
    counts = details.get("counts")
    return MetricEvidence(
        family=family, signature=signature,
        variant=str(details["variant"]) if details.get("variant") else None,
        counts=tuple(float(c) for c in counts) if isinstance(counts, list) else (),
        errors=tuple(sorted(errors, key=lambda e: (e.category, not e.significant))),
    )


@dataclass(frozen=True)
class PairDetail:
    """Everything the explorer shows for one pair (admin view).

    Attributes:
        study: Study name.
        pair: The pair's row (mean errors over counted raters, total target).
        mean_significant: Mean significant errors over counted raters.
        reference: Reference report text.
        candidate: Candidate report text.
        diff: Word-level diff of reference -> candidate.
        metrics: Every scored key.
        raters: Every rater with ratings or an assignment for the pair.
        evidence: Per family that explains its values (``concord``), the errors it found
            and the sentences behind them, for the signature shown.
    """

    study: str
    pair: PairRow
    mean_significant: float | None
    reference: str
    candidate: str
    diff: tuple[DiffOp, ...]
    metrics: tuple[MetricValue, ...]
    raters: tuple[RaterCounts, ...]
    evidence: tuple[MetricEvidence, ...] = ()


def pair_detail(db: Database, actor: Actor, *, study_name: str, pair_id: int) -> PairDetail:
    """Reports, word diff, every metric value and every rater's counts of a pair (admin).

    Raises:
        PermissionDenied: for a non-admin.
        NotFound: unknown study, or no such pair in it.
    """
    from radconcord.db.models import User

    require_admin(actor)
    ratings, columns = _load(db, study_name)
    where = np.flatnonzero(ratings.pair_ids == pair_id)
    if where.size == 0:
        raise NotFound(f"study '{study_name}' has no pair {pair_id}")
    i = int(where[0])
    table = _table(ratings, columns, "total")
    with db.read() as s:
        pair = s.get(Pair, pair_id)
        assert pair is not None  # the pair was just read through load_ratings
        reference = s.scalar(select(Report.text).where(Report.id == pair.reference_id)) or ""
        candidate = s.scalar(select(Report.text).where(Report.id == pair.candidate_id)) or ""
        cells = s.execute(
            select(User.username, Rating.category, Rating.significant, Rating.count)
            .join(User, User.id == Rating.rater_id)
            .where(Rating.pair_id == pair_id)
        ).all()
        # One cached row per computed family (details are stored with every key of a
        # family's result), for the signature whose values the page shows.
        first_key: dict[str, MetricColumn] = {}
        for col in columns.values():
            if col.imported is None:
                first_key.setdefault(col.family, col)
        evidence = []
        for family, col in first_key.items():
            details = s.scalar(
                select(MetricScore.details).where(
                    MetricScore.input_hash == pair.input_hash, MetricScore.family == family,
                    MetricScore.key == col.key,
                    MetricScore.signature_hash == col.signature_hash).limit(1))
            found = _evidence(details, family, col.signature)
            if found is not None:
                evidence.append(found)
        assigned = dict(s.execute(
            select(User.username, Assignment.completed_at)
            .join(User, User.id == Assignment.rater_id)
            .where(Assignment.pair_id == pair_id)
        ).all())
    by_rater: dict[str, dict[tuple[int, bool], int]] = {name: {} for name in assigned}
    for name, category, significant, count in cells:
        by_rater.setdefault(name, {})[(int(category), bool(significant))] = int(count)
    raters = []
    for name in sorted(by_rater):
        counts = {(c, sig): by_rater[name].get((c, sig), 0)
                  for c in range(1, N_CATEGORIES + 1) for sig in (False, True)}
        completed = None if name not in assigned else assigned[name] is not None
        raters.append(RaterCounts(
            rater=name, counted=completed is not False, completed=completed, counts=counts,
            total=sum(counts.values()),
            significant=sum(v for (_, sig), v in counts.items() if sig),
        ))
    return PairDetail(
        study=study_name,
        pair=table.rows[i],
        mean_significant=_none(ratings.mean_errors("significant")[i]),
        reference=reference,
        candidate=candidate,
        diff=tuple(word_diff(reference, candidate)),
        metrics=tuple(
            MetricValue(key=k, value=_none(c.values[i]), higher_is_better=c.higher_is_better,
                        signature=c.signature, imported=c.imported is not None)
            for k, c in columns.items()
        ),
        raters=tuple(raters),
        evidence=tuple(evidence),
    )
