""""I'm unsure / flag this pair": a rater's own flag on a pair, with an optional note.

A flag is a message to the study lead (shown on the Quality control page through
:func:`study_flags`), stored on the rater's ``Assignment`` (``flagged_at``, ``flag_note``). It
never changes the rater's counts, the done-state or the version a save carries: a pair can be
flagged before or after it is marked done, and flagging does not make another tab's save
stale. A rater sees and changes only their own flag; a pair that is not theirs answers like a
pair that does not exist, as everywhere on the rater's side
(:mod:`backend.services.annotation.rating`).
A closed study's flags no longer change.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from radconcord.backend import clock
from radconcord.backend.errors import (
    InvalidInput,
    NotFound,
    PermissionDenied,
    require_admin,
)
from radconcord.backend.services.repo import get_study
from radconcord.backend.services.study_admin.study_status import HIDDEN_STATUSES, READ_ONLY_STATUSES
from radconcord.backend.services.transactions import write_retrying
from radconcord.backend.types import Actor
from radconcord.db.models import Assignment, Pair, Study, User
from radconcord.db.session import Database

#: The longest note a flag may carry, in characters.
MAX_NOTE_CHARS = 1000


@dataclass(frozen=True)
class FlagState:
    """The actor's own flag on one pair.

    Attributes:
        opaque_id: The pair (the id the rater knows).
        flagged_at: When the rater flagged it (None: not flagged).
        note: The note (empty when none or not flagged).
    """

    opaque_id: str
    flagged_at: dt.datetime | None
    note: str

    @property
    def flagged(self) -> bool:
        """Whether the pair is flagged."""
        return self.flagged_at is not None


@dataclass(frozen=True)
class StudyFlag:
    """One flag as the study lead sees it.

    Attributes:
        pair_number: The pair's number in the study (``position + 1``, as on the progress
            page).
        opaque_id: The pair's opaque id.
        kind: ``study``, ``training`` or ``repeat`` (the lead may know; the rater never does).
        rater: The rater's username.
        note: The rater's note (may be empty).
        flagged_at: When it was flagged.
        completed: Whether the rater has marked the pair done.
    """

    pair_number: int
    opaque_id: str
    kind: str
    rater: str
    note: str
    flagged_at: dt.datetime
    completed: bool


def _assignment(s: Session, actor: Actor, opaque_id: str) -> tuple[Assignment, str, str]:
    """The actor's assignment of a visible pair (locked), its study's name and status."""
    if not isinstance(opaque_id, str) or not opaque_id:
        raise InvalidInput(f"opaque_id: must be a pair's id (text), got {opaque_id!r}")
    row = s.execute(
        select(Assignment, Study.name, Study.status)
        .join(Pair, Pair.id == Assignment.pair_id)
        .join(Study, Study.id == Assignment.study_id)
        .where(Assignment.rater_id == actor.user_id, Pair.opaque_id == opaque_id,
               Study.status.not_in(HIDDEN_STATUSES))
        .with_for_update(of=Assignment)
    ).first()
    if row is None:
        raise NotFound(f"pair {opaque_id!r} is not in your assignments")
    return row[0], row[1], row[2]


def _state(opaque_id: str, assignment: Assignment) -> FlagState:
    return FlagState(opaque_id=opaque_id, flagged_at=clock.as_utc(assignment.flagged_at),
                     note=assignment.flag_note or "")


def _clean_note(note: object) -> str:
    if note is None:
        return ""
    if not isinstance(note, str):
        raise InvalidInput(f"note: must be text, got {type(note).__name__}")
    note = note.strip()
    if len(note) > MAX_NOTE_CHARS:
        raise InvalidInput(f"note: {len(note)} characters, at most {MAX_NOTE_CHARS}; "
                           "shorten it (nothing was saved)")
    if "\x00" in note:
        raise InvalidInput("note: contains a NUL character")
    return note


def _writable(study_name: str, status: str) -> None:
    if status in READ_ONLY_STATUSES:
        raise PermissionDenied(f"study {study_name!r} is closed; flags can't change")


def flag_pair(db: Database, actor: Actor, *, opaque_id: str, note: str | None = "",
              now: dt.datetime | None = None) -> FlagState:
    """Flag one of the actor's pairs for the study lead, with an optional note.

    Flagging a flagged pair replaces its note and keeps the time it was first flagged.

    Args:
        db: The study database.
        actor: The rater.
        opaque_id: The pair.
        note: Why (optional; stripped; at most ``MAX_NOTE_CHARS`` characters).
        now: The time to record (tests pass it).

    Raises:
        InvalidInput: the note is not text or too long (nothing is saved).
        NotFound: the pair is not one of the actor's.
        PermissionDenied: the study is closed.
    """
    text = _clean_note(note)
    moment = now or clock.utcnow()

    def work(s: Session) -> FlagState:
        assignment, study_name, status = _assignment(s, actor, opaque_id)
        _writable(study_name, status)
        if assignment.flagged_at is None:
            assignment.flagged_at = moment
        assignment.flag_note = text or None
        return _state(opaque_id, assignment)

    return write_retrying(db, work, what=f"flag of pair {opaque_id}")


def unflag_pair(db: Database, actor: Actor, *, opaque_id: str) -> FlagState:
    """Remove the actor's flag (and its note) from one of their pairs; no flag is no error.

    Raises:
        NotFound: the pair is not one of the actor's.
        PermissionDenied: the study is closed.
    """

    def work(s: Session) -> FlagState:
        assignment, study_name, status = _assignment(s, actor, opaque_id)
        _writable(study_name, status)
        assignment.flagged_at = None
        assignment.flag_note = None
        return _state(opaque_id, assignment)

    return write_retrying(db, work, what=f"unflag of pair {opaque_id}")


def pair_flag(db: Database, actor: Actor, *, opaque_id: str) -> FlagState:
    """The actor's own flag on one of their pairs.

    Raises:
        NotFound: the pair is not one of the actor's.
    """
    with db.read() as s:
        row = s.execute(
            select(Assignment.flagged_at, Assignment.flag_note)
            .join(Pair, Pair.id == Assignment.pair_id)
            .join(Study, Study.id == Assignment.study_id)
            .where(Assignment.rater_id == actor.user_id, Pair.opaque_id == str(opaque_id),
                   Study.status.not_in(HIDDEN_STATUSES))
        ).first()
    if row is None:
        raise NotFound(f"pair {opaque_id!r} is not in your assignments")
    return FlagState(opaque_id=str(opaque_id), flagged_at=clock.as_utc(row[0]), note=row[1] or "")


def study_flags(db: Database, actor: Actor, study_name: str) -> list[StudyFlag]:
    """Every rater's flags in a study, for the study lead, oldest first.

    Args:
        db: The study database.
        actor: An admin.
        study_name: The study.

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such study.
    """
    require_admin(actor)
    with db.read() as s:
        study_id = get_study(s, study_name).id
        rows = s.execute(
            select(Pair.position, Pair.opaque_id, Pair.kind, User.username,
                   Assignment.flag_note, Assignment.flagged_at, Assignment.completed_at)
            .join(Pair, Pair.id == Assignment.pair_id)
            .join(User, User.id == Assignment.rater_id)
            .where(Assignment.study_id == study_id, Assignment.flagged_at.is_not(None))
            .order_by(Assignment.flagged_at, Pair.position, User.username)
        ).all()
    return [
        StudyFlag(pair_number=int(position) + 1, opaque_id=oid, kind=str(kind),
                  rater=username, note=note or "", flagged_at=clock.as_utc(flagged_at),
                  completed=completed is not None)
        for position, oid, kind, username, note, flagged_at, completed in rows
    ]


__all__ = [
    "MAX_NOTE_CHARS",
    "FlagState",
    "StudyFlag",
    "flag_pair",
    "pair_flag",
    "study_flags",
    "unflag_pair",
]
