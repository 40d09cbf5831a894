"""Account management: one-time passwords, resets, (de)activation, own password changes.

Sessions are ``AuthSession`` rows inserted here directly; a change that must end access
revokes them in the same transaction (``revoked_at``/``revoked_reason`` set), and nothing
else is touched when a change is refused.
"""

from __future__ import annotations

import datetime as dt
import re

import pytest
from argon2 import PasswordHasher
from sqlalchemy import select, update

from radconcord.backend.errors import InvalidInput, NotFound, PermissionDenied
from radconcord.backend.services.accounts import auth
from radconcord.backend.types import Actor
from radconcord.db.models import AuthSession, User

SYSTEM = Actor.system()


@pytest.fixture(autouse=True)
def _cheap_hashing(fast_password_hashing):
    """Every test here hashes a few passwords; cheap argon2id parameters keep it quick."""


def _user(db, username: str, role: str = "rater", password: str | None = None) -> Actor:
    password = password or f"{username}-password"
    auth.create_user(db, SYSTEM, username=username, password=password, role=role)
    actor = auth.authenticate(db, username=username, password=password)
    assert actor is not None
    return actor


def _session(db, user_id: int) -> int:
    """A live database session of ``user_id``; its id."""
    with db.begin() as s:
        row = AuthSession(user_id=user_id,
                          expires_at=dt.datetime.now(dt.UTC) + dt.timedelta(hours=12))
        s.add(row)
        s.flush()
        return row.id


def _sessions(db, user_id: int) -> dict[int, tuple[bool, str | None]]:
    """Session id -> (revoked?, reason) of one account."""
    with db.begin() as s:
        rows = s.execute(select(AuthSession.id, AuthSession.revoked_at,
                                AuthSession.revoked_reason)
                         .where(AuthSession.user_id == user_id)).all()
    return {r.id: (r.revoked_at is not None, r.revoked_reason) for r in rows}


def _row(db, username: str) -> User:
    with db.begin() as s:
        user = s.scalar(select(User).where(User.username == username))
        s.expunge(user)
        return user


def test_one_time_password_account_must_choose_its_own_password(any_db):
    admin = _user(any_db, "lead", "admin")
    created = auth.create_user_with_one_time_password(
        any_db, admin, username="newrater", role="rater", display_name="New Rater")
    otp = created.password
    assert re.fullmatch(r"[a-z2-9]{4}(-[a-z2-9]{4}){3}", otp)
    for sample in [otp] + [auth.generate_one_time_password() for _ in range(300)]:
        # Nothing that reads as another character; >= 12 characters.
        assert len(sample) >= 12 and not set(sample) & set("01lIoO5Ss")
    assert (created.user.username, created.user.role, created.user.display_name) == (
        "newrater", "rater", "New Rater")
    assert created.user.must_change_password and created.user.password_changed_at is None
    # Only the hash is stored; every call makes another password.
    assert otp not in _row(any_db, "newrater").password_hash
    other = auth.create_user_with_one_time_password(any_db, admin, username="r2", role="rater")
    assert other.password != otp

    actor = auth.authenticate(any_db, username="newrater", password=otp)
    assert actor is not None
    assert auth.session_user(any_db, user_id=actor.user_id).must_change_password is True
    mine = _session(any_db, actor.user_id)
    info = auth.change_own_password(any_db, actor, current_password=otp,
                                    new_password="my own secret 1", keep_session_id=mine)
    assert not info.must_change_password and info.password_changed_at is not None
    assert auth.session_user(any_db, user_id=actor.user_id).must_change_password is False
    assert auth.authenticate(any_db, username="newrater", password=otp) is None
    assert auth.authenticate(any_db, username="newrater", password="my own secret 1") == actor
    assert _sessions(any_db, actor.user_id) == {mine: (False, None)}
    listed = {u.username: u.must_change_password for u in auth.list_users(any_db, admin)}
    assert listed == {"lead": False, "newrater": False, "r2": True}


