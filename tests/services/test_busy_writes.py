"""``Database.begin(busy_timeout=...)``: a write with a deadline gives up in time, and the
busy errors of both databases are recognised, so a rater's save can retry instead of hang."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from radconcord.db.session import SQLITE_BUSY_TIMEOUT_MS, DatabaseBusy, is_busy_error


def test_a_write_with_a_deadline_gives_up_behind_a_writer_of_this_process(db):
    held, release = threading.Event(), threading.Event()

    def writer() -> None:
        with db.begin() as s:
            s.execute(text("SELECT 1"))
            held.set()
            release.wait(10)

    t = threading.Thread(target=writer)
    t.start()
    held.wait(10)
    try:
        t0 = time.monotonic()
        with pytest.raises(DatabaseBusy) as err, db.begin(busy_timeout=0.3):
            pass
        assert 0.25 < time.monotonic() - t0 < 2.0
        assert is_busy_error(err.value)
    finally:
        release.set()
        t.join(10)
    with db.begin(busy_timeout=0.3) as s:  # free again: goes through at once
        assert s.execute(text("SELECT 1")).scalar() == 1


def test_a_write_with_a_deadline_gives_up_behind_another_process(db):
    raw = sqlite3.connect(db.engine.url.database, isolation_level=None)
    raw.execute("BEGIN IMMEDIATE")
    try:
        t0 = time.monotonic()
        with pytest.raises(OperationalError) as err, db.begin(busy_timeout=0.3) as s:
            s.execute(text("SELECT 1"))
        assert 0.25 < time.monotonic() - t0 < 2.0
        assert is_busy_error(err.value)
    finally:
        raw.rollback()
        raw.close()
    # The pooled connection gets the default wait back for writes without a deadline.
    with db.begin() as s:
        assert s.execute(text("PRAGMA busy_timeout")).scalar() == SQLITE_BUSY_TIMEOUT_MS


def test_other_errors_are_not_taken_for_busy(db):
    with pytest.raises(OperationalError) as err, db.begin() as s:
        s.execute(text("SELECT * FROM no_such_table"))
    assert not is_busy_error(err.value)
    assert not is_busy_error(ValueError("database is locked"))


def test_a_lock_wait_past_the_deadline_is_busy_on_both_databases(any_db):
    """Another client holds the lock (SQLite: the write lock; PostgreSQL: a table lock)."""
    sqlite = any_db.engine.dialect.name == "sqlite"
    with any_db.engine.connect() as conn:
        if sqlite:
            raw = sqlite3.connect(any_db.engine.url.database, isolation_level=None)
            raw.execute("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql("BEGIN")
            conn.exec_driver_sql("LOCK TABLE studies IN ACCESS EXCLUSIVE MODE")
        t0 = time.monotonic()
        with pytest.raises(OperationalError) as err, any_db.begin(busy_timeout=0.3) as s:
            s.execute(text("SELECT count(*) FROM studies"))
        assert 0.25 < time.monotonic() - t0 < 2.0
        assert is_busy_error(err.value)
        if sqlite:
            raw.rollback()
            raw.close()
        else:
            conn.rollback()
    with any_db.begin(busy_timeout=0.3) as s:
        assert s.execute(text("SELECT count(*) FROM studies")).scalar() == 0
