"""The rater's side: their studies, their queue, one pair at a time, autosaved counts, audit.

Blinding is structural: every query starts from the actor's own ``Assignment`` rows, so a
rater can reach only pairs assigned to them, and the values returned carry the texts, images
and the rater's own counts, never a candidate source, a metric score, a database id of a pair
or another rater's answer. A pair that is not assigned to the actor is reported as
``NotFound`` with the same message as a pair that does not exist, so ids cannot be probed.

Writes lock the actor's assignment row (``SELECT ... FOR UPDATE`` on PostgreSQL; SQLite
transactions already hold the database write lock), which serialises two browser tabs of the
same rater on the same pair and makes each audit event's ``old_count`` exact, while different
raters never wait for each other on PostgreSQL.

Every change of a rater's counts or done-state of a pair bumps that assignment's ``version``
in the same transaction. A save may carry the version the rater saw (``expected_version``); a
stale one (another tab or window changed the pair since) is refused with :class:`StaleWrite`,
which carries the stored counts and version so the screen can show them. Nothing is written.

Calibration: training items (``Pair.kind == "training"``) come first in every rater's order.
With the study setting ``qualification_items`` N > 0 the rater reaches the study pairs and
their hidden repeats only after N done training items within ``qualification_max_error`` of
the expert's total (:class:`Qualification`): until then their queue and studies list show
only the training items and any other pair is refused with :class:`PermissionDenied` saying
how many passed. A done training item is final (read only, never reopened): the rater has
seen the expert's counts.

Writes never fail because another writer (an import, a scoring job, another rater) holds the
database for a moment: each one retries with backoff for up to ``SAVE_RETRY_SECONDS`` (SQLite
"database is locked", PostgreSQL serialization failures, deadlocks, lock timeouts) and only
then raises :class:`SaveFailed`, whose message tells the rater that nothing was stored and
the value they entered is kept to be saved again.
"""

from __future__ import annotations

import datetime as dt
import logging
import numbers
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, aliased

from radconcord.backend.services import assignment
from radconcord.backend.services.errors import (
    InvalidInput,
    NotFound,
    PermissionDenied,
    ServiceError,
)
from radconcord.backend.services.study_settings import effective
from radconcord.backend.services.types import CATEGORIES, Actor
from radconcord.db.models import (
    PAIR_TRAINING,
    ROLE_ADJUDICATOR,
    STUDY_STAGING,
    Assignment,
    Image,
    Pair,
    Rating,
    RatingEvent,
    Report,
    Study,
    StudyRole,
)
from radconcord.db.session import (
    Database,
    DatabaseBusy,
    is_busy_error,
    is_storage_full,
    storage_location,
)

log = logging.getLogger(__name__)

MAX_COUNT = 99
# Every (category, significant) cell of the ReXVal scheme, in display order.
CELLS: tuple[tuple[int, bool], ...] = tuple(
    (category, significant) for category in sorted(CATEGORIES) for significant in (True, False)
)
# Studies raters cannot see: not opened yet, or still being imported.
HIDDEN_STATUSES = ("draft", STUDY_STAGING, "archived")
READ_ONLY_STATUSES = ("closed",)  # studies raters can see but no longer change


# How long a write keeps retrying while other writers hold the database, then gives up.
SAVE_RETRY_SECONDS = 5.0
# The longest one attempt waits for the lock (PostgreSQL): a few attempts fit in the window.
_ATTEMPT_SECONDS = 1.5
# On SQLite an attempt waits this long in the busy handler (polls after 1, 2, 5, 10 ms),
# then the next attempt follows at once: a tight poll that finds the gaps between batches.
_SQLITE_POLL_SECONDS = 0.02
_T = TypeVar("_T")

BUSY_MESSAGE = "Not saved: the database is busy; your count is kept, try again"
BUSY_ACTION_MESSAGE = "Not saved: the database is busy; nothing was changed, try again"
STALE_MESSAGE = "Not saved: changed in another window, reloaded"


class SaveFailed(ServiceError):
    """A write gave up after ``SAVE_RETRY_SECONDS`` of a busy database; nothing was stored."""

    def __init__(self, message: str = BUSY_MESSAGE) -> None:
        super().__init__(message)


STORAGE_FULL_MESSAGE = ("Not saved: the server's storage is full. Tell the study's "
                        "administrator")


