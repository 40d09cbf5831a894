"""Accounts: creation rules, argon2id authentication, rehashing, listing, password changes."""

from __future__ import annotations

import dataclasses

import pytest
from argon2 import PasswordHasher
from sqlalchemy import select

from radconcord.backend.errors import InvalidInput, NotFound, PermissionDenied
from radconcord.backend.services.accounts import auth
from radconcord.backend.types import Actor
from radconcord.db.models import User


def _admin(db) -> Actor:
    auth.create_user(db, Actor.system(), username="lead", password="lead-password", role="admin")
    actor = auth.authenticate(db, username="lead", password="lead-password")
    assert actor is not None
    return actor


def _hash_of(db, username: str) -> str:
    with db.begin() as s:
        return s.scalar(select(User.password_hash).where(User.username == username))


def test_bootstrap_admin_then_admin_creates_rater(any_db, fast_password_hashing):
    admin = _admin(any_db)
    assert admin.role == "admin" and admin.username == "lead" and admin.user_id > 0
    info = auth.create_user(
        any_db, admin, username="r1", password="rater-password", role="rater", display_name="R 1"
    )
    assert (info.username, info.role, info.display_name, info.active) == (
        "r1", "rater", "R 1", True
    )
    assert info.created_at.tzinfo is not None
    # The stored hash is argon2id, never the password.
    stored = _hash_of(any_db, "r1")
    assert stored.startswith("$argon2id$") and "rater-password" not in stored


def test_only_admins_create_accounts(any_db, fast_password_hashing):
    admin = _admin(any_db)
    auth.create_user(any_db, admin, username="r1", password="rater-password", role="rater")
    rater = auth.authenticate(any_db, username="r1", password="rater-password")
    with pytest.raises(PermissionDenied):
        auth.create_user(any_db, rater, username="r2", password="rater-password", role="rater")
    # An admin actor whose account was disabled meanwhile is refused too.
    auth.create_user(any_db, admin, username="lead2", password="lead-password", role="admin")
    lead2 = auth.authenticate(any_db, username="lead2", password="lead-password")
    auth.set_active(any_db, admin, username="lead2", active=False)
    with pytest.raises(PermissionDenied):
        auth.create_user(any_db, lead2, username="r3", password="rater-password", role="rater")
    assert [u.username for u in auth.list_users(any_db, admin)] == ["lead", "lead2", "r1"]


@pytest.mark.parametrize(
    ("username", "password", "role", "field"),
    [
        ("", "long-enough", "rater", "username"),
        ("bad name", "long-enough", "rater", "username"),
        ("x" * 65, "long-enough", "rater", "username"),
        ("ok", "short", "rater", "password"),
        ("ok", "long-enough", "superuser", "role"),
    ],
)
def test_create_user_rejects_bad_fields(db, fast_password_hashing, username, password, role, field):
    with pytest.raises(InvalidInput, match=field):
        auth.create_user(db, Actor.system(), username=username, password=password, role=role)
    assert auth.list_users(db, Actor.system()) == []


def test_duplicate_username_case_insensitive(any_db, fast_password_hashing):
    auth.create_user(any_db, Actor.system(), username="Rater", password="password1", role="rater")
    with pytest.raises(InvalidInput, match="already taken"):
        auth.create_user(
            any_db, Actor.system(), username="rater", password="password2", role="rater"
        )
    assert len(auth.list_users(any_db, Actor.system())) == 1


def test_authenticate(any_db, fast_password_hashing):
    auth.create_user(any_db, Actor.system(), username="r1", password="right-password", role="rater")
    actor = auth.authenticate(any_db, username="R1", password="right-password")
    assert actor == Actor(user_id=actor.user_id, username="r1", role="rater")
    assert auth.authenticate(any_db, username="r1", password="wrong-password") is None
    assert auth.authenticate(any_db, username="r1", password="") is None
    assert auth.authenticate(any_db, username="nobody", password="right-password") is None
    auth.set_active(any_db, Actor.system(), username="r1", active=False)
    assert auth.authenticate(any_db, username="r1", password="right-password") is None


