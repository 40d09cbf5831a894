"""Versioned saves (issue 16, "never lose a click"): every change of a rater's counts or
done-state bumps the assignment's version; a save that carries an older version than the
stored one (another tab) is refused with the stored counts, and nothing is written. Both
databases; two concurrent writers of the same pair and version: exactly one wins."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import select, update

from radconcord.backend.errors import InvalidInput, PermissionDenied
from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import assignment_writes, rating
from radconcord.backend.services.study_admin.assignment import assign_raters
from radconcord.backend.types import Actor
from radconcord.db.models import Assignment, RatingEvent, Study

SYSTEM = Actor.system()


def _rater(db, make_study, *, n_pairs=3, name="V"):
    make_study(db, name, n_pairs)
    for username in ("r1", "r2"):
        auth.create_user(db, SYSTEM, username=username, password=f"{username}-password",
                         role="rater")
    assign_raters(db, SYSTEM, study_name=name, rater_usernames=["r1", "r2"],
                  raters_per_pair=2, seed=3)
    r1 = auth.authenticate(db, username="r1", password="r1-password")
    r2 = auth.authenticate(db, username="r2", password="r2-password")
    queue = [q.opaque_id for q in rating.rater_queue(db, r1, study_name=name)]
    return r1, r2, queue


def _events(db, rater):
    with db.begin() as s:
        return [(e.action, e.category, e.significant, e.old_count, e.new_count)
                for e in s.scalars(select(RatingEvent).where(RatingEvent.rater_id == rater.user_id)
                                   .order_by(RatingEvent.id))]


def test_every_change_bumps_the_version_and_a_no_op_keeps_it(any_db, make_study,
                                                             fast_password_hashing):
    r1, r2, (oid, *_) = _rater(any_db, make_study)
    assert rating.get_pair(any_db, r1, opaque_id=oid).version == 0
    res = rating.set_count(any_db, r1, opaque_id=oid, category=2, significant=True, count=3,
                           expected_version=0)
    assert (res.changed, res.version) == (True, 1)
    # The same value again: nothing written, same version (with or without the check).
    res = rating.set_count(any_db, r1, opaque_id=oid, category=2, significant=True, count=3,
                           expected_version=1)
    assert (res.changed, res.version) == (False, 1)
    res = rating.set_count(any_db, r1, opaque_id=oid, category=2, significant=True, count=3)
    assert (res.changed, res.version) == (False, 1)
    # A batch bumps once, however many cells it changes.
    saved = rating.set_counts(any_db, r1, opaque_id=oid, expected_version=1,
                              cells={(1, False): 2, (6, True): 1, (2, True): 3})
    assert saved.version == 2 and saved.changed == ((1, False), (6, True))
    assert saved.counts == dict.fromkeys(assignment_writes.CELLS, 0) | {(2, True): 3, (1, False): 2,
                                                             (6, True): 1}
    done = rating.complete_pair(any_db, r1, opaque_id=oid, expected_version=2)
    assert done.completed_at is not None
    assert rating.get_pair(any_db, r1, opaque_id=oid).version == 3
    rating.complete_pair(any_db, r1, opaque_id=oid)  # already done: no change, no bump
    assert rating.get_pair(any_db, r1, opaque_id=oid).version == 3
    rating.reopen_pair(any_db, r1, opaque_id=oid)
    assert rating.get_pair(any_db, r1, opaque_id=oid).version == 4
    # Versions are per rater: r2's assignment of the same pair is untouched.
    assert rating.get_pair(any_db, r2, opaque_id=oid).version == 0
    with any_db.begin() as s:
        assert sorted(s.scalars(select(Assignment.version)
                                .where(Assignment.rater_id == r1.user_id))) == [0, 0, 4]


def test_a_stale_save_is_refused_with_the_stored_counts_and_writes_nothing(
        any_db, make_study, fast_password_hashing):
    r1, _, (oid, *_) = _rater(any_db, make_study)
    # Tab A and tab B both open the pair at version 0; B saves first.
    seen = rating.get_pair(any_db, r1, opaque_id=oid).version
    rating.set_count(any_db, r1, opaque_id=oid, category=4, significant=False, count=5,
                     expected_version=seen)
    before = _events(any_db, r1)
    # Tab A's "+" on the same cell, based on what it saw: refused.
    with pytest.raises(assignment_writes.StaleWrite) as err:
        rating.set_count(any_db, r1, opaque_id=oid, category=4, significant=False, count=1,
                         expected_version=seen)
    assert err.value.version == 1
    assert err.value.counts == dict.fromkeys(assignment_writes.CELLS, 0) | {(4, False): 5}
    assert err.value.completed_at is None
    assert "changed in another window, reloaded" in str(err.value)
    with pytest.raises(assignment_writes.StaleWrite):
        rating.set_counts(any_db, r1, opaque_id=oid, cells={(1, True): 1},
                          expected_version=seen)
    with pytest.raises(assignment_writes.StaleWrite):
        rating.complete_pair(any_db, r1, opaque_id=oid, expected_version=seen)
    view = rating.get_pair(any_db, r1, opaque_id=oid)
    assert view.counts == err.value.counts and view.version == 1
    assert view.completed_at is None
    assert _events(any_db, r1) == before
    # With the stored version the same change goes through.
    res = rating.set_count(any_db, r1, opaque_id=oid, category=4, significant=False, count=1,
                           expected_version=err.value.version)
    assert (res.changed, res.version) == (True, 2)


def test_set_counts_is_all_or_nothing_and_validates_every_cell(db, make_study,
                                                             fast_password_hashing):
    r1, _, (oid, *_) = _rater(db, make_study)
    for cells, field in (
        ({(1, True): 2, (7, True): 1}, "category"),
        ({(1, True): 2, (2, "yes"): 1}, "significant"),
        ({(1, True): 2, (2, True): 100}, "count"),
        ({(1, True): 2, 3: 1}, "cells"),
        ([(1, True, 2)], "cells"),
    ):
        with pytest.raises(InvalidInput, match=field):
            rating.set_counts(db, r1, opaque_id=oid, cells=cells, expected_version=0)
    with pytest.raises(InvalidInput, match="expected_version"):
        rating.set_counts(db, r1, opaque_id=oid, cells={(1, True): 2}, expected_version=-1)
    with pytest.raises(InvalidInput, match="expected_version"):
        rating.set_count(db, r1, opaque_id=oid, category=1, significant=True, count=1,
                         expected_version="0")
    view = rating.get_pair(db, r1, opaque_id=oid)
    assert view.version == 0 and not any(view.counts.values())
    assert _events(db, r1) == []
    # An empty batch answers what is stored (a grid's way to re-read after a refusal).
    saved = rating.set_counts(db, r1, opaque_id=oid, cells={}, expected_version=0)
    assert (saved.version, saved.changed) == (0, ())


def test_a_closed_study_stays_read_only_and_says_so(any_db, make_study,
                                                   fast_password_hashing):
    r1, _, (oid, *_) = _rater(any_db, make_study)
    assert rating.get_pair(any_db, r1, opaque_id=oid).read_only is False
    with any_db.begin() as s:
        s.execute(update(Study).values(status="closed"))
    view = rating.get_pair(any_db, r1, opaque_id=oid)
    assert view.read_only is True
    with pytest.raises(PermissionDenied, match="closed"):
        rating.set_counts(any_db, r1, opaque_id=oid, cells={(1, True): 1},
                          expected_version=view.version)
    assert rating.get_pair(any_db, r1, opaque_id=oid).version == 0


def test_highlight_differences_follows_the_study_setting(db, make_study,
                                                         fast_password_hashing):
    r1, _, (oid, *_) = _rater(db, make_study)
    assert rating.get_pair(db, r1, opaque_id=oid).highlight_differences is False
    with db.begin() as s:
        s.execute(update(Study).values(settings={"highlight_differences": True}))
    assert rating.get_pair(db, r1, opaque_id=oid).highlight_differences is True
    with db.begin() as s:
        s.execute(update(Study).values(settings={"other": 1}))
    assert rating.get_pair(db, r1, opaque_id=oid).highlight_differences is False


@pytest.mark.parametrize("batch", [False, True], ids=["set_count", "set_counts"])
def test_two_concurrent_writers_of_the_same_version_exactly_one_wins(
        any_db, make_study, fast_password_hashing, batch):
    """Two tabs of one rater send their save at the same moment, both based on version 0
    (the row lock serialises them; the second sees the first's version and is refused)."""
    r1, _, (oid, *_) = _rater(any_db, make_study)
    rounds = 6
    for round_ in range(rounds):
        version = rating.get_pair(any_db, r1, opaque_id=oid).version
        barrier = threading.Barrier(2)
        outcomes: dict[int, object] = {}

        def tab(value: int, version: int = version, barrier=barrier, outcomes=outcomes) -> None:
            barrier.wait(10)
            try:
                if batch:
                    outcomes[value] = rating.set_counts(
                        any_db, r1, opaque_id=oid, cells={(3, True): value},
                        expected_version=version)
                else:
                    outcomes[value] = rating.set_count(
                        any_db, r1, opaque_id=oid, category=3, significant=True, count=value,
                        expected_version=version)
            except assignment_writes.StaleWrite as exc:
                outcomes[value] = exc

        values = (10 + 2 * round_, 11 + 2 * round_)
        threads = [threading.Thread(target=tab, args=(v,)) for v in values]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        stale = assignment_writes.StaleWrite
        winners = [v for v, o in outcomes.items() if not isinstance(o, stale)]
        losers = [o for o in outcomes.values() if isinstance(o, stale)]
        assert len(winners) == 1 and len(losers) == 1, outcomes
        # The refused tab is told exactly what the winner stored.
        assert losers[0].version == version + 1
        assert losers[0].counts[(3, True)] == winners[0]
        view = rating.get_pair(any_db, r1, opaque_id=oid)
        assert (view.counts[(3, True)], view.version) == (winners[0], version + 1)
    # One audit event per round: the loser wrote nothing.
    assert len(_events(any_db, r1)) == rounds