class StorageFull(ServiceError):
    """A write failed because the database's storage is full; nothing was stored.

    Not retried within the request (the disk will not empty in seconds); the grid keeps the
    change and sends it again later, as it does for a busy database.
    """

    def __init__(self, message: str = STORAGE_FULL_MESSAGE) -> None:
        super().__init__(message)


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


def write_retrying(db: Database, work: Callable[[Any], _T], *, what: str,
                   budget: float | None = None, message: str = BUSY_ACTION_MESSAGE) -> _T:
    """Run ``work(session)`` in a write transaction, retrying while the database is busy.

    PostgreSQL queues lock waiters fairly, so an attempt simply waits (at most
    ``_ATTEMPT_SECONDS``) and is retried after a backoff (50 ms doubling to 500 ms, with
    jitter). SQLite has no queue: a writer waiting in its busy handler sleeps up to 100 ms
    between polls, and a process writing batch after batch (an import, the scoring worker)
    takes the lock again before it looks. There an attempt waits only ``_SQLITE_POLL_SECONDS``
    and the next follows a few milliseconds later, so a save gets in at the first gap
    between two batches. Either way the attempts stop ``budget`` seconds after the first.

    Raises:
        SaveFailed: the database stayed busy for the whole budget.
        StorageFull: the database's storage is full (logged as one line naming the folder).
        ServiceError: whatever ``work`` raises (not retried).
    """
    budget = SAVE_RETRY_SECONDS if budget is None else budget
    sqlite = db.engine.dialect.name == "sqlite"
    start = time.monotonic()
    deadline = start + budget
    delay = 0.05
    attempts = 0
    while True:
        attempts += 1
        cap = _SQLITE_POLL_SECONDS if sqlite else _ATTEMPT_SECONDS
        wait = max(0.005, min(deadline - time.monotonic(), cap))
        try:
            with db.begin(busy_timeout=wait) as s:
                return work(s)
        except (DBAPIError, DatabaseBusy, OSError) as exc:
            if is_storage_full(exc):
                log.error("%s not saved: storage full (%s): %s", what, storage_location(db),
                          getattr(exc, "orig", exc))
                raise StorageFull() from None
            if isinstance(exc, OSError) or not is_busy_error(exc):
                raise
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning("%s not saved: database busy for %.1f s (%d attempts): %s",
                            what, time.monotonic() - start, attempts, exc)
                raise SaveFailed(message) from None
            pause = random.uniform(0.001, 0.004) if sqlite else delay * (0.5 + random.random())
            time.sleep(min(pause, left))
            delay = min(delay * 2, 0.5)


def utcnow() -> dt.datetime:
    """Timezone-aware current time in UTC."""
    return dt.datetime.now(dt.UTC)


def as_utc(value: dt.datetime | None) -> dt.datetime | None:
    """``value`` as an aware UTC datetime (SQLite hands back naive datetimes, stored as UTC)."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC)


class ImageRef(NamedTuple):
    """An image of the pair's case, to be fetched through the images service."""

    image_id: int
    view: str | None
    format: str


@dataclass(frozen=True)
class RaterStudy:
    """A study as its rater sees it."""

    name: str
    description: str
    status: str
    completed: int  # pairs the rater has marked done
    total: int
    # First pair (in the rater's order) not yet marked done; None when all are done.
    resume_opaque_id: str | None
    # The rater's own time on task in the study (sum over their pairs of the active time
    # measured from their activity spans, see backend/services/activity.py).
    active_seconds: float = 0.0
    # The qualification gate in words while it holds the rater back (training items to
    # finish, or not qualified); None when the study pairs are open to the rater.
    qualification: str | None = None
    # While the gate holds: the rater's training items and how many are done (the pairs
    # they can reach now); 0 when there is no gate or it is open.
    training_total: int = 0
    training_done: int = 0


@dataclass(frozen=True)
class QueueItem:
    """One entry of the rater's queue."""

    opaque_id: str
    index: int  # 1..N in the rater's seeded order
    completed: bool
    completed_at: dt.datetime | None