def test_unknown_user_costs_one_verification(db, monkeypatch):
    """Unknown usernames still run argon2 verify, so timing does not reveal accounts."""
    calls = []

    class SpyHasher(PasswordHasher):
        def verify(self, hash, password):
            calls.append(hash)
            return super().verify(hash, password)

    monkeypatch.setattr(auth, "_hasher", SpyHasher(time_cost=1, memory_cost=1024, parallelism=1))
    assert auth.authenticate(db, username="ghost", password="whatever-pass") is None
    assert len(calls) == 1 and calls[0].startswith("$argon2id$")


def test_outdated_hash_is_upgraded_on_login(any_db, monkeypatch):
    weak = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
    monkeypatch.setattr(auth, "_hasher", weak)
    auth.create_user(any_db, Actor.system(), username="r1", password="old-params-pw", role="rater")
    old_hash = _hash_of(any_db, "r1")
    strong = PasswordHasher(time_cost=2, memory_cost=2048, parallelism=1)
    monkeypatch.setattr(auth, "_hasher", strong)
    assert auth.authenticate(any_db, username="r1", password="old-params-pw") is not None
    new_hash = _hash_of(any_db, "r1")
    assert new_hash != old_hash and "m=2048,t=2,p=1" in new_hash
    assert not strong.check_needs_rehash(new_hash)
    assert auth.authenticate(any_db, username="r1", password="old-params-pw") is not None
    assert _hash_of(any_db, "r1") == new_hash  # no rehash when parameters are current


def test_list_users_is_admin_only_and_has_no_hash(any_db, fast_password_hashing):
    auth.create_user(any_db, Actor.system(), username="r1", password="rater-password", role="rater")
    rater = auth.authenticate(any_db, username="r1", password="rater-password")
    with pytest.raises(PermissionDenied):
        auth.list_users(any_db, rater)
    users = auth.list_users(any_db, Actor.system())
    assert [u.username for u in users] == ["r1"]
    names = {f.name for f in dataclasses.fields(users[0])}
    assert names == {"user_id", "username", "display_name", "role", "active",
                     "must_change_password", "password_changed_at", "created_at"}


def test_set_password(any_db, fast_password_hashing):
    auth.create_user(any_db, Actor.system(), username="r1", password="first-password", role="rater")
    auth.create_user(any_db, Actor.system(), username="r2", password="other-password", role="rater")
    r1 = auth.authenticate(any_db, username="r1", password="first-password")
    auth.set_password(any_db, r1, username="r1", password="second-password")
    assert auth.authenticate(any_db, username="r1", password="first-password") is None
    assert auth.authenticate(any_db, username="r1", password="second-password") == r1
    with pytest.raises(PermissionDenied):
        auth.set_password(any_db, r1, username="r2", password="hijacked-password")
    with pytest.raises(InvalidInput, match="password"):
        auth.set_password(any_db, r1, username="r1", password="short")
    auth.set_password(any_db, Actor.system(), username="r2", password="reset-by-admin")
    assert auth.authenticate(any_db, username="r2", password="reset-by-admin") is not None
    with pytest.raises(NotFound):
        auth.set_password(any_db, Actor.system(), username="ghost", password="whatever-pass")


def test_session_user_stamp_changes_with_the_password_and_deactivation_hides_it(
    any_db, fast_password_hashing
):
    auth.create_user(any_db, Actor.system(), username="r1", password="first-password", role="rater")
    r1 = auth.authenticate(any_db, username="r1", password="first-password")
    before = auth.session_user(any_db, user_id=r1.user_id)
    assert before is not None and before.actor == r1
    assert auth.session_user(any_db, user_id=r1.user_id).credential_stamp == before.credential_stamp
    auth.set_password(any_db, r1, username="r1", password="second-password")
    after = auth.session_user(any_db, user_id=r1.user_id)
    assert after is not None and after.credential_stamp != before.credential_stamp
    auth.set_active(any_db, Actor.system(), username="r1", active=False)
    assert auth.session_user(any_db, user_id=r1.user_id) is None
    assert auth.session_user(any_db, user_id=99_999) is None
