"""Accounts: create users, check passwords (argon2id), list users, change passwords.

Password hashing takes ~0.2 s of CPU by design, so it always runs outside the database
transaction: on SQLite every transaction holds the single write lock, and raters saving counts
must not wait behind someone logging in.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import re
from dataclasses import dataclass

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError
from sqlalchemy import func, select

from backend.services.errors import InvalidInput, NotFound, PermissionDenied, require_admin
from backend.services.types import ROLES, Actor
from db.models import User
from db.session import Database

log = logging.getLogger(__name__)

MIN_PASSWORD_LENGTH = 8
USERNAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

# argon2-cffi defaults (argon2id, RFC 9106 low-memory profile). Module-level so that every
# call shares the parameters that check_needs_rehash compares against.
_hasher = PasswordHasher()
_dummy_hash: str | None = None


@dataclass(frozen=True)
class UserInfo:
    """An account as admins see it (never the password hash)."""

    user_id: int
    username: str
    display_name: str
    role: str
    active: bool
    created_at: dt.datetime


def _info(user: User) -> UserInfo:
    return UserInfo(
        user_id=user.id,
        username=user.username,
        display_name=user.display_name,
        role=user.role,
        active=user.active,
        created_at=user.created_at,
    )


def _check_password(password: str) -> None:
    if not isinstance(password, str) or len(password) < MIN_PASSWORD_LENGTH:
        raise InvalidInput(f"password: must be at least {MIN_PASSWORD_LENGTH} characters")
    if len(password) > 1024:
        raise InvalidInput("password: must be at most 1024 characters")


def _require_live_admin(s: object, actor: Actor) -> None:
    """Admin role, and (unless it is the system actor) an active admin row in the database."""
    require_admin(actor)
    if actor == Actor.system():
        return
    user = s.get(User, actor.user_id)  # type: ignore[attr-defined]
    if user is None or not user.active or user.role != "admin":
        raise PermissionDenied("this action needs an active admin account")


def create_user(
    db: Database,
    actor: Actor,
    *,
    username: str,
    password: str,
    role: str,
    display_name: str = "",
) -> UserInfo:
    """Create an account.

    Only admins may create accounts; the first admin is bootstrapped by the command line or
    the demo seeding with ``Actor.system()``.

    Args:
        db: the study database.
        actor: an admin, or ``Actor.system()``.
        username: 1-64 characters of letters, digits, ``_``, ``.``, ``-``.
        password: at least 8 characters.
        role: ``admin`` or ``rater``.
        display_name: shown in progress tables (defaults to the username).

    Returns:
        The new account.

    Raises:
        PermissionDenied: the actor is not an admin.
        InvalidInput: a field is malformed or the username is taken.
    """
    require_admin(actor)
    if not isinstance(username, str) or not USERNAME_RE.match(username):
        raise InvalidInput(
            "username: use 1-64 letters, digits, '_', '.' or '-' (starting with a letter or digit)"
        )
    if role not in ROLES:
        raise InvalidInput(f"role: must be one of {', '.join(ROLES)}, got {role!r}")
    _check_password(password)
    password_hash = _hasher.hash(password)
    with db.begin() as s:
        _require_live_admin(s, actor)
        exists = s.scalar(select(User.id).where(func.lower(User.username) == username.lower()))
        if exists is not None:
            raise InvalidInput(f"username: {username!r} is already taken")
        user = User(
            username=username,
            display_name=display_name or username,
            role=role,
            password_hash=password_hash,
            active=True,
        )
        s.add(user)
        s.flush()
        info = _info(user)
    log.info("created %s account %s", role, username)
    return info


def authenticate(db: Database, *, username: str, password: str) -> Actor | None:
    """Check a username and password.

    Unknown or inactive accounts still cost one argon2 verification, so response time does
    not reveal which usernames exist. A hash made with older parameters is upgraded.

    Args:
        db: the study database.
        username: the account name (case-insensitive).
        password: the password as typed.

    Returns:
        The actor for the account, or ``None`` when the credentials are wrong.
    """
    global _dummy_hash
    with db.begin() as s:
        row = s.execute(
            select(User.id, User.username, User.role, User.password_hash, User.active).where(
                func.lower(User.username) == (username or "").lower()
            )
        ).first()
    if row is None or not row.active:
        if _dummy_hash is None:
            _dummy_hash = _hasher.hash("radconcord-timing-equaliser")
        try:
            _hasher.verify(_dummy_hash, password or "")
        except VerificationError:
            pass
        return None
    try:
        _hasher.verify(row.password_hash, password or "")
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return None
    if _hasher.check_needs_rehash(row.password_hash):
        new_hash = _hasher.hash(password)
        with db.begin() as s:
            user = s.get(User, row.id)
            # Only replace the hash we verified; a concurrent password change wins.
            if user is not None and user.password_hash == row.password_hash:
                user.password_hash = new_hash
        log.info("upgraded password hash of %s", row.username)
    return Actor(user_id=row.id, username=row.username, role=row.role)


@dataclass(frozen=True)
class SessionUser:
    """An active account for restoring a remembered browser session.

    Attributes:
        actor: The account as an actor (current role).
        credential_stamp: Changes whenever the password changes; a remembered session issued
            under another stamp must not be restored.
    """

    actor: Actor
    credential_stamp: str


def session_user(db: Database, *, user_id: int) -> SessionUser | None:
    """The active account with this id, or ``None`` if it is gone or deactivated."""
    with db.read() as s:
        row = s.execute(
            select(User.id, User.username, User.role, User.password_hash, User.active)
            .where(User.id == user_id)
        ).first()
    if row is None or not row.active:
        return None
    stamp = hashlib.sha256(row.password_hash.encode("utf-8")).hexdigest()[:16]
    return SessionUser(Actor(user_id=row.id, username=row.username, role=row.role), stamp)


def list_users(db: Database, actor: Actor) -> list[UserInfo]:
    """All accounts, admins first, then by username (admin only).

    Raises:
        PermissionDenied: the actor is not an admin.
    """
    require_admin(actor)
    with db.begin() as s:
        _require_live_admin(s, actor)
        users = s.scalars(select(User).order_by(User.role, User.username)).all()
        return [_info(u) for u in users]


def set_password(db: Database, actor: Actor, *, username: str, password: str) -> None:
    """Change a password: admins for anyone, any user for their own account.

    Raises:
        PermissionDenied: a non-admin changes someone else's password.
        NotFound: no such account.
        InvalidInput: the password is too short.
    """
    if not actor.is_admin and actor.username.lower() != (username or "").lower():
        raise PermissionDenied("you can only change your own password")
    _check_password(password)
    new_hash = _hasher.hash(password)
    with db.begin() as s:
        if actor.is_admin:
            _require_live_admin(s, actor)
        user = s.scalar(select(User).where(func.lower(User.username) == username.lower()))
        if user is None:
            raise NotFound(f"no account named {username!r}")
        user.password_hash = new_hash
    log.info("password changed for %s by %s", username, actor.username)


def set_active(db: Database, actor: Actor, *, username: str, active: bool) -> UserInfo:
    """Enable or disable an account (admin only); disabled accounts cannot log in.

    Raises:
        PermissionDenied: the actor is not an admin, or disables their own account.
        NotFound: no such account.
    """
    require_admin(actor)
    if not active and actor.username.lower() == (username or "").lower():
        raise PermissionDenied("you cannot disable your own account")
    with db.begin() as s:
        _require_live_admin(s, actor)
        user = s.scalar(select(User).where(func.lower(User.username) == username.lower()))
        if user is None:
            raise NotFound(f"no account named {username!r}")
        user.active = active
        s.flush()
        return _info(user)
