"""Calibration (training) items, the qualification gate as the lead sees it, hidden repeats.

The lead marks pairs of a study as training items (admin only) with reference counts:

* from a CSV in the ReXVal ratings layout, one row per cell: ``pair_number`` (1-based,
  ``position + 1`` as the dashboard and exports number pairs), ``error_category`` (1-6),
  ``clinically_significant`` (true/false) and ``num_errors`` (0-99); cells not given are 0;
  :func:`parse_expert_csv`;
* from an expert account's completed counts of those pairs (``from_rater``);
* from adjudicated consensus (``Adjudication`` rows of those pairs).

Marking sets ``Pair.kind = "training"`` and ``Pair.expert = {"counts": {"<c>:<0|1>": n}
(12 cells), "source": ...}`` and gives the item to every rater of the study first in their
order (:func:`backend.services.study_admin.assignment.sync_training`). A pair that already has
ratings
may be marked: they stay stored but leave the study's statistics and exports (only study
pairs count), and the result says how many raters had rated it. A pair with a hidden repeat,
or a repeat itself, is refused (intra-rater agreement depends on it). Marking a training
item again replaces its expert counts (the pass of items already done follows). Unmarking is refused
once a rater has done the item (that answer was given as calibration, with the expert's
counts shown after it); otherwise the open training assignments and their unfinished counts
are removed and the pair is a study pair again with no raters (assign again to give it k).

A rater's answers to training items are exported apart (:func:`training_rows`); after a
rater finishes an item they see the expert's counts beside theirs (:func:`training_feedback`).
"""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from radconcord.backend.errors import InvalidInput, NotFound, require_admin
from radconcord.backend.services.annotation import assignment_writes
from radconcord.backend.services.annotation.definitions import DEFINITIONS
from radconcord.backend.services.quality import qualification
from radconcord.backend.services.repo import get_study
from radconcord.backend.services.study_admin import assignment
from radconcord.backend.services.study_admin.study_settings import effective
from radconcord.backend.types import CATEGORIES, Actor
from radconcord.db.models import (
    PAIR_REPEAT,
    PAIR_STUDY,
    PAIR_TRAINING,
    Adjudication,
    Assignment,
    ErrorRecord,
    Pair,
    Rating,
    Study,
    User,
)
from radconcord.db.session import Database

log = logging.getLogger(__name__)

#: One line per ReXVal category, shown with the expert's counts (the rating screen's wording).
CATEGORY_DEFINITIONS: dict[int, str] = {d.category: d.definition for d in DEFINITIONS}

#: The ReXVal ratings columns a training CSV uses (``pair_number`` instead of study_number).
CSV_COLUMNS = ("pair_number", "error_category", "clinically_significant", "num_errors")
_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}


def cell_key(category: int, significant: bool) -> str:
    """The key of a cell in ``Pair.expert["counts"]`` and ``Adjudication.counts``."""
    return f"{int(category)}:{1 if significant else 0}"


def _full_counts(cells: Mapping[tuple[int, bool], int]) -> dict[str, int]:
    return {cell_key(c, g): int(cells.get((c, g), 0)) for c, g in assignment_writes.CELLS}


@dataclass(frozen=True)
class TrainingItem:
    """A training item of a study, as the lead sees it."""

    pair_number: int
    opaque_id: str
    expert_counts: dict[str, int]  # "<category>:<0|1>" -> count, 12 cells
    expert_source: str
    raters: int  # raters holding it
    done: int  # raters who have done it


@dataclass(frozen=True)
class MarkResult:
    """What a marking or unmarking did."""

    study_name: str
    pair_numbers: tuple[int, ...]
    # Raters who had completed a marked pair as a study pair: those ratings no longer count.
    ratings_left_study: int = 0
    assignments_created: int = 0
    assignments_removed: int = 0


@dataclass(frozen=True)
class RaterQualification:
    """One rater's standing with the gate (the lead's view)."""

    rater: str
    training: int
    done: int
    passed: int
    required: int
    qualified: bool
    failed: bool  # cannot qualify any more: every remaining item passing would not suffice

    @property
    def status(self) -> str:
        """The standing in words, the same on every page and in the CLI: ``no gate``,
        ``qualified``, ``did not qualify`` (the rater's own wording) or ``in training``."""
        if self.required <= 0:
            return "no gate"
        if self.qualified:
            return "qualified"
        return "did not qualify" if self.failed else "in training"


