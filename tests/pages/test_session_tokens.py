"""The "remember this browser" token store of ``webapp/state.py`` (no browser needed)."""

from __future__ import annotations

import datetime as dt
import hashlib

from webapp.state import SessionStore

T0 = dt.datetime(2026, 1, 1, 8, 0, tzinfo=dt.UTC)


def test_only_the_hash_is_kept_and_the_token_resolves_to_its_user():
    store = SessionStore(ttl=dt.timedelta(hours=12))
    token = store.issue(7, now=T0)
    assert len(token) >= 40
    stored = dict(store._entries)
    assert token not in stored and hashlib.sha256(token.encode()).hexdigest() in stored
    assert store.resolve(token, now=T0) == 7
    assert store.resolve("not-a-token", now=T0) is None
    assert store.resolve("", now=T0) is None
    assert store.issue(7, now=T0) != token  # every login gets a fresh random token


def test_expiry_slides_with_use_and_an_idle_token_dies():
    store = SessionStore(ttl=dt.timedelta(hours=12))
    token = store.issue(3, now=T0)
    # Used every 11 hours: still alive after 33 hours.
    for hours in (11, 22, 33):
        assert store.resolve(token, now=T0 + dt.timedelta(hours=hours)) == 3
    # Idle for 12 hours: gone for good.
    assert store.resolve(token, now=T0 + dt.timedelta(hours=45, seconds=1)) is None
    assert len(store) == 0


def test_revoke_logs_the_browser_out():
    store = SessionStore()
    token = store.issue(5, now=T0)
    store.revoke(hashlib.sha256(token.encode()).hexdigest())
    assert store.resolve(token, now=T0) is None


def test_token_remembers_the_credential_stamp_it_was_issued_under():
    """A password change (new stamp) must not restore a browser remembered before it."""
    store = SessionStore()
    token = store.issue(9, stamp="abc", now=T0)
    digest = hashlib.sha256(token.encode()).hexdigest()
    assert store.stamp(digest) == "abc"
    store.revoke(digest)
    assert store.stamp(digest) is None
