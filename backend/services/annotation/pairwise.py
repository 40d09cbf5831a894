"""Pairwise mode: two candidates of one reference side by side, "which is better" and 1-5.

Only in a study whose ``annotation_mode`` setting is ``pairwise`` (the RadPref import sets it;
otherwise ``python -m backend study-settings --study S --set annotation_mode=pairwise``).

The Assign page (a preference study) and ``python -m backend pairwise make|assign`` both call
:func:`make_comparisons` and :func:`assign_judgements`.

Comparisons (:func:`make_comparisons`, admin). The study pairs (kind ``study``) are grouped by
reference: the same case and the same reference text (so two reference rows with one text
count as one reference). A reference with ``m >= 2`` candidates gets a comparison for *every*
pair of its candidates (``m (m - 1) / 2``; RadPref has exactly two). Which candidate is shown
left (A) is a seeded draw per comparison, so no system is always on one side; opaque ids are
random (``secrets``) like the pairs'. Comparisons already made are kept and never repeated
(either side order), so a re-run creates nothing.

Judgements (:func:`assign_judgements`, admin). ``k`` raters per comparison with the algorithm
of :mod:`backend.services.study_admin.assignment`: comparisons visited in a seeded shuffle, each
missing
rater taken least-loaded first (seeded tie-break), each rater's new comparisons shuffled with
their own seed and appended after what they hold. A ``Judgement`` row is the rater's
assignment and their answer in one. Re-running creates nothing.

Rater side. Every query starts from the actor's own ``Judgement`` rows: a comparison not
given to the actor is ``NotFound`` like one that does not exist, and views carry texts,
images and the actor's own answer only (no source, score, position or other rater).
Each field is saved alone on click (:func:`save_judgement`) with the version the screen
showed; a stale version (another tab) is refused with :class:`JudgementStale` and nothing is
written. :func:`complete` needs a preference and both ratings.

Statistics (:func:`study_preference_stats`) count *completed* judgements only; see
:mod:`backend.analysis.preference` for the definitions.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import secrets
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session, aliased

from radconcord.backend import clock
from radconcord.backend.analysis import preference as pref
from radconcord.backend.analysis.data import AnalysisInputError, StudyImports
from radconcord.backend.errors import (
    InvalidInput,
    NotFound,
    PermissionDenied,
    ServiceError,
    require_admin,
)
from radconcord.backend.services.annotation.rating import ImageRef
from radconcord.backend.services.evaluation.study_data import study_imports
from radconcord.backend.services.repo import get_study
from radconcord.backend.services.study_admin.assignment import (
    active_raters,
    balanced_new_items,
    seeded_batch,
    seeded_rng,
)
from radconcord.backend.services.study_admin.study_settings import effective
from radconcord.backend.services.study_admin.study_status import HIDDEN_STATUSES, READ_ONLY_STATUSES
from radconcord.backend.services.transactions import BUSY_ACTION_MESSAGE, write_retrying
from radconcord.backend.types import Actor
from radconcord.db.models import (
    PAIR_STUDY,
    Case,
    Comparison,
    Image,
    Judgement,
    MetricScore,
    Pair,
    Report,
    Study,
    User,
)
from radconcord.db.session import Database

log = logging.getLogger(__name__)

PAIRWISE = "pairwise"
PREFERENCES = ("A", "B", "tie")
RATING_RANGE = (1, 5)
STALE_MESSAGE = "Not saved: changed in another window, reloaded"


def _require_pairwise(study: Study) -> None:
    mode = effective(study.settings)["annotation_mode"]
    if mode != PAIRWISE:
        raise InvalidInput(
            f"study {study.name!r} is in annotation mode {mode!r}, not 'pairwise': set it first "
            f"(python -m backend study-settings --study {study.name!r} "
            "--set annotation_mode=pairwise)")


# -- comparisons (admin) -------------------------------------------------------------------


@dataclass(frozen=True)
class ComparisonsSummary:
    """What :func:`make_comparisons` did."""

    study_name: str
    seed: int
    created: int
    total: int  # comparisons of the study after the run
    references: int  # references with at least two candidates


def make_comparisons(db: Database, actor: Actor, study_name: str, *, seed: int = 0
                     ) -> ComparisonsSummary:
    """Create a comparison for every two candidates of each reference of a study (admin).

    Args:
        db: The study database.
        actor: An admin.
        study_name: A study in pairwise mode.
        seed: Decides which candidate is shown left (A) in each new comparison.

    Returns:
        What was created and what exists.

    Raises:
        PermissionDenied: not an admin.
        NotFound: no such study.
        InvalidInput: the study is not in pairwise mode or is archived.
    """
    require_admin(actor)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise InvalidInput(f"seed: must be an integer, got {seed!r}")
    with db.begin() as s:
        study = get_study(s, study_name, for_update=True)
        _require_pairwise(study)
        if study.status == "archived":
            raise InvalidInput(f"study {study_name!r} is archived: unarchive it first")
        rows = s.execute(
            select(Pair.id, Pair.position, Pair.case_id, Report.text)
            .join(Report, Report.id == Pair.reference_id)
            .where(Pair.study_id == study.id, Pair.kind == PAIR_STUDY)
            .order_by(Pair.position)
        ).all()
        groups: dict[tuple[int, str], list[tuple[int, int]]] = defaultdict(list)
        for pair_id, position, case_id, ref_text in rows:
            groups[(case_id, ref_text)].append((pair_id, position))
        existing = {
            frozenset((a, b))
            for a, b in s.execute(select(Comparison.pair_a_id, Comparison.pair_b_id)
                                  .where(Comparison.study_id == study.id))
        }
        last_pos = s.scalar(select(func.max(Comparison.position))
                            .where(Comparison.study_id == study.id))
        next_pos = 0 if last_pos is None else int(last_pos) + 1
        created = 0
        references = 0
        # Groups in the order of their first pair, so positions follow the study's order.
        for members in sorted(groups.values(), key=lambda m: m[0][1]):
            if len(members) < 2:
                continue
            references += 1
            for (id1, pos1), (id2, pos2) in itertools.combinations(members, 2):
                if frozenset((id1, id2)) in existing:
                    continue
                # Seeded by positions, never database ids: the same study gives the same sides.
                swap = seeded_rng(seed, "side", pos1, pos2).random() < 0.5
                a, b = (id2, id1) if swap else (id1, id2)
                s.add(Comparison(study_id=study.id, pair_a_id=a, pair_b_id=b,
                                 position=next_pos, opaque_id=secrets.token_hex(8), meta={}))
                existing.add(frozenset((a, b)))
                next_pos += 1
                created += 1
        if created:
            runs = list((study.provenance or {}).get("comparison_runs", []))
            runs.append({"seed": seed, "created": created})
            study.provenance = {**(study.provenance or {}), "comparison_runs": runs}
        s.flush()
        total = int(s.scalar(select(func.count(Comparison.id))
                             .where(Comparison.study_id == study.id)) or 0)
    log.info("made %d comparisons in %s (seed=%d)", created, study_name, seed)
    return ComparisonsSummary(study_name, seed, created, total, references)


@dataclass(frozen=True)
class JudgementAssignmentSummary:
    """What :func:`assign_judgements` did."""

    study_name: str
    raters_per_comparison: int
    seed: int
    n_comparisons: int
    created: int
    per_rater: dict[str, int] = field(default_factory=dict)


def assign_judgements(db: Database, actor: Actor, study_name: str,
                      rater_usernames: Sequence[str], k: int, seed: int
                      ) -> JudgementAssignmentSummary:
    """Give every comparison of a study to ``k`` of the raters (admin); see the module doc.

    Args:
        db: The study database.
        actor: An admin.
        study_name: A study in pairwise mode with comparisons.
        rater_usernames: Active rater accounts.
        k: Raters per comparison (1..number of raters).
        seed: Makes the assignment and each rater's order reproducible.

    Raises:
        PermissionDenied: not an admin.
        NotFound: no such study.
        InvalidInput: bad raters or k, not pairwise mode, no comparisons, archived study.
    """
    require_admin(actor)
    names = sorted({u.strip() for u in rater_usernames if u and u.strip()})
    if not names:
        raise InvalidInput("raters: give at least one rater username")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise InvalidInput(f"k: raters per comparison must be a positive integer, got {k!r}")
    if k > len(names):
        raise InvalidInput(f"k: {k} raters per comparison needs at least that many raters, "
                           f"got {len(names)}")
    with db.begin() as s:
        study = get_study(s, study_name, for_update=True)
        _require_pairwise(study)
        if study.status == "archived":
            raise InvalidInput(f"study {study_name!r} is archived: unarchive it first")
        users = active_raters(s, names)
        position_of = dict(s.execute(
            select(Comparison.id, Comparison.position)
            .where(Comparison.study_id == study.id).order_by(Comparison.position)).all())
        if not position_of:
            raise InvalidInput(f"study {study_name!r} has no comparisons: make them first "
                               f"(python -m backend pairwise make --study {study_name!r})")
        on: dict[int, set[int]] = defaultdict(set)
        load: dict[int, int] = defaultdict(int)
        next_index: dict[int, int] = {}
        for cid, rid, order in s.execute(
                select(Judgement.comparison_id, Judgement.rater_id, Judgement.order_index)
                .join(Comparison, Comparison.id == Judgement.comparison_id)
                .where(Comparison.study_id == study.id)):
            on[cid].add(rid)
            load[rid] += 1
            next_index[rid] = max(next_index.get(rid, -1), order)
        # The algorithm of backend/services/study_admin/assignment.py, with comparisons for pairs.
        new_for = balanced_new_items(position_of, on, load, [users[n].id for n in names], k,
                                     seed, labels=("comparisons", "comparison"))
        created = 0
        for name in names:
            rid = users[name].id
            start = next_index.get(rid, -1) + 1
            batch = seeded_batch(new_for.get(rid, []), position_of, seed, name, start)
            for offset, cid in enumerate(batch):
                s.add(Judgement(rater_id=rid, comparison_id=cid, order_index=start + offset))
            created += len(batch)
        if created:
            runs = list((study.provenance or {}).get("judgement_runs", []))
            runs.append({"raters": names, "raters_per_comparison": k, "seed": seed,
                         "created": created})
            study.provenance = {**(study.provenance or {}), "judgement_runs": runs}
        s.flush()
        per_rater = {
            u: int(n) for u, n in sorted(s.execute(
                select(User.username, func.count(Judgement.id))
                .join(Judgement, Judgement.rater_id == User.id)
                .join(Comparison, Comparison.id == Judgement.comparison_id)
                .where(Comparison.study_id == study.id)
                .group_by(User.username)).all())
        }
    log.info("assigned %d judgements in %s (k=%d, seed=%d)", created, study_name, k, seed)
    return JudgementAssignmentSummary(study_name, k, seed, len(position_of), created, per_rater)


# -- rater side ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RaterPairwiseStudy:
    """A pairwise study in which the actor has comparisons, with their progress."""

    name: str
    completed: int
    total: int
    resume_opaque_id: str | None  # the first comparison not done, in the rater's order


@dataclass(frozen=True)
class ComparisonItem:
    """One comparison of the rater's queue."""

    opaque_id: str
    index: int  # 1..N in the rater's order
    completed: bool