@dataclass(frozen=True)
class FeedbackCell:
    """One category x significance cell of the feedback: the rater's and the expert's."""

    category: int
    significant: bool
    rater: int
    expert: int

    @property
    def differs(self) -> bool:
        """The rater's count is not the expert's."""
        return self.rater != self.expert


@dataclass(frozen=True)
class TrainingFeedback:
    """What a rater sees after finishing a training item."""

    opaque_id: str
    cells: tuple[FeedbackCell, ...]  # in ``assignment_writes.CELLS`` order
    rater_total: int
    expert_total: int
    definitions: dict[int, tuple[str, str]]  # category -> (name, definition)
    # The gate's rule when one is set: passed within max_error; None without a gate.
    max_error: int | None
    passed: bool | None
    # The rater's standing with the gate after this item, in words (passed so far, what
    # comes next, or that they did not qualify); None without a gate.
    standing: str | None = None
    # Whether the rater has qualified (the study pairs are open); None without a gate.
    qualified: bool | None = None


# -- parsing --------------------------------------------------------------------------------


def parse_expert_csv(text: str) -> dict[int, dict[str, int]]:
    """Expert counts by pair number from a CSV in the layout of :data:`CSV_COLUMNS`.

    Raises:
        InvalidInput: a missing column, a bad value or a repeated cell (with its line).
    """
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None:
        raise InvalidInput("training CSV: the file is empty")
    header = [h.strip() for h in header]
    missing = [c for c in CSV_COLUMNS if c not in header]
    if missing:
        raise InvalidInput(f"training CSV: missing column(s) {', '.join(missing)} "
                           f"(expected {', '.join(CSV_COLUMNS)})")
    idx = {c: header.index(c) for c in CSV_COLUMNS}
    cells: dict[int, dict[tuple[int, bool], int]] = {}
    for line, row in enumerate(reader, start=2):
        if not any(v.strip() for v in row):
            continue
        if len(row) < len(header):
            raise InvalidInput(f"training CSV line {line}: {len(row)} fields, expected "
                               f"{len(header)}")
        values = {c: row[i].strip() for c, i in idx.items()}
        try:
            number = int(values["pair_number"])
            category = int(values["error_category"])
            count = int(values["num_errors"])
        except ValueError:
            raise InvalidInput(f"training CSV line {line}: pair_number, error_category and "
                               "num_errors must be integers") from None
        flag = values["clinically_significant"].lower()
        if flag not in _TRUE | _FALSE:
            raise InvalidInput(f"training CSV line {line}: clinically_significant must be "
                               f"true or false, got {values['clinically_significant']!r}")
        if number < 1:
            raise InvalidInput(f"training CSV line {line}: pair_number must be >= 1")
        if category not in CATEGORIES:
            raise InvalidInput(f"training CSV line {line}: error_category must be 1-6, "
                               f"got {category}")
        if not 0 <= count <= assignment_writes.MAX_COUNT:
            raise InvalidInput(f"training CSV line {line}: num_errors must be "
                               f"0-{assignment_writes.MAX_COUNT}, got {count}")
        cell = (category, flag in _TRUE)
        pair_cells = cells.setdefault(number, {})
        if cell in pair_cells:
            raise InvalidInput(f"training CSV line {line}: pair {number} category {category} "
                               f"{'significant' if cell[1] else 'insignificant'} given twice")
        pair_cells[cell] = count
    if not cells:
        raise InvalidInput("training CSV: no rows")
    return {number: _full_counts(c) for number, c in sorted(cells.items())}


def _numbers(pair_numbers: Iterable[int] | None) -> list[int] | None:
    if pair_numbers is None:
        return None
    out = sorted({int(n) for n in pair_numbers})
    if not out:
        raise InvalidInput("pairs: give at least one pair number")
    if out[0] < 1:
        raise InvalidInput(f"pairs: pair numbers start at 1, got {out[0]}")
    return out


