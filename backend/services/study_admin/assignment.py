"""Give a study's pairs to raters: k raters per pair, balanced, seeded, idempotent.

Algorithm (deterministic for a given study, rater set, k and seed):

1. Pairs are visited in a seeded shuffle. Each pair that has fewer than ``k`` raters gets the
   missing ones from the listed raters not yet on it, least-loaded first (load = pairs the rater
   holds in this study), ties broken by a seeded per-pair draw. Loads therefore end within one
   pair of each other whenever the rater set allows it.
2. Each rater's new pairs are shuffled with the rater's own seed and appended after the pairs
   they already hold (``order_index``), so re-running never reorders a queue in progress.

Existing assignments are never removed (ratings may hang on them) and their relative order is
never changed; only the hidden repeats below are slipped in between, renumbering indexes.
Re-running with the same arguments creates nothing; new pairs in the study, a larger ``k``
or new raters (with a larger ``k``) extend the assignment.

Training (calibration) items (``Pair.kind == "training"``, marked by
:mod:`backend.services.quality.calibration`) go to *every* rater of the study, before any other
pair:
they hold the negative order indexes ``-T..-1`` in a seeded per-rater order
(:func:`sync_training`, run by every assignment and every marking), so items marked after
raters started are still done first. They count in no rater's load and in no ``k``.

Intra-rater repeats (study setting ``repeat_share`` p > 0, applied by :func:`assign_raters`):
each rater should hold ``floor(p * n + 0.5)`` repeats, n being their study pairs. Missing
ones are added for a seeded choice of the rater's study pairs not yet repeated for them. A
source pair has one hidden ``repeat`` pair (its own opaque id and position, the same texts,
case and input hash), shared by the raters who hold the source and drew it. Placement rule:
with ``gap = max(2, n // 4)``, the repeat is inserted at a seeded place of the rater's queue
that is at least ``gap + 1`` places after its source (so at least ``gap`` pairs lie between
them: never adjacent), in the second half of the queue, and after the rater's last done pair
(nothing is slipped into what they have done). Only sources early enough for such a place are
drawn. Inserting renumbers the rater's non-training order indexes but never changes the
relative order of what they already held. Re-running adds nothing once each rater holds their
number of repeats. Nothing in the rater's views marks a repeat.

Order strategy (``Study.provenance["assignment"]``, set by :func:`set_strategy`): ``random``
(the default) keeps the seeded order above for good. ``adaptive`` reorders a rater's *open*
pairs whenever that rater completes a pair (:func:`reorder_after_completion`, called by
:func:`backend.services.annotation.rating.complete_pair`), by the priority of
:mod:`backend.analysis.adaptive` given every completed rating and the metric scores. Only the
``order_index`` values already held by the rater's open study pairs are permuted among them,
so who rates which pair (k raters per pair) never changes, completed pairs keep their places,
and the next open pair after the one just completed is the highest-priority one. Training
items, hidden repeats and the source pair of each of the rater's repeats keep their places
(a moved source could land next to, or after, its repeat). Raters see only
a different order: nothing about scores or other raters reaches them.
"""

from __future__ import annotations

import hashlib
import logging
import random
import secrets
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from radconcord.backend.analysis import adaptive
from radconcord.backend.analysis.data import AnalysisInputError
from radconcord.backend.errors import InvalidInput, require_admin
from radconcord.backend.services.evaluation.study_data import study_imports
from radconcord.backend.services.repo import get_study
from radconcord.backend.services.study_admin.study_settings import effective
from radconcord.backend.types import Actor
from radconcord.db.models import (
    PAIR_REPEAT,
    PAIR_STUDY,
    PAIR_TRAINING,
    Assignment,
    MetricScore,
    Pair,
    Rating,
    Study,
    User,
)
from radconcord.db.session import Database

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AssignmentSummary:
    """What ``assign_raters`` did."""

    study_name: str
    raters_per_pair: int
    seed: int
    n_pairs: int
    created: int
    # username -> number of study pairs the rater holds in the study after the run.
    per_rater: dict[str, int] = field(default_factory=dict)
    # Training-item and hidden-repeat assignments created by this run.
    training_created: int = 0
    repeats_created: int = 0


