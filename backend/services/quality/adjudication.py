"""Adjudication: who adjudicates a study, the queue of disputed pairs, and consensus counts.

Who. An admin may adjudicate any study; any other active account adjudicates the studies
where it holds a :class:`db.models.StudyRole` ``adjudicator`` row (set by an admin with
:func:`set_adjudicator`). An adjudicator who is also a rater rates through the rating service
only: nothing here writes a ``Rating`` row, and they adjudicate the study only once none of
their own pairs there is open (else the queue would show them the others' answers first).

Which raters' counts. As in the analysis (:func:`backend.analysis.data.load_ratings`): a
rater's counts of a study pair count when the rater's assignment of the pair is completed
(an all-zero completed pair counts as zeros), or when the rater has ratings of the pair and no
assignment of it (imported ratings). Training items and hidden repeats never count.

The queue. :func:`backend.analysis.adjudication.queue_reason` with the study's settings
``adjudicate_significant_range`` and ``adjudicate_category_12``; a pair already adjudicated
stays in the queue (marked done) even when later rating changes take it out of the rule.

Anonymity. The adjudication view shows every counted rater's counts as "Rater A", "Rater B",
... ordered by a hash of the study's seed, the pair and the rater, so the letters are stable
for a pair and say nothing about who rated (never a username, id or order of assignment),
and a letter of one pair is not the same person on another. Sources and scores never appear.

Consensus. :func:`record` stores all twelve cells with a note and the queue reason at that
moment. A note is required when the consensus is not exactly one of the raters' counts (a
new value needs its reason written down); choosing one rater's counts may go without one.
Each save carries the version it was based on; a stale one is refused with
:class:`StaleAdjudication` and nothing is written.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from radconcord.backend import clock
from radconcord.backend.analysis.adjudication import queue_reason
from radconcord.backend.errors import (
    InvalidInput,
    NotFound,
    PermissionDenied,
    ServiceError,
    require_admin,
)
from radconcord.backend.services.accounts.roles import ADJUDICATOR
from radconcord.backend.services.annotation.assignment_writes import CELLS, MAX_COUNT
from radconcord.backend.services.annotation.rating import ImageRef
from radconcord.backend.services.repo import get_study
from radconcord.backend.services.study_admin.study_settings import effective
from radconcord.backend.services.study_admin.study_status import HIDDEN_STATUSES
from radconcord.backend.types import CATEGORIES, Actor
from radconcord.db.models import (
    PAIR_STUDY,
    STUDY_STAGING,
    Adjudication,
    Assignment,
    Image,
    Pair,
    Rating,
    Report,
    Study,
    StudyRole,
    User,
)
from radconcord.db.session import Database

Cell = tuple[int, bool]
#: The reason stored for a pair adjudicated while it was not in the queue.
NOT_QUEUED = "not in the queue when adjudicated"
STALE_MESSAGE = "Not saved: the consensus was changed in another window; reloaded"


class StaleAdjudication(ServiceError):
    """A consensus save was based on an older version than the stored one; nothing written.

    Attributes:
        version: The stored version (the next save must carry it).
        counts: The stored consensus, every cell of ``CELLS``.
        note: The stored note.
    """

    def __init__(self, *, version: int, counts: dict[Cell, int], note: str) -> None:
        super().__init__(STALE_MESSAGE)
        self.version = version
        self.counts = counts
        self.note = note


@dataclass(frozen=True)
class QueueEntry:
    """One pair of the adjudication queue.

    Attributes:
        pair_number: 1-based number of the pair in study order (as every page shows it).
        opaque_id: The pair's opaque id.
        reason: Why it is queued (in words); for a done pair no longer in the rule, the
            reason stored when it was adjudicated.
        adjudicated: Whether consensus counts are stored.
    """

    pair_number: int
    opaque_id: str
    reason: str
    adjudicated: bool


@dataclass(frozen=True)
class RaterCounts:
    """One rater's counts in the adjudication view, anonymised.

    Attributes:
        label: ``"Rater A"``, ``"Rater B"``, ... (stable for the pair, never a name).
        counts: Every cell of ``CELLS``.
    """

    label: str
    counts: dict[Cell, int]


@dataclass(frozen=True)
class Consensus:
    """The stored consensus of a pair.

    Attributes:
        counts: Every cell of ``CELLS``.
        note: The adjudicator's note.
        reason: The queue reason when it was recorded.
        version: Bumped by every save.
        updated_at: Time of the last save (UTC).
        adjudicator: Username of who saved it last.
    """

    counts: dict[Cell, int]
    note: str
    reason: str
    version: int
    updated_at: dt.datetime | None
    adjudicator: str


@dataclass(frozen=True)
class AdjudicationView:
    """What the adjudicator sees for one pair.

    Attributes:
        study_name: The study.
        pair_number: 1-based number of the pair in study order.
        opaque_id: The pair's opaque id.
        reference_text: The reference report.
        candidate_text: The candidate report.
        images: The case's images (fetched through the images service).
        raters: Every counted rater's counts, as Rater A, B, ...
        disagreeing: Cells where the raters' counts are not all equal.
        reason: Why the pair is queued now (None: not in the queue).
        consensus: The stored consensus (None: not adjudicated yet).
        version: The consensus version a save must carry (0 before the first save).
        prev_opaque_id: The previous pair of the queue (None at the start or off-queue).
        next_opaque_id: The next pair of the queue (None at the end or off-queue).
    """

    study_name: str
    pair_number: int
    opaque_id: str
    reference_text: str
    candidate_text: str
    images: tuple[ImageRef, ...]
    raters: tuple[RaterCounts, ...]
    disagreeing: frozenset[Cell]
    reason: str | None
    consensus: Consensus | None
    version: int
    prev_opaque_id: str | None
    next_opaque_id: str | None


@dataclass(frozen=True)
class RecordResult:
    """Outcome of :func:`record`.

    Attributes:
        opaque_id: The pair.
        version: The new version.
        reason: The reason stored with the consensus.
        updated_at: Time of the save (UTC).
    """

    opaque_id: str
    version: int
    reason: str
    updated_at: dt.datetime


# --- access ---------------------------------------------------------------------------------

def _is_adjudicator(s: Session, user_id: int, study_id: int) -> bool:
    return s.scalar(select(StudyRole.id).where(
        StudyRole.study_id == study_id, StudyRole.user_id == user_id,
        StudyRole.role == ADJUDICATOR)) is not None


def _study_for(s: Session, actor: Actor, study_name: str) -> Study:
    """The study, when the actor may adjudicate it (admins: any)."""
    if actor.is_admin:
        return get_study(s, study_name)
    study = s.scalar(select(Study).where(Study.name == study_name,
                                         Study.status != STUDY_STAGING))
    # A rater learns nothing about studies they do not adjudicate, not even that they exist.
    if (study is None or study.status in HIDDEN_STATUSES
            or not _is_adjudicator(s, actor.user_id, study.id)):
        raise PermissionDenied(f"you are not an adjudicator of study {study_name!r}")
    _require_own_ratings_done(s, actor, study)
    return study


def _require_own_ratings_done(s: Session, actor: Actor, study: Study) -> None:
    """Refuse an adjudicator who still has pairs of the study to rate.

    The queue's reasons, the raters' counts and the consensus would tell them the other
    raters' answers before they give their own (blinding). Every open assignment counts,
    hidden repeats and training items too, and the message names no pair, so it says
    nothing about which pair is shown twice.
    """
    left = int(s.scalar(select(func.count(Assignment.id)).where(
        Assignment.study_id == study.id, Assignment.rater_id == actor.user_id,
        Assignment.completed_at.is_(None))) or 0)
    if left:
        raise PermissionDenied(
            f"you have {left} pair{'s' if left != 1 else ''} left to rate in study "
            f"{study.name!r}: finish your own ratings first (adjudicating shows the other "
            "raters' counts)")


def adjudicated_studies(db: Database, actor: Actor) -> list[str]:
    """Names of the studies the actor may adjudicate (admins: every study), by name."""
    with db.read() as s:
        query = select(Study.name).where(Study.status != STUDY_STAGING)
        if not actor.is_admin:
            query = query.join(StudyRole, StudyRole.study_id == Study.id).where(
                StudyRole.user_id == actor.user_id, StudyRole.role == ADJUDICATOR,
                Study.status.not_in(HIDDEN_STATUSES))
        return sorted(set(s.scalars(query)))


def set_adjudicator(db: Database, actor: Actor, *, study_name: str, username: str,
                    on: bool = True) -> tuple[str, ...]:
    """Make an account an adjudicator of a study, or stop it being one (admin only).

    Any active account may be one; admins adjudicate every study without a row.

    Args:
        db: The database.
        actor: Must be an admin.
        study_name: The study.
        username: The account.
        on: ``True`` to add, ``False`` to remove (removing a non-adjudicator changes nothing).

    Returns:
        The study's adjudicators afterwards (usernames, sorted).

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such study or account.
        InvalidInput: adding an inactive account.
    """
    require_admin(actor)
    with db.begin() as s:
        study = get_study(s, study_name, for_update=True)
        user = s.scalar(select(User).where(User.username == username))
        if user is None:
            raise NotFound(f"no account named {username!r}")
        row = s.scalar(select(StudyRole).where(
            StudyRole.study_id == study.id, StudyRole.user_id == user.id,
            StudyRole.role == ADJUDICATOR))
        if on and row is None:
            if not user.active:
                raise InvalidInput(f"account {username!r} is deactivated; reactivate it first")
            s.add(StudyRole(study_id=study.id, user_id=user.id, role=ADJUDICATOR))
        elif not on and row is not None:
            s.delete(row)
        s.flush()
        return _adjudicator_names(s, study.id)


def _adjudicator_names(s: Session, study_id: int) -> tuple[str, ...]:
    return tuple(sorted(s.scalars(
        select(User.username).join(StudyRole, StudyRole.user_id == User.id)
        .where(StudyRole.study_id == study_id, StudyRole.role == ADJUDICATOR))))


def adjudicators(db: Database, actor: Actor, *, study_name: str) -> tuple[str, ...]:
    """The study's adjudicators (usernames, sorted; admin only).

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such study.
    """
    require_admin(actor)
    with db.read() as s:
        return _adjudicator_names(s, get_study(s, study_name).id)


# --- data -----------------------------------------------------------------------------------

def _study_pairs(s: Session, study_id: int) -> list[tuple[int, str, int]]:
    """(pair id, opaque id, pair number) of the study pairs in study order.

    The number is ``position + 1`` as on every other page and in every export (a pair
    marked as a training item leaves a gap, it does not renumber the pairs after it).
    """
    return [(int(p), str(o), int(pos) + 1) for p, o, pos in s.execute(
        select(Pair.id, Pair.opaque_id, Pair.position)
        .where(Pair.study_id == study_id, Pair.kind == PAIR_STUDY)
        .order_by(Pair.position))]


def _counted(s: Session, study_id: int, pair_ids: list[int] | None = None
             ) -> dict[int, dict[int, dict[Cell, int]]]:
    """pair id -> rater id -> counts (every cell) of the counted raters (module docstring)."""
    a_query = (select(Assignment.rater_id, Assignment.pair_id, Assignment.completed_at)
               .join(Pair, Pair.id == Assignment.pair_id)
               .where(Assignment.study_id == study_id, Pair.kind == PAIR_STUDY))
    r_query = (select(Rating.rater_id, Rating.pair_id, Rating.category, Rating.significant,
                      Rating.count)
               .join(Pair, Pair.id == Rating.pair_id)
               .where(Pair.study_id == study_id, Pair.kind == PAIR_STUDY))
    if pair_ids is not None:
        a_query = a_query.where(Assignment.pair_id.in_(pair_ids))
        r_query = r_query.where(Rating.pair_id.in_(pair_ids))
    assigned = {(a.rater_id, a.pair_id): a.completed_at is not None
                for a in s.execute(a_query)}
    ratings = s.execute(r_query).all()
    counted = {key for key, done in assigned.items() if done}
    counted |= {(r.rater_id, r.pair_id) for r in ratings
                if (r.rater_id, r.pair_id) not in assigned}
    out: dict[int, dict[int, dict[Cell, int]]] = defaultdict(dict)
    for rid, pid in counted:
        out[pid][rid] = dict.fromkeys(CELLS, 0)
    for r in ratings:
        if (r.rater_id, r.pair_id) in counted:
            out[r.pair_id][r.rater_id][(int(r.category), bool(r.significant))] = int(r.count)
    return out


def _rule(study: Study) -> tuple[int, bool]:
    values = effective(study.settings)
    return int(values["adjudicate_significant_range"]), bool(values["adjudicate_category_12"])


def _reason(study: Study, by_rater: Mapping[int, Mapping[Cell, int]]) -> str | None:
    significant_range, category_12 = _rule(study)
    return queue_reason(list(by_rater.values()), significant_range=significant_range,
                        category_12=category_12)


def _stored_counts(raw: Mapping[str, Any] | None) -> dict[Cell, int]:
    raw = raw or {}
    return {(c, sig): int(raw.get(f"{c}:{int(sig)}", 0)) for c, sig in CELLS}


def _queue(s: Session, study: Study) -> list[QueueEntry]:
    pairs = _study_pairs(s, study.id)
    counted = _counted(s, study.id)
    done = dict(s.execute(
        select(Adjudication.pair_id, Adjudication.reason)
        .join(Pair, Pair.id == Adjudication.pair_id)
        .where(Pair.study_id == study.id)).all())
    out = []
    for pid, oid, number in pairs:
        reason = _reason(study, counted.get(pid, {}))
        if reason is None and pid in done:
            reason = done[pid] or NOT_QUEUED
        if reason is not None:
            out.append(QueueEntry(number, oid, reason, pid in done))
    return out


def queue(db: Database, actor: Actor, *, study_name: str) -> list[QueueEntry]:
    """The study's adjudication queue in study order (an adjudicator of the study or admin).

    Raises:
        PermissionDenied: the actor may not adjudicate the study.
        NotFound: no such study (admins).
    """
    with db.read() as s:
        return _queue(s, _study_for(s, actor, study_name))


def _letters(seed: int, pair_id: int, rater_ids: list[int]) -> list[tuple[str, int]]:
    """(label, rater id) in a seeded hash order: stable per pair, unrelated to ids or names."""
    def key(rid: int) -> str:
        return hashlib.sha256(f"adjudication:{seed}:{pair_id}:{rid}".encode()).hexdigest()

    ordered = sorted(rater_ids, key=key)
    return [(f"Rater {_letter(i)}", rid) for i, rid in enumerate(ordered)]


def _letter(i: int) -> str:
    """A, B, ..., Z, AA, AB, ... (a study rarely has more than three raters per pair)."""
    out = ""
    i += 1
    while i:
        i, rem = divmod(i - 1, 26)
        out = chr(ord("A") + rem) + out
    return out


def _pair_row(s: Session, study: Study, *, pair_number: int | None,
              opaque_id: str | None) -> tuple[int, int, str]:
    """(pair id, pair number, opaque id) of a study pair named by number or opaque id."""
    if (pair_number is None) == (opaque_id is None):
        raise InvalidInput("give exactly one of pair_number and opaque_id")
    pairs = _study_pairs(s, study.id)
    if pair_number is not None:
        found = [(pid, oid) for pid, oid, number in pairs if number == pair_number]
        if isinstance(pair_number, bool) or not isinstance(pair_number, int) or not found:
            raise NotFound(f"study {study.name!r} has no pair number {pair_number!r}"
                           f" (1-{pairs[-1][2] if pairs else 0})")
        pid, oid = found[0]
        return pid, pair_number, oid
    for pid, oid, number in pairs:
        if oid == opaque_id:
            return pid, number, oid
    raise NotFound(f"study {study.name!r} has no pair {opaque_id!r}")


def get_item(db: Database, actor: Actor, *, study_name: str, pair_number: int | None = None,
             opaque_id: str | None = None) -> AdjudicationView:
    """One pair for adjudication: texts, images, anonymised counts and the stored consensus.

    Args:
        db: The database.
        actor: An adjudicator of the study, or an admin.
        study_name: The study.
        pair_number: The pair's 1-based number, or
        opaque_id: its opaque id (give exactly one).

    Raises:
        PermissionDenied: the actor may not adjudicate the study.
        NotFound: no such pair among the study pairs.
        InvalidInput: both or neither of ``pair_number`` and ``opaque_id``.
    """
    with db.read() as s:
        study = _study_for(s, actor, study_name)
        pid, number, oid = _pair_row(s, study, pair_number=pair_number, opaque_id=opaque_id)
        pair = s.get(Pair, pid)
        assert pair is not None  # just listed among the study's pairs
        ref_text = s.scalar(select(Report.text).where(Report.id == pair.reference_id))
        cand_text = s.scalar(select(Report.text).where(Report.id == pair.candidate_id))
        images = tuple(ImageRef(int(i), v, f) for i, v, f in s.execute(
            select(Image.id, Image.view, Image.format)
            .where(Image.case_id == pair.case_id).order_by(Image.id)))
        by_rater = _counted(s, study.id, [pid]).get(pid, {})
        reason = _reason(study, by_rater)
        raters = tuple(RaterCounts(label, by_rater[rid])
                       for label, rid in _letters(int(study.seed or 0), pid, list(by_rater)))
        consensus = _consensus(s, pid)
        ids = [e.opaque_id for e in _queue(s, study)]
    disagreeing = frozenset(cell for cell in CELLS
                            if len({r.counts[cell] for r in raters}) > 1)
    pos = ids.index(oid) if oid in ids else None
    return AdjudicationView(
        study_name=study.name, pair_number=number, opaque_id=oid,
        reference_text=ref_text, candidate_text=cand_text, images=images, raters=raters,
        disagreeing=disagreeing, reason=reason, consensus=consensus,
        version=consensus.version if consensus else 0,
        prev_opaque_id=ids[pos - 1] if pos is not None and pos > 0 else None,
        next_opaque_id=ids[pos + 1] if pos is not None and pos + 1 < len(ids) else None,
    )


def _consensus(s: Session, pair_id: int) -> Consensus | None:
    row = s.execute(
        select(Adjudication, User.username)
        .join(User, User.id == Adjudication.adjudicator_id)
        .where(Adjudication.pair_id == pair_id)).one_or_none()
    if row is None:
        return None
    adj, username = row
    return Consensus(counts=_stored_counts(adj.counts), note=adj.note or "",
                     reason=adj.reason or "", version=int(adj.version or 0),
                     updated_at=clock.as_utc(adj.updated_at), adjudicator=username)


def _checked_counts(counts: object) -> dict[Cell, int]:
    """All twelve cells, each an integer 0..MAX_COUNT (one error naming the first bad cell)."""
    if not isinstance(counts, Mapping):
        raise InvalidInput(f"counts: must map (category, significant) to a count, got"
                           f" {type(counts).__name__}")
    out: dict[Cell, int] = {}
    for key, n in counts.items():
        if not (isinstance(key, tuple) and len(key) == 2):
            raise InvalidInput(f"counts: key {key!r} must be (category, significant)")
        category, significant = key
        where = f"counts[{category!r}, {significant!r}]"
        if isinstance(category, bool) or not isinstance(category, int) \
                or category not in CATEGORIES:
            raise InvalidInput(f"{where}: category must be an integer 1-6")
        if not isinstance(significant, bool):
            raise InvalidInput(f"{where}: significant must be true or false")
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_COUNT:
            raise InvalidInput(f"{where}: count must be an integer 0-{MAX_COUNT}, got {n!r}")
        out[(category, significant)] = n
    missing = [f"{c}:{'significant' if sig else 'not significant'}"
               for c, sig in CELLS if (c, sig) not in out]
    if missing:
        raise InvalidInput(f"counts: all 12 cells are needed; missing {', '.join(missing)}")
    return out


def record(db: Database, actor: Actor, *, study_name: str, opaque_id: str,
           counts: Mapping[Cell, int], note: str = "",
           expected_version: int | None = None) -> RecordResult:
    """Store (or replace) the consensus counts of a study pair.

    Args:
        db: The database.
        actor: An adjudicator of the study, or an admin with an account.
        study_name: The study.
        opaque_id: The pair.
        counts: ``{(category, significant): n}`` for all twelve cells.
        note: Why; required when the consensus is none of the raters' counts.
        expected_version: The version the adjudicator saw (0 before the first save);
            ``None`` skips the check (command-line use).

    Raises:
        PermissionDenied: the actor may not adjudicate the study.
        NotFound: no such study pair.
        InvalidInput: a bad cell, a missing note, or a bad version.
        StaleAdjudication: the stored version differs from ``expected_version``.
    """
    cells = _checked_counts(counts)
    if not isinstance(note, str):
        raise InvalidInput(f"note: must be text, got {type(note).__name__}")
    note = note.strip()
    if expected_version is not None and (isinstance(expected_version, bool)
                                         or not isinstance(expected_version, int)
                                         or expected_version < 0):
        raise InvalidInput(f"expected_version: must be an integer >= 0, got"
                           f" {expected_version!r}")
    with db.begin() as s:
        study = _study_for(s, actor, study_name)
        if s.get(User, actor.user_id) is None:
            raise PermissionDenied("recording a consensus needs a user account (not the"
                                   " command line's system actor)")
        pid, _, oid = _pair_row(s, study, pair_number=None, opaque_id=opaque_id)
        # Lock the pair row so two saves of the same consensus queue up (PostgreSQL).
        s.execute(select(Pair.id).where(Pair.id == pid).with_for_update())
        row = s.scalar(select(Adjudication).where(Adjudication.pair_id == pid))
        stored = int(row.version or 0) if row is not None else 0
        if expected_version is not None and expected_version != stored:
            raise StaleAdjudication(
                version=stored, counts=_stored_counts(row.counts if row else None),
                note=row.note if row is not None else "")
        by_rater = _counted(s, study.id, [pid]).get(pid, {})
        if not note and all(cells != c for c in by_rater.values()):
            raise InvalidInput("note: required when the consensus differs from every"
                               " rater's counts (say why)")
        reason = _reason(study, by_rater) or NOT_QUEUED
        now = clock.utcnow()
        stored_counts = {f"{c}:{int(sig)}": n for (c, sig), n in cells.items()}
        if row is None:
            row = Adjudication(pair_id=pid, created_at=now)
            s.add(row)
        row.adjudicator_id = actor.user_id
        row.counts = stored_counts
        row.note = note
        row.reason = reason
        row.version = stored + 1
        row.updated_at = now
        return RecordResult(opaque_id=oid, version=stored + 1, reason=reason, updated_at=now)


def export_rows(db: Database, actor: Actor, *, study_name: str) -> list[dict[str, Any]]:
    """The study's consensus counts as rows, one per pair and cell (admin only).

    Columns: ``pair_number``, ``pair_id`` (opaque), ``adjudicator`` (username), the ReXVal
    ratings file's ``error_category``, ``clinically_significant`` and ``num_errors``, then
    ``note``, ``reason`` and ``updated_at`` (ISO 8601, UTC). Ordered by pair number, category,
    significant first (as ``CELLS``).

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such study.
    """
    require_admin(actor)
    with db.read() as s:
        study = get_study(s, study_name)
        number = {pid: n for pid, _, n in _study_pairs(s, study.id)}
        rows = s.execute(
            select(Adjudication, Pair.opaque_id, User.username)
            .join(Pair, Pair.id == Adjudication.pair_id)
            .join(User, User.id == Adjudication.adjudicator_id)
            .where(Pair.study_id == study.id, Pair.kind == PAIR_STUDY)).all()
        out = []
        for adj, oid, username in sorted(rows, key=lambda r: number[r[0].pair_id]):
            counts = _stored_counts(adj.counts)
            updated = clock.as_utc(adj.updated_at)
            for category, significant in CELLS:
                out.append({
                    "pair_number": number[adj.pair_id],
                    "pair_id": oid,
                    "adjudicator": username,
                    "error_category": category,
                    "clinically_significant": significant,
                    "num_errors": counts[(category, significant)],
                    "note": adj.note or "",
                    "reason": adj.reason or "",
                    "updated_at": updated.isoformat() if updated else None,
                })
        return out


__all__ = [
    "NOT_QUEUED",
    "AdjudicationView",
    "Consensus",
    "QueueEntry",
    "RaterCounts",
    "RecordResult",
    "StaleAdjudication",
    "adjudicated_studies",
    "adjudicators",
    "export_rows",
    "get_item",
    "queue",
    "record",
    "set_adjudicator",
]
