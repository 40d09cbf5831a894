"""Per-error records: the rater marks each error instead of counting them.

In a study whose ``annotation_mode`` setting is ``error_records`` the rater selects the
erroneous words of the candidate (a ``span`` record) or a sentence of the reference the
candidate leaves out (an ``omission`` record), with its ReXVal category, its clinical
significance and an optional note. The rater's twelve counts of the pair are *derived* from
the records: every add or delete recomputes them in the same transaction and writes them as
``Rating`` rows with their ``RatingEvent`` audit exactly as the count grid's saves do
(:func:`backend.services.annotation.rating.set_counts`), so the counts stay the single source of
every
analysis and export. The grid of such a study is shown read-only.

Blinding and concurrency are the rating service's: every query starts from the actor's own
assignment (a pair that is not theirs is ``NotFound``, whether it exists or not), a write
locks that assignment row, checks the version the rater saw (``expected_version``; a stale
one raises :class:`backend.services.annotation.assignment_writes.StaleWrite` and writes nothing)
and bumps it.
Texts of a record are always cut from the stored reports by their offsets (character offsets,
end exclusive); a client never supplies them.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, aliased

from radconcord.backend import clock
from radconcord.backend.errors import InvalidInput, NotFound, require_admin
from radconcord.backend.services import transactions
from radconcord.backend.services.annotation import assignment_writes
from radconcord.backend.services.repo import get_study
from radconcord.backend.services.study_admin.study_settings import effective
from radconcord.backend.types import CATEGORIES, Actor
from radconcord.backend.util import is_db_id
from radconcord.db.models import PAIR_STUDY, ErrorRecord, Pair, Report, Study, User
from radconcord.db.session import Database

MODE = "error_records"
SPAN = "span"
OMISSION = "omission"
KINDS = (SPAN, OMISSION)
#: The ReXVal categories each kind can carry: an omission (2 finding, 6 comparison) marks a
#: sentence of the reference; a false finding (1), a wrong location (3) or severity (4) or a
#: comparison the reference lacks (5) is written in the candidate.
KIND_CATEGORIES = {SPAN: (1, 3, 4, 5), OMISSION: (2, 6)}
MAX_NOTE = 2000  # characters of a record's note

# A sentence ends at ". ", "! ", "? " (or a line break): enough for radiology reports, whose
# abbreviations with a dot ("e.g.", "approx.") merely split a sentence in two, which the
# rater can still pick.
_SENTENCE_END = re.compile(r"[.!?](?=\s)|\n")


@dataclass(frozen=True)
class RecordView:
    """One of the rater's own error records of a pair.

    Attributes:
        record_id: The record (the rater's own; needed to delete it).
        kind: ``span`` or ``omission``.
        category: ReXVal category 1-6.
        significant: Clinically significant.
        candidate_start: Offset of the span in the candidate (span records), else None.
        candidate_end: End of the span (exclusive).
        candidate_text: The candidate's words in the span.
        reference_start: Offset of the omitted sentence in the reference (omissions).
        reference_end: End of that sentence (exclusive).
        reference_text: The omitted sentence.
        note: The rater's note ("" when none).
        created_at: When it was recorded (UTC).
    """

    record_id: int
    kind: str
    category: int
    significant: bool
    candidate_start: int | None
    candidate_end: int | None
    candidate_text: str | None
    reference_start: int | None
    reference_end: int | None
    reference_text: str | None
    note: str
    created_at: dt.datetime


@dataclass(frozen=True)
class PairRecords:
    """The rater's records of a pair and the counts derived from them, as stored now.

    Attributes:
        opaque_id: The pair as the rater knows it.
        records: In the order they were made.
        counts: Every cell of :data:`backend.services.annotation.assignment_writes.CELLS`.
        version: The pair's version, to be carried by the next change.
        saved_at: When this change was stored (None for a plain read).
    """

    opaque_id: str
    records: tuple[RecordView, ...]
    counts: dict[tuple[int, bool], int]
    version: int
    saved_at: dt.datetime | None = None


def reference_sentences(text: str) -> list[tuple[int, int]]:
    """The sentences of a report as ``(start, end)`` offsets, end exclusive.

    Leading and trailing white space of each sentence is left out; blank pieces are skipped.

    Args:
        text: The report text.

    Returns:
        The sentences in text order (an empty list for a blank text).
    """
    out: list[tuple[int, int]] = []
    start = 0
    bounds = [m.end() for m in _SENTENCE_END.finditer(text)] + [len(text)]
    for end in bounds:
        piece = text[start:end]
        stripped = piece.strip()
        if stripped:
            lead = len(piece) - len(piece.lstrip())
            out.append((start + lead, start + lead + len(stripped)))
        start = end
    return out


def category_refusal(kind: str, category: int) -> str | None:
    """Why a record of ``kind`` cannot carry ``category``, in the rater's words; None if it can.

    The records panel says the same words when it refuses a save (``panel_data`` hands them
    to it), e.g. "category 2 is an omission: press O on a reference sentence the candidate
    leaves out (omission of finding)".

    Args:
        kind: ``span`` or ``omission``.
        category: ReXVal category 1-6.

    Returns:
        The reason, without a final full stop, or None when ``category`` fits ``kind``.
    """
    if kind not in KINDS or category not in CATEGORIES or category in KIND_CATEGORIES[kind]:
        return None
    label = CATEGORIES[category].lower()
    if kind == SPAN:  # an omission's category on words of the candidate
        return (f"category {category} is an omission: press O on a reference sentence the "
                f"candidate leaves out ({label})")
    return (f"category {category} marks wrong words of the candidate, not an omission: press "
            f"O to go back to the candidate's words ({label})")


def category_refusals() -> dict[str, dict[int, str]]:
    """:func:`category_refusal` of every kind and category that do not go together."""
    return {kind: {c: reason for c in CATEGORIES
                   if (reason := category_refusal(kind, c)) is not None}
            for kind in KINDS}


# -- validation -----------------------------------------------------------------------------


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _offsets(field: str, start: object, end: object, text: str) -> tuple[int, int]:
    """Check ``start``/``end`` against ``text``; the span must hold more than white space."""
    for name, value in ((f"{field}_start", start), (f"{field}_end", end)):
        if not _is_int(value):
            raise InvalidInput(f"{name}: must be a whole number, got {value!r:.40}")
    start, end = int(start), int(end)  # type: ignore[arg-type]
    if not 0 <= start < end <= len(text):
        raise InvalidInput(f"{field}_start/{field}_end: {start}-{end} is not a non-empty span "
                           f"of the {field} report (0-{len(text)})")
    if not text[start:end].strip():
        raise InvalidInput(f"{field}_start/{field}_end: {start}-{end} covers only white space "
                           f"of the {field} report")
    if not any(ch.isalnum() for ch in text[start:end]):
        # The panel's word cursor also rests on punctuation: a lone "." is no error, and
        # would add a count.
        raise InvalidInput(f"{field}_start/{field}_end: {start}-{end} holds no word of the "
                           f"{field} report ({text[start:end]!r:.20}): mark the wrong words")
    return start, end


def _a(kind: object) -> str:
    return f"an {kind}" if str(kind)[:1] in "aeiou" else f"a {kind}"


def _validate(kind: object, category: object, significant: object, note: object,
              expected_version: object, spans: dict[str, object]) -> None:
    """Everything that needs no database; the offsets are checked against the texts later."""
    if kind not in KINDS:
        raise InvalidInput(f"kind: must be 'span' or 'omission', got {kind!r:.40}")
    if not _is_int(category) or int(category) not in CATEGORIES:  # type: ignore[arg-type]
        raise InvalidInput(f"category: must be an integer 1-6, got {category!r:.40}")
    refusal = category_refusal(kind, int(category))  # type: ignore[arg-type]
    if refusal is not None:
        allowed = " or ".join(map(str, KIND_CATEGORIES[kind]))  # type: ignore[index]
        where = ("an omission marks the reference" if kind == OMISSION
                 else "an error span marks the candidate")
        raise InvalidInput(f"category: {where}, so its category is {allowed}, got {category} "
                           f"({refusal})")
    if not isinstance(significant, bool):
        # No default: an error is stored only with a significance the rater chose for it.
        raise InvalidInput(f"significant: must be true or false, got {significant!r:.40} "
                           "(choose: S clinically significant, I insignificant)")
    if not isinstance(note, str):
        raise InvalidInput(f"note: must be text, got {type(note).__name__}")
    if len(note) > MAX_NOTE:
        raise InvalidInput(f"note: at most {MAX_NOTE} characters, got {len(note)}")
    if expected_version is not None and (not _is_int(expected_version)
                                         or int(expected_version) < 0):  # type: ignore[arg-type]
        raise InvalidInput(f"expected_version: must be an integer >= 0, got "
                           f"{expected_version!r:.40}")
    needed, refused = (("candidate", "reference") if kind == SPAN
                       else ("reference", "candidate"))
    for end in ("start", "end"):
        if spans[f"{needed}_{end}"] is None:
            raise InvalidInput(f"{needed}_{end}: required for {_a(kind)} record")
        if spans[f"{refused}_{end}"] is not None:
            raise InvalidInput(f"{refused}_{end}: not allowed for {_a(kind)} record "
                               f"(a {kind} marks the {needed} report)")


# -- internals ------------------------------------------------------------------------------


def _view(r: ErrorRecord) -> RecordView:
    return RecordView(
        record_id=int(r.id), kind=r.kind, category=int(r.category),
        significant=bool(r.significant), candidate_start=r.candidate_start,
        candidate_end=r.candidate_end, candidate_text=r.candidate_text,
        reference_start=r.reference_start, reference_end=r.reference_end,
        reference_text=r.reference_text, note=r.note or "",
        created_at=clock.as_utc(r.created_at),  # type: ignore[arg-type]
    )


def _records(s: Session, actor: Actor, pair_id: int) -> list[ErrorRecord]:
    return list(s.scalars(
        select(ErrorRecord)
        .where(ErrorRecord.rater_id == actor.user_id, ErrorRecord.pair_id == pair_id)
        .order_by(ErrorRecord.created_at, ErrorRecord.id)
    ))


def _require_mode(s: Session, t: Any) -> None:  # noqa: ANN401 - rating's private target
    mode = effective(s.scalar(select(Study.settings).where(Study.id == t.study_id)))[
        "annotation_mode"]
    if mode != MODE:
        raise InvalidInput(f"study {t.study_name!r} does not use per-error records "
                           f"(its annotation_mode is {mode!r}); enter the counts in the grid")


def _texts(s: Session, t: Any) -> tuple[str, str]:  # noqa: ANN401
    """(reference text, candidate text) of the target pair."""
    ref, cand = aliased(Report), aliased(Report)
    row = s.execute(
        select(ref.text, cand.text)
        .join_from(ref, cand, cand.case_id == ref.case_id)
        .where(ref.id == t.reference_id, cand.id == t.candidate_id)
    ).one()
    return str(row[0]), str(row[1])


def _derive(s: Session, actor: Actor, t: Any, now: dt.datetime) -> bool:  # noqa: ANN401
    """Write the 12 counts tallied from the records (audited); True when any cell changed."""
    s.flush()
    tally = Counter((int(r.category), bool(r.significant)) for r in _records(s, actor, t.pair_id))
    changed = False
    for cell in assignment_writes.CELLS:  # the grid's order, as set_counts audits
        if assignment_writes.set_cell(s, actor, t, *cell, tally.get(cell, 0), now):
            changed = True
    return changed


def _answer(s: Session, actor: Actor, t: Any, opaque_id: str,  # noqa: ANN401
            saved_at: dt.datetime | None) -> PairRecords:
    s.flush()
    return PairRecords(
        opaque_id=str(opaque_id),
        records=tuple(_view(r) for r in _records(s, actor, t.pair_id)),
        counts=assignment_writes.stored_counts(s, actor, t.pair_id),
        version=int(t.assignment.version or 0),
        saved_at=saved_at,
    )


# -- services -------------------------------------------------------------------------------


def list_records(db: Database, actor: Actor, *, opaque_id: str) -> PairRecords:
    """The actor's own error records of one assigned pair, with their counts and version.

    Raises:
        NotFound: the pair does not exist or is not assigned to the actor.
    """
    with db.read() as s:
        t = assignment_writes.find_target(s, actor, opaque_id)
        return _answer(s, actor, t, opaque_id, None)


def add_record(
    db: Database,
    actor: Actor,
    *,
    opaque_id: str,
    kind: str,
    category: int,
    significant: bool,
    candidate_start: int | None = None,
    candidate_end: int | None = None,
    reference_start: int | None = None,
    reference_end: int | None = None,
    note: str = "",
    expected_version: int | None = None,
) -> PairRecords:
    """Record one error of a pair and store the counts derived from all its records.

    Args:
        db: the study database.
        actor: the rater the pair is assigned to.
        opaque_id: the pair as the rater knows it.
        kind: ``span`` (words of the candidate) or ``omission`` (a reference sentence the
            candidate leaves out).
        category: ReXVal category 1-6.
        significant: clinically significant (True) or insignificant (False).
        candidate_start: span records: offset of the first character in the candidate.
        candidate_end: span records: offset after the last character (exclusive).
        reference_start: omissions: offset of the omitted text in the reference.
        reference_end: omissions: its end (exclusive).
        note: optional, at most ``MAX_NOTE`` characters.
        expected_version: the version the rater saw; None skips the check.

    Returns:
        Every record of the actor's pair, the derived counts and the new version.

    Raises:
        InvalidInput: a value missing or out of range, the same record already made, a cell
            over ``assignment_writes.MAX_COUNT``, or a study that does not use per-error records.
        NotFound: the pair is not assigned to the actor.
        PermissionDenied: the study is closed.
        StaleWrite: ``expected_version`` is not the stored version; nothing was written.
        SaveFailed: the database stayed busy; nothing was stored.
    """
    spans = {"candidate_start": candidate_start, "candidate_end": candidate_end,
             "reference_start": reference_start, "reference_end": reference_end}
    _validate(kind, category, significant, note, expected_version, spans)
    category = int(category)

    def work(s: Session) -> PairRecords:
        now = clock.utcnow()
        t = assignment_writes.find_target(s, actor, opaque_id, lock=True)
        assignment_writes.check_writable(s, t)
        _require_mode(s, t)
        assignment_writes.check_version(s, actor, t, expected_version)
        ref_text, cand_text = _texts(s, t)
        record = ErrorRecord(rater_id=actor.user_id, pair_id=t.pair_id, kind=kind,
                             category=category, significant=significant,
                             note=note.strip(), created_at=now)
        if kind == SPAN:
            start, end = _offsets("candidate", candidate_start, candidate_end, cand_text)
            record.candidate_start, record.candidate_end = start, end
            record.candidate_text = cand_text[start:end]
        else:
            start, end = _offsets("reference", reference_start, reference_end, ref_text)
            record.reference_start, record.reference_end = start, end
            record.reference_text = ref_text[start:end]
        existing = _records(s, actor, t.pair_id)
        key = (kind, category, significant, start, end)
        for r in existing:
            span = ((r.candidate_start, r.candidate_end) if r.kind == SPAN
                    else (r.reference_start, r.reference_end))
            if (r.kind, int(r.category), bool(r.significant), *span) == key:
                raise InvalidInput(f"this {kind} ({start}-{end}, category {category}, "
                                   f"{'significant' if significant else 'insignificant'}) "
                                   "is already recorded")
        same_cell = sum(1 for r in existing
                        if (int(r.category), bool(r.significant)) == (category, significant))
        if same_cell >= assignment_writes.MAX_COUNT:
            raise InvalidInput(f"category {category}: at most {assignment_writes.MAX_COUNT} "
                               "records of one category and significance per pair")
        s.add(record)
        _derive(s, actor, t, now)
        assignment_writes.bump_version(t)  # a record is a change even when the counts stay the same
        return _answer(s, actor, t, opaque_id, now)

    return transactions.write_retrying(db, work, what=f"error record of pair {opaque_id!r}",
                         message=transactions.BUSY_ACTION_MESSAGE)


def delete_record(
    db: Database,
    actor: Actor,
    *,
    opaque_id: str,
    record_id: int,
    expected_version: int | None = None,
) -> PairRecords:
    """Delete one of the actor's records of a pair and store the counts derived from the rest.

    Raises:
        InvalidInput: a bad ``record_id`` or version, or a study without per-error records.
        NotFound: the pair is not assigned to the actor, or the record is not one of the
            actor's records of that pair (the same answer whether it exists or not).
        PermissionDenied: the study is closed.
        StaleWrite: ``expected_version`` is not the stored version; nothing was written.
        SaveFailed: the database stayed busy; nothing was stored.
    """
    if not _is_int(record_id) or int(record_id) < 1:
        raise InvalidInput(f"record_id: must be a whole number >= 1, got {record_id!r:.40}")
    if expected_version is not None and (not _is_int(expected_version)
                                         or int(expected_version) < 0):
        raise InvalidInput(f"expected_version: must be an integer >= 0, got "
                           f"{expected_version!r:.40}")

    def work(s: Session) -> PairRecords:
        now = clock.utcnow()
        t = assignment_writes.find_target(s, actor, opaque_id, lock=True)
        assignment_writes.check_writable(s, t)
        _require_mode(s, t)
        assignment_writes.check_version(s, actor, t, expected_version)
        record = s.scalar(select(ErrorRecord).where(
            ErrorRecord.id == int(record_id), ErrorRecord.rater_id == actor.user_id,
            ErrorRecord.pair_id == t.pair_id)) if is_db_id(record_id) else None
        if record is None:
            raise NotFound(f"record {int(record_id)} is not among your records of pair "
                           f"{opaque_id!r}")
        s.delete(record)
        _derive(s, actor, t, now)
        assignment_writes.bump_version(t)
        return _answer(s, actor, t, opaque_id, now)

    return transactions.write_retrying(db, work, what=f"error record of pair {opaque_id!r}",
                         message=transactions.BUSY_ACTION_MESSAGE)


def export_rows(db: Database, actor: Actor, study_name: str) -> list[dict[str, Any]]:
    """Every error record of a study's study pairs, one dict per record, for JSONL (admin).

    Training and repeat items are left out: their counts are exported apart (the training
    answers, and the intra-rater agreement of the repeats), their records are not.

    Args:
        db: the study database.
        actor: an admin.
        study_name: the study.

    Returns:
        Rows ordered by pair number, rater and record, with the keys ``pair_number``,
        ``opaque_id``, ``rater``, ``kind``, ``category``, ``significant``,
        ``candidate_start``, ``candidate_end``, ``candidate_text``, ``reference_start``,
        ``reference_end``, ``reference_text``, ``note``, ``details``, ``created_at``
        (ISO 8601, UTC).

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such study.
    """
    require_admin(actor)
    with db.read() as s:
        study = get_study(s, study_name)
        rows = s.execute(
            select(Pair.position, Pair.opaque_id, User.username, ErrorRecord)
            .join(ErrorRecord, ErrorRecord.pair_id == Pair.id)
            .join(User, User.id == ErrorRecord.rater_id)
            .where(Pair.study_id == study.id, Pair.kind == PAIR_STUDY)
            .order_by(Pair.position, User.username, ErrorRecord.created_at, ErrorRecord.id)
        ).all()
        return [
            {
                # Pair numbers count from 1 like the study's other exports.
                "pair_number": int(position) + 1,
                "opaque_id": opaque_id,
                "rater": username,
                "kind": r.kind,
                "category": int(r.category),
                "significant": bool(r.significant),
                "candidate_start": r.candidate_start,
                "candidate_end": r.candidate_end,
                "candidate_text": r.candidate_text,
                "reference_start": r.reference_start,
                "reference_end": r.reference_end,
                "reference_text": r.reference_text,
                "note": r.note or "",
                "details": r.details,
                "created_at": clock.as_utc(r.created_at).isoformat(),  # type: ignore[union-attr]
            }
            for position, opaque_id, username, r in rows
        ]


__all__ = [
    "KINDS",
    "MAX_NOTE",
    "MODE",
    "OMISSION",
    "SPAN",
    "PairRecords",
    "RecordView",
    "add_record",
    "category_refusal",
    "category_refusals",
    "delete_record",
    "export_rows",
    "list_records",
    "reference_sentences",
]
