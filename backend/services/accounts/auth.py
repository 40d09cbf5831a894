"""Accounts: create users, check passwords (argon2id), list users, manage and change passwords.

Password hashing takes ~0.2 s of CPU by design, so it always runs outside the database
transaction: on SQLite every transaction holds the single write lock, and raters saving counts
must not wait behind someone logging in.

Account changes that must end access (a deactivation, a password reset or change) revoke the
account's database sessions (``AuthSession``) in the same transaction as the change, so no
remembered browser or open tab outlives it: the router checks its session row on every run.

An admin may hand out a *one-time password* (on creation or by a reset): the account is marked
``must_change_password`` and the app shows only "My account" until its owner has chosen a new
password with :func:`change_own_password`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import re
import secrets
from dataclasses import dataclass

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from radconcord.backend import clock
from radconcord.backend.errors import (
    InvalidInput,
    NotFound,
    PermissionDenied,
    require_admin,
)
from radconcord.backend.services.accounts import demo_accounts
from radconcord.backend.types import ROLES, Actor
from radconcord.db.models import AuthSession, User
from radconcord.db.session import Database

log = logging.getLogger(__name__)

MIN_PASSWORD_LENGTH = 8
MAX_PASSWORD_LENGTH = 1024
USERNAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")

# One-time passwords: groups of characters a person can read aloud and type without
# confusing 0/O, 1/l/I or 5/S; 4 groups of 4 from 29 symbols is ~77 bits.
OTP_ALPHABET = "abcdefghjkmnpqrtuvwxyz2346789"
OTP_GROUPS = 4
OTP_GROUP_LENGTH = 4

# AuthSession.revoked_reason values set here (String(32)).
REVOKED_DEACTIVATED = "account_deactivated"
REVOKED_PASSWORD_RESET = "password_reset"
REVOKED_PASSWORD_CHANGED = "password_changed"

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
    must_change_password: bool
    password_changed_at: dt.datetime | None
    created_at: dt.datetime


@dataclass(frozen=True)
class OneTimePassword:
    """An account and the one-time password just given to it (shown once, never stored).

    Attributes:
        user: The account after the change.
        password: The generated password in clear text; only its hash is in the database.
    """

    user: UserInfo
    password: str


def _info(user: User) -> UserInfo:
    return UserInfo(
        user_id=user.id,
        username=user.username,
        display_name=user.display_name,
        role=user.role,
        active=user.active,
        must_change_password=bool(user.must_change_password),
        password_changed_at=user.password_changed_at,
        created_at=user.created_at,
    )


def generate_one_time_password() -> str:
    """A random, readable password such as ``k7mq-x4tz-9hbw-pe3r`` (19 characters)."""
    return "-".join(
        "".join(secrets.choice(OTP_ALPHABET) for _ in range(OTP_GROUP_LENGTH))
        for _ in range(OTP_GROUPS)
    )


def _check_password(password: str, *, username: str, allow_demo_of: str | None = None) -> None:
    """Refuse a password a user may not choose; messages start with ``password:``.

    Args:
        password: the candidate password.
        username: the account it is for (the password may not equal it).
        allow_demo_of: a demo account allowed to get its own published demo password (only
            demo seeding by the system actor does this).
    """
    if not isinstance(password, str) or len(password) < MIN_PASSWORD_LENGTH:
        raise InvalidInput(f"password: must be at least {MIN_PASSWORD_LENGTH} characters")
    if len(password) > MAX_PASSWORD_LENGTH:
        raise InvalidInput(f"password: must be at most {MAX_PASSWORD_LENGTH} characters")
    if password.strip().lower() == (username or "").strip().lower():
        raise InvalidInput("password: must not be the username")
    demo_owner = demo_accounts.demo_password_owners().get(password)
    if demo_owner is not None and (allow_demo_of or "").lower() != demo_owner.lower():
        raise InvalidInput("password: this is a published demo password; choose another")


def _require_live_admin(s: object, actor: Actor) -> None:
    """Admin role, and (unless it is the system actor) an active admin row in the database."""
    require_admin(actor)
    if actor == Actor.system():
        return
    user = s.get(User, actor.user_id)  # type: ignore[attr-defined]
    if user is None or not user.active or user.role != "admin":
        raise PermissionDenied("this action needs an active admin account")


def _find_user(s: object, username: str) -> User:
    user = s.scalar(  # type: ignore[attr-defined]
        select(User).where(func.lower(User.username) == (username or "").lower())
    )
    if user is None:
        raise NotFound(f"no account named {username!r}")
    return user


def revoke_user_sessions(s: Session, user_id: int, reason: str, *,
                         keep_session_id: int | None = None) -> int:
    """End every session of an account inside the caller's transaction.

    For deactivation and password changes: the account's open tabs lose access on their
    next action and no remembered browser logs in again.

    Args:
        s: The caller's SQLAlchemy session (its transaction commits the change).
        user_id: The account.
        reason: Why (stored, at most 32 characters), e.g. ``"deactivated"``.
        keep_session_id: A session to keep (the tab where users changed their own password);
            it is re-stamped with the account's current password hash, so call this after
            setting the new hash in ``s``.

    Returns:
        How many sessions were ended.
    """
    now = clock.utcnow()
    condition = [AuthSession.user_id == user_id, AuthSession.revoked_at.is_(None)]
    if keep_session_id is not None:
        condition.append(AuthSession.id != keep_session_id)
    result = s.execute(update(AuthSession).where(*condition).values(
        revoked_at=now, revoked_reason=reason[:32], ticket_sha256=None, ticket_expires_at=None
    ).execution_options(synchronize_session=False))
    if keep_session_id is not None:
        user = s.get(User, user_id)
        if user is not None:
            s.execute(update(AuthSession).where(
                AuthSession.id == keep_session_id, AuthSession.user_id == user_id).values(
                credential_stamp=credential_stamp(user.password_hash)
            ).execution_options(synchronize_session=False))
    ended = int(result.rowcount or 0)
    log.info("ended %d session(s) of user %s (%s)", ended, user_id, reason)
    return ended


def _guard_last_admin(s: object, user: User, action: str) -> None:
    """Refuse to leave the study without an active admin."""
    if user.role != "admin" or not user.active:
        return
    # Locks the admin rows on PostgreSQL so two admins cannot remove each other at once
    # (SQLite serialises writers already).
    others = s.scalars(  # type: ignore[attr-defined]
        select(User.id)
        .where(User.role == "admin", User.active.is_(True), User.id != user.id)
        .with_for_update()
    ).all()
    if not others:
        raise PermissionDenied(
            f"cannot {action} {user.username!r}: it is the last active admin account"
        )


def create_user(
    db: Database,
    actor: Actor,
    *,
    username: str,
    password: str,
    role: str,
    display_name: str = "",
    must_change_password: bool = False,
) -> UserInfo:
    """Create an account with a password chosen by the caller.

    Only admins may create accounts; the first admin is bootstrapped by the command line or
    the demo seeding with ``Actor.system()``. Published demo passwords are refused, except
    the system actor giving a demo account its own demo password (demo seeding).

    Args:
        db: the study database.
        actor: an admin, or ``Actor.system()``.
        username: 1-64 characters of letters, digits, ``_``, ``.``, ``-``.
        password: at least 8 characters, not the username.
        role: ``admin`` or ``rater``.
        display_name: shown in progress tables (defaults to the username).
        must_change_password: the owner must choose a new password at first login.

    Returns:
        The new account.

    Raises:
        PermissionDenied: the actor is not an active admin.
        InvalidInput: a field is malformed or the username is taken.
    """
    require_admin(actor)
    if not isinstance(username, str) or not USERNAME_RE.fullmatch(username):
        raise InvalidInput(
            "username: use 1-64 letters, digits, '_', '.' or '-' (starting with a letter or digit)"
        )
    if role not in ROLES:
        raise InvalidInput(f"role: must be one of {', '.join(ROLES)}, got {role!r}")
    _check_password(
        password, username=username, allow_demo_of=username if actor == Actor.system() else None
    )
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
            must_change_password=must_change_password,
        )
        s.add(user)
        s.flush()
        info = _info(user)
    log.info("%s created %s account %s", actor.username, role, username)
    return info


def create_user_with_one_time_password(
    db: Database, actor: Actor, *, username: str, role: str, display_name: str = ""
) -> OneTimePassword:
    """Create an account with a generated one-time password (admin only).

    The owner must choose a new password at first login. The password is returned once, for
    the admin to hand over; only its hash is stored.

    Raises:
        PermissionDenied: the actor is not an active admin.
        InvalidInput: a field is malformed or the username is taken.
    """
    password = generate_one_time_password()
    info = create_user(
        db, actor, username=username, password=password, role=role,
        display_name=display_name, must_change_password=True,
    )
    return OneTimePassword(user=info, password=password)


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
    with db.read() as s:
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
        must_change_password: The account must choose a new password before anything else.
    """

    actor: Actor
    credential_stamp: str
    must_change_password: bool = False