@dataclass(frozen=True)
class ComparisonView:
    """What a rater sees of one comparison: texts, images and their own answer only."""

    opaque_id: str
    study_name: str
    index: int
    total: int
    reference_text: str
    candidate_a_text: str
    candidate_b_text: str
    images: tuple[ImageRef, ...]
    preference: str | None
    rating_a: int | None
    rating_b: int | None
    version: int
    completed_at: dt.datetime | None
    prev_opaque_id: str | None
    next_opaque_id: str | None
    read_only: bool


@dataclass(frozen=True)
class JudgementSaved:
    """The stored answer after a save or completion."""

    opaque_id: str
    preference: str | None
    rating_a: int | None
    rating_b: int | None
    version: int
    completed_at: dt.datetime | None
    changed: bool
    next_open_opaque_id: str | None = None


class JudgementStale(ServiceError):
    """A save carried an older version than the stored one; nothing was written.

    Attributes:
        stored: The stored answer, to show instead of the rater's stale one.
    """

    def __init__(self, stored: JudgementSaved) -> None:
        super().__init__(STALE_MESSAGE)
        self.stored = stored


def _not_found(opaque_id: object) -> NotFound:
    return NotFound(f"comparison {opaque_id!r} is not in your assignments")


def _target(s: Session, actor: Actor, opaque_id: str, *, lock: bool = False
            ) -> tuple[Judgement, Comparison, Study]:
    stmt = (select(Judgement, Comparison, Study)
            .join(Comparison, Comparison.id == Judgement.comparison_id)
            .join(Study, Study.id == Comparison.study_id)
            .where(Judgement.rater_id == actor.user_id, Comparison.opaque_id == str(opaque_id),
                   Study.status.not_in(HIDDEN_STATUSES)))
    if lock:
        stmt = stmt.with_for_update(of=Judgement)
    row = s.execute(stmt).first()
    if row is None:
        raise _not_found(opaque_id)
    judgement, comparison, study = row
    _require_pairwise(study)
    return judgement, comparison, study