def _pairs_by_number(s: Session, study: Study, numbers: Iterable[int]) -> dict[int, Pair]:
    numbers = list(numbers)
    pairs = {p.position + 1: p for p in s.scalars(
        select(Pair).where(Pair.study_id == study.id,
                           Pair.position.in_([n - 1 for n in numbers])))}
    missing = [n for n in numbers if n not in pairs]
    if missing:
        raise InvalidInput(f"pairs: study {study.name!r} has no pair number(s) "
                           f"{', '.join(map(str, missing))}")
    return pairs


# -- marking --------------------------------------------------------------------------------


def mark_training(db: Database, actor: Actor, *, study_name: str,
                  expert: Mapping[int, Mapping[str, int]], source: str,
                  expert_rater_id: int | None = None) -> MarkResult:
    """Mark pairs as training items with the given expert counts (admin).

    Args:
        db: the study database.
        actor: an admin.
        study_name: the study.
        expert: pair number -> ``{"<category>:<0|1>": count}`` (missing cells are 0).
        source: where the counts come from (shown to the lead, exported).
        expert_rater_id: the account whose ratings the counts are (``mark_from_rater``):
            that rater is not graded against their own counts nor held by the gate.

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such study.
        InvalidInput: an unknown pair number, a repeat or a pair with repeats, a bad count.
    """
    require_admin(actor)
    if not expert:
        raise InvalidInput("training items: no pairs given")
    checked: dict[int, dict[str, int]] = {}
    valid = {cell_key(c, g) for c, g in assignment_writes.CELLS}
    for number, counts in expert.items():
        unknown = sorted(set(counts) - valid)
        if unknown:
            raise InvalidInput(f"pair {number}: unknown cell(s) {', '.join(unknown)}")
        for key, n in counts.items():
            if not assignment_writes.is_int(n) or not 0 <= int(n) <= assignment_writes.MAX_COUNT:
                raise InvalidInput(f"pair {number} cell {key}: count must be 0-"
                                   f"{assignment_writes.MAX_COUNT}, got {n!r}")
        checked[int(number)] = {k: int(counts.get(k, 0)) for k in sorted(valid)}
    numbers = _numbers(checked)
    with db.begin() as s:
        study = get_study(s, study_name, for_update=True)
        pairs = _pairs_by_number(s, study, numbers or [])
        for number, pair in pairs.items():
            if pair.kind == PAIR_REPEAT:
                raise InvalidInput(f"pair {number} is not a study pair")
            if s.scalar(select(func.count(Pair.id)).where(Pair.repeat_of_id == pair.id)):
                raise InvalidInput(f"pair {number} has hidden repeats for intra-rater "
                                   "agreement: it can't become a training item")
        left = 0
        for number, pair in sorted(pairs.items()):
            if pair.kind == PAIR_STUDY:
                left += int(s.scalar(select(func.count(Assignment.id)).where(
                    Assignment.pair_id == pair.id, Assignment.completed_at.is_not(None))) or 0)
            pair.kind = PAIR_TRAINING
            pair.expert = {"counts": checked[number], "source": str(source)}
            if expert_rater_id is not None:
                pair.expert["rater_id"] = int(expert_rater_id)
        s.flush()
        created = assignment.sync_training(s, study)
    log.info("study %s: %d training item(s) marked from %s", study_name, len(pairs), source)
    return MarkResult(study_name, tuple(sorted(pairs)), ratings_left_study=left,
                      assignments_created=created)


def mark_from_csv(db: Database, actor: Actor, *, study_name: str, text: str,
                  pair_numbers: Iterable[int] | None = None,
                  source: str = "expert CSV") -> MarkResult:
    """Mark the pairs of a CSV (see :func:`parse_expert_csv`), or only ``pair_numbers``.

    Raises:
        InvalidInput: a bad CSV, or a listed pair the CSV does not have.
    """
    require_admin(actor)
    expert = parse_expert_csv(text)
    wanted = _numbers(pair_numbers)
    if wanted is not None:
        absent = [n for n in wanted if n not in expert]
        if absent:
            raise InvalidInput(f"pairs: the CSV has no rows for pair(s) "
                               f"{', '.join(map(str, absent))}")
        expert = {n: expert[n] for n in wanted}
    return mark_training(db, actor, study_name=study_name, expert=expert, source=source)


