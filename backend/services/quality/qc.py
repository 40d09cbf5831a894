"""Quality control for the study lead: rater monitoring and intra-rater agreement (admin only).

Monitoring (:mod:`backend.analysis.monitoring`) reads each rater's **study** pairs: their
assignments (``Assignment.completed_at`` for the completion order, ``active_seconds`` for the
time on task of :mod:`backend.services.annotation.activity`) and the total of their ``Rating``
cells for
each done pair. Training items and hidden repeats never enter it. Ratings imported without
assignments (a ReXVal file) have no completion order or time on task, so their raters are
not monitored.

Intra-rater agreement (:mod:`backend.analysis.intra_rater`) reads the repeats: ``Pair`` rows
of kind ``repeat`` whose ``repeat_of_id`` is the source study pair. A repeat counts for a
rater when the rater completed both their assignment of the source pair and of the repeat;
the two ``(6, 2)`` grids are their ``Rating`` cells (a cell without a row is 0, as in the
analysis loader). Besides each rater, a pooled row puts every counted repeat of every rater
together (:data:`POOLED`).

Pairwise studies (:mod:`backend.analysis.judge_monitoring`): each rater's completed
``Judgement`` rows (preference, both ratings, completion time) give side bias,
straight-lining and agreement with the other raters.

Clipped time on task (:func:`time_clipping`): per rater, the time their browser claimed on the
study's pairs and comparisons (``claimed_seconds``) against what was credited
(``active_seconds``) under the rules of :mod:`backend.services.annotation.activity` (inside the
rater's
sessions, an instant for one pair only, spans with an input event). A large difference is
time that was not physically possible: two pairs at once, or time outside any login.

Pairs are numbered 1..N (``position + 1``) wherever a person reads them. Raters never reach
this module: every function requires an admin.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session, aliased

from radconcord.backend import clock
from radconcord.backend.analysis import intra_rater as ir
from radconcord.backend.analysis import judge_monitoring as jm
from radconcord.backend.analysis import monitoring as mon
from radconcord.backend.errors import InvalidInput, require_admin
from radconcord.backend.services.annotation.activity import clipped_seconds
from radconcord.backend.services.quality.qualification import expert_total, training_results
from radconcord.backend.services.repo import get_study
from radconcord.backend.services.study_admin.demo_ratings import constructed_raters
from radconcord.backend.services.study_admin.study_settings import effective
from radconcord.backend.services.transfer.radpref import DETAILS_KEY as RADPREF_DETAILS
from radconcord.backend.types import Actor
from radconcord.db.models import (
    PAIR_REPEAT,
    PAIR_STUDY,
    PAIR_TRAINING,
    Assignment,
    Comparison,
    Image,
    Judgement,
    Pair,
    Rating,
    Study,
    User,
)
from radconcord.db.session import Database

#: The label of the row that pools every rater's repeats.
POOLED = "(all raters)"
#: Clipped time under this is clock jitter between two tabs (milliseconds where one pair's
#: span ends and the next one's starts), not worth a line: a pair is named from here on.
CLIPPED_NOTICE_SECONDS = 1.0


@dataclass(frozen=True)
class StudyMonitoring:
    """Rater monitoring of one study.

    Attributes:
        study: Study name.
        straight_run: Zero-run length flagged as straight-lining.
        outlier_z: ``|robust z|`` flagged across raters.
        raters: One entry per rater with study assignments, by username.
        floors: The absolute floors in force (the study's ``qc_*`` settings).
        between_rater_note: Why between-rater flags are off (fewer than 3 raters with done
            pairs), ``""`` when they are on.
        training_items: Training items (expert counts) in the study; with any, each rater's
            agreement with the expert is measured on the ones they did.
    """

    study: str
    straight_run: int
    outlier_z: float
    raters: tuple[mon.RaterMonitoring, ...]
    floors: mon.Floors = mon.Floors()
    between_rater_note: str = ""
    training_items: int = 0

    @property
    def flagged(self) -> tuple[str, ...]:
        """Usernames of the raters with any flag."""
        return tuple(r.rater for r in self.raters if r.flags)


@dataclass(frozen=True)
class RaterRepeats:
    """One rater's repeats and their intra-rater agreement.

    Attributes:
        rater: Username (or :data:`POOLED`).
        assigned: Repeats assigned to the rater.
        counted: Repeats done in both showings (the ``n`` of the statistics).
        agreement: The statistics per scope.
    """

    rater: str
    assigned: int
    counted: int
    agreement: ir.RaterIntraRater


@dataclass(frozen=True)
class StudyIntraRater:
    """Intra-rater agreement of one study.

    Attributes:
        study: Study name.
        repeat_pairs: Repeat pairs in the study.
        raters: One entry per rater with a repeat assigned, by username.
        pooled: Every counted repeat of every rater together (None when no rater has one).
    """

    study: str
    repeat_pairs: int
    raters: tuple[RaterRepeats, ...]
    pooled: RaterRepeats | None


def _study(s: Session, name: str) -> Study:
    if not isinstance(name, str) or not name.strip():
        raise InvalidInput("study_name: give the study's name")
    return get_study(s, name)


def _grids(s: Session, study_id: int, pair_ids: set[int]
           ) -> dict[tuple[int, int], np.ndarray]:
    """``(rater id, pair id) -> (6, 2)`` counts of the given pairs (missing cells are 0)."""
    grids: dict[tuple[int, int], np.ndarray] = defaultdict(lambda: np.zeros((6, 2)))
    if not pair_ids:
        return grids
    rows = s.execute(
        select(Rating.rater_id, Rating.pair_id, Rating.category, Rating.significant,
               Rating.count)
        .join(Pair, Pair.id == Rating.pair_id)
        .where(Pair.study_id == study_id)
    ).all()
    for rater_id, pair_id, category, significant, count in rows:
        if pair_id in pair_ids:
            grids[(rater_id, pair_id)][int(category) - 1, 1 if significant else 0] = count
    return grids


def _check_thresholds(straight_run: int, outlier_z: float) -> None:
    if isinstance(straight_run, bool) or not isinstance(straight_run, int) or straight_run < 2:
        raise InvalidInput(f"straight_run: a whole number of pairs, at least 2; got "
                           f"{straight_run!r}")
    if (isinstance(outlier_z, bool) or not isinstance(outlier_z, (int, float))
            or not math.isfinite(outlier_z) or outlier_z <= 0):
        raise InvalidInput(f"outlier_z: a positive number; got {outlier_z!r}")


def monitoring(db: Database, actor: Actor, study_name: str, *,
               straight_run: int = mon.STRAIGHT_RUN,
               outlier_z: float = mon.OUTLIER_Z) -> StudyMonitoring:
    """Per-rater monitoring of a study's study pairs (admin only).

    Args:
        db: The study database.
        actor: An admin.
        study_name: The study.
        straight_run: Consecutive all-zero done pairs flagged as straight-lining (>= 2).
        outlier_z: ``|robust z|`` across raters flagged as an outlier (> 0).

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such study.
        InvalidInput: a bad threshold.
    """
    require_admin(actor)
    _check_thresholds(straight_run, outlier_z)
    with db.read() as s:
        study = _study(s, study_name)
        rows = s.execute(
            select(User.id, User.username, Pair.id, Pair.position, Assignment.completed_at,
                   Assignment.active_seconds)
            .join(Assignment, Assignment.rater_id == User.id)
            .join(Pair, Pair.id == Assignment.pair_id)
            .where(Assignment.study_id == study.id, Pair.kind == PAIR_STUDY)
            .order_by(User.username, Pair.position)
        ).all()
        grids = _grids(s, study.id, {pid for _, _, pid, _, done, _ in rows if done is not None})
        name = study.name
        constructed = constructed_raters(study.provenance)
        settings = effective(study.settings)
        floors = mon.Floors(min_seconds=settings["qc_min_seconds_per_pair"],
                            min_seconds_film=settings["qc_min_seconds_per_film_pair"],
                            max_per_hour=settings["qc_max_pairs_per_hour"])
        max_error = float(settings["qualification_max_error"])
        # Pairs that show a film: their case has an image (the higher time floor).
        with_film = set(s.scalars(
            select(Pair.id).join(Image, Image.case_id == Pair.case_id)
            .where(Pair.study_id == study.id)))
        training: dict[str, list[mon.ExpertItem]] = {}
        user_ids = {username: user_id for user_id, username, *_ in rows}
        for username, user_id in user_ids.items():
            items = [mon.ExpertItem(rater_total=float(total), expert_total=float(exp))
                     for _, done, total, expert in training_results(s, user_id, study.id)
                     if done is not None and (exp := expert_total(expert)) is not None]
            training[username] = items
        n_training = int(s.scalar(
            select(func.count(Pair.id)).where(Pair.study_id == study.id,
                                              Pair.kind == PAIR_TRAINING)) or 0)
    work: dict[str, dict[str, Any]] = {}
    for user_id, username, pair_id, position, completed_at, seconds in rows:
        entry = work.setdefault(username, {"done": [], "assigned": 0, "time": 0.0})
        entry["assigned"] += 1
        entry["time"] += float(seconds or 0.0)
        if completed_at is not None:
            entry["done"].append(mon.DoneItem(
                pair=int(position) + 1, completed_at=clock.as_utc(completed_at),
                seconds=float(seconds or 0.0),
                total=float(grids[(user_id, pair_id)].sum()),
                has_film=pair_id in with_film))
    inputs = [mon.RaterInput(rater=u, done=e["done"], assigned=e["assigned"],
                             time_seconds=e["time"], training=training.get(u, ()),
                             timed=u not in constructed)
              for u, e in work.items()]
    raters = mon.monitor(inputs, straight_run=straight_run, outlier_z=outlier_z,
                         floors=floors, expert_max_error=max_error)
    return StudyMonitoring(study=name, straight_run=straight_run, outlier_z=float(outlier_z),
                           raters=raters, floors=floors,
                           between_rater_note=mon.between_rater_note(raters),
                           training_items=n_training)


def intra_rater(db: Database, actor: Actor, study_name: str) -> StudyIntraRater:
    """Intra-rater agreement of each rater on their hidden repeats (admin only).

    Args:
        db: The study database.
        actor: An admin.
        study_name: The study.

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such study.
    """
    require_admin(actor)
    source = aliased(Assignment)
    with db.read() as s:
        study = _study(s, study_name)
        repeat_pairs = s.scalars(
            select(Pair.id).where(Pair.study_id == study.id, Pair.kind == PAIR_REPEAT)).all()
        # Each rater's repeat assignments, with the same rater's assignment of the source.
        rows = s.execute(
            select(User.id, User.username, Pair.id, Pair.repeat_of_id, Pair.position,
                   Assignment.completed_at, source.completed_at)
            .join(Assignment, Assignment.rater_id == User.id)
            .join(Pair, Pair.id == Assignment.pair_id)
            .outerjoin(source, (source.pair_id == Pair.repeat_of_id)
                       & (source.rater_id == User.id))
            .where(Assignment.study_id == study.id, Pair.kind == PAIR_REPEAT,
                   Pair.repeat_of_id.is_not(None))
            .order_by(User.username, Pair.position)
        ).all()
        counted = [(uid, name, rid, sid) for uid, name, rid, sid, _, done, src_done in rows
                   if done is not None and src_done is not None]
        grids = _grids(s, study.id, {p for *_, r, sp in counted for p in (r, sp)})
        name = study.name
    assigned: dict[str, int] = defaultdict(int)
    for _, username, *_ in rows:
        assigned[username] += 1
    firsts: dict[str, list[np.ndarray]] = defaultdict(list)
    seconds: dict[str, list[np.ndarray]] = defaultdict(list)
    for user_id, username, repeat_id, source_id in counted:
        firsts[username].append(grids[(user_id, source_id)])
        seconds[username].append(grids[(user_id, repeat_id)])
    raters = tuple(
        RaterRepeats(rater=u, assigned=n, counted=len(firsts[u]),
                     agreement=ir.rater_agreement(u, firsts[u], seconds[u]))
        for u, n in sorted(assigned.items()))
    pooled = None
    if raters:
        all_first = [g for u in sorted(firsts) for g in firsts[u]]
        all_second = [g for u in sorted(seconds) for g in seconds[u]]
        pooled = RaterRepeats(rater=POOLED, assigned=sum(assigned.values()),
                              counted=len(all_first),
                              agreement=ir.rater_agreement(POOLED, all_first, all_second))
    return StudyIntraRater(study=name, repeat_pairs=len(repeat_pairs), raters=raters,
                           pooled=pooled)


def _num(value: float) -> float | None:
    """A finite float, or None (an empty cell in the export) for NaN."""
    return float(value) if math.isfinite(value) else None


def intra_rater_rows(db: Database, actor: Actor, study_name: str) -> list[dict[str, Any]]:
    """Intra-rater agreement as export rows: one per rater (and the pooled row) and scope.

    Columns: ``study, rater, scope, repeats_assigned, repeats_counted, exact_agreement,
    exact_all_cells, icc2_1, icc_note, kappa_quadratic, kappa_note, mean_abs_diff``; an
    undefined statistic is ``None`` and its note says why.

    Args:
        db: The study database.
        actor: An admin.
        study_name: The study.
    """
    result = intra_rater(db, actor, study_name)
    rows: list[dict[str, Any]] = []
    entries = result.raters + ((result.pooled,) if result.pooled is not None else ())
    for entry in entries:
        for scope in entry.agreement.scopes:
            rows.append({
                "study": result.study,
                "rater": entry.rater,
                "scope": scope.scope,
                "repeats_assigned": entry.assigned,
                "repeats_counted": entry.counted,
                "exact_agreement": _num(scope.exact),
                "exact_all_cells": _num(entry.agreement.exact_all_cells),
                "icc2_1": _num(scope.icc2_1),
                "icc_note": scope.icc_note,
                "kappa_quadratic": _num(scope.kappa),
                "kappa_note": scope.kappa_note,
                "mean_abs_diff": _num(scope.mean_abs_diff),
            })
    return rows


def _pairs(numbers: tuple[int, ...]) -> str:
    return " ".join(str(n) for n in numbers)


def monitoring_rows(db: Database, actor: Actor, study_name: str, *,
                    straight_run: int = mon.STRAIGHT_RUN,
                    outlier_z: float = mon.OUTLIER_Z) -> list[dict[str, Any]]:
    """Rater monitoring as export rows: one per rater.

    Columns: ``study, rater, assigned, done, timed_pairs, untimed_pairs, median_seconds,
    q1_seconds, q3_seconds, iqr_seconds, slow_limit_seconds, slow_pairs, fast_pairs,
    time_seconds, done_per_hour, drift_n, drift_first, drift_last, drift, drift_note,
    zero_run, zero_run_pairs, straight_lining, shared_pairs, spearman, abs_diff,
    agreement_note, z_time_per_pair, z_agreement, z_abs_diff, z_drift, below_floor_pairs,
    max_pace_per_hour, expert_items, expert_within, expert_abs_diff, flags``. Pair lists are
    1-based numbers separated by spaces; ``flags`` are joined by ``"; "``; an undefined value
    is ``None``. A ``z_*`` column holds the robust z only where it flagged the rater.

    Args:
        db: The study database.
        actor: An admin.
        study_name: The study.
        straight_run: As in :func:`monitoring`.
        outlier_z: As in :func:`monitoring`.
    """
    result = monitoring(db, actor, study_name, straight_run=straight_run,
                        outlier_z=outlier_z)
    rows: list[dict[str, Any]] = []
    for r in result.raters:
        z = {o.measure: o.z for o in r.outliers}
        rows.append({
            "study": result.study, "rater": r.rater, "assigned": r.assigned, "done": r.done,
            "timed_pairs": r.timed_pairs, "untimed_pairs": r.untimed_pairs,
            "median_seconds": _num(r.median_seconds), "q1_seconds": _num(r.q1_seconds),
            "q3_seconds": _num(r.q3_seconds), "iqr_seconds": _num(r.iqr_seconds),
            "slow_limit_seconds": _num(r.slow_limit_seconds),
            "slow_pairs": _pairs(r.slow_pairs), "fast_pairs": _pairs(r.fast_pairs),
            "time_seconds": r.time_seconds, "done_per_hour": _num(r.done_per_hour),
            "drift_n": r.drift_n, "drift_first": _num(r.drift_first),
            "drift_last": _num(r.drift_last), "drift": _num(r.drift),
            "drift_note": r.drift_note, "zero_run": r.zero_run,
            "zero_run_pairs": _pairs(r.zero_run_pairs), "straight_lining": r.straight_lining,
            "shared_pairs": r.shared_pairs, "spearman": _num(r.spearman),
            "abs_diff": _num(r.abs_diff), "agreement_note": r.agreement_note,
            "z_time_per_pair": z.get("time_per_pair"), "z_agreement": z.get("agreement"),
            "z_abs_diff": z.get("abs_diff"), "z_drift": z.get("drift"),
            "below_floor_pairs": _pairs(r.below_floor_pairs),
            "max_pace_per_hour": _num(r.max_pace_per_hour),
            "expert_items": r.expert_items, "expert_within": r.expert_within,
            "expert_abs_diff": _num(r.expert_abs_diff),
            "flags": "; ".join(r.flags),
        })
    return rows


def judgement_monitoring(db: Database, actor: Actor, study_name: str, *,
                         straight_run: int = jm.STRAIGHT_RUN,
                         outlier_z: float = mon.OUTLIER_Z) -> tuple[jm.JudgeMonitoring, ...]:
    """Per-rater monitoring of a pairwise study's judgements (admin only; empty when the
    study has no judgements).

    Args:
        db: The study database.
        actor: An admin.
        study_name: The study.
        straight_run: Identical answers in a row flagged as straight-lining (>= 2).
        outlier_z: ``|robust z|`` of the agreement flagged when low (> 0).

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such study.
        InvalidInput: a bad threshold.
    """
    return _judgement_monitoring(db, actor, study_name, straight_run, outlier_z)[1]


def _judgement_monitoring(db: Database, actor: Actor, study_name: str, straight_run: int,
                          outlier_z: float) -> tuple[str, tuple[jm.JudgeMonitoring, ...]]:
    """(the study's stored name, its judgement monitoring): see :func:`judgement_monitoring`."""
    require_admin(actor)
    _check_thresholds(straight_run, outlier_z)
    with db.read() as s:
        study = _study(s, study_name)
        name = study.name
        rows = s.execute(
            select(User.username, Comparison.position, Judgement.completed_at,
                   Judgement.preference, Judgement.rating_a, Judgement.rating_b,
                   Judgement.active_seconds, Comparison.meta)
            .join(Judgement, Judgement.rater_id == User.id)
            .join(Comparison, Comparison.id == Judgement.comparison_id)
            .where(Comparison.study_id == study.id)
        ).all()
    work: dict[str, dict[str, Any]] = {}
    for username, position, completed_at, preference, rating_a, rating_b, seconds, meta in rows:
        entry = work.setdefault(username, {"done": [], "assigned": 0})
        entry["assigned"] += 1
        # Marking done needs the preference and both ratings: a done one has all three.
        if completed_at is not None and preference is not None:
            entry["done"].append(jm.Judged(
                comparison=int(position) + 1, completed_at=clock.as_utc(completed_at),
                preference=str(preference), rating_a=int(rating_a or 0),
                rating_b=int(rating_b or 0), seconds=float(seconds or 0.0),
                # An imported RadPref comparison keeps its file's sides (A = C1).
                random_side=RADPREF_DETAILS not in (meta or {})))
    inputs = [jm.JudgeInput(rater=u, done=e["done"], assigned=e["assigned"])
              for u, e in work.items()]
    return name, tuple(jm.monitor_judges(inputs, straight_run=straight_run,
                                         outlier_z=outlier_z))


def judgement_monitoring_rows(db: Database, actor: Actor, study_name: str, *,
                              straight_run: int = jm.STRAIGHT_RUN,
                              outlier_z: float = mon.OUTLIER_Z) -> list[dict[str, Any]]:
    """Monitoring of a pairwise study's raters as export rows: one per rater.

    Columns: ``study, rater, assigned, done, n_a, n_b, n_tie, side_decided, share_a,
    side_p, same_run,
    same_run_comparisons, straight_lining, shared, agreement, agreement_note, agreement_z,
    timed, median_seconds, flags`` (comparison numbers 1-based and space separated; flags
    joined by ``"; "``; an undefined value is ``None``).
    """
    name, raters = _judgement_monitoring(db, actor, study_name, straight_run, outlier_z)
    return [{
        "study": name, "rater": r.rater, "assigned": r.assigned, "done": r.done,
        "n_a": r.n_a, "n_b": r.n_b, "n_tie": r.n_tie, "side_decided": r.side_decided,
        "share_a": _num(r.share_a),
        "side_p": _num(r.side_p), "same_run": r.same_run,
        "same_run_comparisons": _pairs(r.same_run_comparisons),
        "straight_lining": r.straight_lining, "shared": r.shared,
        "agreement": _num(r.agreement), "agreement_note": r.agreement_note,
        "agreement_z": _num(r.agreement_z), "timed": r.timed,
        "median_seconds": _num(r.median_seconds), "flags": "; ".join(r.flags),
    } for r in raters]


@dataclass(frozen=True)
class RaterClipping:
    """How much of one rater's claimed time on task in a study was not credited.

    Attributes:
        rater: Username.
        claimed_seconds: Sum over the rater's pairs and comparisons of the union of their
            spans as the browser sent them.
        credited_seconds: Sum of their ``active_seconds`` (the time on task every page shows).
        clipped_seconds: ``claimed_seconds - credited_seconds``.
        pairs: Study pair numbers (1-based) with at least :data:`CLIPPED_NOTICE_SECONDS`
            clipped.
        comparisons: Comparison numbers (1-based, pairwise mode) likewise.
        other_items: Training items and hidden repeats likewise (not numbered for the lead).
    """

    rater: str
    claimed_seconds: float
    credited_seconds: float
    clipped_seconds: float
    pairs: tuple[int, ...]
    comparisons: tuple[int, ...]
    other_items: int

    @property
    def noticeable(self) -> bool:
        """Whether at least :data:`CLIPPED_NOTICE_SECONDS` were clipped."""
        return self.clipped_seconds >= CLIPPED_NOTICE_SECONDS


def time_clipping(db: Database, actor: Actor, study_name: str) -> tuple[RaterClipping, ...]:
    """Time on task claimed by each rater's browser against what was credited (admin only).

    Args:
        db: The study database.
        actor: An admin.
        study_name: The study.

    Returns:
        One entry per rater with any claimed time in the study (assignments or judgements),
        by username.

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such study.
    """
    require_admin(actor)
    with db.read() as s:
        study = _study(s, study_name)
        pairs = s.execute(
            select(User.username, Pair.kind, Pair.position, Assignment.claimed_seconds,
                   Assignment.active_seconds)
            .join(Assignment, Assignment.rater_id == User.id)
            .join(Pair, Pair.id == Assignment.pair_id)
            .where(Assignment.study_id == study.id)
            .order_by(User.username, Pair.position)).all()
        comparisons = s.execute(
            select(User.username, Comparison.position, Judgement.claimed_seconds,
                   Judgement.active_seconds)
            .join(Judgement, Judgement.rater_id == User.id)
            .join(Comparison, Comparison.id == Judgement.comparison_id)
            .where(Comparison.study_id == study.id)
            .order_by(User.username, Comparison.position)).all()
    work: dict[str, dict[str, Any]] = defaultdict(lambda: {
        "claimed": 0.0, "credited": 0.0, "pairs": [], "comparisons": [], "other": 0})
    items = [(u, kind, pos, c, a, "pairs") for u, kind, pos, c, a in pairs]
    items += [(u, PAIR_STUDY, pos, c, a, "comparisons") for u, pos, c, a in comparisons]
    for username, kind, position, claimed, credited, where in items:
        if not claimed and not credited:
            continue
        entry = work[username]
        entry["claimed"] += float(claimed or 0.0)
        entry["credited"] += float(credited or 0.0)
        if clipped_seconds(claimed, credited) >= CLIPPED_NOTICE_SECONDS:
            if kind == PAIR_STUDY:
                entry[where].append(int(position) + 1)
            else:
                entry["other"] += 1
    return tuple(RaterClipping(
        rater=u, claimed_seconds=e["claimed"], credited_seconds=e["credited"],
        clipped_seconds=clipped_seconds(e["claimed"], e["credited"]),
        pairs=tuple(e["pairs"]), comparisons=tuple(e["comparisons"]), other_items=e["other"])
        for u, e in sorted(work.items()))


__all__ = [
    "CLIPPED_NOTICE_SECONDS",
    "POOLED",
    "RaterClipping",
    "RaterRepeats",
    "StudyIntraRater",
    "StudyMonitoring",
    "intra_rater",
    "intra_rater_rows",
    "judgement_monitoring",
    "judgement_monitoring_rows",
    "monitoring",
    "monitoring_rows",
    "time_clipping",
]
