"""Study progress for admins: per rater done/total/time on task, per pair completed ratings
(in a pairwise study: per rater their judgements, per comparison the judgements done).

Time on task is the measure of :mod:`backend.services.annotation.activity` (the rater's own activity
spans, unioned per pair, idle gaps cut); per rater the total over their pairs and the median
per pair over the pairs with any active time. Pairs are numbered 1..N (``number``) wherever
a person reads them; ``position`` is the 0-based storage order.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session, aliased

from radconcord.backend import clock
from radconcord.backend.errors import require_admin
from radconcord.backend.services.annotation.activity import summarize
from radconcord.backend.services.repo import get_study
from radconcord.backend.services.study_admin.study_settings import PAIRWISE, effective
from radconcord.backend.types import Actor
from radconcord.db.models import (
    PAIR_STUDY,
    Assignment,
    Comparison,
    Judgement,
    Pair,
    Study,
    User,
)
from radconcord.db.session import Database


@dataclass(frozen=True)
class RaterProgress:
    """One rater's progress in a study."""

    username: str
    display_name: str
    completed: int
    total: int
    active_seconds: float  # time on task summed over the rater's pairs (activity spans)
    last_active_at: dt.datetime | None
    # Median time on task per pair over the pairs with any active time (None: none yet).
    median_seconds: float | None = None
    pairs_with_time: int = 0


@dataclass(frozen=True)
class PairProgress:
    """How many of a pair's raters have marked it done."""

    position: int
    opaque_id: str
    source: str
    assigned: int
    completed: int

    @property
    def number(self) -> int:
        """The pair's 1-based number, as every page and export shows it."""
        return self.position + 1


@dataclass(frozen=True)
class ComparisonProgress:
    """How many of a comparison's raters (pairwise mode) have marked their judgement done."""

    position: int
    opaque_id: str
    sources: str  # "source of A vs source of B"
    assigned: int
    completed: int

    @property
    def number(self) -> int:
        """The comparison's 1-based number."""
        return self.position + 1


@dataclass(frozen=True)
class StudyProgress:
    """Progress of a whole study."""

    name: str
    status: str
    raters_per_pair: int
    n_pairs: int
    n_assignments: int
    n_completed: int
    # Pairs whose every assigned rater has marked them done.
    n_pairs_fully_rated: int
    raters: tuple[RaterProgress, ...]
    pairs: tuple[PairProgress, ...]
    #: The ``annotation_mode`` setting in force. In ``pairwise`` mode the raters' work is
    #: judging comparisons: ``raters`` (done/total, time on task), ``n_assignments`` and
    #: ``n_completed`` count judgements, and ``comparisons`` holds each comparison's
    #: judgements given and done (``pairs`` then only lists the study pairs).
    annotation_mode: str = "counts"
    comparisons: tuple[ComparisonProgress, ...] = ()

    @property
    def unit(self) -> str:
        """What a rater's done/total counts: ``comparison`` (pairwise mode) or ``pair``."""
        return "comparison" if self.annotation_mode == PAIRWISE else "pair"

    @property
    def n_comparisons_fully_judged(self) -> int:
        """Comparisons whose every assigned rater has marked their judgement done."""
        return sum(1 for c in self.comparisons if c.assigned and c.completed == c.assigned)


def study_progress(db: Database, actor: Actor, *, study_name: str) -> StudyProgress:
    """Per-rater and per-pair progress of a study (admin only).

    Args:
        db: the study database.
        actor: an admin.
        study_name: the study.

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such study.
    """
    require_admin(actor)
    with db.read() as s:
        study = get_study(s, study_name)
        mode = effective(study.settings)["annotation_mode"]
        if mode == PAIRWISE:
            return _pairwise_progress(s, study, mode)
        rater_rows = s.execute(
            select(
                User.username,
                User.display_name,
                func.count(Assignment.id),
                func.count(Assignment.completed_at),
                func.max(Assignment.last_active_at),
            )
            .join(Assignment, Assignment.rater_id == User.id)
            .where(Assignment.study_id == study.id)
            .group_by(User.id, User.username, User.display_name)
            .order_by(User.username)
        ).all()
        per_pair: dict[str, list[float]] = {}
        for username, secs in s.execute(
            select(User.username, Assignment.active_seconds)
            .join(Assignment, Assignment.rater_id == User.id)
            .where(Assignment.study_id == study.id)
        ):
            per_pair.setdefault(username, []).append(float(secs or 0.0))
        times = {u: summarize(v) for u, v in per_pair.items()}
        raters = tuple(
            RaterProgress(
                username=u,
                display_name=d,
                completed=int(done),
                total=int(total),
                active_seconds=times[u].total_seconds,
                last_active_at=clock.as_utc(last),
                median_seconds=times[u].median_seconds,
                pairs_with_time=times[u].pairs_with_time,
            )
            for u, d, total, done, last in rater_rows
        )
        pairs = _pair_rows(s, study)
        return StudyProgress(
            name=study.name,
            status=study.status,
            raters_per_pair=study.raters_per_pair,
            n_pairs=len(pairs),
            n_assignments=sum(p.assigned for p in pairs),
            n_completed=sum(p.completed for p in pairs),
            n_pairs_fully_rated=sum(1 for p in pairs if p.assigned and p.completed == p.assigned),
            raters=raters,
            pairs=pairs,
            annotation_mode=mode,
        )