def mark_from_rater(db: Database, actor: Actor, *, study_name: str, username: str,
                    pair_numbers: Iterable[int] | None = None) -> MarkResult:
    """Mark pairs with an expert account's completed counts (default: every pair they did).

    Raises:
        InvalidInput: no such account, or a listed pair the account has not completed.
    """
    require_admin(actor)
    wanted = _numbers(pair_numbers)
    with db.read() as s:
        study = get_study(s, study_name)
        user_id = s.scalar(select(User.id).where(User.username == username))
        if user_id is None:
            raise InvalidInput(f"from-rater: no account named {username!r}")
        done = {pos + 1: pid for pid, pos in s.execute(
            select(Pair.id, Pair.position).join(Assignment, Assignment.pair_id == Pair.id)
            .where(Assignment.rater_id == user_id, Assignment.study_id == study.id,
                   Assignment.completed_at.is_not(None), Pair.kind == PAIR_STUDY))}
        if wanted is None:
            wanted = sorted(done)
            if not wanted:
                raise InvalidInput(f"from-rater: {username!r} has completed no study pair "
                                   f"of {study_name!r}")
        absent = [n for n in wanted if n not in done]
        if absent:
            raise InvalidInput(f"from-rater: {username!r} has not completed pair(s) "
                               f"{', '.join(map(str, absent))} of {study_name!r}")
        expert: dict[int, dict[str, int]] = {}
        for n in wanted:
            cells = {(int(c), bool(g)): int(v) for c, g, v in s.execute(
                select(Rating.category, Rating.significant, Rating.count)
                .where(Rating.rater_id == user_id, Rating.pair_id == done[n]))}
            expert[n] = _full_counts(cells)
    return mark_training(db, actor, study_name=study_name, expert=expert,
                         source=f"expert {username}", expert_rater_id=user_id)


def mark_from_adjudication(db: Database, actor: Actor, *, study_name: str,
                           pair_numbers: Iterable[int] | None = None) -> MarkResult:
    """Mark pairs with their adjudicated consensus counts (default: every adjudicated pair).

    Raises:
        InvalidInput: a listed pair without an adjudication.
    """
    require_admin(actor)
    wanted = _numbers(pair_numbers)
    with db.read() as s:
        study = get_study(s, study_name)
        adjudicated = {pos + 1: dict(counts or {}) for pos, counts in s.execute(
            select(Pair.position, Adjudication.counts)
            .join(Adjudication, Adjudication.pair_id == Pair.id)
            .where(Pair.study_id == study.id, Pair.kind == PAIR_STUDY))}
    if wanted is None:
        wanted = sorted(adjudicated)
        if not wanted:
            raise InvalidInput(f"from-adjudication: study {study_name!r} has no adjudicated "
                               "pair")
    absent = [n for n in wanted if n not in adjudicated]
    if absent:
        raise InvalidInput(f"from-adjudication: pair(s) {', '.join(map(str, absent))} of "
                           f"{study_name!r} have no adjudication")
    return mark_training(db, actor, study_name=study_name,
                         expert={n: adjudicated[n] for n in wanted},
                         source="adjudicated consensus")


def unmark_training(db: Database, actor: Actor, *, study_name: str,
                    pair_numbers: Iterable[int]) -> MarkResult:
    """Make training items study pairs again (admin); refused once a rater has done one.

    Raises:
        InvalidInput: a pair that is not a training item, or one a rater has done.
    """
    require_admin(actor)
    numbers = _numbers(pair_numbers) or []
    with db.begin() as s:
        study = get_study(s, study_name, for_update=True)
        pairs = _pairs_by_number(s, study, numbers)
        for number, pair in pairs.items():
            if pair.kind != PAIR_TRAINING:
                raise InvalidInput(f"pair {number} is not a training item")
            done = s.scalar(select(func.count(Assignment.id)).where(
                Assignment.pair_id == pair.id, Assignment.completed_at.is_not(None)))
            if done:
                raise InvalidInput(f"pair {number}: {done} rater(s) have done this training "
                                   "item; their answers were given as calibration, so it "
                                   "stays a training item")
        removed = 0
        for pair in pairs.values():
            # Unfinished counts would otherwise count as imported ratings without assignment;
            # the error records they derive from go with them.
            s.execute(delete(Rating).where(Rating.pair_id == pair.id))
            s.execute(delete(ErrorRecord).where(ErrorRecord.pair_id == pair.id))
            removed += s.execute(delete(Assignment).where(Assignment.pair_id == pair.id)
                                 ).rowcount or 0
            pair.kind = PAIR_STUDY
            pair.expert = None
        s.flush()
        assignment.sync_training(s, study)  # close the gap in the training block
    return MarkResult(study_name, tuple(sorted(pairs)), assignments_removed=removed)