@dataclass(frozen=True)
class RaterPairView:
    """Everything a rater sees for one pair, and nothing else."""

    opaque_id: str
    study_name: str
    index: int
    total: int
    reference_text: str
    candidate_text: str
    images: tuple[ImageRef, ...]
    counts: dict[tuple[int, bool], int]  # every cell of CELLS, 0 when never entered
    completed_at: dt.datetime | None
    prev_opaque_id: str | None
    next_opaque_id: str | None
    # The version of the rater's counts and done-state: a save carries it back.
    version: int = 0
    # The study lead's choice (``Study.settings["highlight_differences"]``), off by default.
    highlight_differences: bool = False
    # The study is closed, or the pair is final: counts are shown, not editable.
    read_only: bool = False
    # The rater adjudicates the study and has rated all their pairs of it: their counts are
    # final (see :func:`final_for_adjudicator`).
    final_for_adjudicator: bool = False
    # The study's ``annotation_mode`` setting: ``counts`` (grid) or ``error_records`` (the
    # counts derive from the rater's error records). Pairwise studies use their own screen.
    annotation_mode: str = "counts"
    # A calibration item: the rater is told, and sees the expert counts once it is done.
    # (A hidden repeat is never marked: it must not be recognisable.)
    training: bool = False


@dataclass(frozen=True)
class SaveResult:
    """Outcome of an autosaved count."""

    saved_at: dt.datetime
    count: int
    changed: bool
    version: int = 0  # the pair's version after the save


@dataclass(frozen=True)
class CountsSaved:
    """Outcome of :func:`set_counts`: what is stored now."""

    saved_at: dt.datetime
    version: int
    counts: dict[tuple[int, bool], int]  # every cell of CELLS
    changed: tuple[tuple[int, bool], ...]  # the cells this save changed, in CELLS order


@dataclass(frozen=True)
class CompletionStatus:
    """A pair's done-state after ``complete_pair`` or ``reopen_pair``."""

    opaque_id: str
    completed_at: dt.datetime | None
    # The next pair still to do after this one in the rater's order (wrapping); None if none.
    next_open_opaque_id: str | None


# -- internals ------------------------------------------------------------------------------


class _Target(NamedTuple):
    assignment: Assignment
    pair_id: int
    case_id: int
    reference_id: int
    candidate_id: int
    study_id: int
    study_name: str
    study_status: str
    kind: str


@dataclass(frozen=True)
class Qualification:
    """Where a rater stands with a study's qualification gate.

    A training item passes when the rater's total count is within ``max_error`` of the
    expert's total. With ``required`` N > 0 the study pairs (and repeats) open to the rater
    only once N items have passed; with N = 0 there is no gate.
    """

    required: int
    max_error: int
    training: int  # training items the rater holds
    done: int  # of them marked done
    passed: int  # of the done ones, within max_error of the expert

    @property
    def open(self) -> bool:
        """The rater may rate the study pairs."""
        return self.required <= 0 or self.passed >= self.required

    @property
    def failed(self) -> bool:
        """Even passing every remaining training item cannot reach ``required``.

        A rater who holds fewer training items than ``required`` has not failed: the lead
        set the rule before marking (all) the items, and the rater waits for them.
        """
        return (not self.open and self.training >= self.required
                and self.passed + (self.training - self.done) < self.required)

    def message(self, study_name: str) -> str | None:
        """What the rater is told while the gate holds them back; None when open."""
        if self.open:
            return None
        if self.training == 0:
            return (f"Study {study_name!r} starts with training items that are not ready "
                    "yet: your study lead will let you know.")
        if self.failed:
            return (f"You did not qualify for study {study_name!r}: {self.passed} of the "
                    f"{self.required} training items needed were within {self.max_error} "
                    "of the expert's total. Your study lead can see this and will contact you.")
        if self.done == self.training:
            return (f"Study {study_name!r}: {self.passed} of the {self.required} training "
                    "items needed passed; the others are not ready yet: your study lead "
                    "will let you know.")
        return (f"Finish the training items of study {study_name!r} first "
                f"({self.passed} of {self.required} passed).")


def expert_total(expert: Mapping[str, Any] | None) -> int | None:
    """Sum of a training item's expert counts (``Pair.expert["counts"]``); None if absent."""
    counts = (expert or {}).get("counts")
    if not isinstance(counts, Mapping):
        return None
    return sum(int(v) for v in counts.values())


def item_passed(rater_total: int, expert: Mapping[str, Any] | None, max_error: int) -> bool:
    """A done training item passes when the totals differ by at most ``max_error``."""
    total = expert_total(expert)
    return total is not None and abs(int(rater_total) - total) <= int(max_error)


