"""Write transactions that wait out a busy database: :func:`write_retrying`.

Writes never fail because another writer (an import, a scoring job, another rater) holds the
database for a moment: each one retries with backoff for up to ``SAVE_RETRY_SECONDS`` (SQLite
"database is locked", PostgreSQL serialization failures, deadlocks, lock timeouts) and only
then raises :class:`SaveFailed`, whose message tells the user that nothing was stored. A full
disk is not retried: :class:`StorageFull`.

Every service that writes on a user's click (rating, error records, pairwise judgements,
flags, ...) runs its transaction through :func:`write_retrying`.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.exc import DBAPIError

from radconcord.backend.errors import ServiceError
from radconcord.db.session import (
    Database,
    DatabaseBusy,
    is_busy_error,
    is_storage_full,
    storage_location,
)

log = logging.getLogger(__name__)

# How long a write keeps retrying while other writers hold the database, then gives up.
SAVE_RETRY_SECONDS = 5.0
# The longest one attempt waits for the lock (PostgreSQL): a few attempts fit in the window.
_ATTEMPT_SECONDS = 1.5
# On SQLite an attempt waits this long in the busy handler (polls after 1, 2, 5, 10 ms),
# then the next attempt follows at once: a tight poll that finds the gaps between batches.
_SQLITE_POLL_SECONDS = 0.02
_T = TypeVar("_T")

BUSY_MESSAGE = "Not saved: the database is busy; your count is kept, try again"
BUSY_ACTION_MESSAGE = "Not saved: the database is busy; nothing was changed, try again"
STORAGE_FULL_MESSAGE = ("Not saved: the server's storage is full. Tell the study's "
                        "administrator")


class SaveFailed(ServiceError):
    """A write gave up after ``SAVE_RETRY_SECONDS`` of a busy database; nothing was stored."""

    def __init__(self, message: str = BUSY_MESSAGE) -> None:
        super().__init__(message)


class StorageFull(ServiceError):
    """A write failed because the database's storage is full; nothing was stored.

    Not retried within the request (the disk will not empty in seconds); the grid keeps the
    change and sends it again later, as it does for a busy database.
    """

    def __init__(self, message: str = STORAGE_FULL_MESSAGE) -> None:
        super().__init__(message)


def write_retrying(db: Database, work: Callable[[Any], _T], *, what: str,
                   budget: float | None = None, message: str = BUSY_ACTION_MESSAGE) -> _T:
    """Run ``work(session)`` in a write transaction, retrying while the database is busy.

    PostgreSQL queues lock waiters fairly, so an attempt simply waits (at most
    ``_ATTEMPT_SECONDS``) and is retried after a backoff (50 ms doubling to 500 ms, with
    jitter). SQLite has no queue: a writer waiting in its busy handler sleeps up to 100 ms
    between polls, and a process writing batch after batch (an import, the scoring worker)
    takes the lock again before it looks. There an attempt waits only ``_SQLITE_POLL_SECONDS``
    and the next follows a few milliseconds later, so a save gets in at the first gap
    between two batches. Either way the attempts stop ``budget`` seconds after the first.

    Args:
        db: the study database.
        work: the transaction's body; called again on each attempt with a fresh session.
        what: what is being saved, for the log.
        budget: seconds to keep trying; ``SAVE_RETRY_SECONDS`` when None.
        message: the :class:`SaveFailed` message when the budget runs out.

    Raises:
        SaveFailed: the database stayed busy for the whole budget.
        StorageFull: the database's storage is full (logged as one line naming the folder).
        ServiceError: whatever ``work`` raises (not retried).
    """
    budget = SAVE_RETRY_SECONDS if budget is None else budget
    sqlite = db.engine.dialect.name == "sqlite"
    start = time.monotonic()
    deadline = start + budget
    delay = 0.05
    attempts = 0
    while True:
        attempts += 1
        cap = _SQLITE_POLL_SECONDS if sqlite else _ATTEMPT_SECONDS
        wait = max(0.005, min(deadline - time.monotonic(), cap))
        try:
            with db.begin(busy_timeout=wait) as s:
                return work(s)
        except (DBAPIError, DatabaseBusy, OSError) as exc:
            if is_storage_full(exc):
                log.error("%s not saved: storage full (%s): %s", what, storage_location(db),
                          getattr(exc, "orig", exc))
                raise StorageFull() from None
            if isinstance(exc, OSError) or not is_busy_error(exc):
                raise
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning("%s not saved: database busy for %.1f s (%d attempts): %s",
                            what, time.monotonic() - start, attempts, exc)
                raise SaveFailed(message) from None
            pause = random.uniform(0.001, 0.004) if sqlite else delay * (0.5 + random.random())
            time.sleep(min(pause, left))
            delay = min(delay * 2, 0.5)


__all__ = [
    "BUSY_ACTION_MESSAGE",
    "BUSY_MESSAGE",
    "SAVE_RETRY_SECONDS",
    "STORAGE_FULL_MESSAGE",
    "SaveFailed",
    "StorageFull",
    "write_retrying",
]
