"""Engine and session factory for SQLite (WAL, busy timeout) and PostgreSQL.

Services create one session per user action (``with db.begin() as s:``); nothing here keeps
a session alive between actions.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.orm import Session, sessionmaker

from backend import config

SQLITE_BUSY_TIMEOUT_MS = 15_000
# PostgreSQL errors that mean "another transaction was in the way; the same work can simply be
# run again": serialization failure, deadlock detected, lock not available (lock_timeout).
PG_RETRYABLE_SQLSTATES = frozenset({"40001", "40P01", "55P03"})


class DatabaseBusy(Exception):
    """A write could not start within its time limit because other writers held the database.

    Raised by ``Database.begin(busy_timeout=...)`` when the writers of this process did not
    let go in time; the SQLite or PostgreSQL "busy" errors of a timed-out lock wait are
    recognised by :func:`is_busy_error`.
    """


def is_busy_error(exc: BaseException) -> bool:
    """Whether ``exc`` means the database was busy (retrying the transaction may succeed).

    True for :class:`DatabaseBusy`, SQLite's "database is locked"/"database is busy", and
    PostgreSQL serialization failures, deadlocks and lock timeouts.
    """
    if isinstance(exc, DatabaseBusy):
        return True
    orig = getattr(exc, "orig", None)
    if orig is None:
        return False
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if state in PG_RETRYABLE_SQLSTATES:
        return True
    if type(orig).__module__.startswith("sqlite3"):
        text = str(orig).lower()
        return "database is locked" in text or "database is busy" in text or (
            "locked" in text and "table" in text)
    return False
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def make_engine(url: str | None = None, *, echo: bool = False) -> Engine:
    """Create an engine for ``url`` (default: ``config.database_url()``).

    SQLite gets WAL journaling, ``synchronous=NORMAL``, foreign keys and a busy timeout so
    that raters writing at once wait for each other instead of failing.
    """
    url = url or config.database_url()
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url,
            echo=echo,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False},
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):  # noqa: ANN001
            # pysqlite's implicit BEGIN breaks SAVEPOINT and delays the write lock; take
            # control of transactions so BEGIN IMMEDIATE avoids upgrade deadlocks.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cur.close()

        @event.listens_for(engine, "begin")
        def _sqlite_begin(conn):  # noqa: ANN001
            # Writers take the write lock up front (no deadlock on lock upgrade); readers use
            # a deferred BEGIN, which under WAL never waits for or blocks a writer.
            options = conn.get_execution_options()
            if options.get("readonly"):
                conn.exec_driver_sql("BEGIN")
            else:
                # A write with a deadline (a rater's save) waits for the lock at most that
                # long; every other write gets the default back (pooled connections are
                # shared).
                wait_ms = int(options.get("busy_timeout_ms", SQLITE_BUSY_TIMEOUT_MS))
                conn.exec_driver_sql(f"PRAGMA busy_timeout={max(wait_ms, 1)}")
                conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    # 20 raters + a worker + dashboard fragments exceed the default 5+10 pool.
    return create_engine(url, echo=echo, pool_pre_ping=True, pool_size=10, max_overflow=20)


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    """Session factory; ``expire_on_commit=False`` so services can return loaded values."""
    return sessionmaker(engine, expire_on_commit=False)


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to ``revision`` (default: the latest Alembic revision)."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    sqlite = engine.dialect.name == "sqlite"
    with engine.connect() as conn:
        raw = conn.connection.driver_connection if sqlite else None
        if raw is not None:
            # SQLite changes a constraint by copying the table, dropping the old one and
            # renaming the copy; with foreign keys on, the drop would cascade into (and
            # delete) every row that references it. The pragma only works outside a
            # transaction, so it is set on the raw connection before BEGIN.
            raw.execute("PRAGMA foreign_keys=OFF")
        try:
            with conn.begin():
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, revision)
                if sqlite:
                    broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                    if broken:
                        raise RuntimeError(f"migration left broken foreign keys: {broken[:5]}")
        finally:
            if raw is not None:
                raw.execute("PRAGMA foreign_keys=ON")


class Database:
    """An engine plus its session factory: what services are given."""

    def __init__(self, url: str | None = None, *, migrate: bool = True) -> None:
        self.url = url or config.database_url()
        self.engine = make_engine(self.url)
        if migrate:
            upgrade(self.engine)
        self.sessions = make_sessionmaker(self.engine)
        self._read_sessions = make_sessionmaker(self.engine.execution_options(readonly=True))
        # SQLite admits one writer; a waiting connection polls with sleeps of up to 100 ms,
        # which gives 20 concurrent raters a long latency tail. Writers of this process queue
        # on a lock instead (other processes, e.g. the worker, still use the busy timeout).
        self._write_gate = threading.RLock() if self.engine.dialect.name == "sqlite" else None
        # The session every read() of a thread uses while it is inside snapshot().
        self._pinned = threading.local()

    @contextlib.contextmanager
    def begin(self, *, busy_timeout: float | None = None) -> Iterator[Session]:
        """A session in a transaction that commits on success and rolls back on error.

        Args:
            busy_timeout: The most seconds to wait for other writers before giving up (a
                rater's save retries rather than hang). ``None``: the default waits (the
                SQLite busy timeout, no PostgreSQL lock timeout).

        Raises:
            DatabaseBusy: the writers of this process held the database past
                ``busy_timeout``. Lock waits past it in the database itself raise the
                driver's error, recognised by :func:`is_busy_error`.
        """
        if busy_timeout is None:
            if self._write_gate is None:
                with self.sessions.begin() as s:
                    yield s
                return
            with self._write_gate, self.sessions.begin() as s:
                yield s
            return
        deadline = time.monotonic() + busy_timeout
        if self._write_gate is None:
            with self.sessions.begin() as s:
                # Row locks (another tab of the same rater) wait at most the deadline.
                ms = max(1, int(busy_timeout * 1000))
                s.execute(text(f"SET LOCAL lock_timeout = {ms}"))
                yield s
            return
        if not self._write_gate.acquire(timeout=max(busy_timeout, 0.0)):
            raise DatabaseBusy(f"no write access within {busy_timeout:.1f} s")
        try:
            remaining_ms = max(1, int((deadline - time.monotonic()) * 1000))
            bound = self.engine.execution_options(busy_timeout_ms=remaining_ms)
            with Session(bound, expire_on_commit=False) as s, s.begin():
                yield s
        finally:
            self._write_gate.release()

    def read(self):  # noqa: ANN201 - context manager of Session
        """A session for reads only: on SQLite it neither takes nor waits for the write lock.

        Writing through it is a bug; on SQLite the write would fail or wait at commit.
        Inside :meth:`snapshot` (same thread) it is the snapshot's session.
        """
        pinned = getattr(self._pinned, "session", None)
        if pinned is not None:
            return contextlib.nullcontext(pinned)
        return self._read_sessions.begin()

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Make every :meth:`read` of this thread inside the block one read transaction.

        What is read inside sees the database as it was at the first read, whatever is
        written meanwhile: the files of one export agree with each other. SQLite (WAL) keeps
        a deferred read transaction's snapshot from its first read and never blocks a writer;
        PostgreSQL gets ``REPEATABLE READ``. Writes (:meth:`begin`) are not affected. Nested
        blocks share the outer snapshot.
        """
        if getattr(self._pinned, "session", None) is not None:
            yield
            return
        options: dict[str, object] = {"readonly": True}
        if self.engine.dialect.name == "postgresql":
            options["isolation_level"] = "REPEATABLE READ"
        with Session(self.engine.execution_options(**options), expire_on_commit=False) as s, \
                s.begin():
            self._pinned.session = s
            try:
                yield
            finally:
                self._pinned.session = None

    def session(self) -> Session:
        """A plain session (read-only use)."""
        return self.sessions()

    def dispose(self) -> None:
        """Close pooled connections."""
        self.engine.dispose()