def _queue(s: Session, actor: Actor, study_id: int) -> list[tuple[str, dt.datetime | None]]:
    return [(oid, done) for oid, done in s.execute(
        select(Comparison.opaque_id, Judgement.completed_at)
        .join(Comparison, Comparison.id == Judgement.comparison_id)
        .where(Judgement.rater_id == actor.user_id, Comparison.study_id == study_id)
        .order_by(Judgement.order_index, Judgement.id))]


def _saved(opaque_id: str, j: Judgement, *, changed: bool,
           next_open: str | None = None) -> JudgementSaved:
    return JudgementSaved(str(opaque_id), j.preference, j.rating_a, j.rating_b,
                          int(j.version or 0), clock.as_utc(j.completed_at), changed, next_open)


def rater_studies(db: Database, actor: Actor) -> list[RaterPairwiseStudy]:
    """The visible pairwise studies in which the actor has comparisons, by name."""
    with db.read() as s:
        rows = s.execute(
            select(Study.id, Study.name, func.count(Judgement.id),
                   func.count(Judgement.completed_at))
            .join(Comparison, Comparison.study_id == Study.id)
            .join(Judgement, Judgement.comparison_id == Comparison.id)
            .where(Judgement.rater_id == actor.user_id, Study.status.not_in(HIDDEN_STATUSES))
            .group_by(Study.id, Study.name)
            .order_by(Study.name)).all()
        out = []
        for study_id, name, total, done in rows:
            # JSON has no equality operator on PostgreSQL: settings are read per study.
            settings = s.scalar(select(Study.settings).where(Study.id == study_id))
            if effective(settings)["annotation_mode"] != PAIRWISE:
                continue
            resume = next((oid for oid, at in _queue(s, actor, study_id) if at is None), None)
            out.append(RaterPairwiseStudy(name, int(done), int(total), resume))
    return out


