"""Engine and session factory for SQLite (WAL, busy timeout) and PostgreSQL.

Services create one session per user action (``with db.begin() as s:``); nothing here keeps
a session alive between actions.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn, TypeVar

from sqlalchemy import Engine, create_engine, event, make_url, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from radconcord.backend import config

SQLITE_BUSY_TIMEOUT_MS = 15_000
# PostgreSQL errors that mean "another transaction was in the way; the same work can simply be
# run again": serialization failure, deadlock detected, lock not available (lock_timeout).
PG_RETRYABLE_SQLSTATES = frozenset({"40001", "40P01", "55P03"})
# Exit status of a server that cannot start because its database folder is unusable (the
# command line's exit status for errors the user can fix).
DATA_FOLDER_EXIT_STATUS = 2

T = TypeVar("T")
# PostgreSQL's disk_full: the server could not extend a file.
PG_DISK_FULL_SQLSTATE = "53100"


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
def is_storage_full(exc: BaseException) -> bool:
    """Whether ``exc`` means the database's storage is full (retrying now will not help).

    True for SQLite's ``SQLITE_FULL`` ("database or disk is full", also what a database at
    its ``max_page_count`` answers), PostgreSQL's ``disk_full`` (SQLSTATE 53100) and an
    ``OSError`` with ``ENOSPC``.
    """
    import errno

    if isinstance(exc, OSError):
        return exc.errno == errno.ENOSPC
    orig = getattr(exc, "orig", None)
    if orig is None:
        return False
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if state == PG_DISK_FULL_SQLSTATE:
        return True
    if type(orig).__module__.startswith("sqlite3"):
        code = getattr(orig, "sqlite_errorcode", None)
        return code == 13 or "database or disk is full" in str(orig).lower()  # SQLITE_FULL
    return False


def storage_location(db: Database) -> str:
    """Where ``db`` keeps its data, for a log line: the SQLite file's folder, or the server."""
    url = db.engine.url
    if url.get_backend_name() == "sqlite":
        database = url.database or ""
        if database and database != ":memory:":
            return f"data folder {Path(database).resolve().parent}"
        return "in-memory SQLite database"
    return f"{url.get_backend_name()} server {url.host or 'localhost'}:{url.port or ''}".rstrip(":")


class DataFolderError(Exception):
    """The folder of the SQLite database cannot hold it.

    Missing and impossible to create (a parent is a file, or cannot be written), not a
    folder, or not writable (a read-only file system, no permission); or the database file
    itself is read-only. The message is one line naming the folder (or file) and the
    problem, e.g. ``data folder /srv/rc is not writable (read-only file system)``: the command
    line prints it as its error, a server stops with it (:func:`exit_on_data_folder_error`).
    """


def _reason(exc: OSError) -> str:
    text = exc.strerror or str(exc)
    return text[:1].lower() + text[1:]


def sqlite_file(url: str) -> Path | None:
    """The database file of a SQLite URL (``None``: not SQLite, or in memory)."""
    if not url.startswith("sqlite"):
        return None
    name = make_url(url).database
    if not name or name == ":memory:" or name.startswith("file:"):
        return None
    return Path(name).expanduser().resolve()


def data_folder_problem(db_file: Path) -> str | None:
    """Why SQLite cannot create or write ``db_file`` in its folder.

    The check writes a temporary file rather than asking ``os.access``: root passes every
    permission check but still cannot write to a read-only mount.

    Args:
        db_file: The SQLite database file.

    Returns:
        One line naming the folder (or the file) and the problem; ``None`` when the folder
        and the file look usable (the error that led here had another cause).
    """
    folder = db_file.parent
    label = "data folder" if folder == config.data_dir() else "database folder"
    try:
        if not folder.exists():
            ancestor = folder.parent
            while not ancestor.exists() and ancestor != ancestor.parent:
                ancestor = ancestor.parent
            if ancestor.exists() and not ancestor.is_dir():
                why = f"{ancestor} is a file, not a folder"
            else:
                try:
                    folder.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    why = f"cannot create {exc.filename or folder}: {_reason(exc)}"
                else:
                    return None
            return f"{label} {folder} does not exist and cannot be created ({why})"
        if not folder.is_dir():
            return f"{label} {folder} is a file, not a folder"
        try:
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as exc:
            return f"{label} {folder} is not writable ({_reason(exc)})"
        if db_file.is_dir():
            return f"database {db_file} is a folder, not a file"
        if db_file.exists() and not os.access(db_file, os.W_OK):
            return f"database {db_file} is read-only"
    except OSError as exc:
        # Looking itself failed (a parent that cannot be searched): that is the problem.
        return f"{label} {folder} cannot be used ({_reason(exc)})"
    return None


@contextlib.contextmanager
def data_folder_errors(url: str) -> Iterator[None]:
    """Turn the errors of an unusable SQLite folder raised in the block into one
    :class:`DataFolderError`.

    Creating the folder raises ``OSError``; SQLite says only "unable to open database file"
    or "attempt to write a readonly database" (SQLAlchemy's ``OperationalError``), without
    the folder or the cause, so the folder is examined here to name both. Errors that the
    folder does not explain (a locked or corrupt database, PostgreSQL) pass unchanged.

    Args:
        url: The database URL the block opens.
    """
    try:
        yield
    except (OSError, OperationalError) as exc:
        db_file = sqlite_file(url)
        if isinstance(exc, OperationalError) and not type(exc.orig).__module__.startswith(
                "sqlite3"):
            raise
        problem = data_folder_problem(db_file) if db_file is not None else None
        if problem is None:
            raise
        raise DataFolderError(problem) from None


def exit_on_data_folder_error(open_db: Callable[[], T]) -> T:
    """``open_db()``, or end the process with one line on stderr when it raises
    :class:`DataFolderError`.

    For a server's start (``webapp/server.py``'s lifespan): Starlette and uvicorn print
    every exception of the lifespan with its traceback, so the line is printed here and the
    process ends at once (nothing has been served yet), with exit status
    :data:`DATA_FOLDER_EXIT_STATUS`.

    Args:
        open_db: Opens (and migrates) the database; runs in any thread.
    """
    try:
        return open_db()
    except DataFolderError as exc:
        _exit_with(f"radconcord: {exc}")


def _exit_with(line: str) -> NoReturn:
    sys.stdout.flush()
    print(line, file=sys.stderr, flush=True)
    # os._exit, not sys.exit: SystemExit raised in the lifespan (or its worker thread) is
    # caught and printed with a traceback like any other exception.
    os._exit(DATA_FOLDER_EXIT_STATUS)


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
        with data_folder_errors(self.url):
            self.engine = make_engine(self.url)
            try:
                if migrate:
                    upgrade(self.engine)
            except BaseException:
                self.engine.dispose()
                raise
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
