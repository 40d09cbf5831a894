"""SQLite transaction modes: writers serialise up front, readers never wait for a writer."""

from __future__ import annotations

import threading
import time

from sqlalchemy import text

from radconcord.db.models import User
from radconcord.db.session import Database


def test_read_session_does_not_wait_for_an_open_write_transaction(tmp_path):
    db = Database(f"sqlite:///{tmp_path}/t.db")
    with db.begin() as s:
        s.execute(text("CREATE TABLE t (x INTEGER)"))
    holding, release = threading.Event(), threading.Event()

    def writer() -> None:
        with db.begin() as s:
            s.execute(text("INSERT INTO t VALUES (1)"))
            holding.set()
            release.wait(10)

    th = threading.Thread(target=writer)
    th.start()
    assert holding.wait(10)
    t0 = time.perf_counter()
    with db.read() as s:
        seen = s.execute(text("SELECT count(*) FROM t")).scalar()
    waited = time.perf_counter() - t0
    release.set()
    th.join()
    # A BEGIN IMMEDIATE reader would block until the writer commits (10 s here).
    assert waited < 5
    assert seen == 0  # snapshot isolation: the uncommitted row is invisible
    with db.read() as s:
        assert s.execute(text("SELECT count(*) FROM t")).scalar() == 1


def test_second_writer_waits_for_the_first(tmp_path):
    db = Database(f"sqlite:///{tmp_path}/t.db")
    with db.begin() as s:
        s.execute(text("CREATE TABLE t (x INTEGER)"))
    holding = threading.Event()
    order: list[str] = []

    def first() -> None:
        with db.begin() as s:
            s.execute(text("INSERT INTO t VALUES (1)"))
            holding.set()
            time.sleep(0.5)
            order.append("first-commit")

    th = threading.Thread(target=first)
    th.start()
    assert holding.wait(10)
    with db.begin() as s:
        # The session begins lazily: the first statement is where BEGIN IMMEDIATE waits.
        s.execute(text("INSERT INTO t VALUES (2)"))
        order.append("second-wrote")
    th.join()
    assert order == ["first-commit", "second-wrote"]


def _n_users(db: Database) -> int:
    with db.read() as s:
        return int(s.execute(text("SELECT count(*) FROM users")).scalar())


def test_reads_inside_a_snapshot_see_the_database_as_at_the_first(any_db):
    """Database.snapshot: a write committed meanwhile (another connection) is invisible to
    every read of the block, nested blocks included, and visible once the block ends; other
    threads read as usual. On SQLite (WAL) and PostgreSQL (REPEATABLE READ)."""
    db = any_db
    before = _n_users(db)

    def add_user(name: str) -> None:
        with db.begin() as s:
            s.add(User(username=name, role="rater", password_hash="x"))

    seen_elsewhere = []
    with db.snapshot():
        assert _n_users(db) == before
        add_user("during")
        assert _n_users(db) == before
        with db.snapshot():
            assert _n_users(db) == before
        other = threading.Thread(target=lambda: seen_elsewhere.append(_n_users(db)))
        other.start()
        other.join()
        assert _n_users(db) == before
    assert seen_elsewhere == [before + 1]
    assert _n_users(db) == before + 1