def rater_comparisons(db: Database, actor: Actor, study_name: str) -> list[ComparisonItem]:
    """The actor's comparisons in a study, in their own seeded order.

    Raises:
        NotFound: no such visible study, or nothing of it is given to the actor.
        InvalidInput: the study is not in pairwise mode.
    """
    with db.read() as s:
        study = s.scalar(select(Study).where(Study.name == study_name,
                                             Study.status.not_in(HIDDEN_STATUSES)))
        queue = _queue(s, actor, study.id) if study is not None else []
        if not queue:
            raise NotFound(f"you have no comparisons in study {study_name!r}")
        _require_pairwise(study)
    return [ComparisonItem(oid, i, done is not None)
            for i, (oid, done) in enumerate(queue, start=1)]


def get_comparison(db: Database, actor: Actor, opaque_id: str) -> ComparisonView:
    """One comparison given to the actor, with both candidates, images and their answer.

    Raises:
        NotFound: not given to the actor (or no such comparison).
        InvalidInput: the study is not in pairwise mode.
    """
    pa, pb = aliased(Pair), aliased(Pair)
    ref, ca, cb = aliased(Report), aliased(Report), aliased(Report)
    with db.read() as s:
        j, c, study = _target(s, actor, opaque_id)
        ref_text, a_text, b_text, case_id = s.execute(
            select(ref.text, ca.text, cb.text, pa.case_id)
            .select_from(pa)
            .join(pb, pb.id == c.pair_b_id)
            .join(ref, ref.id == pa.reference_id)
            .join(ca, ca.id == pa.candidate_id)
            .join(cb, cb.id == pb.candidate_id)
            .where(pa.id == c.pair_a_id)).one()
        images = tuple(ImageRef(int(i), v, f) for i, v, f in s.execute(
            select(Image.id, Image.view, Image.format)
            .where(Image.case_id == case_id).order_by(Image.id)))
        ids = [oid for oid, _ in _queue(s, actor, study.id)]
        pos = ids.index(c.opaque_id)
        return ComparisonView(
            opaque_id=c.opaque_id, study_name=study.name, index=pos + 1, total=len(ids),
            reference_text=ref_text, candidate_a_text=a_text, candidate_b_text=b_text,
            images=images, preference=j.preference, rating_a=j.rating_a, rating_b=j.rating_b,
            version=int(j.version or 0), completed_at=clock.as_utc(j.completed_at),
            prev_opaque_id=ids[pos - 1] if pos > 0 else None,
            next_opaque_id=ids[pos + 1] if pos + 1 < len(ids) else None,
            read_only=study.status in READ_ONLY_STATUSES)


