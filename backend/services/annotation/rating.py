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
stale one (another tab or window changed the pair since) is refused with
:class:`~backend.services.annotation.assignment_writes.StaleWrite`, which carries the stored counts
and
version so the screen can show them. Nothing is written.

Calibration: training items (``Pair.kind == "training"``) come first in every rater's order.
With the study setting ``qualification_items`` N > 0 the rater reaches the study pairs and
their hidden repeats only after N done training items within ``qualification_max_error`` of
the expert's total (:class:`~backend.services.quality.qualification.Qualification`): until then
their queue and studies list show only the training items and any other pair is refused with
:class:`PermissionDenied` saying how many passed. A done training item is final (read only,
never reopened): the rater has seen the expert's counts.

Writes never fail because another writer (an import, a scoring job, another rater) holds the
database for a moment: each one retries with backoff for up to ``SAVE_RETRY_SECONDS`` (SQLite
"database is locked", PostgreSQL serialization failures, deadlocks, lock timeouts) and only
then raises :class:`~backend.services.transactions.SaveFailed`, whose message tells the rater
that nothing was stored and the value they entered is kept to be saved again.

The steps a write to an assigned pair shares with per-error records and calibration (target,
lock, version, bump, set a cell, audit) live in
:mod:`backend.services.annotation.assignment_writes`;
the retry in :mod:`backend.services.transactions`; the gate in
:mod:`backend.services.quality.qualification`; which statuses raters see in
:mod:`backend.services.study_admin.study_status`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import func, select
from sqlalchemy.orm import Session, aliased

from radconcord.backend import clock
from radconcord.backend.errors import InvalidInput, NotFound, PermissionDenied
from radconcord.backend.services.annotation.assignment_writes import (
    CELLS,
    MAX_COUNT,
    Target,
    bump_version,
    check_version,
    check_writable,
    final_for_adjudicator,
    find_target,
    is_int,
    set_cell,
    stored_counts,
    upsert_rating,
)
from radconcord.backend.services.quality.qualification import qualification
from radconcord.backend.services.study_admin import assignment
from radconcord.backend.services.study_admin.study_settings import effective
from radconcord.backend.services.study_admin.study_status import HIDDEN_STATUSES, READ_ONLY_STATUSES
from radconcord.backend.services.transactions import BUSY_MESSAGE, write_retrying
from radconcord.backend.types import CATEGORIES, Actor
from radconcord.db.models import (
    PAIR_TRAINING,
    Assignment,
    Image,
    Pair,
    Rating,
    RatingEvent,
    Report,
    Study,
)
from radconcord.db.session import Database


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
    # measured from their activity spans, see backend/services/annotation/activity.py).
    active_seconds: float = 0.0
    # The qualification gate in words while it holds the rater back (training items to
    # finish, or not qualified); None when the study pairs are open to the rater.
    qualification: str | None = None
    # While the gate holds: the rater's training items and how many are done (the pairs
    # they can reach now); 0 when there is no gate or it is open.
    training_total: int = 0
    training_done: int = 0
    # The study's annotation mode (``counts``, ``error_records`` or ``pairwise``; see
    # ``study_settings.ANNOTATION_MODES`` for its name on a page).
    annotation_mode: str = "counts"


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


def _grid_editable(s: Session, target: Target) -> None:
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


def _validate_cell(category: object, significant: object, count: object) -> None:
    if not is_int(category) or int(category) not in CATEGORIES:
        raise InvalidInput(f"category: must be an integer 1-6, got {category!r}")
    if not isinstance(significant, bool):
        raise InvalidInput(f"significant: must be true or false, got {significant!r}")
    if not is_int(count) or not 0 <= int(count) <= MAX_COUNT:
        raise InvalidInput(f"count: must be an integer 0-{MAX_COUNT}, got {count!r}")


def _validate_version(expected_version: object) -> None:
    if expected_version is not None and (not is_int(expected_version)
                                         or int(expected_version) < 0):
        raise InvalidInput(f"expected_version: must be an integer >= 0, got {expected_version!r}")


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
            # JSON has no equality operator on PostgreSQL: settings are read per study.
            mode = effective(s.scalar(select(Study.settings).where(Study.id == study_id)))[
                "annotation_mode"]
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
                    annotation_mode=mode,
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
        QueueItem(opaque_id=oid, index=i, completed=done is not None,
                  completed_at=clock.as_utc(done))
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
        t = find_target(s, actor, opaque_id)
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
        counts = stored_counts(s, actor, t.pair_id)
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
        completed_at=clock.as_utc(t.assignment.completed_at),
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
        now = clock.utcnow()
        t = find_target(s, actor, opaque_id, lock=True)
        # A pair marked done stays editable (a rater going back to fix a count must never
        # lose the edit); the change is audited like any other.
        check_writable(s, t)
        _grid_editable(s, t)
        check_version(s, actor, t, expected_version)
        changed = set_cell(s, actor, t, category, significant, count, now)
        version = bump_version(t) if changed else int(t.assignment.version or 0)
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
        now = clock.utcnow()
        t = find_target(s, actor, opaque_id, lock=True)
        check_writable(s, t)
        _grid_editable(s, t)
        check_version(s, actor, t, expected_version)
        changed = []
        for cell in CELLS:  # a fixed order: audit events come out in grid order
            if cell in wanted and set_cell(s, actor, t, *cell, wanted[cell], now):
                changed.append(cell)
        version = bump_version(t) if changed else int(t.assignment.version or 0)
        s.flush()
        return CountsSaved(saved_at=now, version=version, counts=stored_counts(s, actor, t.pair_id),
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
        now = clock.utcnow()
        t = find_target(s, actor, opaque_id, lock=True)
        check_writable(s, t, counts=False)
        check_version(s, actor, t, expected_version)
        if t.assignment.completed_at is None:
            counts = stored_counts(s, actor, t.pair_id)
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
                    upsert_rating(
                        s,
                        rater_id=actor.user_id,
                        pair_id=t.pair_id,
                        category=category,
                        significant=significant,
                        count=0,
                        now=now,
                    )
            t.assignment.completed_at = now
            bump_version(t)
            s.add(RatingEvent(rater_id=actor.user_id, pair_id=t.pair_id, action="complete", at=now))
            s.flush()
            # The queue-ordering hook: an adaptive study reorders this rater's open pairs so
            # the next one is the most useful (a random study keeps its seeded order).
            assignment.reorder_after_completion(
                s, study_id=t.study_id, rater_id=actor.user_id, username=actor.username,
                completed_pair_id=t.pair_id,
            )
        completed_at = clock.as_utc(t.assignment.completed_at)
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
        now = clock.utcnow()
        t = find_target(s, actor, opaque_id, lock=True)
        check_writable(s, t, counts=False)
        if t.kind == PAIR_TRAINING and t.assignment.completed_at is not None:
            raise PermissionDenied("a done training item can't be reopened: you have seen "
                                   "the expert's counts")
        if t.assignment.completed_at is not None:
            t.assignment.completed_at = None
            bump_version(t)
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
    "CompletionStatus",
    "CountsSaved",
    "ImageRef",
    "QueueItem",
    "RaterPairView",
    "RaterStudy",
    "SaveResult",
    "assigned_case_ids",
    "complete_pair",
    "get_pair",
    "rater_queue",
    "rater_studies",
    "reopen_pair",
    "set_count",
    "set_counts",
]
