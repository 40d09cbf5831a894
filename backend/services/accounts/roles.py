"""What an account does in its studies beyond its role: which screens the router offers.

A rater's screens depend on their studies: the count screen (``Rate``) for pairs assigned to
them, the side-by-side screen (``Compare``) for pairwise judgements, and the adjudication
view for studies where they are an adjudicator (:class:`db.models.StudyRole`). Admins see
every screen; this only decides what a rater's navigation lists, every page still checks
access through the services it calls.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import exists, select

from radconcord.backend.services.study_admin.study_status import HIDDEN_STATUSES
from radconcord.backend.types import Actor
from radconcord.db.models import (
    ROLE_ADJUDICATOR,
    Assignment,
    Comparison,
    Judgement,
    Study,
    StudyRole,
)
from radconcord.db.session import Database

#: ``StudyRole.role`` of a senior reader who records consensus counts.
ADJUDICATOR = ROLE_ADJUDICATOR


@dataclass(frozen=True)
class Capabilities:
    """The screens an account has work on.

    Attributes:
        rates_pairs: Has pairs assigned (count grid or per-error records).
        judges_pairs: Has pairwise judgements assigned.
        adjudicates: Is an adjudicator of a visible study (admins: always).
    """

    rates_pairs: bool
    judges_pairs: bool
    adjudicates: bool


def capabilities(db: Database, actor: Actor) -> Capabilities:
    """Which screens ``actor`` has work on, in studies raters can see."""
    visible = Study.status.not_in(HIDDEN_STATUSES)
    with db.read() as s:
        rates = s.scalar(select(exists().where(
            Assignment.rater_id == actor.user_id, Assignment.study_id == Study.id, visible)))
        judges = s.scalar(select(exists().where(
            Judgement.rater_id == actor.user_id, Judgement.comparison_id == Comparison.id,
            Comparison.study_id == Study.id, visible)))
        adjudicates = actor.is_admin or s.scalar(select(exists().where(
            StudyRole.user_id == actor.user_id, StudyRole.role == ADJUDICATOR,
            StudyRole.study_id == Study.id, visible)))
    return Capabilities(bool(rates), bool(judges), bool(adjudicates))