def answer_key_of(expert: Mapping[str, Any] | None, rater_id: int) -> bool:
    """Whether a training item's expert counts are this rater's own (marked from their
    ratings): it is their answer key, not a test of them."""
    return (expert or {}).get("rater_id") == rater_id


def _training_rows(s: Session, rater_id: int, study_id: int
                   ) -> list[tuple[int, dt.datetime | None, int, dict[str, Any] | None]]:
    """(pair id, completed_at, rater total, expert) of every training item the rater holds,
    their own answer keys included, in their order."""
    totals = (
        select(Rating.pair_id, func.sum(Rating.count).label("total"))
        .where(Rating.rater_id == rater_id)
        .group_by(Rating.pair_id)
        .subquery()
    )
    return [
        (int(pid), done, int(total or 0), expert)
        for pid, done, total, expert in s.execute(
            select(Pair.id, Assignment.completed_at, totals.c.total, Pair.expert)
            .join(Assignment, Assignment.pair_id == Pair.id)
            .outerjoin(totals, totals.c.pair_id == Pair.id)
            .where(Assignment.rater_id == rater_id, Assignment.study_id == study_id,
                   Pair.kind == PAIR_TRAINING)
            .order_by(Assignment.order_index, Assignment.id)
        )
    ]


def training_results(s: Session, rater_id: int, study_id: int
                     ) -> list[tuple[int, dt.datetime | None, int, dict[str, Any] | None]]:
    """(pair id, completed_at, rater total, expert) of a rater's training items, in order.

    Items whose expert counts are the rater's own (:func:`answer_key_of`) are left out.
    """
    return [r for r in _training_rows(s, rater_id, study_id)
            if not answer_key_of(r[3], rater_id)]


def qualification(s: Session, rater_id: int, study_id: int,
                  settings: Mapping[str, Any] | None = None, *,
                  count_without_gate: bool = False) -> Qualification:
    """The rater's standing with the study's gate (``settings``: the stored Study.settings).

    The rater whose counts are the expert's answer key of a training item (marked from
    their ratings, so given to them too) is not held by the gate: they are the expert it
    measures against. Without a gate the items are not read (this runs on every save)
    unless ``count_without_gate`` asks for them (the lead's view).
    """
    if settings is None:
        settings = s.scalar(select(Study.settings).where(Study.id == study_id))
    values = effective(settings)
    required = int(values["qualification_items"])
    max_error = int(values["qualification_max_error"])
    rows = _training_rows(s, rater_id, study_id) if required > 0 or count_without_gate else []
    if any(answer_key_of(r[3], rater_id) for r in rows):
        required = 0
    results = [r for r in rows if not answer_key_of(r[3], rater_id)]
    done = [r for r in results if r[1] is not None]
    passed = sum(1 for _, _, total, expert in done if item_passed(total, expert, max_error))
    return Qualification(required=required, max_error=max_error, training=len(results),
                         done=len(done), passed=passed)


def _not_found(opaque_id: str) -> NotFound:
    return NotFound(f"pair {opaque_id!r} is not in your assignments")


def _target(s: Session, actor: Actor, opaque_id: str, *, lock: bool = False) -> _Target:
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
    target = _Target(*row[:-1])
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


def _writable(s: Session, target: _Target, *, counts: bool = True) -> None:
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


def _grid_editable(s: Session, target: _Target) -> None:
    """Refuse direct count edits where the counts derive from the rater's error records."""
    mode = effective(s.scalar(select(Study.settings).where(Study.id == target.study_id)))[
        "annotation_mode"]
    if mode != "counts":
        raise PermissionDenied(f"study {target.study_name!r} derives the counts from your "
                               "marked errors; mark the errors instead")


def _queue(s: Session, actor: Actor, study_id: int) -> list[tuple[str, dt.datetime | None]]:
    """(opaque_id, completed_at) of the actor's pairs in a study, in the rater's order.

    While the qualification gate holds the rater back, only their training items.
    """
    stmt = (
        select(Pair.opaque_id, Assignment.completed_at)
        .join(Pair, Pair.id == Assignment.pair_id)
        .where(Assignment.rater_id == actor.user_id, Assignment.study_id == study_id)
        .order_by(Assignment.order_index, Assignment.id)
    )
    if not qualification(s, actor.user_id, study_id).open:
        stmt = stmt.where(Pair.kind == PAIR_TRAINING)
    return [(oid, done) for oid, done in s.execute(stmt)]