def _pair_rows(s: Session, study: Study) -> tuple[PairProgress, ...]:
    """The study pairs with their pair assignments (given, done)."""
    return tuple(
        PairProgress(position=int(p), opaque_id=o, source=src, assigned=int(a),
                     completed=int(c))
        for p, o, src, a, c in s.execute(
            select(Pair.position, Pair.opaque_id, Pair.source, func.count(Assignment.id),
                   func.count(Assignment.completed_at))
            .outerjoin(Assignment, Assignment.pair_id == Pair.id)
            .where(Pair.study_id == study.id, Pair.kind == PAIR_STUDY)
            .group_by(Pair.id, Pair.position, Pair.opaque_id, Pair.source)
            .order_by(Pair.position))
    )


def _pairwise_progress(s: Session, study: Study, mode: str) -> StudyProgress:
    """Progress of a pairwise study: the raters' judgements of its comparisons."""
    rater_rows = s.execute(
        select(User.username, User.display_name, func.count(Judgement.id),
               func.count(Judgement.completed_at), func.max(Judgement.last_active_at))
        .join(Judgement, Judgement.rater_id == User.id)
        .join(Comparison, Comparison.id == Judgement.comparison_id)
        .where(Comparison.study_id == study.id)
        .group_by(User.id, User.username, User.display_name)
        .order_by(User.username)
    ).all()
    per_item: dict[str, list[float]] = {}
    for username, secs in s.execute(
        select(User.username, Judgement.active_seconds)
        .join(Judgement, Judgement.rater_id == User.id)
        .join(Comparison, Comparison.id == Judgement.comparison_id)
        .where(Comparison.study_id == study.id)
    ):
        per_item.setdefault(username, []).append(float(secs or 0.0))
    times = {u: summarize(v) for u, v in per_item.items()}
    raters = tuple(
        RaterProgress(
            username=u, display_name=d, completed=int(done), total=int(total),
            active_seconds=times[u].total_seconds, last_active_at=clock.as_utc(last),
            median_seconds=times[u].median_seconds, pairs_with_time=times[u].pairs_with_time)
        for u, d, total, done, last in rater_rows
    )
    pair_a, pair_b = aliased(Pair), aliased(Pair)
    comparisons = tuple(
        ComparisonProgress(position=int(p), opaque_id=o,
                           sources=f"{src_a or '(none)'} vs {src_b or '(none)'}",
                           assigned=int(a), completed=int(c))
        for p, o, src_a, src_b, a, c in s.execute(
            select(Comparison.position, Comparison.opaque_id, pair_a.source, pair_b.source,
                   func.count(Judgement.id), func.count(Judgement.completed_at))
            .join(pair_a, pair_a.id == Comparison.pair_a_id)
            .join(pair_b, pair_b.id == Comparison.pair_b_id)
            .outerjoin(Judgement, Judgement.comparison_id == Comparison.id)
            .where(Comparison.study_id == study.id)
            .group_by(Comparison.id, Comparison.position, Comparison.opaque_id,
                      pair_a.source, pair_b.source)
            .order_by(Comparison.position))
    )
    pairs = _pair_rows(s, study)
    return StudyProgress(
        name=study.name,
        status=study.status,
        raters_per_pair=study.raters_per_pair,
        n_pairs=len(pairs),
        n_assignments=sum(c.assigned for c in comparisons),
        n_completed=sum(c.completed for c in comparisons),
        n_pairs_fully_rated=sum(1 for p in pairs if p.assigned and p.completed == p.assigned),
        raters=raters,
        pairs=pairs,
        annotation_mode=mode,
        comparisons=comparisons,
    )