def seeded_rng(seed: int, *parts: object) -> random.Random:
    """A generator seeded from the study seed and a label (stable across Python versions)."""
    text = "\x1f".join([str(seed), *(str(p) for p in parts)])
    return random.Random(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big"))


def active_raters(s: Session, names: Sequence[str]) -> dict[str, User]:
    """The accounts of ``names`` (username -> User), all existing active raters, or
    :class:`InvalidInput` naming those that are not."""
    by_name = {u.username: u for u in s.scalars(select(User).where(User.username.in_(names)))}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise InvalidInput(f"raters: no account named {', '.join(map(repr, missing))}")
    bad = [n for n in names if by_name[n].role != "rater" or not by_name[n].active]
    if bad:
        raise InvalidInput(f"raters: not an active rater account: {', '.join(bad)}")
    return by_name


def balanced_new_items(position_of: Mapping[int, int], on: dict[int, set[int]],
                       load: dict[int, int], rater_ids: Sequence[int], k: int, seed: int, *,
                       labels: tuple[str, str] = ("pairs", "pair")) -> dict[int, list[int]]:
    """Step 1 of the module docstring's algorithm, for any items (pairs, comparisons).

    Args:
        position_of: item id -> its position (seeds come from positions, never ids, so the
            same content, raters and seed give the same result in any database).
        on: item id -> raters already on it (updated in place).
        load: rater id -> items held (updated in place).
        rater_ids: the raters to draw from.
        k: raters wanted per item.
        seed: the assignment seed.
        labels: the seed labels of the visit order and of each item's tie-break draw.

    Returns:
        rater id -> the items newly given to them, in visit order.
    """
    visit = list(position_of)
    seeded_rng(seed, labels[0]).shuffle(visit)
    new_for: dict[int, list[int]] = defaultdict(list)
    for item in visit:
        need = k - len(on[item])
        if need <= 0:
            continue
        free = [r for r in rater_ids if r not in on[item]]
        tiebreak = seeded_rng(seed, labels[1], position_of[item])
        draw = {r: tiebreak.random() for r in free}
        free.sort(key=lambda r: (load[r], draw[r]))
        # k <= len(raters), so there are always enough free raters.
        for r in free[:need]:
            on[item].add(r)
            load[r] += 1
            new_for[r].append(item)
    return new_for


def seeded_batch(items: Sequence[int], position_of: Mapping[int, int], seed: int,
                 username: str, start: int) -> list[int]:
    """Step 2: a rater's new items in their own seeded order, appended at ``start``.

    The offset is part of the label so that each extension gets its own shuffle.
    """
    batch = sorted(items, key=position_of.__getitem__)
    seeded_rng(seed, "order", username, start).shuffle(batch)
    return batch


def assign_raters(
    db: Database,
    actor: Actor,
    *,
    study_name: str,
    rater_usernames: list[str],
    raters_per_pair: int,
    seed: int,
) -> AssignmentSummary:
    """Assign ``raters_per_pair`` of ``rater_usernames`` to every pair of a study (admin).

    Args:
        db: the study database.
        actor: an admin.
        study_name: the study.
        rater_usernames: accounts with the ``rater`` role (order does not matter).
        raters_per_pair: k, the number of raters each pair should have (1..len(raters)).
        seed: makes the assignment and every rater's order reproducible; recorded on the study.

    Returns:
        Counts of what exists and what was created.

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such study.
        InvalidInput: unknown/inactive/non-rater usernames, or k out of range.
    """
    require_admin(actor)
    names = sorted({u.strip() for u in rater_usernames if u and u.strip()})
    if not names:
        raise InvalidInput("raters: give at least one rater username")
    if not isinstance(raters_per_pair, int) or raters_per_pair < 1:
        raise InvalidInput("raters_per_pair: must be a positive integer")
    if raters_per_pair > len(names):
        raise InvalidInput(
            f"raters_per_pair: {raters_per_pair} raters per pair needs at least that many "
            f"raters, got {len(names)}"
        )
    with db.begin() as s:
        study = get_study(s, study_name, for_update=True)
        if study.status == "archived":
            # Raters cannot see an archived study: assignments would be silent dead weight.
            raise InvalidInput(f"study '{study_name}' is archived: unarchive it first")
        by_name = active_raters(s, names)

        # Seeds are derived from positions and usernames, never database ids, so the same
        # study content, raters and seed give the same assignment in any database.
        position_of = dict(
            s.execute(
                select(Pair.id, Pair.position)
                .where(Pair.study_id == study.id, Pair.kind == PAIR_STUDY)
                .order_by(Pair.position)
            ).all()
        )
        pair_ids = list(position_of)
        # Only study pairs carry k raters and make a rater's load.
        existing = s.execute(
            select(Assignment.pair_id, Assignment.rater_id)
            .join(Pair, Pair.id == Assignment.pair_id)
            .where(Assignment.study_id == study.id, Pair.kind == PAIR_STUDY)
        ).all()
        on_pair: dict[int, set[int]] = defaultdict(set)
        load: dict[int, int] = defaultdict(int)
        for pair_id, rater_id in existing:
            on_pair[pair_id].add(rater_id)
            load[rater_id] += 1

        rater_ids = [by_name[n].id for n in names]
        new_for = balanced_new_items(position_of, on_pair, load, rater_ids, raters_per_pair,
                                     seed)

        created = 0
        next_index = dict(
            s.execute(
                select(Assignment.rater_id, func.max(Assignment.order_index))
                .where(Assignment.study_id == study.id)
                .group_by(Assignment.rater_id)
            ).all()
        )
        for username in names:
            rater_id = by_name[username].id
            start = next_index.get(rater_id, -1) + 1
            batch = seeded_batch(new_for.get(rater_id, []), position_of, seed, username, start)
            for offset, pair_id in enumerate(batch):
                s.add(
                    Assignment(
                        study_id=study.id,
                        rater_id=rater_id,
                        pair_id=pair_id,
                        order_index=start + offset,
                    )
                )
            created += len(batch)
        s.flush()
        training_created = sync_training(s, study, seed=seed)
        repeats_created = add_repeats(s, study, seed=seed)
        total_created = created + training_created + repeats_created

        if total_created:
            # Recorded only when something was assigned, so an idempotent re-run (even with
            # another seed) leaves the study exactly as it was.
            study.raters_per_pair = raters_per_pair
            study.seed = seed
            runs = list((study.provenance or {}).get("assignment_runs", []))
            run = {"raters": names, "raters_per_pair": raters_per_pair, "seed": seed,
                   "created": created}
            # Only when there were any: a study without them records what it always did.
            if training_created:
                run["training_created"] = training_created
            if repeats_created:
                run["repeats_created"] = repeats_created
            runs.append(run)
            study.provenance = {**(study.provenance or {}), "assignment_runs": runs}
            s.flush()
        per_rater_rows = s.execute(
            select(User.username, func.count(Assignment.id))
            .join(Assignment, Assignment.rater_id == User.id)
            .join(Pair, Pair.id == Assignment.pair_id)
            .where(Assignment.study_id == study.id, Pair.kind == PAIR_STUDY)
            .group_by(User.username)
        ).all()
        summary = AssignmentSummary(
            study_name=study.name,
            raters_per_pair=raters_per_pair,
            seed=seed,
            n_pairs=len(pair_ids),
            created=created,
            per_rater={u: int(n) for u, n in sorted(per_rater_rows)},
            training_created=training_created,
            repeats_created=repeats_created,
        )
    log.info("assigned %d pairs in %s (k=%d, seed=%d)", created, study_name, raters_per_pair, seed)
    return summary


# -- training items and repeats ---------------------------------------------------------------


def _study_raters(s: Session, study_id: int) -> list[tuple[int, str]]:
    """(user id, username) of every rater holding a study pair of the study, by username."""
    return sorted(
        s.execute(
            select(User.id, User.username)
            .join(Assignment, Assignment.rater_id == User.id)
            .join(Pair, Pair.id == Assignment.pair_id)
            .where(Assignment.study_id == study_id, Pair.kind == PAIR_STUDY)
            .distinct()
        ).all(),
        key=lambda r: r[1],
    )


def sync_training(s: Session, study: Study, *, seed: int | None = None) -> int:
    """Give every rater of the study every training item, first in their order.

    Runs in the caller's write transaction. Each rater's training assignments take the
    order indexes ``-T..-1`` in a seeded order of the training pairs (by position); the
    rest of their queue is untouched. Returns the number of assignments created.
    """
    seed = int(study.seed or 0) if seed is None else int(seed)
    training = list(s.execute(
        select(Pair.id, Pair.position)
        .where(Pair.study_id == study.id, Pair.kind == PAIR_TRAINING)
        .order_by(Pair.position)
    ).all())
    if not training:
        return 0
    created = 0
    for rater_id, username in _study_raters(s, study.id):
        held = {
            a.pair_id: a for a in s.scalars(
                select(Assignment).join(Pair, Pair.id == Assignment.pair_id)
                .where(Assignment.rater_id == rater_id, Assignment.study_id == study.id,
                       Pair.kind == PAIR_TRAINING)
            )
        }
        order = [pid for pid, _ in training]
        seeded_rng(seed, "training", username).shuffle(order)
        for offset, pair_id in enumerate(order):
            index = offset - len(order)
            a = held.get(pair_id)
            if a is None:
                s.add(Assignment(study_id=study.id, rater_id=rater_id, pair_id=pair_id,
                                 order_index=index))
                created += 1
            elif a.order_index != index:
                a.order_index = index
    s.flush()
    return created


def repeat_gap(n_study: int) -> int:
    """The least number of pairs between a source and its repeat in a rater's queue."""
    return max(2, n_study // 4)


def _repeat_pair(s: Session, source: Pair) -> Pair:
    """The study's hidden repeat of ``source``, created the first time it is needed."""
    pair = s.scalar(select(Pair).where(Pair.repeat_of_id == source.id,
                                       Pair.kind == PAIR_REPEAT))
    if pair is not None:
        return pair
    last = s.scalar(select(func.max(Pair.position)).where(Pair.study_id == source.study_id))
    pair = Pair(
        study_id=source.study_id, case_id=source.case_id, reference_id=source.reference_id,
        candidate_id=source.candidate_id, source=source.source,
        opaque_id=secrets.token_hex(8), position=int(last if last is not None else -1) + 1,
        input_hash=source.input_hash, kind=PAIR_REPEAT, repeat_of_id=source.id,
    )
    s.add(pair)
    s.flush()
    return pair


def add_repeats(s: Session, study: Study, *, seed: int | None = None) -> int:
    """Add the hidden repeats each rater is missing (see the module docstring).

    Runs in the caller's write transaction; returns the number of assignments created.
    """
    share = float(effective(study.settings)["repeat_share"])
    if share <= 0:
        return 0
    seed = int(study.seed or 0) if seed is None else int(seed)
    created = 0
    for rater_id, username in _study_raters(s, study.id):
        rows = list(s.execute(
            select(Assignment, Pair)
            .join(Pair, Pair.id == Assignment.pair_id)
            .where(Assignment.rater_id == rater_id, Assignment.study_id == study.id,
                   Pair.kind != PAIR_TRAINING)
            .order_by(Assignment.order_index, Assignment.id)
        ).all())
        n_study = sum(1 for _, p in rows if p.kind == PAIR_STUDY)
        have = sum(1 for _, p in rows if p.kind == PAIR_REPEAT)
        need = int(share * n_study + 0.5) - have
        if need <= 0:
            continue
        gap = repeat_gap(n_study)
        repeated = {p.repeat_of_id for _, p in rows if p.kind == PAIR_REPEAT}
        queue = [a for a, _ in rows]
        # Room is judged against the study pairs alone: repeats already in the queue make it
        # longer, and counting them would let a second run place repeats the first could
        # not (running again must add nothing).
        length = n_study
        eligible = sorted(
            (p for i, (_, p) in enumerate(rows)
             if p.kind == PAIR_STUDY and p.id not in repeated and i + gap + 1 <= length),
            key=lambda p: p.position,
        )
        rng = seeded_rng(seed, "repeats", username, have)
        chosen = rng.sample(eligible, min(need, len(eligible)))
        for source in sorted(chosen, key=lambda p: p.position):
            src_index = next(i for i, a in enumerate(queue) if a.pair_id == source.id)
            last_done = max((i for i, a in enumerate(queue) if a.completed_at is not None),
                            default=-1)
            low = max(src_index + gap + 1, (len(queue) + 1) // 2, last_done + 1)
            if low > len(queue):
                continue  # earlier insertions left no room: fewer repeats, never a close one
            slot = rng.randint(low, len(queue))
            repeat = _repeat_pair(s, source)
            a = Assignment(study_id=study.id, rater_id=rater_id, pair_id=repeat.id,
                           order_index=0)
            s.add(a)
            queue.insert(slot, a)
            created += 1
        for index, a in enumerate(queue):
            if a.order_index != index:
                a.order_index = index
        s.flush()
    return created


def add_missing_repeats(db: Database, actor: Actor, *, study_name: str) -> int:
    """Give the study's raters the hidden repeats its ``repeat_share`` asks for now (admin).

    For a share set (or raised) after raters were assigned: the same seeded placement as
    :func:`assign_raters` (see the module docstring), so assigning again later adds nothing
    more. A share of 0, or raters who already hold their number, adds nothing.

    Returns:
        The number of repeat assignments created.

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such study.
    """
    require_admin(actor)
    with db.begin() as s:
        study = get_study(s, study_name, for_update=True)
        if study.status in ("archived", "closed"):
            # Raters cannot see an archived study, nor rate a closed one: repeats there
            # would be items nobody can ever do.
            return 0
        created = add_repeats(s, study)
    if created:
        log.info("study %s: %d hidden repeat(s) added for repeat_share", study_name, created)
    return created


# -- order strategy ----------------------------------------------------------------------------

#: Where the strategy lives in ``Study.provenance`` (exported with the study's manifest).
STRATEGY_KEY = "assignment"


@dataclass(frozen=True)
class StrategySetting:
    """A study's order strategy: ``random`` (seeded, fixed) or ``adaptive``."""

    study_name: str
    strategy: str
    question: str | None
    seed: int
    # Open pairs whose place changed when the strategy was set (adaptive only).
    reordered: int = 0

    def as_dict(self) -> dict[str, object]:
        """The record stored in ``Study.provenance["assignment"]``."""
        return {"strategy": self.strategy, "question": self.question, "seed": self.seed}


def study_strategy(study: Study) -> StrategySetting:
    """The strategy recorded on a study (``random`` with the study seed when none is)."""
    rec = (study.provenance or {}).get(STRATEGY_KEY)
    if not isinstance(rec, dict) or rec.get("strategy") not in adaptive.STRATEGIES:
        return StrategySetting(study.name, adaptive.DEFAULT_STRATEGY, None, int(study.seed or 0))
    seed = rec.get("seed")
    return StrategySetting(
        study.name, str(rec["strategy"]), rec.get("question"),
        int(study.seed or 0) if seed is None else int(seed),
    )


def get_strategy(db: Database, actor: Actor, *, study_name: str) -> StrategySetting:
    """The order strategy of a study (admin).

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such study.
    """
    require_admin(actor)
    with db.read() as s:
        return study_strategy(get_study(s, study_name))


def scored_keys(db: Database, actor: Actor, *, study_name: str) -> list[str]:
    """Metric keys with scores on the study's pairs (the choices of a ``tau_diff`` question).

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such study.
    """
    require_admin(actor)
    with db.read() as s:
        return sorted(_study_keys(s, get_study(s, study_name).id))


def _study_keys(s: Session, study_id: int) -> set[str]:
    imports = study_imports(s, study_id)
    # Values another study imported for pairs of the same content are not this study's.
    return {key for key, family, sig in s.execute(
        select(MetricScore.key, MetricScore.family, MetricScore.signature_hash)
        .join(Pair, Pair.input_hash == MetricScore.input_hash)
        .where(Pair.study_id == study_id).distinct()
    ) if imports.counts(key, family, sig)}


def set_strategy(
    db: Database,
    actor: Actor,
    *,
    study_name: str,
    strategy: str,
    question: str | None = "all",
    seed: int | None = None,
) -> StrategySetting:
    """Choose how each rater's remaining pairs are ordered (admin); recorded on the study.

    Switching to ``adaptive`` reorders every rater's open pairs at once, except each
    rater's first open pair (the one they resume on, possibly on screen now). Switching back
    to ``random`` stops reordering; orders already changed stay as they are.

    Args:
        db: the study database.
        actor: an admin.
        study_name: the study.
        strategy: ``"random"`` or ``"adaptive"``.
        question: ``"all"`` or ``"tau_diff:A,B"`` (adaptive only; metric keys scored on the
            study's pairs).
        seed: seeds the adaptive tie-breaks; default the study's assignment seed.

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such study.
        InvalidInput: an unknown strategy, a malformed question or an unscored metric key.
    """
    require_admin(actor)
    if strategy not in adaptive.STRATEGIES:
        raise InvalidInput(
            f"strategy: must be one of {', '.join(adaptive.STRATEGIES)}, got {strategy!r}"
        )
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
        raise InvalidInput(f"seed: must be a non-negative integer, got {seed!r}")
    q_text: str | None = None
    if strategy == "adaptive":
        try:
            q_text = adaptive.parse_question(question).text
        except ValueError as exc:
            raise InvalidInput(str(exc)) from None
    with db.begin() as s:
        study = get_study(s, study_name, for_update=True)
        if q_text is not None and q_text != "all":
            have = _study_keys(s, study.id)
            missing = [k for k in adaptive.parse_question(q_text).metrics if k not in have]
            if missing:
                raise InvalidInput(
                    f"question: no scores for {', '.join(missing)} on study {study.name!r} "
                    f"(score it first: python -m backend score --study {study.name} "
                    f"--metrics {','.join(missing)})"
                )
        setting = StrategySetting(study.name, strategy, q_text,
                                  int(study.seed or 0) if seed is None else int(seed))
        study.provenance = {**(study.provenance or {}), STRATEGY_KEY: setting.as_dict()}
        s.flush()
        moved = 0
        if strategy == "adaptive":
            raters = s.execute(
                select(User.id, User.username).join(Assignment, Assignment.rater_id == User.id)
                .where(Assignment.study_id == study.id).distinct()
            ).all()
            for rater_id, username in sorted(raters, key=lambda r: r[1]):
                moved += _reorder(s, study, rater_id, username, pinned_pair_id=None)
    log.info("study %s: order strategy %s (question %s, seed %d)", study_name, strategy,
             q_text, setting.seed)
    return StrategySetting(setting.study_name, setting.strategy, setting.question,
                           setting.seed, moved)


def _metric_rows(s: Session, study: Study, pair_index: dict[str, list[int]],
                 keys: list[str] | None, n: int) -> np.ndarray:
    """``(M, n)`` oriented metric values, per key the signature covering most pairs."""
    stmt = (
        select(MetricScore.key, MetricScore.family, MetricScore.signature_hash,
               MetricScore.input_hash, MetricScore.value, MetricScore.created_at)
        .join(Pair, Pair.input_hash == MetricScore.input_hash)
        .where(Pair.study_id == study.id).distinct()
    )
    if keys is not None:
        stmt = stmt.where(MetricScore.key.in_(keys))
    imports = study_imports(s, study.id)
    groups: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for row in s.execute(stmt):
        if imports.counts(row.key, row.family, row.signature_hash):
            groups[row.key][row.signature_hash].append(row)
    wanted = keys if keys is not None else sorted(groups)
    rows = []
    for key in wanted:
        sigs = groups.get(key)
        if not sigs:
            rows.append(np.full(n, np.nan))
            continue
        # The same choice as the analysis (backend.analysis.data.load_metric_columns).
        imported = imports.chosen(key, sigs)
        best = imported.signature_hash if imported is not None else max(
            sigs, key=lambda h, sigs=sigs: (
                sum(len(pair_index.get(r.input_hash, ())) for r in sigs[h]),
                max(r.created_at.timestamp() if r.created_at else 0.0 for r in sigs[h]), h))
        values = np.full(n, np.nan)
        for r in sigs[best]:
            for i in pair_index.get(r.input_hash, ()):
                values[i] = np.nan if r.value is None else float(r.value)
        try:
            higher = imports.direction(key, sigs[best][0].family)
        except AnalysisInputError:
            # An unknown key cannot be oriented; it is left out of the order, not guessed.
            log.warning("adaptive order: metric key %r skipped (direction unknown)", key)
            continue
        rows.append(values if higher else -values)
    return np.array(rows, dtype=np.float64).reshape(len(rows), n)


def _priorities(s: Session, study: Study, question: adaptive.Question) -> tuple[dict, np.ndarray]:
    """(pair id -> index, priority per pair) from the completed ratings and the scores."""
    pairs = s.execute(
        select(Pair.id, Pair.input_hash)
        .where(Pair.study_id == study.id, Pair.kind == PAIR_STUDY).order_by(Pair.position)
    ).all()
    index = {pid: i for i, (pid, _) in enumerate(pairs)}
    pair_index: dict[str, list[int]] = defaultdict(list)
    for i, (_, h) in enumerate(pairs):
        pair_index[h].append(i)
    n = len(pairs)
    # Counted ratings as in the analysis: completed assignments only (a pair in progress is
    # no rating yet); total errors over every cell.
    done = s.execute(
        select(Assignment.rater_id, Assignment.pair_id, func.coalesce(func.sum(Rating.count), 0))
        .join(Pair, Pair.id == Assignment.pair_id)
        .outerjoin(Rating, (Rating.rater_id == Assignment.rater_id)
                   & (Rating.pair_id == Assignment.pair_id))
        .where(Assignment.study_id == study.id, Assignment.completed_at.is_not(None),
               Pair.kind == PAIR_STUDY)
        .group_by(Assignment.rater_id, Assignment.pair_id)
    ).all()
    raters = sorted({r for r, _, _ in done})
    row_of = {r: k for k, r in enumerate(raters)}
    ratings = np.full((max(1, len(raters)), n), np.nan)
    for rater_id, pair_id, total in done:
        ratings[row_of[rater_id], index[pair_id]] = float(total)
    keys = None if question.kind == "all" else list(question.metrics)
    oriented = _metric_rows(s, study, pair_index, keys, n)
    if oriented.shape[0] == 0 or (question.kind == "tau_diff" and oriented.shape[0] != 2):
        # No usable scores: coverage first, then the seeded order (the rule with W = 0).
        weights = np.zeros((1, n, n))
    else:
        weights = adaptive.question_weights(oriented, question.kind)
    return index, adaptive.adaptive_priority(None, ratings, weights=weights)


def _reorder(s: Session, study: Study, rater_id: int, username: str, *,
             pinned_pair_id: int | None) -> int:
    """Permute the rater's open pairs' places by priority; returns how many moved.

    The places are visited as the rater's "next open pair" does (after the pinned pair, then
    wrapping round), so the best pair becomes the next one the rater gets.
    """
    setting = study_strategy(study)
    rows = s.execute(
        select(Assignment, Pair.position, Pair.kind, Pair.repeat_of_id)
        .join(Pair, Pair.id == Assignment.pair_id)
        .where(Assignment.rater_id == rater_id, Assignment.study_id == study.id)
        .order_by(Assignment.order_index, Assignment.id)
    ).all()
    # Training items stay first and hidden repeats stay where their placement rule put them;
    # the source of a repeat stays too, since moving it towards (or past) its repeat would
    # make the repeat recognisable. Only the other study pairs trade places.
    sources = {of for _, _, kind, of in rows if kind == PAIR_REPEAT}
    open_rows = [(a, pos) for a, pos, kind, _ in rows if a.completed_at is None
                 and kind == PAIR_STUDY]
    if pinned_pair_id is None and open_rows:
        pinned_pair_id = open_rows[0][0].pair_id  # the pair the rater resumes on
    pin_index = next((a.order_index for a, _, _, _ in rows if a.pair_id == pinned_pair_id),
                     -1)
    movable = [(a, pos) for a, pos in open_rows
               if a.pair_id != pinned_pair_id and a.pair_id not in sources]
    if len(movable) < 2:
        return 0
    slots = sorted(a.order_index for a, _ in movable)
    slots = [i for i in slots if i > pin_index] + [i for i in slots if i <= pin_index]
    question = adaptive.parse_question(setting.question or "all")
    index, prio = _priorities(s, study, question)
    draws = adaptive.tiebreak_draws(setting.seed, username, [pos for _, pos in movable])
    ranked = adaptive.order_pairs(prio[[index[a.pair_id] for a, _ in movable]], draws)
    moved = 0
    for slot, j in zip(slots, ranked, strict=True):
        a = movable[int(j)][0]
        if a.order_index != slot:
            a.order_index = slot
            moved += 1
    s.flush()
    return moved


def reorder_after_completion(s: Session, *, study_id: int, rater_id: int, username: str,
                             completed_pair_id: int) -> int:
    """Hook of ``complete_pair``: reorder the rater's open pairs in an adaptive study.

    Runs in the caller's write transaction, after the pair was marked done; does nothing in
    a random study. Returns how many open pairs changed place.
    """
    study = s.get(Study, study_id)
    if study is None or study_strategy(study).strategy != "adaptive":
        return 0
    return _reorder(s, study, rater_id, username, pinned_pair_id=completed_pair_id)