def test_create_with_one_time_password_rejects_bad_fields_and_non_admins(any_db):
    admin = _user(any_db, "lead", "admin")
    rater = _user(any_db, "r1")
    with pytest.raises(PermissionDenied):
        auth.create_user_with_one_time_password(any_db, rater, username="x1", role="rater")
    with pytest.raises(InvalidInput, match="username"):
        auth.create_user_with_one_time_password(any_db, admin, username="bad name",
                                                role="rater")
    with pytest.raises(InvalidInput, match="already taken"):
        auth.create_user_with_one_time_password(any_db, admin, username="R1", role="rater")
    with pytest.raises(InvalidInput, match="role"):
        auth.create_user_with_one_time_password(any_db, admin, username="x2", role="owner")
    assert [u.username for u in auth.list_users(any_db, admin)] == ["lead", "r1"]


def test_reset_password_gives_a_one_time_password_and_ends_every_session(any_db):
    admin = _user(any_db, "lead", "admin")
    rater = _user(any_db, "r1")
    bystander = _user(any_db, "r2")
    s1, s2 = _session(any_db, rater.user_id), _session(any_db, rater.user_id)
    old = _session(any_db, rater.user_id)
    with any_db.begin() as s:  # a session logged out earlier keeps its own record
        s.execute(update(AuthSession).where(AuthSession.id == old)
                  .values(revoked_at=dt.datetime(2020, 1, 1, tzinfo=dt.UTC),
                          revoked_reason="logout"))
    other = _session(any_db, bystander.user_id)

    reset = auth.reset_password(any_db, admin, username="R1")
    assert reset.user.username == "r1" and reset.user.must_change_password
    assert len(reset.password) >= 12
    assert _sessions(any_db, rater.user_id) == {
        s1: (True, "password_reset"), s2: (True, "password_reset"), old: (True, "logout")}
    assert _sessions(any_db, bystander.user_id) == {other: (False, None)}
    assert auth.authenticate(any_db, username="r1", password="r1-password") is None
    assert auth.authenticate(any_db, username="r1", password=reset.password) == rater
    assert auth.session_user(any_db, user_id=rater.user_id).must_change_password
    # The one-time password cannot be kept as the new password.
    with pytest.raises(InvalidInput, match="differ"):
        auth.change_own_password(any_db, rater, current_password=reset.password,
                                 new_password=reset.password)
    assert auth.reset_password(any_db, SYSTEM, username="r1").password != reset.password


def test_reset_password_refusals(any_db):
    admin = _user(any_db, "lead", "admin")
    rater = _user(any_db, "r1")
    mine = _session(any_db, admin.user_id)
    with pytest.raises(PermissionDenied):
        auth.reset_password(any_db, rater, username="lead")
    with pytest.raises(PermissionDenied, match="My account"):
        auth.reset_password(any_db, admin, username="lead")
    with pytest.raises(NotFound, match="ghost"):
        auth.reset_password(any_db, admin, username="ghost")
    assert _sessions(any_db, admin.user_id) == {mine: (False, None)}
    assert auth.authenticate(any_db, username="lead", password="lead-password") == admin
    # An admin deactivated meanwhile is refused, whatever role its browser remembers.
    second = _user(any_db, "lead2", "admin")
    auth.set_active(any_db, admin, username="lead2", active=False)
    with pytest.raises(PermissionDenied, match="active admin"):
        auth.reset_password(any_db, second, username="r1")
    assert auth.authenticate(any_db, username="r1", password="r1-password") == rater


