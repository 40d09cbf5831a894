"""Give a study's pairs to raters: k raters per pair, balanced, seeded, idempotent.

Algorithm (deterministic for a given study, rater set, k and seed):

1. Pairs are visited in a seeded shuffle. Each pair that has fewer than ``k`` raters gets the
   missing ones from the listed raters not yet on it, least-loaded first (load = pairs the rater
   holds in this study), ties broken by a seeded per-pair draw. Loads therefore end within one
   pair of each other whenever the rater set allows it.
2. Each rater's new pairs are shuffled with the rater's own seed and appended after the pairs
   they already hold (``order_index``), so re-running never reorders a queue in progress.

Existing assignments are never moved or removed: ratings may hang on them. Re-running with the
same arguments creates nothing; new pairs in the study, a larger ``k`` or new raters (with a
larger ``k``) extend the assignment.
"""

from __future__ import annotations

import hashlib
import logging
import random
from collections import defaultdict
from dataclasses import dataclass, field

from sqlalchemy import func, select

from backend.services.errors import InvalidInput, require_admin
from backend.services.repo import get_study
from backend.services.types import Actor
from db.models import Assignment, Pair, User
from db.session import Database

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AssignmentSummary:
    """What ``assign_raters`` did."""

    study_name: str
    raters_per_pair: int
    seed: int
    n_pairs: int
    created: int
    # username -> number of pairs the rater holds in the study after the run.
    per_rater: dict[str, int] = field(default_factory=dict)


def _rng(seed: int, *parts: object) -> random.Random:
    """A generator seeded from the study seed and a label (stable across Python versions)."""
    text = "\x1f".join([str(seed), *(str(p) for p in parts)])
    return random.Random(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big"))


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
        users = s.scalars(select(User).where(User.username.in_(names))).all()
        by_name = {u.username: u for u in users}
        missing = [n for n in names if n not in by_name]
        if missing:
            raise InvalidInput(f"raters: no account named {', '.join(map(repr, missing))}")
        bad = [n for n in names if by_name[n].role != "rater" or not by_name[n].active]
        if bad:
            raise InvalidInput(f"raters: not an active rater account: {', '.join(bad)}")

        # Seeds are derived from positions and usernames, never database ids, so the same
        # study content, raters and seed give the same assignment in any database.
        position_of = dict(
            s.execute(
                select(Pair.id, Pair.position)
                .where(Pair.study_id == study.id)
                .order_by(Pair.position)
            ).all()
        )
        pair_ids = list(position_of)
        existing = s.execute(
            select(Assignment.pair_id, Assignment.rater_id).where(Assignment.study_id == study.id)
        ).all()
        on_pair: dict[int, set[int]] = defaultdict(set)
        load: dict[int, int] = defaultdict(int)
        for pair_id, rater_id in existing:
            on_pair[pair_id].add(rater_id)
            load[rater_id] += 1

        rater_ids = [by_name[n].id for n in names]
        visit = list(pair_ids)
        _rng(seed, "pairs").shuffle(visit)
        new_for: dict[int, list[int]] = defaultdict(list)
        for pair_id in visit:
            need = raters_per_pair - len(on_pair[pair_id])
            if need <= 0:
                continue
            free = [r for r in rater_ids if r not in on_pair[pair_id]]
            tiebreak = _rng(seed, "pair", position_of[pair_id])
            draw = {r: tiebreak.random() for r in free}
            free.sort(key=lambda r: (load[r], draw[r]))
            # k <= len(raters), so there are always enough free raters.
            for r in free[:need]:
                on_pair[pair_id].add(r)
                load[r] += 1
                new_for[r].append(pair_id)

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
            batch = sorted(new_for.get(rater_id, []), key=position_of.__getitem__)
            start = next_index.get(rater_id, -1) + 1
            # The offset is part of the label so that each extension gets its own shuffle.
            _rng(seed, "order", username, start).shuffle(batch)
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

        if created:
            # Recorded only when something was assigned, so an idempotent re-run (even with
            # another seed) leaves the study exactly as it was.
            study.raters_per_pair = raters_per_pair
            study.seed = seed
            runs = list((study.provenance or {}).get("assignment_runs", []))
            runs.append(
                {"raters": names, "raters_per_pair": raters_per_pair, "seed": seed,
                 "created": created}
            )
            study.provenance = {**(study.provenance or {}), "assignment_runs": runs}
            s.flush()
        per_rater_rows = s.execute(
            select(User.username, func.count(Assignment.id))
            .join(Assignment, Assignment.rater_id == User.id)
            .where(Assignment.study_id == study.id)
            .group_by(User.username)
        ).all()
        summary = AssignmentSummary(
            study_name=study.name,
            raters_per_pair=raters_per_pair,
            seed=seed,
            n_pairs=len(pair_ids),
            created=created,
            per_rater={u: int(n) for u, n in sorted(per_rater_rows)},
        )
    log.info("assigned %d pairs in %s (k=%d, seed=%d)", created, study_name, raters_per_pair, seed)
    return summary