def _check_rating(name: str, value: object) -> None:
    lo, hi = RATING_RANGE
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                              or not lo <= value <= hi):
        raise InvalidInput(f"{name}: must be an integer from {lo} to {hi}, got {value!r}")


def _check_version(expected_version: object) -> None:
    if expected_version is not None and (not isinstance(expected_version, int)
                                         or isinstance(expected_version, bool)
                                         or expected_version < 0):
        raise InvalidInput(f"expected_version: must be an integer >= 0, got "
                           f"{expected_version!r}")


def _locked_writable(s: Session, actor: Actor, opaque_id: str, expected_version: int | None
                     ) -> tuple[Judgement, Comparison, Study]:
    j, c, study = _target(s, actor, opaque_id, lock=True)
    if study.status in READ_ONLY_STATUSES:
        raise PermissionDenied(f"study {study.name!r} is closed; judgements can't change")
    if expected_version is not None and int(j.version or 0) != expected_version:
        raise JudgementStale(_saved(c.opaque_id, j, changed=False))
    return j, c, study


def save_judgement(db: Database, actor: Actor, opaque_id: str, *,
                   preference: str | None = None, rating_a: int | None = None,
                   rating_b: int | None = None, expected_version: int | None = None
                   ) -> JudgementSaved:
    """Store the fields given (``None``: leave as stored) of the actor's judgement.

    Args:
        db: The study database.
        actor: The rater holding the comparison.
        opaque_id: The comparison.
        preference: ``"A"``, ``"B"`` or ``"tie"``.
        rating_a: 1-5 overall rating of candidate A.
        rating_b: 1-5 overall rating of candidate B.
        expected_version: The version the screen showed; a different stored one is refused.

    Returns:
        The stored answer (``changed`` False when it already held these values).

    Raises:
        InvalidInput: a bad value, or no field given.
        JudgementStale: the stored version differs from ``expected_version``.
        NotFound: not given to the actor. PermissionDenied: the study is closed.
        SaveFailed: the database stayed busy; nothing was stored.
    """
    if preference is None and rating_a is None and rating_b is None:
        raise InvalidInput("judgement: give a preference, rating_a or rating_b to save")
    if preference is not None and preference not in PREFERENCES:
        raise InvalidInput(f"preference: must be one of A, B, tie, got {preference!r}")
    _check_rating("rating_a", rating_a)
    _check_rating("rating_b", rating_b)
    _check_version(expected_version)

    def work(s: Session) -> JudgementSaved:
        j, c, _ = _locked_writable(s, actor, opaque_id, expected_version)
        changes = {k: v for k, v in (("preference", preference), ("rating_a", rating_a),
                                     ("rating_b", rating_b))
                   if v is not None and getattr(j, k) != v}
        for key, value in changes.items():
            setattr(j, key, value)
        if changes:
            j.version = int(j.version or 0) + 1
            j.updated_at = clock.utcnow()
        s.flush()
        return _saved(c.opaque_id, j, changed=bool(changes))

    # A click must not fail because an import or the scoring worker holds the database for
    # a moment: retried as the count grid's saves are (transactions.SAVE_RETRY_SECONDS).
    return write_retrying(db, work, what=f"judgement {opaque_id}",
                          message=BUSY_ACTION_MESSAGE)


def complete(db: Database, actor: Actor, opaque_id: str, *,
             expected_version: int | None = None) -> JudgementSaved:
    """Mark the actor's judgement done; it needs a preference and both ratings.

    Returns:
        The stored answer, with the next comparison not done in the rater's order.

    Raises:
        InvalidInput: something is missing (named).
        JudgementStale: the stored version differs from ``expected_version``.
        NotFound: not given to the actor. PermissionDenied: the study is closed.
    """
    _check_version(expected_version)

    def work(s: Session) -> JudgementSaved:
        j, c, study = _locked_writable(s, actor, opaque_id, expected_version)
        missing = [label for label, value in (("which is better (A, tie or B)", j.preference),
                                              ("the rating of A", j.rating_a),
                                              ("the rating of B", j.rating_b))
                   if value is None]
        if missing:
            raise InvalidInput(f"comparison {c.opaque_id}: not done yet, give "
                               f"{' and '.join(missing)}")
        changed = j.completed_at is None
        if changed:
            j.completed_at = clock.utcnow()
            j.version = int(j.version or 0) + 1
            j.updated_at = j.completed_at
        s.flush()
        queue = _queue(s, actor, study.id)
        ids = [oid for oid, _ in queue]
        start = ids.index(c.opaque_id) + 1
        nxt = next((oid for oid, at in queue[start:] + queue[:start]
                    if at is None and oid != c.opaque_id), None)
        return _saved(c.opaque_id, j, changed=changed, next_open=nxt)

    return write_retrying(db, work, what=f"completion of {opaque_id}",
                          message=BUSY_ACTION_MESSAGE)