def test_deactivation_ends_every_session_and_reactivation_does_not_restore_them(any_db):
    admin = _user(any_db, "lead", "admin")
    rater = _user(any_db, "r1")
    s1, s2 = _session(any_db, rater.user_id), _session(any_db, rater.user_id)
    admin_session = _session(any_db, admin.user_id)

    info = auth.set_active(any_db, admin, username="r1", active=False)
    assert info.active is False
    revoked = {s1: (True, "account_deactivated"), s2: (True, "account_deactivated")}
    assert _sessions(any_db, rater.user_id) == revoked
    assert _sessions(any_db, admin.user_id) == {admin_session: (False, None)}
    assert auth.session_user(any_db, user_id=rater.user_id) is None
    assert auth.authenticate(any_db, username="r1", password="r1-password") is None
    with pytest.raises(PermissionDenied, match="no longer active"):
        auth.change_own_password(any_db, rater, current_password="r1-password",
                                 new_password="another-password")

    assert auth.set_active(any_db, admin, username="r1", active=True).active is True
    assert _sessions(any_db, rater.user_id) == revoked
    assert auth.authenticate(any_db, username="r1", password="r1-password") == rater
    with pytest.raises(PermissionDenied):
        auth.set_active(any_db, rater, username="r1", active=False)
    with pytest.raises(NotFound):
        auth.set_active(any_db, admin, username="ghost", active=False)


def test_a_deactivated_admin_loses_admin_services_at_once(any_db):
    admin = _user(any_db, "lead", "admin")
    second = _user(any_db, "lead2", "admin")
    auth.set_active(any_db, admin, username="lead2", active=False)
    for call in (
        lambda: auth.list_users(any_db, second),
        lambda: auth.set_active(any_db, second, username="lead", active=False),
        lambda: auth.set_role(any_db, second, username="lead", role="rater"),
        lambda: auth.create_user_with_one_time_password(any_db, second, username="x",
                                                        role="rater"),
    ):
        with pytest.raises(PermissionDenied, match="active admin"):
            call()
    assert _row(any_db, "lead").active and _row(any_db, "lead").role == "admin"


def test_the_last_active_admin_cannot_be_deactivated_or_demoted(any_db):
    lead = _user(any_db, "lead", "admin")
    _user(any_db, "r1")
    session = _session(any_db, lead.user_id)
    with pytest.raises(PermissionDenied, match="last active admin"):
        auth.set_active(any_db, SYSTEM, username="lead", active=False)
    with pytest.raises(PermissionDenied, match="last active admin"):
        auth.set_role(any_db, SYSTEM, username="lead", role="rater")
    assert _row(any_db, "lead").active and _row(any_db, "lead").role == "admin"
    assert _sessions(any_db, lead.user_id) == {session: (False, None)}
    with pytest.raises(PermissionDenied, match="your own"):
        auth.set_active(any_db, lead, username="lead", active=False)
    with pytest.raises(PermissionDenied, match="your own"):
        auth.set_role(any_db, lead, username="lead", role="rater")

    # With a second active admin either may go; the one left is the last again.
    auth.set_role(any_db, lead, username="r1", role="admin")
    assert auth.set_active(any_db, SYSTEM, username="lead", active=False).active is False
    with pytest.raises(PermissionDenied, match="last active admin"):
        auth.set_role(any_db, SYSTEM, username="r1", role="rater")
    auth.set_active(any_db, SYSTEM, username="lead", active=True)
    assert auth.set_role(any_db, SYSTEM, username="r1", role="rater").role == "rater"
    with pytest.raises(InvalidInput, match="role"):
        auth.set_role(any_db, SYSTEM, username="r1", role="owner")


def test_change_own_password_refusals_change_nothing(any_db):
    rater = _user(any_db, "longrater1")
    mine, other = _session(any_db, rater.user_id), _session(any_db, rater.user_id)
    before = _row(any_db, "longrater1").password_hash
    cases = [
        ("wrong-password", "new-password-1", "current password: wrong"),
        ("", "new-password-1", "current password: wrong"),
        ("longrater1-password", "longrater1-password", "must differ"),
        ("longrater1-password", "short", "new password: must be at least 8"),
        ("longrater1-password", "LongRater1", "new password: must not be the username"),
        ("longrater1-password", "radconcord-rater1", "new password: .*demo password"),
        ("longrater1-password", "radconcord-admin", "new password: .*demo password"),
    ]
    for current, new, message in cases:
        with pytest.raises(InvalidInput, match=message):
            auth.change_own_password(any_db, rater, current_password=current,
                                     new_password=new, keep_session_id=mine)
    row = _row(any_db, "longrater1")
    assert row.password_hash == before and row.password_changed_at is None
    assert _sessions(any_db, rater.user_id) == {mine: (False, None), other: (False, None)}