def _next_open(queue: list[tuple[str, Any]], after: str) -> str | None:
    ids = [oid for oid, _ in queue]
    start = ids.index(after) + 1 if after in ids else 0
    for oid, done in queue[start:] + queue[:start]:
        if done is None and oid != after:
            return oid
    return None


def _counts(s: Session, actor: Actor, pair_id: int) -> dict[tuple[int, bool], int]:
    counts = dict.fromkeys(CELLS, 0)
    for category, significant, count in s.execute(
        select(Rating.category, Rating.significant, Rating.count).where(
            Rating.rater_id == actor.user_id, Rating.pair_id == pair_id
        )
    ):
        counts[(int(category), bool(significant))] = int(count)
    return counts


def _upsert_rating(
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


def _is_int(value: object) -> bool:
    # numpy integers from a widget are fine; bools and floats are not counts.
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _validate_cell(category: object, significant: object, count: object) -> None:
    if not _is_int(category) or int(category) not in CATEGORIES:
        raise InvalidInput(f"category: must be an integer 1-6, got {category!r}")
    if not isinstance(significant, bool):
        raise InvalidInput(f"significant: must be true or false, got {significant!r}")
    if not _is_int(count) or not 0 <= int(count) <= MAX_COUNT:
        raise InvalidInput(f"count: must be an integer 0-{MAX_COUNT}, got {count!r}")


def _validate_version(expected_version: object) -> None:
    if expected_version is not None and (not _is_int(expected_version)
                                         or int(expected_version) < 0):
        raise InvalidInput(f"expected_version: must be an integer >= 0, got {expected_version!r}")


def _check_version(s: Session, actor: Actor, t: _Target, expected_version: int | None) -> None:
    """Refuse a save based on an older view of the pair (called with the row lock held)."""
    stored = int(t.assignment.version or 0)
    if expected_version is not None and int(expected_version) != stored:
        raise StaleWrite(counts=_counts(s, actor, t.pair_id), version=stored,
                         completed_at=as_utc(t.assignment.completed_at))


def _bump(t: _Target) -> int:
    t.assignment.version = int(t.assignment.version or 0) + 1
    return t.assignment.version


def _set_cell(s: Session, actor: Actor, t: _Target, category: int, significant: bool,
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
    _upsert_rating(s, rater_id=actor.user_id, pair_id=t.pair_id, category=category,
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


# -- services -------------------------------------------------------------------------------


def rater_studies(db: Database, actor: Actor) -> list[RaterStudy]:
    """The studies in which the actor has pairs to rate, with their progress.

    Args:
        db: the study database.
        actor: any account (only its own assignments count).

    Returns:
        One entry per visible study, by name.
    """
    with db.read() as s:
        rows = s.execute(
            select(
                Study.id,
                Study.name,
                Study.description,
                Study.status,
                func.count(Assignment.id),
                func.count(Assignment.completed_at),
                func.coalesce(func.sum(Assignment.active_seconds), 0.0),
            )
            .join(Assignment, Assignment.study_id == Study.id)
            .where(Assignment.rater_id == actor.user_id, Study.status.not_in(HIDDEN_STATUSES))
            .group_by(Study.id, Study.name, Study.description, Study.status)
            .order_by(Study.name)
        ).all()
        out = []
        for study_id, name, description, status, total, done, seconds in rows:
            gate = qualification(s, actor.user_id, study_id)
            resume_stmt = (
                select(Pair.opaque_id)
                .join(Assignment, Assignment.pair_id == Pair.id)
                .where(
                    Assignment.rater_id == actor.user_id,
                    Assignment.study_id == study_id,
                    Assignment.completed_at.is_(None),
                )
                .order_by(Assignment.order_index, Assignment.id)
                .limit(1)
            )
            if not gate.open:
                resume_stmt = resume_stmt.where(Pair.kind == PAIR_TRAINING)
            resume = s.scalar(resume_stmt)
            out.append(
                RaterStudy(
                    name=name,
                    description=description,
                    status=status,
                    completed=int(done),
                    total=int(total),
                    resume_opaque_id=resume,
                    active_seconds=float(seconds or 0.0),
                    qualification=gate.message(name),
                    training_total=0 if gate.open else gate.training,
                    training_done=0 if gate.open else gate.done,
                )
            )
        return out


def rater_queue(db: Database, actor: Actor, *, study_name: str) -> list[QueueItem]:
    """The actor's pairs in a study, in their own seeded order.

    Raises:
        NotFound: no such study, or no pairs of it are assigned to the actor.
    """
    with db.read() as s:
        study_id = s.scalar(
            select(Study.id).where(
                Study.name == study_name, Study.status.not_in(HIDDEN_STATUSES)
            )
        )
        queue = _queue(s, actor, study_id) if study_id is not None else []
    if not queue:
        raise NotFound(f"you have no pairs to rate in study {study_name!r}")
    return [
        QueueItem(opaque_id=oid, index=i, completed=done is not None, completed_at=as_utc(done))
        for i, (oid, done) in enumerate(queue, start=1)
    ]


def get_pair(db: Database, actor: Actor, *, opaque_id: str) -> RaterPairView:
    """One assigned pair with the texts, images and the actor's own saved counts.

    Raises:
        NotFound: the pair does not exist or is not assigned to the actor.
    """
    reference = aliased(Report)
    candidate = aliased(Report)
    with db.read() as s:
        t = _target(s, actor, opaque_id)
        ref_text, cand_text = s.execute(
            select(reference.text, candidate.text)
            .join_from(reference, candidate, candidate.case_id == reference.case_id)
            .where(reference.id == t.reference_id, candidate.id == t.candidate_id)
        ).one()
        images = tuple(
            ImageRef(int(i), v, f)
            for i, v, f in s.execute(
                select(Image.id, Image.view, Image.format)
                .where(Image.case_id == t.case_id)
                .order_by(Image.id)
            )
        )
        counts = _counts(s, actor, t.pair_id)
        ids = [oid for oid, _ in _queue(s, actor, t.study_id)]
        settings = effective(s.scalar(select(Study.settings).where(Study.id == t.study_id)))
        final = final_for_adjudicator(s, actor.user_id, t.study_id)
    pos = ids.index(str(opaque_id))
    training = t.kind == PAIR_TRAINING
    return RaterPairView(
        opaque_id=str(opaque_id),
        study_name=t.study_name,
        index=pos + 1,
        total=len(ids),
        reference_text=ref_text,
        candidate_text=cand_text,
        images=images,
        counts=counts,
        completed_at=as_utc(t.assignment.completed_at),
        prev_opaque_id=ids[pos - 1] if pos > 0 else None,
        next_opaque_id=ids[pos + 1] if pos + 1 < len(ids) else None,
        version=int(t.assignment.version or 0),
        highlight_differences=bool(settings["highlight_differences"]),
        # A done training item is final: its feedback shows the expert's counts.
        read_only=t.study_status in READ_ONLY_STATUSES
        or (training and t.assignment.completed_at is not None) or final,
        final_for_adjudicator=final,
        annotation_mode=str(settings["annotation_mode"]),
        training=training,
    )


def set_count(
    db: Database,
    actor: Actor,
    *,
    opaque_id: str,
    category: int,
    significant: bool,
    count: int,
    expected_version: int | None = None,
) -> SaveResult:
    """Autosave one cell: the number of errors of a category and significance.

    Idempotent: saving the value already stored changes nothing, logs no event and keeps the
    version. Otherwise the cell is upserted, one ``RatingEvent`` (old and new count) is
    appended and the pair's version is bumped, in the same transaction. A missing cell
    counts as 0.

    Args:
        db: the study database.
        actor: the rater the pair is assigned to.
        opaque_id: the pair as the rater knows it.
        category: ReXVal error category 1-6.
        significant: clinically significant (True) or insignificant (False) errors.
        count: 0-99.
        expected_version: the version the rater saw (``RaterPairView.version``); None
            skips the check.

    Returns:
        When it was saved, the stored count, whether anything changed, and the version.

    Raises:
        InvalidInput: a value out of range.
        NotFound: the pair is not assigned to the actor.
        PermissionDenied: the study is closed.
        StaleWrite: ``expected_version`` is not the stored version; nothing was written.
        SaveFailed: the database stayed busy for ``SAVE_RETRY_SECONDS``; nothing was stored.
    """
    _validate_cell(category, significant, count)
    _validate_version(expected_version)
    category, count = int(category), int(count)

    def work(s: Session) -> SaveResult:
        now = utcnow()
        t = _target(s, actor, opaque_id, lock=True)
        # A pair marked done stays editable (a rater going back to fix a count must never
        # lose the edit); the change is audited like any other.
        _writable(s, t)
        _grid_editable(s, t)
        _check_version(s, actor, t, expected_version)
        changed = _set_cell(s, actor, t, category, significant, count, now)
        version = _bump(t) if changed else int(t.assignment.version or 0)
        return SaveResult(saved_at=now, count=count, changed=changed, version=version)

    return write_retrying(db, work, what=f"count of pair {opaque_id!r}", message=BUSY_MESSAGE)


def set_counts(
    db: Database,
    actor: Actor,
    *,
    opaque_id: str,
    cells: Mapping[tuple[int, bool], int],
    expected_version: int | None,
) -> CountsSaved:
    """Autosave several cells of one pair at once (the grid's pending changes), all or none.

    Each changed cell is upserted and audited as by :func:`set_count`; the version is bumped
    once when anything changed. An empty ``cells`` stores nothing and answers what is stored
    (after the version check).

    Args:
        db: the study database.
        actor: the rater the pair is assigned to.
        opaque_id: the pair as the rater knows it.
        cells: count by (category, significant).
        expected_version: the version the rater saw; None skips the check.

    Returns:
        When it was saved, the new version, every stored count and the cells that changed.

    Raises:
        InvalidInput: a cell or count out of range (nothing is written).
        NotFound: the pair is not assigned to the actor.
        PermissionDenied: the study is closed.
        StaleWrite: ``expected_version`` is not the stored version; nothing was written.
        SaveFailed: the database stayed busy for ``SAVE_RETRY_SECONDS``; nothing was stored.
    """
    if not isinstance(cells, Mapping):
        raise InvalidInput(f"cells: must be a mapping of (category, significant) to count, "
                           f"got {type(cells).__name__}")
    for key, count in cells.items():
        if not isinstance(key, tuple) or len(key) != 2:
            raise InvalidInput(f"cells: key must be (category, significant), got {key!r}")
        _validate_cell(key[0], key[1], count)
    _validate_version(expected_version)
    wanted = {(int(c), bool(g)): int(n) for (c, g), n in cells.items()}

    def work(s: Session) -> CountsSaved:
        now = utcnow()
        t = _target(s, actor, opaque_id, lock=True)
        _writable(s, t)
        _grid_editable(s, t)
        _check_version(s, actor, t, expected_version)
        changed = []
        for cell in CELLS:  # a fixed order: audit events come out in grid order
            if cell in wanted and _set_cell(s, actor, t, *cell, wanted[cell], now):
                changed.append(cell)
        version = _bump(t) if changed else int(t.assignment.version or 0)
        s.flush()
        return CountsSaved(saved_at=now, version=version, counts=_counts(s, actor, t.pair_id),
                           changed=tuple(changed))

    return write_retrying(db, work, what=f"counts of pair {opaque_id!r}", message=BUSY_MESSAGE)


def complete_pair(
    db: Database, actor: Actor, *, opaque_id: str, confirm_zero: bool = False,
    expected_version: int | None = None,
) -> CompletionStatus:
    """Mark a pair done.

    Cells never entered are stored as explicit zeros so a done pair always has all twelve
    cells. Marking a done pair again changes nothing. Marking it bumps the pair's version.

    Args:
        db: the study database.
        actor: the rater the pair is assigned to.
        opaque_id: the pair.
        confirm_zero: must be True when every count is 0 (the rater confirms "no errors"
            rather than forgetting to enter them).
        expected_version: the version of the counts the rater saw when asking to mark the
            pair done; None skips the check.

    Raises:
        InvalidInput: all counts are zero and ``confirm_zero`` is False.
        NotFound: the pair is not assigned to the actor.
        PermissionDenied: the study is closed.
        StaleWrite: ``expected_version`` is not the stored version; nothing was written.
        SaveFailed: the database stayed busy for ``SAVE_RETRY_SECONDS``; nothing was stored.
    """
    _validate_version(expected_version)

    def work(s: Session) -> CompletionStatus:
        now = utcnow()
        t = _target(s, actor, opaque_id, lock=True)
        _writable(s, t, counts=False)
        _check_version(s, actor, t, expected_version)
        if t.assignment.completed_at is None:
            counts = _counts(s, actor, t.pair_id)
            if not any(counts.values()) and not confirm_zero:
                raise InvalidInput(
                    "all counts are 0: confirm that the candidate has no errors "
                    "(confirm_zero) or enter the errors first"
                )
            present = {
                (int(category), bool(significant))
                for category, significant in s.execute(
                    select(Rating.category, Rating.significant).where(
                        Rating.rater_id == actor.user_id, Rating.pair_id == t.pair_id
                    )
                )
            }
            for category, significant in CELLS:
                if (category, significant) not in present:
                    _upsert_rating(
                        s,
                        rater_id=actor.user_id,
                        pair_id=t.pair_id,
                        category=category,
                        significant=significant,
                        count=0,
                        now=now,
                    )
            t.assignment.completed_at = now
            _bump(t)
            s.add(RatingEvent(rater_id=actor.user_id, pair_id=t.pair_id, action="complete", at=now))
            s.flush()
            # The queue-ordering hook: an adaptive study reorders this rater's open pairs so
            # the next one is the most useful (a random study keeps its seeded order).
            assignment.reorder_after_completion(
                s, study_id=t.study_id, rater_id=actor.user_id, username=actor.username,
                completed_pair_id=t.pair_id,
            )
        completed_at = as_utc(t.assignment.completed_at)
        s.flush()
        nxt = _next_open(_queue(s, actor, t.study_id), str(opaque_id))
        return CompletionStatus(str(opaque_id), completed_at, nxt)

    return write_retrying(db, work, what=f"completion of pair {opaque_id!r}")


def reopen_pair(db: Database, actor: Actor, *, opaque_id: str) -> CompletionStatus:
    """Take a pair out of the done state so its counts can change again.

    Raises:
        NotFound: the pair is not assigned to the actor.
        PermissionDenied: the study is closed, or the pair is a done training item.
        SaveFailed: the database stayed busy for ``SAVE_RETRY_SECONDS``; nothing was stored.
    """

    def work(s: Session) -> CompletionStatus:
        now = utcnow()
        t = _target(s, actor, opaque_id, lock=True)
        _writable(s, t, counts=False)
        if t.kind == PAIR_TRAINING and t.assignment.completed_at is not None:
            raise PermissionDenied("a done training item can't be reopened: you have seen "
                                   "the expert's counts")
        if t.assignment.completed_at is not None:
            t.assignment.completed_at = None
            _bump(t)
            s.add(RatingEvent(rater_id=actor.user_id, pair_id=t.pair_id, action="reopen", at=now))
            s.flush()
        nxt = _next_open(_queue(s, actor, t.study_id), str(opaque_id))
        return CompletionStatus(str(opaque_id), None, nxt)

    return write_retrying(db, work, what=f"reopening of pair {opaque_id!r}")


def assigned_case_ids(db: Database, actor: Actor) -> frozenset[int]:
    """Case ids whose pairs are assigned to the actor (for image access checks).

    The images service can use this to refuse a rater an image of a case they do not rate.
    """
    with db.read() as s:
        return frozenset(
            s.scalars(
                select(Pair.case_id)
                .join(Assignment, Assignment.pair_id == Pair.id)
                .join(Study, Study.id == Assignment.study_id)
                .where(Assignment.rater_id == actor.user_id, Study.status.not_in(HIDDEN_STATUSES))
                .distinct()
            )
        )


__all__ = [
    "BUSY_MESSAGE",
    "CELLS",
    "SAVE_RETRY_SECONDS",
    "STALE_MESSAGE",
    "CompletionStatus",
    "CountsSaved",
    "ImageRef",
    "Qualification",
    "QueueItem",
    "RaterPairView",
    "RaterStudy",
    "SaveFailed",
    "SaveResult",
    "StaleWrite",
    "as_utc",
    "assigned_case_ids",
    "complete_pair",
    "expert_total",
    "get_pair",
    "item_passed",
    "qualification",
    "rater_queue",
    "rater_studies",
    "reopen_pair",
    "set_count",
    "set_counts",
    "training_results",
    "answer_key_of",
    "utcnow",
]