# -- lead's results ------------------------------------------------------------------------


@dataclass(frozen=True)
class RaterJudgement:
    """One rater's answer to a comparison (lead's view)."""

    rater: str
    preference: str | None
    rating_a: int | None
    rating_b: int | None
    completed_at: dt.datetime | None
    # Time on task on the Compare screen (union of the rater's spans; 0: none recorded).
    active_seconds: float = 0.0


@dataclass(frozen=True)
class ComparisonResult:
    """A comparison with its sources and every rater's answer (admin only)."""

    position: int
    opaque_id: str
    case_id: str
    pair_a_position: int
    pair_b_position: int
    source_a: str
    source_b: str
    judgements: tuple[RaterJudgement, ...]


def _study_for_admin(s: Session, actor: Actor, study_name: str) -> Study:
    require_admin(actor)
    return get_study(s, study_name)


def results(db: Database, actor: Actor, study_name: str) -> list[ComparisonResult]:
    """Every comparison of a study with sources and all raters' answers, by position (admin).

    Raises:
        PermissionDenied: not an admin. NotFound: no such study.
    """
    pa, pb = aliased(Pair), aliased(Pair)
    with db.read() as s:
        study = _study_for_admin(s, actor, study_name)
        comps = s.execute(
            select(Comparison.id, Comparison.position, Comparison.opaque_id, Case.external_id,
                   pa.position, pb.position, pa.source, pb.source)
            .join(pa, pa.id == Comparison.pair_a_id)
            .join(pb, pb.id == Comparison.pair_b_id)
            .join(Case, Case.id == pa.case_id)
            .where(Comparison.study_id == study.id)
            .order_by(Comparison.position)).all()
        answers: dict[int, list[RaterJudgement]] = defaultdict(list)
        for cid, name, p, ra, rb, done, seconds in s.execute(
                select(Judgement.comparison_id, User.username, Judgement.preference,
                       Judgement.rating_a, Judgement.rating_b, Judgement.completed_at,
                       Judgement.active_seconds)
                .join(User, User.id == Judgement.rater_id)
                .join(Comparison, Comparison.id == Judgement.comparison_id)
                .where(Comparison.study_id == study.id)
                .order_by(User.username)):
            answers[cid].append(RaterJudgement(name, p, ra, rb, clock.as_utc(done),
                                               float(seconds or 0.0)))
    return [ComparisonResult(int(pos), oid, ext, int(apos), int(bpos), sa or "", sb or "",
                             tuple(answers.get(cid, ())))
            for cid, pos, oid, ext, apos, bpos, sa, sb in comps]


def export_rows(db: Database, actor: Actor, study_name: str) -> list[dict[str, Any]]:
    """One row per (comparison, rater holding it), for a CSV/JSON export (admin).

    Columns: comparison_position, comparison_id (opaque), case_id, pair_a_position,
    pair_b_position, source_a, source_b, rater, preference, rating_a, rating_b, completed_at
    (ISO 8601 or empty), active_seconds (time on task on the Compare screen). A comparison
    nobody holds yet gives one row with an empty rater.
    """
    rows: list[dict[str, Any]] = []
    for r in results(db, actor, study_name):
        base = {"comparison_position": r.position, "comparison_id": r.opaque_id,
                "case_id": r.case_id, "pair_a_position": r.pair_a_position,
                "pair_b_position": r.pair_b_position, "source_a": r.source_a,
                "source_b": r.source_b}
        for j in r.judgements or (RaterJudgement("", None, None, None, None),):
            rows.append({**base, "rater": j.rater, "preference": j.preference,
                         "rating_a": j.rating_a, "rating_b": j.rating_b,
                         "completed_at": j.completed_at.isoformat() if j.completed_at else "",
                         "active_seconds": j.active_seconds})
    return rows