def credential_stamp(password_hash: str) -> str:
    """A short digest of a password hash: it changes whenever the password changes."""
    return hashlib.sha256(password_hash.encode("utf-8")).hexdigest()[:16]


def session_user(db: Database, *, user_id: int) -> SessionUser | None:
    """The active account with this id, or ``None`` if it is gone or deactivated."""
    with db.read() as s:
        row = s.execute(
            select(
                User.id, User.username, User.role, User.password_hash, User.active,
                User.must_change_password,
            ).where(User.id == user_id)
        ).first()
    if row is None or not row.active:
        return None
    return SessionUser(
        Actor(user_id=row.id, username=row.username, role=row.role),
        credential_stamp(row.password_hash),
        bool(row.must_change_password),
    )


def list_users(db: Database, actor: Actor) -> list[UserInfo]:
    """All accounts, admins first, then by username (admin only).

    Raises:
        PermissionDenied: the actor is not an active admin.
    """
    require_admin(actor)
    # A read session: listing accounts never waits for (or holds) the SQLite write lock.
    with db.read() as s:
        _require_live_admin(s, actor)
        users = s.scalars(select(User).order_by(User.role, User.username)).all()
        return [_info(u) for u in users]


def set_password(db: Database, actor: Actor, *, username: str, password: str) -> None:
    """Set a password: admins for anyone, any user for their own account.

    Every session of the account is revoked. A password an admin sets for someone else is
    known to the admin, so its owner must change it at first login. Users changing their own
    password in the app use :func:`change_own_password`, which also checks the current one.

    Raises:
        PermissionDenied: a non-admin changes someone else's password, or the actor's
            account is no longer active.
        NotFound: no such account.
        InvalidInput: the password is too short, is the username or a demo password.
    """
    own = actor.username.lower() == (username or "").lower()
    if not actor.is_admin and not own:
        raise PermissionDenied("you can only change your own password")
    _check_password(password, username=username)
    new_hash = _hasher.hash(password)
    with db.begin() as s:
        if actor.is_admin:
            _require_live_admin(s, actor)
        else:
            me = s.get(User, actor.user_id)
            if me is None or not me.active:
                raise PermissionDenied("this account is no longer active")
        user = _find_user(s, username)
        user.password_hash = new_hash
        user.password_changed_at = clock.utcnow()
        user.must_change_password = not own
        revoke_user_sessions(
            s, user.id, reason=REVOKED_PASSWORD_CHANGED if own else REVOKED_PASSWORD_RESET
        )
    log.info("password set for %s by %s", username, actor.username)


