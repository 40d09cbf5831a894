"""Database sessions, one-time tickets, login throttling and the loopback rule.

Runs on SQLite and PostgreSQL (``any_db``). Times are passed explicitly (``now=``) so the
expiry and lock arithmetic is checked exactly, without sleeping.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging

import pytest
from sqlalchemy import select, update

from radconcord.backend import clock
from radconcord.backend.services.accounts import auth, sessions
from radconcord.backend.services.accounts.demo_accounts import DEMO_USERS
from radconcord.backend.types import Actor
from radconcord.db.models import AuthSession, LoginThrottle, User
from radconcord.db.session import Database

T0 = dt.datetime(2026, 3, 2, 8, 0, tzinfo=dt.UTC)
LOCAL = sessions.Client(address="127.0.0.1", loopback=True)
REMOTE = sessions.Client(address="203.0.113.7", loopback=False)
PASSWORD = "correct-horse-1"


def _sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _user(db: Database, name: str = "rita", role: str = "rater",
          password: str = PASSWORD) -> Actor:
    info = auth.create_user(db, Actor.system(), username=name, password=password, role=role)
    return Actor(user_id=info.user_id, username=info.username, role=info.role)


def _logged_in(db: Database, actor: Actor, now: dt.datetime = T0) -> sessions.IssuedToken:
    ticket = sessions.create_session(db, actor, client="127.0.0.1", now=now)
    issued = sessions.exchange_ticket(db, ticket.ticket, now=now)
    assert issued is not None
    return issued


def _row(db: Database, session_id: int) -> AuthSession:
    with db.read() as s:
        row = s.get(AuthSession, session_id)
        s.expunge(row)
        return row


def _utc(value: dt.datetime) -> dt.datetime:
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value


# --- the client rule -------------------------------------------------------------------------


@pytest.mark.parametrize("peer", ["127.0.0.1", "::1", "127.8.9.10", "localhost"])
def test_a_loopback_peer_without_proxy_headers_is_this_machine(peer):
    assert sessions.client_from(peer, {"Host": "x"}) == sessions.Client(peer, True)


@pytest.mark.parametrize("header", ["X-Forwarded-For", "x-real-ip", "Forwarded"])
def test_any_proxy_header_makes_a_loopback_peer_a_remote_client(header):
    value = "for=198.51.100.4" if header == "Forwarded" else "198.51.100.4"
    client = sessions.client_from("127.0.0.1", {header: value})
    assert client == sessions.Client("198.51.100.4", False)


def test_the_last_forwarded_entry_counts_and_a_remote_peer_cannot_choose_its_address():
    # The local proxy appends what it saw last; earlier entries are the client's own words.
    assert sessions.client_from(
        "127.0.0.1", {"X-Forwarded-For": "10.0.0.1, 198.51.100.4"}).address == "198.51.100.4"
    # A remote peer claiming to be someone else (or this machine) is still itself.
    assert sessions.client_from(
        "203.0.113.9", {"X-Forwarded-For": "127.0.0.1"}) == sessions.Client("203.0.113.9", False)
    assert sessions.client_from("203.0.113.9", {}) == sessions.Client("203.0.113.9", False)
    assert sessions.client_from(None, {}) == sessions.Client("unknown", False)


# --- sessions, tickets, tokens ---------------------------------------------------------------


def test_ticket_and_token_are_stored_only_as_hashes_and_the_ticket_works_once(any_db):
    rita = _user(any_db)
    ticket = sessions.create_session(any_db, rita, client="127.0.0.1", now=T0)
    assert len(ticket.ticket) >= 40
    assert ticket.ticket_expires_at == T0 + sessions.TICKET_TTL
    row = _row(any_db, ticket.session_id)
    assert row.ticket_sha256 == _sha(ticket.ticket) and row.token_sha256 is None
    issued = sessions.exchange_ticket(any_db, ticket.ticket, now=T0 + dt.timedelta(seconds=5))
    assert issued is not None and issued.session_id == ticket.session_id
    assert len(issued.token) >= 40 and issued.token != ticket.ticket
    row = _row(any_db, ticket.session_id)
    assert row.token_sha256 == _sha(issued.token)
    assert row.ticket_sha256 is None and row.ticket_expires_at is None
    # Single use.
    assert sessions.exchange_ticket(any_db, ticket.ticket, now=T0 + dt.timedelta(seconds=6)) \
        is None
    live = sessions.resolve_token(any_db, issued.token, now=T0 + dt.timedelta(seconds=7))
    assert live is not None and live.actor == rita and live.session_id == ticket.session_id
    assert live.must_change_password is False
    assert sessions.resolve_token(any_db, "not-a-token", now=T0) is None
    assert sessions.resolve_token(any_db, "", now=T0) is None


def test_an_expired_ticket_opens_nothing(any_db):
    rita = _user(any_db)
    ticket = sessions.create_session(any_db, rita, now=T0)
    late = T0 + sessions.TICKET_TTL + dt.timedelta(seconds=1)
    assert sessions.exchange_ticket(any_db, ticket.ticket, now=late) is None
    # Burnt even though it failed: a second try within the minute is no better.
    assert sessions.exchange_ticket(any_db, ticket.ticket, now=T0) is None


def test_expiry_slides_with_use_written_at_most_once_a_minute(any_db):
    rita = _user(any_db)
    issued = _logged_in(any_db, rita)
    assert issued.expires_at == T0 + sessions.SESSION_TTL
    # 30 s later: alive, but no write (last_seen_at unchanged).
    live = sessions.check_session(any_db, issued.session_id, actor=rita,
                                  now=T0 + dt.timedelta(seconds=30))
    assert live is not None and live.expires_at == T0 + sessions.SESSION_TTL
    assert _utc(_row(any_db, issued.session_id).last_seen_at) == T0
    # Used every 11 hours: still alive after 33 hours.
    for hours in (11, 22, 33):
        now = T0 + dt.timedelta(hours=hours)
        live = sessions.resolve_token(any_db, issued.token, now=now)
        assert live is not None and live.expires_at == now + sessions.SESSION_TTL
    assert _utc(_row(any_db, issued.session_id).expires_at) == \
        T0 + dt.timedelta(hours=33) + sessions.SESSION_TTL
    # Idle for 12 hours: gone for good, by token and by id.
    dead = T0 + dt.timedelta(hours=45, seconds=1)
    assert sessions.resolve_token(any_db, issued.token, now=dead) is None
    assert sessions.check_session(any_db, issued.session_id, actor=rita, now=dead) is None


def test_sessions_survive_a_restart(any_db):
    rita = _user(any_db)
    issued = _logged_in(any_db, rita, now=clock.utcnow())
    again = Database(any_db.url, migrate=False)  # a new process: nothing shared in memory
    try:
        live = sessions.resolve_token(again, issued.token)
        assert live is not None and live.actor == rita
    finally:
        again.dispose()


def test_logout_revokes_the_token_and_the_open_tab(any_db):
    rita = _user(any_db)
    one = _logged_in(any_db, rita)
    two = _logged_in(any_db, rita)
    assert sessions.revoke_session(any_db, token=one.token, now=T0) is True
    assert sessions.resolve_token(any_db, one.token, now=T0) is None
    assert sessions.check_session(any_db, one.session_id, actor=rita, now=T0) is None
    row = _row(any_db, one.session_id)
    assert row.revoked_reason == "logout" and row.revoked_at is not None
    # The other browser is untouched; revoking by id works too and only once.
    assert sessions.check_session(any_db, two.session_id, actor=rita, now=T0) is not None
    assert sessions.revoke_session(any_db, two.session_id, now=T0) is True
    assert sessions.revoke_session(any_db, two.session_id, now=T0) is False
    assert sessions.resolve_token(any_db, two.token, now=T0) is None


def test_deactivation_password_change_and_role_change_end_open_sessions(any_db):
    rita = _user(any_db)
    issued = _logged_in(any_db, rita)
    soon = T0 + dt.timedelta(seconds=1)
    assert sessions.check_session(any_db, issued.session_id, actor=rita, now=soon) is not None
    # Deactivated (even with the session row left alone): no access.
    with any_db.begin() as s:
        s.execute(update(User).where(User.id == rita.user_id).values(active=False))
    assert sessions.check_session(any_db, issued.session_id, actor=rita, now=soon) is None
    assert sessions.resolve_token(any_db, issued.token, now=soon) is None
    assert sessions.check_session(any_db, None, actor=rita, now=soon) is None
    with any_db.begin() as s:
        s.execute(update(User).where(User.id == rita.user_id).values(active=True))
    assert sessions.check_session(any_db, issued.session_id, actor=rita, now=soon) is not None
    # A role change: the actor held by the tab is no longer who the account is.
    with any_db.begin() as s:
        s.execute(update(User).where(User.id == rita.user_id).values(role="admin"))
    assert sessions.check_session(any_db, issued.session_id, actor=rita, now=soon) is None
    assert sessions.check_session(any_db, None, actor=rita, now=soon) is None
    with any_db.begin() as s:
        s.execute(update(User).where(User.id == rita.user_id).values(role="rater"))
    # A new password hash (the credential stamp changes).
    with any_db.begin() as s:
        s.execute(update(User).where(User.id == rita.user_id).values(
            password_hash=auth._hasher.hash("another-password-2")))
    assert sessions.check_session(any_db, issued.session_id, actor=rita, now=soon) is None
    assert sessions.resolve_token(any_db, issued.token, now=soon) is None


def test_revoke_user_sessions_in_the_callers_transaction_keeps_the_chosen_session(any_db):
    rita = _user(any_db)
    boss = _user(any_db, "boss", "admin")
    kept, other = _logged_in(any_db, rita), _logged_in(any_db, rita)
    boss_session = _logged_in(any_db, boss)
    with any_db.begin() as s:
        user = s.get(User, rita.user_id)
        user.password_hash = auth._hasher.hash("rita-new-password")
        assert auth.revoke_user_sessions(s, rita.user_id, "password changed",
                                             keep_session_id=kept.session_id) == 1
    soon = T0 + dt.timedelta(seconds=1)
    assert sessions.check_session(any_db, kept.session_id, actor=rita, now=soon) is not None
    assert sessions.check_session(any_db, other.session_id, actor=rita, now=soon) is None
    assert _row(any_db, other.session_id).revoked_reason == "password changed"
    assert sessions.check_session(any_db, boss_session.session_id, actor=boss,
                                  now=soon) is not None
    # Without a kept session: all of them.
    with any_db.begin() as s:
        assert auth.revoke_user_sessions(s, rita.user_id, "deactivated") == 1
    assert sessions.check_session(any_db, kept.session_id, actor=rita, now=soon) is None


def test_must_change_password_is_reported_with_the_session(any_db):
    rita = _user(any_db)
    issued = _logged_in(any_db, rita)
    with any_db.begin() as s:
        s.execute(update(User).where(User.id == rita.user_id).values(must_change_password=True))
    live = sessions.resolve_token(any_db, issued.token, now=T0)
    assert live is not None and live.must_change_password is True
    assert sessions.check_session(any_db, None, actor=rita, now=T0).must_change_password


# --- login: throttling and the known-password rule ---------------------------------------------


def _fail(db: Database, name: str, client: sessions.Client, now: dt.datetime) -> Exception:
    with pytest.raises(sessions.LoginRefused) as info:
        sessions.login(db, username=name, password="wrong-password", client=client, now=now)
    return info.value


def test_five_failures_lock_the_account_exponentially_and_a_success_resets(any_db, caplog):
    _user(any_db)
    caplog.set_level(logging.WARNING, logger="radconcord.backend.services.accounts.sessions")
    for i in range(4):
        exc = _fail(any_db, "rita", REMOTE, T0 + dt.timedelta(seconds=i))
        assert not isinstance(exc, sessions.LoginLocked)
        assert str(exc) == sessions.WRONG_CREDENTIALS
    fifth = T0 + dt.timedelta(seconds=4)
    exc = _fail(any_db, "RITA", REMOTE, fifth)  # names are case-insensitive
    assert isinstance(exc, sessions.LoginLocked)
    assert exc.locked_until == fifth + dt.timedelta(seconds=30)
    assert f"{exc.locked_until:%H:%M:%S} UTC" in str(exc)
    # While locked even the right password is refused, from any client.
    with pytest.raises(sessions.LoginLocked) as locked:
        sessions.login(any_db, username="rita", password=PASSWORD, client=LOCAL,
                       now=fifth + dt.timedelta(seconds=29))
    assert locked.value.locked_until == fifth + dt.timedelta(seconds=30)
    assert "locked until" in str(locked.value)
    # Each further failure after the lock doubles it: 60 s, 120 s, ... capped at 15 min.
    now = fifth + dt.timedelta(seconds=31)
    exc = _fail(any_db, "rita", REMOTE, now)
    assert exc.locked_until == now + dt.timedelta(seconds=60)
    for _ in range(10):
        now = exc.locked_until + dt.timedelta(seconds=1)
        exc = _fail(any_db, "rita", REMOTE, now)
    assert exc.locked_until == now + sessions.LOCK_CAP
    # The lock and its end are logged with the account and the client.
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("'rita'" in m and "203.0.113.7" in m and "locked until" in m for m in messages)
    # After the lock, the right password works and clears the counters.
    after = exc.locked_until + dt.timedelta(seconds=1)
    actor = sessions.login(any_db, username="rita", password=PASSWORD, client=REMOTE, now=after)
    assert actor.username == "rita"
    with any_db.read() as s:
        assert s.scalars(select(LoginThrottle)).all() == []
    exc = _fail(any_db, "rita", REMOTE, after)
    assert not isinstance(exc, sessions.LoginLocked)


def test_a_client_spraying_many_accounts_is_locked_but_others_are_not(any_db):
    _user(any_db, "rita")
    _user(any_db, "ravi")
    for i, name in enumerate(["a1", "a2", "a3", "a4", "a5"]):
        exc = _fail(any_db, name, REMOTE, T0 + dt.timedelta(seconds=i))
    assert isinstance(exc, sessions.LoginLocked)
    with pytest.raises(sessions.LoginLocked):
        sessions.login(any_db, username="rita", password=PASSWORD, client=REMOTE,
                       now=T0 + dt.timedelta(seconds=10))
    other = sessions.Client(address="198.51.100.20", loopback=False)
    assert sessions.login(any_db, username="rita", password=PASSWORD, client=other,
                          now=T0 + dt.timedelta(seconds=10)).username == "rita"


def test_old_failures_are_forgotten(any_db):
    _user(any_db)
    for i in range(4):
        _fail(any_db, "rita", REMOTE, T0 + dt.timedelta(seconds=i))
    later = T0 + sessions.FAILURE_MEMORY + dt.timedelta(minutes=1)
    exc = _fail(any_db, "rita", REMOTE, later)
    assert not isinstance(exc, sessions.LoginLocked)


def test_a_locked_login_does_not_check_the_password(any_db, monkeypatch):
    _user(any_db)
    for i in range(5):
        _fail(any_db, "rita", REMOTE, T0 + dt.timedelta(seconds=i))
    calls = []
    monkeypatch.setattr(auth, "authenticate", lambda *a, **k: calls.append(1))
    with pytest.raises(sessions.LoginLocked):
        sessions.login(any_db, username="rita", password=PASSWORD, client=REMOTE,
                       now=T0 + dt.timedelta(seconds=6))
    assert calls == []


@pytest.mark.parametrize("username,password", [(u, p) for u, p, _, _ in DEMO_USERS])
def test_a_demo_password_is_refused_from_another_computer_even_when_right(any_db, username,
                                                                          password, caplog):
    _user(any_db, username, password=password)
    caplog.set_level(logging.WARNING, logger="radconcord.backend.services.accounts.sessions")
    with pytest.raises(sessions.LoginRefused) as info:
        sessions.login(any_db, username=username, password=password, client=REMOTE, now=T0)
    assert not isinstance(info.value, sessions.LoginLocked)
    assert "demo" in str(info.value) and "My account" in str(info.value)
    assert any("published demo password" in r.getMessage() and "203.0.113.7" in r.getMessage()
               for r in caplog.records)
    # From the server itself it works (and the rule is about the password, not the account).
    actor = sessions.login(any_db, username=username, password=password, client=LOCAL, now=T0)
    assert actor.username == username


def test_create_session_refuses_a_deactivated_account(any_db):
    rita = _user(any_db)
    with any_db.begin() as s:
        s.execute(update(User).where(User.id == rita.user_id).values(active=False))
    with pytest.raises(sessions.LoginRefused):
        sessions.create_session(any_db, rita, now=T0)


def test_a_long_writer_does_not_fail_or_hold_up_a_page_run_that_would_slide_the_expiry(db):
    """Sliding the expiry is bookkeeping: while another process holds the SQLite write lock
    (an import batch, a worker), the re-check still answers at once and the slide waits."""
    import sqlite3
    import time

    rita = _user(db)
    issued = _logged_in(db, rita)
    before = _utc(_row(db, issued.session_id).expires_at)
    holder = sqlite3.connect(db.url.split("///", 1)[1], isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        live = sessions.check_session(db, issued.session_id, actor=rita,
                                      now=T0 + dt.timedelta(minutes=5))
        waited = time.monotonic() - started
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert live is not None and live.actor == rita
    assert waited < 5  # the default busy wait is 15 s; the slide gives up after 0.5 s
    assert _utc(_row(db, issued.session_id).expires_at) == before