# -- statistics ----------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricPreference:
    """A metric's agreement with the raters' preferences and 1-5 ratings.

    ``kendall_tau_b_rating`` is over the candidates (study pairs) with a completed rating.
    """

    key: str
    higher_is_better: bool
    signature: str
    agreement: pref.PairwiseAgreement
    kendall_tau_b_rating: float
    n: int

    def as_dict(self) -> dict[str, Any]:
        """The JSON block ``correlate`` writes per metric (NaN as None)."""
        a = self.agreement
        return {"higher_is_better": self.higher_is_better, "signature": self.signature,
                "pairwise_agreement": _num(a.value), "ci_low": _num(a.ci_low),
                "ci_high": _num(a.ci_high), "n_comparisons": a.n_comparisons,
                "n_ties_excluded": a.n_ties_excluded, "n_missing": a.n_missing,
                "n_metric_ties": a.n_metric_ties, "n_references": a.n_clusters,
                "kendall_tau_b_rating": _num(self.kendall_tau_b_rating), "n": self.n}


@dataclass(frozen=True)
class PreferenceStats:
    """Per-metric pairwise statistics of a study (admin)."""

    study_name: str
    preference_source: str
    n_comparisons: int  # comparisons with at least one completed judgement
    n_candidates: int  # candidates with at least one completed rating
    resamples: int
    seed: int
    level: float
    metrics: tuple[MetricPreference, ...]

    def as_dict(self) -> dict[str, Any]:
        """JSON-able block (``correlate`` writes it as ``preference``)."""
        return {"study": self.study_name, "preference_source": self.preference_source,
                "n_comparisons": self.n_comparisons, "n_candidates": self.n_candidates,
                "resamples": self.resamples, "seed": self.seed, "level": self.level,
                "ties": "raters' ties excluded; a metric tie scores 0.5",
                "resampling": "references with replacement (their comparisons share "
                              "candidates); a replicate is the mean over the comparisons "
                              "drawn",
                "metrics": {m.key: m.as_dict() for m in self.metrics}}


def _num(value: float) -> float | None:
    return None if not np.isfinite(value) else float(value)


def has_comparisons(db: Database, actor: Actor, study_name: str) -> bool:
    """Whether a study has any comparison (admin)."""
    with db.read() as s:
        study = _study_for_admin(s, actor, study_name)
        return bool(s.scalar(select(func.count(Comparison.id))
                             .where(Comparison.study_id == study.id)))


