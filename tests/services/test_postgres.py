"""PostgreSQL specifics: the test server itself, the migrated schema, time zones, and the row
locks that serialise one rater's writes on a pair without making other raters wait."""

from __future__ import annotations

import datetime as dt
import threading
import uuid

import pytest
from sqlalchemy import inspect, select, text

from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import rating
from radconcord.backend.services.study_admin.assignment import assign_raters
from radconcord.backend.types import Actor
from radconcord.db.models import Assignment, Base, Pair, Rating, RatingEvent
from radconcord.db.session import Database
from tests import pgserver

SYSTEM = Actor.system()


@pytest.fixture
def pg_db(pg_server, pg_template):
    name = f"t_{uuid.uuid4().hex[:16]}"
    database = Database(pg_server.create_database(name, template=pg_template))
    yield database
    database.dispose()
    pg_server.drop_database(name)


def test_missing_binaries_give_a_clear_error(monkeypatch):
    monkeypatch.setattr(pgserver.shutil, "which", lambda _name: None)
    monkeypatch.setattr(pgserver.glob, "glob", lambda _pattern: [])
    with pytest.raises(pgserver.PgServerError, match="apt-get install postgresql"):
        pgserver.find_bindir()


@pytest.mark.postgres
def test_server_and_schema(pg_db):
    assert pg_db.engine.dialect.name == "postgresql"
    with pg_db.engine.connect() as conn:
        assert conn.execute(text("SHOW server_version_num")).scalar_one().isdigit()
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
    tables = set(inspect(pg_db.engine).get_table_names())
    assert set(Base.metadata.tables) <= tables
    uniques = {u["name"] for u in inspect(pg_db.engine).get_unique_constraints("ratings")}
    assert "uq_ratings_cell" in uniques


@pytest.mark.postgres
def test_same_rater_waits_other_rater_does_not(pg_db, make_study, fast_password_hashing):
    make_study(pg_db, "Locks", 1)
    actors = {}
    for name in ("r1", "r2"):
        auth.create_user(pg_db, SYSTEM, username=name, password=f"{name}-password", role="rater")
        actors[name] = auth.authenticate(pg_db, username=name, password=f"{name}-password")
    assign_raters(pg_db, SYSTEM, study_name="Locks", rater_usernames=["r1", "r2"],
                  raters_per_pair=2, seed=0)
    r1, r2 = actors["r1"], actors["r2"]
    oid = rating.rater_queue(pg_db, r1, study_name="Locks")[0].opaque_id
    finished = threading.Event()
    outcome: list[object] = []

    def second_tab() -> None:
        try:
            outcome.append(rating.set_count(pg_db, r1, opaque_id=oid, category=1,
                                            significant=True, count=3))
        except BaseException as exc:  # re-raised below
            outcome.append(exc)
        finished.set()

    with pg_db.begin() as s:
        # Another transaction of r1 (a first tab) holds r1's assignment row for this pair
        # and writes the cell; it commits only after the second tab has started waiting.
        held = s.execute(
            select(Assignment).join(Pair, Pair.id == Assignment.pair_id)
            .where(Assignment.rater_id == r1.user_id, Pair.opaque_id == oid)
            .with_for_update(of=Assignment)
        ).scalar_one()
        s.add(Rating(rater_id=r1.user_id, pair_id=held.pair_id, category=1, significant=True,
                     count=7))
        s.flush()
        thread = threading.Thread(target=second_tab)
        thread.start()
        assert not finished.wait(0.75), "r1's second write did not wait for the row lock"
        # r2 on the same pair is not blocked by r1's lock (run aside so a regression fails
        # instead of hanging while this transaction holds the lock).
        other: list[rating.SaveResult] = []
        r2_thread = threading.Thread(target=lambda: other.append(rating.set_count(
            pg_db, r2, opaque_id=oid, category=1, significant=True, count=5)))
        r2_thread.start()
        r2_thread.join(timeout=10)
        r2_blocked = r2_thread.is_alive()
        assert not finished.is_set()
    r2_thread.join()
    assert not r2_blocked, "another rater's write waited for r1's row lock"
    assert other[0].changed
    assert finished.wait(30)
    thread.join()
    assert isinstance(outcome[0], rating.SaveResult) and outcome[0].count == 3
    assert rating.get_pair(pg_db, r1, opaque_id=oid).counts[(1, True)] == 3
    assert rating.get_pair(pg_db, r2, opaque_id=oid).counts[(1, True)] == 5
    with pg_db.begin() as s:
        # The waiting write saw the first tab's committed 7, not its stale snapshot.
        assert s.execute(select(RatingEvent.old_count, RatingEvent.new_count).where(
            RatingEvent.rater_id == r1.user_id)).all() == [(7, 3)]


@pytest.mark.postgres
def test_timestamps_are_aware_utc(pg_db, make_study, fast_password_hashing):
    make_study(pg_db, "Tz", 1)
    auth.create_user(pg_db, SYSTEM, username="r1", password="r1-password", role="rater")
    r1 = auth.authenticate(pg_db, username="r1", password="r1-password")
    assign_raters(pg_db, SYSTEM, study_name="Tz", rater_usernames=["r1"], raters_per_pair=1,
                  seed=0)
    oid = rating.rater_queue(pg_db, r1, study_name="Tz")[0].opaque_id
    # A session time zone far from UTC must not shift what the services return.
    with pg_db.engine.begin() as conn:
        conn.execute(text("SELECT set_config('TimeZone', 'Pacific/Kiritimati', false)"))
    done = rating.complete_pair(pg_db, r1, opaque_id=oid, confirm_zero=True)
    view = rating.get_pair(pg_db, r1, opaque_id=oid)
    assert view.completed_at == done.completed_at
    assert view.completed_at.utcoffset() == dt.timedelta(0)
    saved = rating.set_counts(pg_db, r1, opaque_id=oid, cells={(1, True): 1},
                              expected_version=view.version)
    assert saved.saved_at.utcoffset() == dt.timedelta(0)
