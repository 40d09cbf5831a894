"""Study listings: admins see every study with counts and sources; raters only their own."""

from __future__ import annotations

import copy
import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.services.errors import require_admin
from backend.services.rating import RaterStudy, as_utc, rater_studies
from backend.services.repo import get_study
from backend.services.types import Actor
from db.models import STUDY_STAGING, Assignment, Pair, Study
from db.session import Database


@dataclass(frozen=True)
class StudySummary:
    """A study as an admin sees it."""

    name: str
    description: str
    status: str
    scheme: str
    raters_per_pair: int
    seed: int
    n_pairs: int
    n_cases: int
    n_raters: int
    n_assignments: int
    n_completed: int
    created_at: dt.datetime | None
    sources: dict[str, int] = field(default_factory=dict)  # candidate source -> pairs
    provenance: dict[str, Any] = field(default_factory=dict)


def _summary(s: Session, study: Study) -> StudySummary:
    n_pairs, n_cases = s.execute(
        select(func.count(Pair.id), func.count(func.distinct(Pair.case_id))).where(
            Pair.study_id == study.id
        )
    ).one()
    n_raters, n_assign, n_done = s.execute(
        select(
            func.count(func.distinct(Assignment.rater_id)),
            func.count(Assignment.id),
            func.count(Assignment.completed_at),
        ).where(Assignment.study_id == study.id)
    ).one()
    sources = dict(
        s.execute(
            select(Pair.source, func.count(Pair.id))
            .where(Pair.study_id == study.id)
            .group_by(Pair.source)
            .order_by(Pair.source)
        ).all()
    )
    return StudySummary(
        name=study.name,
        description=study.description,
        status=study.status,
        scheme=study.scheme,
        raters_per_pair=study.raters_per_pair,
        seed=study.seed,
        n_pairs=int(n_pairs),
        n_cases=int(n_cases),
        n_raters=int(n_raters),
        n_assignments=int(n_assign),
        n_completed=int(n_done),
        created_at=as_utc(study.created_at),
        sources={str(k): int(v) for k, v in sources.items()},
        provenance=copy.deepcopy(study.provenance or {}),
    )


def list_studies(db: Database, actor: Actor) -> list[StudySummary] | list[RaterStudy]:
    """Studies visible to the actor, by name.

    Admins get a ``StudySummary`` per study (counts, sources, provenance); raters get their
    own ``RaterStudy`` entries (done/total), which carry no sources or other raters' data.
    A study still being imported (status ``importing``) is listed to nobody.

    Args:
        db: the study database.
        actor: any account.
    """
    if not actor.is_admin:
        return rater_studies(db, actor)
    with db.read() as s:
        studies = s.scalars(
            select(Study).where(Study.status != STUDY_STAGING).order_by(Study.name)
        ).all()
        return [_summary(s, st) for st in studies]


def get_study_summary(db: Database, actor: Actor, *, study_name: str) -> StudySummary:
    """One study's summary (admin only).

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such study.
    """
    require_admin(actor)
    with db.read() as s:
        study = get_study(s, study_name)
        return _summary(s, study)