def reset_password(db: Database, actor: Actor, *, username: str) -> OneTimePassword:
    """Give an account a new one-time password (admin only) and end all its sessions.

    The owner must choose a new password at the next login. Admins change their own password
    on "My account" instead (a reset would log them out).

    Args:
        db: the study database.
        actor: an active admin, or ``Actor.system()`` (command line).
        username: the account to reset (case-insensitive).

    Returns:
        The account and its one-time password (shown once, only its hash is stored).

    Raises:
        PermissionDenied: the actor is not an active admin, or resets their own account.
        NotFound: no such account.
    """
    require_admin(actor)
    if actor != Actor.system() and actor.username.lower() == (username or "").lower():
        raise PermissionDenied("you cannot reset your own password: change it on My account")
    password = generate_one_time_password()
    new_hash = _hasher.hash(password)
    with db.begin() as s:
        _require_live_admin(s, actor)
        user = _find_user(s, username)
        user.password_hash = new_hash
        user.password_changed_at = clock.utcnow()
        user.must_change_password = True
        revoked = revoke_user_sessions(s, user.id, reason=REVOKED_PASSWORD_RESET)
        s.flush()
        info = _info(user)
    log.info("password of %s reset by %s (%d sessions ended)", info.username, actor.username,
             revoked)
    return OneTimePassword(user=info, password=password)


