"""Logged-in browsers and login attempts: database sessions, one-time tickets, throttling.

Nothing here imports Streamlit; ``webapp/state.py`` and the cookie routes of
``webapp/server.py`` call these services.

A login goes through three steps:

1. :func:`login` checks the password (``backend.services.accounts.auth.authenticate``) under the
   throttling rules and the "no known password from another computer" rule.
2. :func:`create_session` stores an :class:`~db.models.AuthSession` row and hands back a
   one-time *ticket* (random, only its sha256 stored, valid :data:`TICKET_TTL`). The page
   passes the ticket to the browser, which posts it to the server's cookie route.
3. :func:`exchange_ticket` burns the ticket and issues the cookie *token* (random, only its
   sha256 stored). The server sets it as an HttpOnly cookie; a reload finds the session again
   with :func:`resolve_token`.

While a browser session is open, the page re-checks its row before every action
(:func:`check_session`: one primary-key read joined with the account), so logout, a
deactivation, a password change or expiry end an open tab at once. Expiry slides forward by
:data:`SESSION_TTL` with use, written at most once per :data:`TOUCH_INTERVAL`.

Throttling counts failed logins per account (``user:<lowercased name>``) and per client
(``client:<address>``); from the :data:`MAX_FAILURES`-th failure on, the key is locked for
:data:`LOCK_BASE` doubling with every further failure, capped at :data:`LOCK_CAP`. A locked
login is refused without checking the password. A success clears both keys; failures older
than :data:`FAILURE_MEMORY` are forgotten.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import delete, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from radconcord.backend import clock
from radconcord.backend.errors import ServiceError
from radconcord.backend.services.accounts import auth, demo_accounts
from radconcord.backend.types import Actor
from radconcord.db.models import AuthSession, LoginThrottle, User
from radconcord.db.session import Database, DatabaseBusy, is_busy_error

log = logging.getLogger(__name__)

SESSION_TTL = dt.timedelta(hours=12)
TICKET_TTL = dt.timedelta(seconds=60)
# Sliding the expiry costs a write; once a minute keeps reruns read-only.
TOUCH_INTERVAL = dt.timedelta(minutes=1)
# How long sliding a session's expiry may wait for other writers before it is left for later.
TOUCH_BUSY_TIMEOUT_S = 0.5
MAX_FAILURES = 5
LOCK_BASE = dt.timedelta(seconds=30)
LOCK_CAP = dt.timedelta(minutes=15)
FAILURE_MEMORY = dt.timedelta(hours=1)
# Revoked and expired rows are kept this long (who was logged in when), then deleted.
KEEP_ENDED = dt.timedelta(days=30)
FORWARDING_HEADERS = ("x-forwarded-for", "forwarded", "x-real-ip")
WRONG_CREDENTIALS = "Unknown username or wrong password."


class LoginRefused(ServiceError):
    """A login attempt was refused; the message says why and what to do."""


class LoginLocked(LoginRefused):
    """Too many failed logins for this account or from this client.

    Attributes:
        locked_until: When the lock ends (aware UTC).
    """

    def __init__(self, message: str, locked_until: dt.datetime) -> None:
        super().__init__(message)
        self.locked_until = locked_until


@dataclass(frozen=True)
class Client:
    """Where a request comes from.

    Attributes:
        address: The client's address for throttling and logs: the peer, or the address a
            local reverse proxy forwarded.
        loopback: True only for a request from this machine that no proxy forwarded.
    """

    address: str
    loopback: bool


@dataclass(frozen=True)
class IssuedTicket:
    """A new session and the one-time ticket that turns into its cookie."""

    session_id: int
    ticket: str
    ticket_expires_at: dt.datetime


@dataclass(frozen=True)
class IssuedToken:
    """The cookie token of a session (the only time the plain token exists server-side)."""

    session_id: int
    token: str
    expires_at: dt.datetime


@dataclass(frozen=True)
class LiveSession:
    """A session that may act now.

    Attributes:
        session_id: The ``auth_sessions`` row (``None``: an actor without one, see
            :func:`check_session`).
        actor: The account with its current role.
        must_change_password: The account must choose a new password before anything else.
        expires_at: When the session ends unless used again.
    """

    session_id: int | None
    actor: Actor
    must_change_password: bool
    expires_at: dt.datetime


def _sha256(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


def account_tag(actor: Actor, scope: str) -> str:
    """A short opaque tag of ``actor`` for what a browser keeps across a logout.

    The rating page's components keep data they could not send (a count, activity spans)
    in the browser and send it after the next login; tagged with this, the server refuses
    it when another account is logged in by then (raters share pairs and workstations).
    Not a secret (the account's own page carries it) and names no account.

    Args:
        actor: The account.
        scope: What is tagged (e.g. ``"activity"``, ``"grid:<pair>"``); tags of different
            scopes differ.
    """
    return _sha256(f"radconcord-{scope}|{actor.user_id}|{actor.username}")[:20]


def _is_loopback_ip(address: str | None) -> bool:
    if not address:
        return False
    if address.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def _forwarded_address(headers: Mapping[str, str]) -> str | None:
    """The client address a reverse proxy states (the entry it appended last)."""
    value = headers.get("x-forwarded-for")
    if value and value.split(",")[-1].strip():
        return value.split(",")[-1].strip()
    value = headers.get("x-real-ip")
    if value and value.strip():
        return value.strip()
    value = headers.get("forwarded")
    if value:
        last = value.split(",")[-1]
        for part in last.split(";"):
            name, _, found = part.strip().partition("=")
            if name.lower() == "for" and found:
                return found.strip('"')
    return None


def client_from(peer: str | None, headers: Mapping[str, str]) -> Client:
    """Classify a request by its peer address and headers.

    A request is *loopback* only when the peer is a loopback address and no proxy header
    (``X-Forwarded-For``, ``Forwarded``, ``X-Real-IP``) is present: behind a reverse proxy
    on the same machine every peer is 127.0.0.1, but the person is elsewhere. Proxy headers
    are trusted for the address only when the peer is loopback (the local proxy); a remote
    peer could write any address into them.

    Args:
        peer: The connection's remote address, or ``None`` when unknown.
        headers: The request headers (any case).

    Returns:
        The client's address (``"unknown"`` when there is none) and whether it is loopback.
    """
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    forwarded = any(name in lowered for name in FORWARDING_HEADERS)
    peer_loopback = _is_loopback_ip(peer)
    if peer_loopback and forwarded:
        address = _forwarded_address(lowered) or peer or "unknown"
    else:
        address = peer or "unknown"
    return Client(address=address[:64], loopback=peer_loopback and not forwarded)


def any_account(db: Database) -> bool:
    """Whether the database holds at least one account."""
    with db.read() as s:
        return s.scalar(select(User.id).limit(1)) is not None


def known_passwords() -> frozenset[str]:
    """Passwords published with the project (the demo accounts')."""
    return demo_accounts.published_passwords()


def _lock_for(failures: int) -> dt.timedelta:
    """Lock length after ``failures`` failures (none below :data:`MAX_FAILURES`)."""
    if failures < MAX_FAILURES:
        return dt.timedelta(0)
    # The exponent is bounded: the cap is reached long before 2**20.
    return min(LOCK_BASE * 2 ** min(failures - MAX_FAILURES, 20), LOCK_CAP)


def _throttle_keys(username: str, client: Client) -> tuple[str, str]:
    return f"user:{username.strip().lower()}"[:200], f"client:{client.address}"[:200]


def _active_lock(db: Database, keys: tuple[str, ...], now: dt.datetime) -> dt.datetime | None:
    with db.read() as s:
        rows = s.scalars(select(LoginThrottle.locked_until).where(
            LoginThrottle.key.in_(keys))).all()
    ends = [end for end in (clock.as_utc(r) for r in rows) if end is not None and end > now]
    return max(ends) if ends else None


def _insert_ignore(s: Session, key: str) -> None:
    dialect = s.get_bind().dialect.name
    module = postgresql if dialect == "postgresql" else sqlite
    s.execute(module.insert(LoginThrottle).values(key=key, failures=0)
              .on_conflict_do_nothing(index_elements=[LoginThrottle.key]))


def _record_failure(db: Database, keys: tuple[str, ...], now: dt.datetime) -> dt.datetime | None:
    """Count one failure on every key; the end of the longest lock it starts, if any."""
    lock_end: dt.datetime | None = None
    with db.begin() as s:
        for key in keys:
            # Insert-or-ignore, then lock the row: two failures at once both count.
            _insert_ignore(s, key)
            row = s.scalars(select(LoginThrottle).where(LoginThrottle.key == key)
                            .with_for_update()).one()
            last = clock.as_utc(row.last_failure_at)
            failures = row.failures or 0
            if last is None or now - last > FAILURE_MEMORY:
                failures = 0
            row.failures = failures + 1
            row.last_failure_at = now
            lock = _lock_for(row.failures)
            if lock:
                row.locked_until = now + lock
                lock_end = max(lock_end, row.locked_until) if lock_end else row.locked_until
    return lock_end


def _clear_failures(db: Database, keys: tuple[str, ...]) -> None:
    with db.begin() as s:
        s.execute(delete(LoginThrottle).where(LoginThrottle.key.in_(keys)))


def lock_message(locked_until: dt.datetime) -> str:
    """The message shown for a lock (UTC clock time: the server's zone may differ)."""
    end = locked_until.astimezone(dt.UTC)
    return (f"Too many failed logins: locked until {end:%H:%M:%S} UTC. "
            "Please wait, then try again.")


def login(db: Database, *, username: str, password: str, client: Client,
          now: dt.datetime | None = None) -> Actor:
    """Check a login under the throttling and known-password rules.

    Args:
        db: The study database.
        username: The account name as typed (case-insensitive).
        password: The password as typed.
        client: Where the attempt comes from (see :func:`client_from`).
        now: The current time (tests).

    Returns:
        The actor of the account.

    Raises:
        LoginLocked: The account or client is locked; the password was not checked. Also
            raised by the failure that starts a lock.
        LoginRefused: Wrong credentials, or a published demo password from a client that is
            not this machine.
    """
    now = now or clock.utcnow()
    username = (username or "").strip()
    keys = _throttle_keys(username, client)
    locked_until = _active_lock(db, keys, now)
    if locked_until is not None:
        log.warning("login refused (locked until %s): account %r from %s",
                    locked_until.isoformat(), username, client.address)
        raise LoginLocked(lock_message(locked_until), locked_until)
    if password in known_passwords() and not client.loopback:
        log.warning("login refused (published demo password): account %r from %s",
                    username, client.address)
        raise LoginRefused(
            "This password is published with RadConcord's demo and is never accepted from "
            "another computer. Log in once on the server itself (http://127.0.0.1) and set a "
            "new password under \"My account\", or ask the study lead for a one-time "
            "password (`python -m backend reset-password USER` on the server).")
    actor = auth.authenticate(db, username=username, password=password)
    if actor is None:
        lock_end = _record_failure(db, keys, now)
        if lock_end is not None:
            log.warning("failed login for account %r from %s: locked until %s",
                        username, client.address, lock_end.isoformat())
            raise LoginLocked(f"{WRONG_CREDENTIALS} {lock_message(lock_end)}", lock_end)
        log.warning("failed login for account %r from %s", username, client.address)
        raise LoginRefused(WRONG_CREDENTIALS)
    _clear_failures(db, keys)
    log.info("login of %s from %s", actor.username, client.address)
    return actor


def create_session(db: Database, actor: Actor, *, client: str = "",
                   now: dt.datetime | None = None) -> IssuedTicket:
    """Start a session for a checked login and issue its one-time ticket.

    Args:
        db: The study database.
        actor: The account that just logged in.
        client: The client address (kept for the admin's view of sessions).
        now: The current time (tests).

    Returns:
        The session id and the plain ticket (only its sha256 is stored).

    Raises:
        LoginRefused: The account is gone or deactivated.
    """
    now = now or clock.utcnow()
    ticket = secrets.token_urlsafe(32)
    with db.begin() as s:
        user = s.get(User, actor.user_id)
        if user is None or not user.active:
            raise LoginRefused(WRONG_CREDENTIALS)
        # Housekeeping rides on logins: old ended sessions would otherwise pile up.
        s.execute(delete(AuthSession).where(or_(
            AuthSession.expires_at < now - KEEP_ENDED, AuthSession.revoked_at < now - KEEP_ENDED)))
        row = AuthSession(
            user_id=user.id, ticket_sha256=_sha256(ticket), ticket_expires_at=now + TICKET_TTL,
            credential_stamp=auth.credential_stamp(user.password_hash), client=client[:64],
            created_at=now, last_seen_at=now, expires_at=now + SESSION_TTL)
        s.add(row)
        s.flush()
        return IssuedTicket(session_id=row.id, ticket=ticket, ticket_expires_at=now + TICKET_TTL)


def exchange_ticket(db: Database, ticket: str, *, now: dt.datetime | None = None
                    ) -> IssuedToken | None:
    """Burn a one-time ticket and issue the session's cookie token.

    Args:
        db: The study database.
        ticket: The ticket the browser posted.
        now: The current time (tests).

    Returns:
        The new token, or ``None`` when the ticket is unknown, used, expired, or its session
        has ended.
    """
    if not isinstance(ticket, str) or not ticket or len(ticket) > 256:
        return None
    now = now or clock.utcnow()
    token = secrets.token_urlsafe(32)
    with db.begin() as s:
        row = s.scalars(select(AuthSession).where(
            AuthSession.ticket_sha256 == _sha256(ticket)).with_for_update()).first()
        if row is None:
            return None
        expired = (clock.as_utc(row.ticket_expires_at) or now) <= now
        # Single use: the ticket is gone whatever happens next.
        row.ticket_sha256 = None
        row.ticket_expires_at = None
        if expired or row.revoked_at is not None or clock.as_utc(row.expires_at) <= now:
            return None
        row.token_sha256 = _sha256(token)
        row.last_seen_at = now
        row.expires_at = now + SESSION_TTL
        return IssuedToken(session_id=row.id, token=token, expires_at=row.expires_at)


def _session_query():  # noqa: ANN202 - a SQLAlchemy Select
    return select(
        AuthSession.id, AuthSession.user_id, AuthSession.credential_stamp,
        AuthSession.revoked_at, AuthSession.expires_at, AuthSession.last_seen_at,
        User.username, User.role, User.active, User.must_change_password, User.password_hash,
    ).join(User, User.id == AuthSession.user_id)


def _live(db: Database, row, now: dt.datetime, *, force_touch: bool = False  # noqa: ANN001
          ) -> LiveSession | None:
    """The session of a joined row if it may act now; slides its expiry when due."""
    if row is None or row.revoked_at is not None or not row.active:
        return None
    expires = clock.as_utc(row.expires_at)
    if expires is None or expires <= now:
        return None
    if row.credential_stamp != auth.credential_stamp(row.password_hash):
        return None
    if force_touch or now - (clock.as_utc(row.last_seen_at) or now) >= TOUCH_INTERVAL:
        try:
            # Best effort and short: a page run must not wait behind a long writer for a
            # bookkeeping write; the expiry slides on a later action instead.
            with db.begin(busy_timeout=TOUCH_BUSY_TIMEOUT_S) as s:
                s.execute(update(AuthSession).where(
                    AuthSession.id == row.id, AuthSession.revoked_at.is_(None)).values(
                    last_seen_at=now, expires_at=now + SESSION_TTL))
            expires = now + SESSION_TTL
        except (OperationalError, DatabaseBusy) as exc:
            if not isinstance(exc, DatabaseBusy) and not is_busy_error(exc):
                raise
            log.warning("could not extend session %s now (database busy)", row.id)
    return LiveSession(
        session_id=row.id, actor=Actor(user_id=row.user_id, username=row.username, role=row.role),
        must_change_password=bool(row.must_change_password), expires_at=expires)


def resolve_token(db: Database, token: str, *, now: dt.datetime | None = None,
                  force_touch: bool = False) -> LiveSession | None:
    """The live session of a cookie token (a reload), sliding its expiry when due.

    Args:
        db: The study database.
        token: The cookie's value.
        now: The current time (tests).
        force_touch: Slide the expiry now (the cookie is being set again).

    Returns:
        The session, or ``None`` when the token is unknown, revoked or expired, or the
        account is deactivated or its password changed since.
    """
    if not isinstance(token, str) or not token or len(token) > 256:
        return None
    now = now or clock.utcnow()
    with db.read() as s:
        row = s.execute(_session_query().where(
            AuthSession.token_sha256 == _sha256(token))).first()
    return _live(db, row, now, force_touch=force_touch)


def check_session(db: Database, session_id: int | None, *, actor: Actor,
                  now: dt.datetime | None = None) -> LiveSession | None:
    """Re-check an open session before an action (one primary-key read).

    Args:
        db: The study database.
        session_id: The session's row; ``None`` for an actor that has no database session
            (placed directly by the page tests): then only the account is checked.
        actor: Who the page believes is logged in.
        now: The current time (tests).

    Returns:
        The session, or ``None`` when it was revoked or expired, the account is deactivated,
        its password changed, or it is no longer ``actor`` (another user or another role).
    """
    now = now or clock.utcnow()
    if session_id is None:
        with db.read() as s:
            user = s.execute(select(User.id, User.username, User.role, User.active,
                                    User.must_change_password).where(
                User.id == actor.user_id)).first()
        if user is None or not user.active or Actor(user.id, user.username, user.role) != actor:
            return None
        return LiveSession(session_id=None, actor=actor,
                           must_change_password=bool(user.must_change_password),
                           expires_at=now + SESSION_TTL)
    with db.read() as s:
        row = s.execute(_session_query().where(AuthSession.id == session_id)).first()
    live = _live(db, row, now)
    if live is None or live.actor != actor:
        return None
    return live


def revoke_session(db: Database, session_id: int | None = None, *, token: str | None = None,
                   reason: str = "logout", now: dt.datetime | None = None) -> bool:
    """End one session, found by id or by cookie token (logout).

    Returns:
        Whether a live session was ended.
    """
    now = now or clock.utcnow()
    if session_id is None and not token:
        return False
    condition = (AuthSession.id == session_id if session_id is not None
                 else AuthSession.token_sha256 == _sha256(token or ""))
    with db.begin() as s:
        result = s.execute(update(AuthSession).where(
            condition, AuthSession.revoked_at.is_(None)).values(
            revoked_at=now, revoked_reason=reason[:32], ticket_sha256=None,
            ticket_expires_at=None))
        ended = bool(result.rowcount)
    if ended:
        log.info("session %s ended (%s)", session_id if session_id is not None else "(cookie)",
                 reason)
    return ended


