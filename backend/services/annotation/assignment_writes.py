"""One rater's write to one assigned pair: the steps every such write shares.

The rating grid (backend/services/annotation/rating.py), per-error records
(backend/services/annotation/error_records.py) and calibration
(backend/services/quality/calibration.py) all
write a rater's counts of a pair the same way, inside one transaction
(:func:`backend.services.transactions.write_retrying`):

1. :func:`find_target`: the actor's own assignment of the pair (``lock=True`` locks it:
   ``SELECT ... FOR UPDATE`` on PostgreSQL; SQLite transactions hold the write lock). A pair
   that is not the actor's, or whose study raters cannot see, is ``NotFound`` with the same
   message as a pair that does not exist; the qualification gate refuses study pairs until
   the rater has qualified.
2. :func:`check_writable`: the study is not closed, the rater is not its adjudicator with
   final counts, a done training item keeps its counts.
3. :func:`check_version`: the version the rater saw is still the stored one, or
   :class:`StaleWrite` (carrying what is stored) and nothing is written.
4. :func:`set_cell` per changed cell: upsert the ``Rating`` row and append its
   ``RatingEvent`` audit (old and new count).
5. :func:`bump_version` once when anything changed.

:func:`stored_counts` reads the actor's twelve cells (:data:`CELLS`) of a pair.
"""

from __future__ import annotations

import datetime as dt
import numbers
from typing import NamedTuple

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from radconcord.backend import clock
from radconcord.backend.errors import NotFound, PermissionDenied, ServiceError
from radconcord.backend.services.quality.qualification import qualification
from radconcord.backend.services.study_admin.study_status import HIDDEN_STATUSES, READ_ONLY_STATUSES
from radconcord.backend.types import CATEGORIES, Actor
from radconcord.db.models import (
    PAIR_TRAINING,
    ROLE_ADJUDICATOR,
    Assignment,
    Pair,
    Rating,
    RatingEvent,
    Study,
    StudyRole,
)

MAX_COUNT = 99
# Every (category, significant) cell of the ReXVal scheme, in display order.
CELLS: tuple[tuple[int, bool], ...] = tuple(
    (category, significant) for category in sorted(CATEGORIES) for significant in (True, False)
)
STALE_MESSAGE = "Not saved: changed in another window, reloaded"


class StaleWrite(ServiceError):
    """A save carried a version of the pair older than the stored one; nothing was written.

    Attributes:
        counts: the stored counts, every cell of ``CELLS``.
        version: the stored version, to be carried by the next save.
        completed_at: the stored done-state.
    """

    def __init__(self, *, counts: dict[tuple[int, bool], int], version: int,
                 completed_at: dt.datetime | None, message: str = STALE_MESSAGE) -> None:
        super().__init__(message)
        self.counts = counts
        self.version = version
        self.completed_at = completed_at


class Target(NamedTuple):
    """The actor's assignment of one pair and what it points to (:func:`find_target`)."""

    assignment: Assignment
    pair_id: int
    case_id: int
    reference_id: int
    candidate_id: int
    study_id: int
    study_name: str
    study_status: str
    kind: str


def _not_found(opaque_id: str) -> NotFound:
    return NotFound(f"pair {opaque_id!r} is not in your assignments")


def find_target(s: Session, actor: Actor, opaque_id: str, *, lock: bool = False) -> Target:
    """The actor's assignment for ``opaque_id`` (and what it points to), or ``NotFound``."""
    stmt = (
        select(
            Assignment,
            Pair.id,
            Pair.case_id,
            Pair.reference_id,
            Pair.candidate_id,
            Study.id,
            Study.name,
            Study.status,
            Pair.kind,
            Study.settings,
        )
        .join(Pair, Pair.id == Assignment.pair_id)
        .join(Study, Study.id == Assignment.study_id)
        .where(
            Assignment.rater_id == actor.user_id,
            Pair.opaque_id == str(opaque_id),
            Study.status.not_in(HIDDEN_STATUSES),
        )
    )
    if lock:
        stmt = stmt.with_for_update(of=Assignment)
    row = s.execute(stmt).first()
    if row is None:
        raise _not_found(opaque_id)
    target = Target(*row[:-1])
    if target.kind != PAIR_TRAINING:
        gate = qualification(s, actor.user_id, target.study_id, row[-1])
        if not gate.open:
            raise PermissionDenied(gate.message(target.study_name) or "")
    return target


def final_for_adjudicator(s: Session, rater_id: int, study_id: int) -> bool:
    """Whether the rater adjudicates the study and has rated all of their pairs of it.

    Adjudication opens to them at that moment and shows the other raters' counts, so their
    own become final: a change made after would no longer be an independent reading.
    """
    adjudicates = s.scalar(select(StudyRole.id).where(
        StudyRole.study_id == study_id, StudyRole.user_id == rater_id,
        StudyRole.role == ROLE_ADJUDICATOR)) is not None
    if not adjudicates:
        return False
    return s.scalar(select(Assignment.id).where(
        Assignment.study_id == study_id, Assignment.rater_id == rater_id,
        Assignment.completed_at.is_(None)).limit(1)) is None