# -- the lead's views -----------------------------------------------------------------------


def list_training(db: Database, actor: Actor, *, study_name: str) -> list[TrainingItem]:
    """The study's training items by pair number (admin)."""
    require_admin(actor)
    with db.read() as s:
        study = get_study(s, study_name)
        stats = {pid: (int(n), int(d)) for pid, n, d in s.execute(
            select(Assignment.pair_id, func.count(Assignment.id),
                   func.count(Assignment.completed_at))
            .join(Pair, Pair.id == Assignment.pair_id)
            .where(Pair.study_id == study.id, Pair.kind == PAIR_TRAINING)
            .group_by(Assignment.pair_id))}
        return [
            TrainingItem(
                pair_number=p.position + 1, opaque_id=p.opaque_id,
                expert_counts=dict((p.expert or {}).get("counts") or {}),
                expert_source=str((p.expert or {}).get("source") or ""),
                raters=stats.get(p.id, (0, 0))[0], done=stats.get(p.id, (0, 0))[1],
            )
            for p in s.scalars(select(Pair).where(Pair.study_id == study.id,
                                                  Pair.kind == PAIR_TRAINING)
                               .order_by(Pair.position))
        ]


def qualification_status(db: Database, actor: Actor, *,
                         study_name: str) -> list[RaterQualification]:
    """Per rater of the study: training items held, done, passed and whether qualified."""
    require_admin(actor)
    with db.read() as s:
        study = get_study(s, study_name)
        out = []
        for rater_id, username in s.execute(
            select(User.id, User.username).join(Assignment, Assignment.rater_id == User.id)
            .where(Assignment.study_id == study.id).distinct().order_by(User.username)
        ):
            gate = qualification.qualification(s, rater_id, study.id, study.settings,
                                        count_without_gate=True)
            out.append(RaterQualification(
                rater=username, training=gate.training, done=gate.done, passed=gate.passed,
                required=gate.required, qualified=gate.open, failed=gate.failed))
        return out


def training_rows(db: Database, actor: Actor, study_name: str) -> list[dict[str, Any]]:
    """Every rater's answers to the training items, one row per cell (admin), for export.

    Keys: rater, pair_number, opaque_id, category, significant, count, expert_count, passed
    (the item's pass against ``qualification_max_error``; None while not done). The rater
    whose ratings are an item's expert counts has no row for it.
    """
    require_admin(actor)
    with db.read() as s:
        study = get_study(s, study_name)
        max_error = int(effective(study.settings)["qualification_max_error"])
        rows = []
        for username, rater_id, pair_id, position, opaque_id, expert, done in s.execute(
            select(User.username, User.id, Pair.id, Pair.position, Pair.opaque_id,
                   Pair.expert, Assignment.completed_at)
            .join(Assignment, Assignment.rater_id == User.id)
            .join(Pair, Pair.id == Assignment.pair_id)
            .where(Pair.study_id == study.id, Pair.kind == PAIR_TRAINING)
            .order_by(User.username, Pair.position)
        ):
            if qualification.answer_key_of(expert, rater_id):
                continue  # the expert's own counts: the answer key, not a training answer
            cells = {(int(c), bool(g)): int(n) for c, g, n in s.execute(
                select(Rating.category, Rating.significant, Rating.count)
                .where(Rating.rater_id == rater_id, Rating.pair_id == pair_id))}
            expert_counts = (expert or {}).get("counts") or {}
            passed = (qualification.item_passed(sum(cells.values()), expert, max_error)
                      if done is not None else None)
            for c, g in assignment_writes.CELLS:
                rows.append({
                    "rater": username, "pair_number": int(position) + 1,
                    "opaque_id": opaque_id, "category": c, "significant": g,
                    "count": cells.get((c, g), 0),
                    "expert_count": int(expert_counts.get(cell_key(c, g), 0)),
                    "passed": passed,
                })
        return rows