def change_own_password(
    db: Database,
    actor: Actor,
    *,
    current_password: str,
    new_password: str,
    keep_session_id: int | None = None,
) -> UserInfo:
    """Change the actor's own password after checking the current one.

    Clears ``must_change_password`` and ends every other session of the account (other
    browsers, other tabs holding another session); ``keep_session_id`` (the session making
    the change) stays logged in.

    Args:
        db: the study database.
        actor: the logged-in user (any role).
        current_password: the password in use now (the one-time password after a reset).
        new_password: at least 8 characters, different from the current one, not the
            username, not a published demo password.
        keep_session_id: the ``AuthSession`` id of the browser making the change.

    Returns:
        The account after the change.

    Raises:
        PermissionDenied: the account is gone or deactivated.
        InvalidInput: the current password is wrong, or the new one is not allowed.
    """
    with db.read() as s:
        row = s.execute(
            select(User.username, User.password_hash, User.active).where(
                User.id == actor.user_id
            )
        ).first()
    if row is None or not row.active:
        raise PermissionDenied("this account is no longer active")
    try:
        _hasher.verify(row.password_hash, current_password or "")
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        log.warning("wrong current password in a password change of %s", row.username)
        raise InvalidInput("current password: wrong password") from None
    if new_password == current_password:
        raise InvalidInput("new password: must differ from the current password")
    try:
        _check_password(new_password, username=row.username)
    except InvalidInput as exc:
        raise InvalidInput("new " + str(exc)) from None
    new_hash = _hasher.hash(new_password)
    with db.begin() as s:
        user = s.get(User, actor.user_id)
        if user is None or not user.active:
            raise PermissionDenied("this account is no longer active")
        # Another change (a reset, another tab) since we verified: the current password we
        # checked may no longer be the current one.
        if user.password_hash != row.password_hash:
            raise InvalidInput("current password: the password was changed meanwhile; log in "
                               "again")
        user.password_hash = new_hash
        user.password_changed_at = clock.utcnow()
        user.must_change_password = False
        revoked = revoke_user_sessions(
            s, user.id, reason=REVOKED_PASSWORD_CHANGED, keep_session_id=keep_session_id
        )
        s.flush()
        info = _info(user)
    log.info("%s changed their password (%d other sessions ended)", info.username, revoked)
    return info


def set_active(db: Database, actor: Actor, *, username: str, active: bool) -> UserInfo:
    """Enable or disable an account (admin only); disabled accounts cannot log in.

    Disabling ends every session of the account at once; enabling it again does not bring
    them back (its owner logs in again).

    Raises:
        PermissionDenied: the actor is not an active admin, disables their own account or the
            last active admin.
        NotFound: no such account.
    """
    require_admin(actor)
    if not active and actor.username.lower() == (username or "").lower():
        raise PermissionDenied("you cannot disable your own account")
    with db.begin() as s:
        _require_live_admin(s, actor)
        user = _find_user(s, username)
        revoked = 0
        if not active:
            _guard_last_admin(s, user, "deactivate")
            revoked = revoke_user_sessions(s, user.id, reason=REVOKED_DEACTIVATED)
        user.active = active
        s.flush()
        info = _info(user)
    log.info("%s %s account %s (%d sessions ended)", actor.username,
             "reactivated" if active else "deactivated", info.username, revoked)
    return info


def set_role(db: Database, actor: Actor, *, username: str, role: str) -> UserInfo:
    """Make an account an admin or a rater (admin only).

    The new role applies on the account's next action: pages and services read the role
    from the database, not from the browser session.

    Raises:
        PermissionDenied: the actor is not an active admin, changes their own role, or
            demotes the last active admin.
        NotFound: no such account.
        InvalidInput: an unknown role.
    """
    require_admin(actor)
    if role not in ROLES:
        raise InvalidInput(f"role: must be one of {', '.join(ROLES)}, got {role!r}")
    if actor.username.lower() == (username or "").lower():
        raise PermissionDenied("you cannot change your own role")
    with db.begin() as s:
        _require_live_admin(s, actor)
        user = _find_user(s, username)
        if user.role == "admin" and role != "admin":
            _guard_last_admin(s, user, "demote")
        user.role = role
        s.flush()
        info = _info(user)
    log.info("%s made %s a %s", actor.username, info.username, role)
    return info
