"""The one home of the application's clock: aware UTC datetimes, in and out of the database.

Every timestamp RadConcord stores is UTC. SQLite hands datetimes back naive, PostgreSQL aware;
:func:`as_utc` makes either comparable. Tests that move time patch :func:`utcnow` here.
"""

from __future__ import annotations

import datetime as dt
from typing import overload

__all__ = ["as_utc", "utcnow"]


def utcnow() -> dt.datetime:
    """Timezone-aware current time in UTC."""
    return dt.datetime.now(dt.UTC)


@overload
def as_utc(value: dt.datetime) -> dt.datetime: ...
@overload
def as_utc(value: None) -> None: ...
@overload
def as_utc(value: dt.datetime | None) -> dt.datetime | None: ...


def as_utc(value: dt.datetime | None) -> dt.datetime | None:
    """``value`` as an aware UTC datetime (SQLite hands back naive datetimes, stored as UTC).

    Args:
        value: A naive datetime (read as UTC), an aware one (converted), or None.

    Returns:
        The aware UTC datetime, or None for None.
    """
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC)
