"""Rater services on both databases: queue, pair view, autosave with audit, done state, and
the admin progress/summary views built on them (versioned saves: test_rating_versions.py)."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time

import pytest
from sqlalchemy import func, select, update

from radconcord.backend.errors import (
    InvalidInput,
    NotFound,
    PermissionDenied,
    ServiceError,
)
from radconcord.backend.services import transactions
from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import assignment_writes, rating
from radconcord.backend.services.study_admin import progress, studies
from radconcord.backend.services.study_admin.assignment import assign_raters
from radconcord.backend.types import Actor
from radconcord.db.models import Assignment, Image, Pair, Rating, RatingEvent, Study

SYSTEM = Actor.system()


def _setup(db, make_study, *, n_pairs=4, raters=("r1", "r2"), k=2, name="S"):
    make_study(db, name, n_pairs)
    actors = {}
    for username in raters:
        auth.create_user(db, SYSTEM, username=username, password=f"{username}-password",
                         role="rater")
        actors[username] = auth.authenticate(db, username=username,
                                             password=f"{username}-password")
    assign_raters(db, SYSTEM, study_name=name, rater_usernames=list(raters),
                  raters_per_pair=k, seed=5)
    return actors


def _events(db, **where):
    with db.begin() as s:
        stmt = select(RatingEvent).order_by(RatingEvent.id)
        for key, value in where.items():
            stmt = stmt.where(getattr(RatingEvent, key) == value)
        return [(e.action, e.category, e.significant, e.old_count, e.new_count)
                for e in s.scalars(stmt)]


def test_queue_and_pair_view(any_db, make_study, fast_password_hashing):
    actors = _setup(any_db, make_study)
    r1 = actors["r1"]
    queue = rating.rater_queue(any_db, r1, study_name="S")
    assert [q.index for q in queue] == [1, 2, 3, 4]
    assert not any(q.completed for q in queue) and all(q.completed_at is None for q in queue)
    # The queue is the rater's own seeded order.
    with any_db.begin() as s:
        expected = list(s.scalars(
            select(Pair.opaque_id).join(Assignment, Assignment.pair_id == Pair.id)
            .where(Assignment.rater_id == r1.user_id).order_by(Assignment.order_index)))
    assert [q.opaque_id for q in queue] == expected

    first, second = queue[0].opaque_id, queue[1].opaque_id
    view = rating.get_pair(any_db, r1, opaque_id=second)
    assert (view.index, view.total, view.study_name) == (2, 4, "S")
    assert (view.prev_opaque_id, view.next_opaque_id) == (first, queue[2].opaque_id)
    assert view.counts == dict.fromkeys(assignment_writes.CELLS, 0) and len(view.counts) == 12
    assert view.completed_at is None and view.images == ()
    with any_db.begin() as s:
        pair = s.scalar(select(Pair).where(Pair.opaque_id == second))
        assert view.reference_text == pair.reference.text
        assert view.candidate_text == pair.candidate.text
        s.add_all([
            Image(case_id=pair.case_id, path="x/pa.dcm", format="dicom", view="PA", sha256="a"),
            Image(case_id=pair.case_id, path="x/lat.png", format="png", view="LATERAL",
                  sha256="b"),
        ])
    view = rating.get_pair(any_db, r1, opaque_id=second)
    assert [(i.view, i.format) for i in view.images] == [("PA", "dicom"), ("LATERAL", "png")]
    assert all(isinstance(i.image_id, int) for i in view.images)
    assert rating.get_pair(any_db, r1, opaque_id=first).prev_opaque_id is None
    assert rating.get_pair(any_db, r1, opaque_id=queue[-1].opaque_id).next_opaque_id is None


def test_set_count_saves_and_audits(any_db, make_study, fast_password_hashing):
    r1 = _setup(any_db, make_study)["r1"]
    oid = rating.rater_queue(any_db, r1, study_name="S")[0].opaque_id
    res = rating.set_count(any_db, r1, opaque_id=oid, category=2, significant=True, count=3)
    assert (res.count, res.changed) == (3, True) and res.saved_at.tzinfo is not None
    res = rating.set_count(any_db, r1, opaque_id=oid, category=2, significant=True, count=3)
    assert res.changed is False  # unchanged: no event
    rating.set_count(any_db, r1, opaque_id=oid, category=2, significant=True, count=1)
    rating.set_count(any_db, r1, opaque_id=oid, category=5, significant=False, count=2)
    # Entering 0 in a cell never written is no change (a missing cell is 0).
    assert not rating.set_count(any_db, r1, opaque_id=oid, category=6, significant=True,
                                count=0).changed
    assert _events(any_db, rater_id=r1.user_id) == [
        ("set", 2, True, None, 3),
        ("set", 2, True, 3, 1),
        ("set", 5, False, None, 2),
    ]
    # A second read returns exactly what was saved (what a reload shows).
    view = rating.get_pair(any_db, r1, opaque_id=oid)
    expected = dict.fromkeys(assignment_writes.CELLS, 0) | {(2, True): 1, (5, False): 2}
    assert view.counts == expected
    with any_db.begin() as s:
        assert s.scalar(select(func.count(Rating.id))) == 2


@pytest.mark.parametrize(
    ("category", "significant", "count", "field"),
    [
        (0, True, 1, "category"),
        (7, True, 1, "category"),
        (True, True, 1, "category"),
        ("2", True, 1, "category"),
        (1, 1, 1, "significant"),
        (1, True, -1, "count"),
        (1, True, 100, "count"),
        (1, True, 2.0, "count"),
    ],
)
def test_set_count_validation(db, make_study, fast_password_hashing, category, significant,
                              count, field):
    r1 = _setup(db, make_study, n_pairs=1)["r1"]
    oid = rating.rater_queue(db, r1, study_name="S")[0].opaque_id
    with pytest.raises(InvalidInput, match=field):
        rating.set_count(db, r1, opaque_id=oid, category=category, significant=significant,
                         count=count)
    assert _events(db) == []
    zeros = dict.fromkeys(assignment_writes.CELLS, 0)
    assert rating.get_pair(db, r1, opaque_id=oid).counts == zeros


def test_complete_and_reopen(any_db, make_study, fast_password_hashing):
    r1 = _setup(any_db, make_study, n_pairs=3)["r1"]
    queue = [q.opaque_id for q in rating.rater_queue(any_db, r1, study_name="S")]
    a, b, c = queue
    with pytest.raises(InvalidInput, match="confirm"):
        rating.complete_pair(any_db, r1, opaque_id=a)
    assert rating.get_pair(any_db, r1, opaque_id=a).completed_at is None
    done = rating.complete_pair(any_db, r1, opaque_id=a, confirm_zero=True)
    assert done.completed_at is not None and done.next_open_opaque_id == b
    # A done pair stores all twelve cells, as explicit zeros here.
    with any_db.begin() as s:
        rows = s.execute(select(Rating.category, Rating.significant, Rating.count).where(
            Rating.rater_id == r1.user_id)).all()
    assert sorted((int(x), bool(y)) for x, y, _ in rows) == sorted(assignment_writes.CELLS)
    assert {n for *_, n in rows} == {0}
    again = rating.complete_pair(any_db, r1, opaque_id=a, confirm_zero=True)
    assert again.completed_at == done.completed_at
    assert [e[0] for e in _events(any_db)] == ["complete"]

    rating.set_count(any_db, r1, opaque_id=c, category=1, significant=True, count=1)
    done_c = rating.complete_pair(any_db, r1, opaque_id=c)  # non-zero: no confirmation
    assert done_c.next_open_opaque_id == b  # wraps round to the remaining pair
    # Editing a done pair is allowed and audited; it stays done.
    rating.set_count(any_db, r1, opaque_id=c, category=1, significant=True, count=2)
    assert rating.get_pair(any_db, r1, opaque_id=c).completed_at is not None

    items = {q.opaque_id: q for q in rating.rater_queue(any_db, r1, study_name="S")}
    assert (items[a].completed, items[b].completed, items[c].completed) == (True, False, True)
    assert items[a].completed_at == done.completed_at

    reopened = rating.reopen_pair(any_db, r1, opaque_id=a)
    assert reopened.completed_at is None
    assert rating.get_pair(any_db, r1, opaque_id=a).completed_at is None
    rating.reopen_pair(any_db, r1, opaque_id=a)  # already open: no event
    assert [e[0] for e in _events(any_db)] == ["complete", "set", "complete", "set", "reopen"]


def test_closed_study_is_read_only_and_draft_is_hidden(any_db, make_study,
                                                       fast_password_hashing):
    r1 = _setup(any_db, make_study, n_pairs=2)["r1"]
    oid = rating.rater_queue(any_db, r1, study_name="S")[0].opaque_id
    rating.set_count(any_db, r1, opaque_id=oid, category=3, significant=False, count=4)
    with any_db.begin() as s:
        s.scalar(select(Study).where(Study.name == "S")).status = "closed"
    with pytest.raises(PermissionDenied, match="closed"):
        rating.set_count(any_db, r1, opaque_id=oid, category=3, significant=False, count=5)
    with pytest.raises(PermissionDenied):
        rating.complete_pair(any_db, r1, opaque_id=oid)
    assert rating.get_pair(any_db, r1, opaque_id=oid).counts[(3, False)] == 4
    with any_db.begin() as s:
        s.scalar(select(Study).where(Study.name == "S")).status = "draft"
    assert rating.rater_studies(any_db, r1) == []
    with pytest.raises(NotFound):
        rating.get_pair(any_db, r1, opaque_id=oid)
    with pytest.raises(NotFound):
        rating.rater_queue(any_db, r1, study_name="S")


def test_rater_studies_progress_and_summaries(any_db, make_study, fast_password_hashing):
    actors = _setup(any_db, make_study, n_pairs=4, raters=("r1", "r2", "r3"), k=2)
    make_study(any_db, "Other", 2)  # nobody assigned
    r1 = actors["r1"]
    mine = rating.rater_studies(any_db, r1)
    assert [(m.name, m.completed) for m in mine] == [("S", 0)]
    total = mine[0].total
    queue = rating.rater_queue(any_db, r1, study_name="S")
    assert mine[0].resume_opaque_id == queue[0].opaque_id and total == len(queue)
    rating.complete_pair(any_db, r1, opaque_id=queue[0].opaque_id, confirm_zero=True)
    mine = rating.rater_studies(any_db, r1)
    assert (mine[0].completed, mine[0].resume_opaque_id) == (1, queue[1].opaque_id)
    assert studies.list_studies(any_db, r1) == mine

    prog = progress.study_progress(any_db, SYSTEM, study_name="S")
    assert (prog.name, prog.n_pairs, prog.n_assignments, prog.n_completed) == ("S", 4, 8, 1)
    assert prog.n_pairs_fully_rated == 0
    assert sorted((r.username, r.completed) for r in prog.raters) == [
        ("r1", 1), ("r2", 0), ("r3", 0)
    ]
    assert sum(r.total for r in prog.raters) == 8
    assert all(p.assigned == 2 for p in prog.pairs)
    assert [p.position for p in prog.pairs] == [0, 1, 2, 3]
    done_pair = next(p for p in prog.pairs if p.opaque_id == queue[0].opaque_id)
    assert done_pair.completed == 1

    listed = {s.name: s for s in studies.list_studies(any_db, SYSTEM)}
    assert set(listed) == {"S", "Other"}
    summary = studies.get_study_summary(any_db, SYSTEM, study_name="S")
    assert summary == listed["S"]
    assert (summary.n_pairs, summary.n_cases, summary.n_raters, summary.n_assignments,
            summary.n_completed) == (4, 4, 3, 8, 1)
    assert summary.sources == {"gen-a": 2, "gen-b": 2}
    assert summary.provenance["assignment_runs"][0]["raters_per_pair"] == 2
    assert listed["Other"].n_raters == 0
    with pytest.raises(NotFound):
        studies.get_study_summary(any_db, SYSTEM, study_name="missing")
    with pytest.raises(NotFound):
        progress.study_progress(any_db, SYSTEM, study_name="missing")


def test_assigned_case_ids(any_db, make_study, fast_password_hashing):
    actors = _setup(any_db, make_study, n_pairs=4, raters=("r1", "r2"), k=1)
    with any_db.begin() as s:
        expected = {
            u: set(s.scalars(select(Pair.case_id).join(Assignment, Assignment.pair_id == Pair.id)
                             .where(Assignment.rater_id == a.user_id)))
            for u, a in actors.items()
        }
    got = {u: set(rating.assigned_case_ids(any_db, a)) for u, a in actors.items()}
    assert got == expected and not (got["r1"] & got["r2"]) and len(got["r1"]) == 2


@contextlib.contextmanager
def _database_locked(db):
    """Another client holds the lock a save needs: SQLite's write lock (a raw connection in
    ``BEGIN IMMEDIATE``, as a long import did) or, on PostgreSQL, an exclusive table lock."""
    if db.engine.dialect.name == "sqlite":
        raw = sqlite3.connect(db.engine.url.database, isolation_level=None)
        raw.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            raw.rollback()
            raw.close()
        return
    with db.engine.connect() as conn:
        conn.exec_driver_sql("BEGIN")
        conn.exec_driver_sql("LOCK TABLE assignments IN ACCESS EXCLUSIVE MODE")
        try:
            yield
        finally:
            conn.rollback()


def test_a_save_waits_out_a_short_lock(any_db, make_study, fast_password_hashing):
    db = any_db
    actors = _setup(db, make_study)
    r1 = actors["r1"]
    oid = rating.rater_queue(db, r1, study_name="S")[0].opaque_id
    released = threading.Event()

    def hold() -> None:
        with _database_locked(db):
            ready.set()
            time.sleep(1.2)
        released.set()

    ready = threading.Event()
    holder = threading.Thread(target=hold)
    holder.start()
    ready.wait(10)
    t0 = time.monotonic()
    result = rating.set_count(db, r1, opaque_id=oid, category=2, significant=True, count=3)
    waited = time.monotonic() - t0
    holder.join(10)
    assert result.changed and released.is_set()
    assert 0.8 < waited < transactions.SAVE_RETRY_SECONDS
    assert rating.get_pair(db, r1, opaque_id=oid).counts[(2, True)] == 3


def test_a_save_gives_a_clear_error_when_the_lock_outlasts_the_retry_window(
        any_db, make_study, fast_password_hashing, monkeypatch, caplog):
    db = any_db
    monkeypatch.setattr(transactions, "SAVE_RETRY_SECONDS", 1.0)
    actors = _setup(db, make_study)
    r1 = actors["r1"]
    oid = rating.rater_queue(db, r1, study_name="S")[0].opaque_id
    with _database_locked(db):
        t0 = time.monotonic()
        with pytest.raises(transactions.SaveFailed) as err:
            rating.set_count(db, r1, opaque_id=oid, category=4, significant=False, count=2)
        waited = time.monotonic() - t0
        with pytest.raises(transactions.SaveFailed, match="nothing was changed"):
            rating.complete_pair(db, r1, opaque_id=oid, confirm_zero=True)
    assert str(err.value) == ("Not saved: the database is busy; your count is kept, "
                              "try again")
    assert isinstance(err.value, ServiceError)
    assert 0.9 < waited < 3.0  # bounded: the window plus at most one attempt
    assert "not saved: database busy" in caplog.text
    # Nothing was half-written, and the same save goes through once the lock is gone.
    assert rating.get_pair(db, r1, opaque_id=oid).counts[(4, False)] == 0
    assert _events(db, rater_id=r1.user_id) == []
    rating.set_count(db, r1, opaque_id=oid, category=4, significant=False, count=2)
    assert rating.get_pair(db, r1, opaque_id=oid).counts[(4, False)] == 2
    assert _events(db, rater_id=r1.user_id) == [("set", 4, False, None, 2)]


def test_studies_being_imported_are_hidden_from_raters(any_db, make_study,
                                                       fast_password_hashing):
    db = any_db
    actors = _setup(db, make_study)
    r1 = actors["r1"]
    oid = rating.rater_queue(db, r1, study_name="S")[0].opaque_id
    with db.begin() as s:
        s.execute(update(Study).values(status="importing"))
    assert rating.rater_studies(db, r1) == []
    assert studies.list_studies(db, SYSTEM) == []
    with pytest.raises(NotFound):
        rating.get_pair(db, r1, opaque_id=oid)
    with pytest.raises(NotFound):
        rating.set_count(db, r1, opaque_id=oid, category=1, significant=True, count=1)
    assert rating.assigned_case_ids(db, r1) == frozenset()