def _metric_values(s: Session, pair_hash: dict[int, str], keys: Sequence[str] | None,
                   imports: StudyImports) -> dict[str, tuple[str, dict[int, float]]]:
    """key -> (signature, pair id -> value); per key the signature covering most pairs wins
    (then the newest), and an imported key reads its latest import, as in
    :func:`backend.analysis.data.load_metric_columns`."""
    hashes = set(pair_hash.values())
    if not hashes:
        return {}
    stmt = (select(MetricScore.input_hash, MetricScore.key, MetricScore.family,
                   MetricScore.signature_hash, MetricScore.signature, MetricScore.value,
                   MetricScore.created_at)
            .where(MetricScore.input_hash.in_(hashes)))
    if keys is not None:
        stmt = stmt.where(MetricScore.key.in_(list(keys)))
    by_key: dict[str, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    for row in s.execute(stmt):
        if imports.counts(row.key, row.family, row.signature_hash):
            by_key[row.key][row.signature_hash].append(row)
    out: dict[str, tuple[str, dict[int, float]]] = {}
    for key, sigs in by_key.items():
        def rank(h: str, sigs: dict[str, list[Any]] = sigs) -> tuple[int, float, str]:
            newest = max(r.created_at for r in sigs[h])
            return (len(sigs[h]), newest.timestamp() if newest else 0.0, h)
        imported = imports.chosen(key, sigs)
        chosen = sigs[imported.signature_hash if imported is not None else max(sigs, key=rank)]
        value_of = {r.input_hash: r.value for r in chosen}
        out[key] = (chosen[0].signature, {
            pid: float(value_of[h]) if value_of.get(h) is not None else float("nan")
            for pid, h in pair_hash.items()})
    return out


def study_preference_stats(
    db: Database, actor: Actor, study_name: str, *, metrics: Sequence[str] | None = None,
    source: str = "mean_rating", resamples: int = 1000, seed: int = 0,
    level: float = pref.DEFAULT_LEVEL,
) -> PreferenceStats:
    """Each metric's pairwise agreement and Kendall tau-b vs the 1-5 ratings (admin).

    Args:
        db: The study database.
        actor: An admin.
        study_name: A study with comparisons.
        metrics: Output keys (``None``: every key scored on the study's pairs).
        source: Raters' preference from ``"mean_rating"`` (default; RadPref) or ``"votes"``.
        resamples: Bootstrap resamples of the agreement's interval (0: none).
        seed: Seed of the resamples.
        level: Interval coverage.

    Raises:
        PermissionDenied: not an admin. NotFound: no such study.
        InvalidInput: bad source, no comparisons, a requested key never scored or unknown.
    """
    if source not in pref.SOURCES:
        raise InvalidInput(f"source: must be one of {', '.join(pref.SOURCES)}, got {source!r}")
    if not isinstance(resamples, int) or resamples < 0:
        raise InvalidInput(f"resamples: must be an integer >= 0, got {resamples!r}")
    pa, pb = aliased(Pair), aliased(Pair)
    with db.read() as s:
        study = _study_for_admin(s, actor, study_name)
        comps = s.execute(
            select(Comparison.id, Comparison.pair_a_id, Comparison.pair_b_id,
                   pa.input_hash, pb.input_hash)
            .join(pa, pa.id == Comparison.pair_a_id)
            .join(pb, pb.id == Comparison.pair_b_id)
            .where(Comparison.study_id == study.id)
            .order_by(Comparison.position)).all()
        # Both sides of a comparison are candidates of one reference: its case.
        case_of = dict(s.execute(
            select(Comparison.id, pa.case_id).join(pa, pa.id == Comparison.pair_a_id)
            .where(Comparison.study_id == study.id)).all())
        if not comps:
            raise InvalidInput(f"study {study_name!r} has no comparisons")
        done = s.execute(
            select(Judgement.comparison_id, Judgement.preference, Judgement.rating_a,
                   Judgement.rating_b)
            .join(Comparison, Comparison.id == Judgement.comparison_id)
            .where(Comparison.study_id == study.id, Judgement.completed_at.is_not(None))
        ).all()
        pair_hash = {}
        for _, a, b, ha, hb in comps:
            pair_hash[a] = ha
            pair_hash[b] = hb
        imports = study_imports(s, study.id)
        values = _metric_values(s, pair_hash, metrics, imports)
    if metrics is not None:
        unscored = [k for k in metrics if k not in values]
        if unscored:
            raise InvalidInput(f"metrics: no scores for {', '.join(unscored)} on study "
                               f"{study_name!r}")

    votes: dict[int, list[str | None]] = defaultdict(list)
    ra: dict[int, list[float]] = defaultdict(list)
    rb: dict[int, list[float]] = defaultdict(list)
    per_pair: dict[int, list[float]] = defaultdict(list)
    sides = {cid: (a, b) for cid, a, b, _, _ in comps}
    for cid, p, x, y in done:
        votes[cid].append(p)
        if x is not None:
            ra[cid].append(float(x))
            per_pair[sides[cid][0]].append(float(x))
        if y is not None:
            rb[cid].append(float(y))
            per_pair[sides[cid][1]].append(float(y))
    cids = [c[0] for c in comps]

    def mean(xs: list[float]) -> float:
        return float(np.mean(xs)) if xs else float("nan")

    if source == "votes":
        prefs = pref.preference_from_votes([votes.get(c, []) for c in cids])
    else:
        prefs = pref.preference_from_ratings([mean(ra.get(c, [])) for c in cids],
                                             [mean(rb.get(c, [])) for c in cids])
    pair_ids = sorted(pair_hash)
    mean_rating = np.array([mean(per_pair.get(p, [])) for p in pair_ids])
    out = []
    for key in sorted(values):
        signature, by_pair = values[key]
        try:
            hib = imports.direction(key)
        except AnalysisInputError as exc:
            raise InvalidInput(str(exc)) from None
        agreement = pref.pairwise_agreement(
            [by_pair[a] for _, a, _, _, _ in comps], [by_pair[b] for _, _, b, _, _ in comps],
            prefs, higher_is_better=hib, resamples=resamples, seed=seed, level=level,
            clusters=[case_of[cid] for cid in cids])
        tau, n = pref.kendall_tau_b_rating([by_pair[p] for p in pair_ids], mean_rating,
                                           higher_is_better=hib)
        out.append(MetricPreference(key, hib, signature, agreement, tau, n))
    return PreferenceStats(
        study_name=study_name, preference_source=source,
        n_comparisons=len({cid for cid, *_ in done}),
        n_candidates=int(np.isfinite(mean_rating).sum()), resamples=resamples, seed=seed,
        level=level, metrics=tuple(out))
