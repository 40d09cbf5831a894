"""Twenty raters saving at once through the services, on a SQLite file (WAL) and PostgreSQL.

Twenty rater threads plus four "second browser tab" threads (the same rater as four of them)
save counts on pairs shared by eight raters each, and record time on task in between. The
second tabs write the very cells their twin writes, so same-cell races happen. Afterwards:
no call failed, every cell holds the last value written to it, the audit has exactly one
event per change, and each cell's events chain (old value == previous new value).
"""

from __future__ import annotations

import random
import threading
from collections import defaultdict

import pytest
from sqlalchemy import select

from backend.services import auth, rating
from backend.services.assignment import assign_raters
from backend.services.types import Actor
from db.models import Pair, Rating, RatingEvent, User

N_RATERS = 20
N_TABS = 4  # raters 0..3 also write from a second thread
CALLS = 50
SYSTEM = Actor.system()


@pytest.mark.slow
def test_twenty_raters_save_at_once(any_db, make_study, fast_password_hashing):
    db = any_db
    make_study(db, "Busy", 10)
    names = [f"r{i:02d}" for i in range(N_RATERS)]
    actors = []
    for name in names:
        auth.create_user(db, SYSTEM, username=name, password=f"{name}-password", role="rater")
        actors.append(auth.authenticate(db, username=name, password=f"{name}-password"))
    summary = assign_raters(db, SYSTEM, study_name="Busy", rater_usernames=names,
                            raters_per_pair=8, seed=11)
    assert summary.created == 80
    queues = {a.username: [q.opaque_id for q in rating.rater_queue(db, a, study_name="Busy")]
              for a in actors}

    workers = [(a, f"{a.username}#1") for a in actors]
    workers += [(a, f"{a.username}#2") for a in actors[:N_TABS]]
    barrier = threading.Barrier(len(workers))
    log: dict[str, list[tuple]] = {}
    errors: list[BaseException] = []

    def work(actor: Actor, label: str) -> None:
        rng = random.Random(label)
        mine: list[tuple] = []
        try:
            barrier.wait(timeout=60)
            for step in range(CALLS):
                oid = rng.choice(queues[actor.username])
                # Few cells, so the two tabs of a rater collide often.
                cat, sig = rng.choice([(1, True), (1, False), (2, True), (4, False)])
                count = rng.randint(0, 4)
                res = rating.set_count(db, actor, opaque_id=oid, category=cat, significant=sig,
                                       count=count)
                mine.append((actor.username, oid, cat, sig, count, res.changed))
                if step % 5 == 0:
                    rating.record_activity(db, actor, opaque_id=oid)
        except BaseException as exc:  # collected and re-raised in the main thread
            errors.append(exc)
        log[label] = mine

    threads = [threading.Thread(target=work, args=w, name=w[1]) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a rater thread hung"
    assert errors == [], errors[:3]
    assert sum(len(v) for v in log.values()) == len(workers) * CALLS

    with db.begin() as s:
        stored = {
            (u, oid, int(c), bool(g)): n
            for u, oid, c, g, n in s.execute(
                select(User.username, Pair.opaque_id, Rating.category, Rating.significant,
                       Rating.count)
                .join(User, User.id == Rating.rater_id).join(Pair, Pair.id == Rating.pair_id))
        }
        events = s.execute(
            select(User.username, Pair.opaque_id, RatingEvent.category, RatingEvent.significant,
                   RatingEvent.old_count, RatingEvent.new_count, RatingEvent.action)
            .join(User, User.id == RatingEvent.rater_id)
            .join(Pair, Pair.id == RatingEvent.pair_id)
            .order_by(RatingEvent.id)
        ).all()

    changes = sum(1 for entries in log.values() for *_, changed in entries if changed)
    assert len(events) == changes
    assert {e.action for e in events} == {"set"}

    chains: dict[tuple, list[tuple[int | None, int]]] = defaultdict(list)
    for u, oid, c, g, old, new, _ in events:
        chains[(u, oid, int(c), bool(g))].append((old, new))
    for cell, chain in chains.items():
        assert chain[0][0] is None, cell
        for (_, prev_new), (old, _new) in zip(chain, chain[1:], strict=False):
            assert old == prev_new, (cell, chain)
        assert all(old != new for old, new in chain), (cell, chain)
        assert stored[cell] == chain[-1][1], (cell, chain, stored[cell])
    assert set(stored) == set(chains)

    # Cells one thread alone wrote hold that thread's last value (a missing row means 0).
    writers: dict[tuple, set[str]] = defaultdict(set)
    last: dict[tuple, int] = {}
    for label, entries in log.items():
        for u, oid, c, g, _count, _ in entries:
            writers[(u, oid, c, g)].add(label)
    for label, entries in log.items():
        for u, oid, c, g, count, _ in entries:
            if writers[(u, oid, c, g)] == {label}:
                last[(u, oid, c, g)] = count
    assert last, "no single-writer cells: the scenario lost its control group"
    for cell, value in last.items():
        assert stored.get(cell, 0) == value, cell
    shared = [cell for cell, who in writers.items() if len(who) > 1]
    assert shared, "the second tabs never raced their twins"
    for cell in shared:
        written = {count for entries in log.values() for *key, count, _ in entries
                   if tuple(key) == cell}
        assert stored.get(cell, 0) in written | {0}, cell