def test_change_own_password_ends_the_other_sessions(any_db):
    rater = _user(any_db, "r1")
    bystander = _user(any_db, "r2")
    mine, other = _session(any_db, rater.user_id), _session(any_db, rater.user_id)
    theirs = _session(any_db, bystander.user_id)
    auth.change_own_password(any_db, rater, current_password="r1-password",
                             new_password="second-password", keep_session_id=mine)
    assert _sessions(any_db, rater.user_id) == {mine: (False, None),
                                                other: (True, "password_changed")}
    assert _sessions(any_db, bystander.user_id) == {theirs: (False, None)}
    # The kept session carries the new credential stamp, so it stays valid.
    with any_db.begin() as s:
        stamp = s.get(AuthSession, mine).credential_stamp
    assert stamp == auth.session_user(any_db, user_id=rater.user_id).credential_stamp
    # Without a session to keep (the command line, an API client) every session ends.
    auth.change_own_password(any_db, rater, current_password="second-password",
                             new_password="third-password")
    assert _sessions(any_db, rater.user_id)[mine] == (True, "password_changed")


def test_change_own_password_loses_to_a_reset_made_while_it_hashed(any_db, monkeypatch):
    """The current password was verified, then an admin reset it before the write: the reset
    wins and the user is told to log in again."""
    admin = _user(any_db, "lead", "admin")
    rater = _user(any_db, "r1")
    reset: list[str] = []

    class ResettingHasher(PasswordHasher):
        def hash(self, password, *, salt=None):
            digest = super().hash(password, salt=salt)
            if password == "second-password" and not reset:
                reset.append(auth.reset_password(any_db, admin, username="r1").password)
            return digest

    monkeypatch.setattr(auth, "_hasher",
                        ResettingHasher(time_cost=1, memory_cost=1024, parallelism=1))
    with pytest.raises(InvalidInput, match="changed meanwhile"):
        auth.change_own_password(any_db, rater, current_password="r1-password",
                                 new_password="second-password")
    assert auth.authenticate(any_db, username="r1", password=reset[0]) == rater
    assert auth.authenticate(any_db, username="r1", password="second-password") is None
    assert _row(any_db, "r1").must_change_password


def test_demo_passwords_only_for_demo_seeding(any_db):
    admin = _user(any_db, "lead", "admin")
    # Demo seeding (the system actor) may give a demo account its own published password ...
    auth.create_user(any_db, SYSTEM, username="rater1", password="radconcord-rater1",
                     role="rater")
    # ... but nobody may give it to any other account, nor set it later.
    with pytest.raises(InvalidInput, match="demo password"):
        auth.create_user(any_db, SYSTEM, username="rater9", password="radconcord-rater1",
                         role="rater")
    with pytest.raises(InvalidInput, match="demo password"):
        auth.create_user(any_db, admin, username="rater2", password="radconcord-rater2",
                         role="rater")
    with pytest.raises(InvalidInput, match="demo password"):
        auth.set_password(any_db, admin, username="rater1", password="radconcord-admin")
    with pytest.raises(InvalidInput, match="must not be the username"):
        auth.create_user(any_db, admin, username="longname1", password="LONGNAME1",
                         role="rater")
    assert [u.username for u in auth.list_users(any_db, admin)] == ["lead", "rater1"]


def test_set_password_by_an_admin_ends_sessions_and_requires_a_change(any_db):
    admin = _user(any_db, "lead", "admin")
    rater = _user(any_db, "r1")
    live = _session(any_db, rater.user_id)
    auth.set_password(any_db, admin, username="r1", password="admin-chosen-pw")
    assert _sessions(any_db, rater.user_id) == {live: (True, "password_reset")}
    assert _row(any_db, "r1").must_change_password