def repeat_pairs(db: Database, actor: Actor, study_name: str) -> list[tuple[str, int, str]]:
    """(rater, source pair number, repeat opaque id) of every hidden repeat given (admin)."""
    require_admin(actor)
    with db.read() as s:
        study = get_study(s, study_name)
        source = Pair.__table__.alias("source")
        return [
            (str(u), int(pos) + 1, str(oid))
            for u, pos, oid in s.execute(
                select(User.username, source.c.position, Pair.opaque_id)
                .join(Assignment, Assignment.rater_id == User.id)
                .join(Pair, Pair.id == Assignment.pair_id)
                .join(source, source.c.id == Pair.repeat_of_id)
                .where(Pair.study_id == study.id, Pair.kind == PAIR_REPEAT)
                .order_by(User.username, source.c.position)
            )
        ]


# -- the rater's feedback -------------------------------------------------------------------


def training_feedback(db: Database, actor: Actor, opaque_id: str) -> TrainingFeedback:
    """The expert's counts beside the actor's, for their own done training item only.

    Raises:
        NotFound: not the actor's training item, or not done yet (same message: nothing
            about the expert's counts leaks before the rater has answered).
    """
    with db.read() as s:
        t = assignment_writes.find_target(s, actor, opaque_id)
        if t.kind != PAIR_TRAINING or t.assignment.completed_at is None:
            raise NotFound(f"no feedback for pair {opaque_id!r}: it is not one of your done "
                           "training items")
        expert = s.scalar(select(Pair.expert).where(Pair.id == t.pair_id)) or {}
        mine = assignment_writes.stored_counts(s, actor, t.pair_id)
        settings = s.scalar(select(Study.settings).where(Study.id == t.study_id))
        values = effective(settings)
        gate = qualification.qualification(s, actor.user_id, t.study_id, settings)
        study_name = s.scalar(select(Study.name).where(Study.id == t.study_id))
    theirs = expert.get("counts") or {}
    cells = tuple(FeedbackCell(c, g, int(mine[(c, g)]), int(theirs.get(cell_key(c, g), 0)))
                  for c, g in assignment_writes.CELLS)
    rater_total = sum(c.rater for c in cells)
    expert_total = sum(c.expert for c in cells)
    gated = int(values["qualification_items"]) > 0
    max_error = int(values["qualification_max_error"]) if gated else None
    return TrainingFeedback(
        opaque_id=str(opaque_id), cells=cells, rater_total=rater_total,
        expert_total=expert_total,
        definitions={c: (CATEGORIES[c], CATEGORY_DEFINITIONS[c]) for c in sorted(CATEGORIES)},
        max_error=max_error,
        passed=None if max_error is None else abs(rater_total - expert_total) <= max_error,
        standing=_standing(gate, str(study_name)) if gated else None,
        qualified=gate.open if gated else None,
    )


def _standing(gate: qualification.Qualification, study_name: str) -> str:
    """The gate in words for the feedback panel: the rater learns there, not only on the
    studies list, whether the study pairs are open, how far they are, or that they failed."""
    if gate.open:
        return (f"Qualified: {gate.passed} of the {gate.required} training item(s) needed "
                f"passed; the study pairs of {study_name!r} are open to you.")
    return gate.message(study_name) or ""


__all__ = [
    "CATEGORY_DEFINITIONS",
    "CSV_COLUMNS",
    "FeedbackCell",
    "MarkResult",
    "RaterQualification",
    "TrainingFeedback",
    "TrainingItem",
    "cell_key",
    "list_training",
    "mark_from_adjudication",
    "mark_from_csv",
    "mark_from_rater",
    "mark_training",
    "parse_expert_csv",
    "qualification_status",
    "repeat_pairs",
    "training_feedback",
    "training_rows",
    "unmark_training",
]