def check_writable(s: Session, target: Target, *, counts: bool = True) -> None:
    """Refuse a write the rater may not make now (``PermissionDenied``).

    The study is closed; or the rater adjudicates it and their counts are final; or, when
    ``counts`` (a change of counts rather than of the done-state), the pair is a done
    training item whose expert counts the rater has seen.
    """
    if target.study_status in READ_ONLY_STATUSES:
        raise PermissionDenied(f"study {target.study_name!r} is closed; ratings can't change")
    if final_for_adjudicator(s, target.assignment.rater_id, target.study_id):
        raise PermissionDenied(
            f"your ratings of study {target.study_name!r} are final: as its adjudicator you "
            "can see the other raters' counts now that yours are done (an admin can take "
            "the adjudicator role away for a correction)")
    if counts and target.kind == PAIR_TRAINING and target.assignment.completed_at is not None:
        # The expert's counts are shown once the item is done: a later change would be
        # copied from them, not a judgement.
        raise PermissionDenied("this training item is done and its expert counts are shown: "
                               "its counts can't change")


def stored_counts(s: Session, actor: Actor, pair_id: int) -> dict[tuple[int, bool], int]:
    """The actor's count of every cell of :data:`CELLS` for the pair (0 when never entered)."""
    counts = dict.fromkeys(CELLS, 0)
    for category, significant, count in s.execute(
        select(Rating.category, Rating.significant, Rating.count).where(
            Rating.rater_id == actor.user_id, Rating.pair_id == pair_id
        )
    ):
        counts[(int(category), bool(significant))] = int(count)
    return counts


def upsert_rating(
    s: Session, *, rater_id: int, pair_id: int, category: int, significant: bool, count: int,
    now: dt.datetime,
) -> None:
    """Insert or update one rating cell in a single statement (SQLite and PostgreSQL)."""
    dialect = s.get_bind().dialect.name
    if dialect == "postgresql":
        insert = pg_insert
    elif dialect == "sqlite":
        insert = sqlite_insert
    else:  # pragma: no cover - the project supports these two
        raise RuntimeError(f"unsupported database dialect {dialect!r}")
    stmt = insert(Rating).values(
        rater_id=rater_id,
        pair_id=pair_id,
        category=category,
        significant=significant,
        count=count,
        created_at=now,
        updated_at=now,
    )
    stmt = stmt.on_conflict_do_update(
        index_elements=[Rating.rater_id, Rating.pair_id, Rating.category, Rating.significant],
        set_={"count": stmt.excluded.count, "updated_at": stmt.excluded.updated_at},
    )
    s.execute(stmt)


def is_int(value: object) -> bool:
    """Whether ``value`` is a whole number: numpy integers from a widget are fine; bools and
    floats are not counts."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_version(s: Session, actor: Actor, t: Target, expected_version: int | None) -> None:
    """Refuse a save based on an older view of the pair (called with the row lock held)."""
    stored = int(t.assignment.version or 0)
    if expected_version is not None and int(expected_version) != stored:
        raise StaleWrite(counts=stored_counts(s, actor, t.pair_id), version=stored,
                         completed_at=clock.as_utc(t.assignment.completed_at))


def bump_version(t: Target) -> int:
    """Bump the assignment's version (every change of counts or done-state); the new one."""
    t.assignment.version = int(t.assignment.version or 0) + 1
    return t.assignment.version


def set_cell(s: Session, actor: Actor, t: Target, category: int, significant: bool,
             count: int, now: dt.datetime) -> bool:
    """Store one cell and audit it; False (nothing written) when it already holds ``count``."""
    # Read in its own statement, after the lock is held: under PostgreSQL's READ COMMITTED
    # a statement that waited for a row lock re-reads only the locked row, so a count
    # joined into the locking query could be stale and break the audit chain.
    old = s.scalar(
        select(Rating.count).where(
            Rating.rater_id == actor.user_id,
            Rating.pair_id == t.pair_id,
            Rating.category == category,
            Rating.significant == significant,
        )
    )
    if (old if old is not None else 0) == count:
        return False
    upsert_rating(s, rater_id=actor.user_id, pair_id=t.pair_id, category=category,
                   significant=significant, count=count, now=now)
    s.add(
        RatingEvent(
            rater_id=actor.user_id,
            pair_id=t.pair_id,
            action="set",
            category=category,
            significant=significant,
            old_count=old,
            new_count=count,
            at=now,
        )
    )
    return True


__all__ = [
    "CELLS",
    "MAX_COUNT",
    "STALE_MESSAGE",
    "StaleWrite",
    "Target",
    "bump_version",
    "check_version",
    "check_writable",
    "final_for_adjudicator",
    "find_target",
    "is_int",
    "set_cell",
    "stored_counts",
    "upsert_rating",
]
