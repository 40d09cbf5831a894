"""What every command module shares: the user-error type, error mapping, the database.

Imports nothing heavy: ``python -m backend --help`` imports every command module.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from radconcord.db.session import Database


class UserError(Exception):
    """An error caused by the user's input; printed as one line, exit status 2."""


@contextlib.contextmanager
def user_errors(*types: type[BaseException]) -> Iterator[None]:
    """Turn the given exceptions raised in the block into :class:`UserError`.

    The error's message becomes the one-line ``error: ...`` the command line prints; the
    traceback is dropped because the message alone names what to fix.

    Args:
        types: Exception classes whose message is meant for the user.
    """
    try:
        yield
    except types as exc:
        raise UserError(str(exc)) from None


@contextlib.contextmanager
def database(url: str | None = None) -> Iterator[Database]:
    """The study database for one command, disposed of when the command ends.

    Args:
        url: Database URL; ``None`` takes ``DATABASE_URL`` or the data folder's SQLite file.

    Raises:
        UserError: The SQLite database's folder is missing and cannot be created, or is
            not writable (the message names the folder and the problem).
    """
    # SQLAlchemy and the models load only when a command opens the database.
    from radconcord.db.session import Database, DataFolderError

    try:
        db = Database(url)
    except DataFolderError as exc:
        raise UserError(str(exc)) from None
    try:
        yield db
    finally:
        db.dispose()


def service_errors() -> contextlib.AbstractContextManager[None]:
    """:func:`user_errors` for the services' errors (``ServiceError`` and its subclasses)."""
    from radconcord.backend.errors import ServiceError

    return user_errors(ServiceError)
