"""``POST _rc/api/rating/counts`` (the count grid's saves) through Starlette: 200 with the new
version, 409 for a stale version with the stored counts, 401 without a live session (expired,
revoked, deactivated), 403 without the header or on a closed study, 404 for a pair that is not
the actor's (same answer as a missing one) or another account's kept change, 400 for a bad
body (nothing written), 503 when the database stays busy."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy import func, select, update
from starlette.applications import Starlette
from starlette.testclient import TestClient

from radconcord.backend.services import transactions
from radconcord.backend.services.accounts import auth, sessions
from radconcord.backend.services.annotation import rating
from radconcord.backend.services.study_admin.assignment import assign_raters
from radconcord.backend.types import Actor
from radconcord.db.models import AuthSession, Pair, RatingEvent, Study
from radconcord.webapp import api
from radconcord.webapp.api import rating as rating_api
from radconcord.webapp.state import CSRF_HEADER, SESSION_COOKIE

SYSTEM = Actor.system()
HEADERS = {CSRF_HEADER: "1"}
URL = "/_rc/api/rating/counts"


def _login(db, actor) -> str:
    ticket = sessions.create_session(db, actor)
    return sessions.exchange_ticket(db, ticket.ticket).token


@pytest.fixture
def env(db, make_study, fast_password_hashing):
    make_study(db, "S", 3)
    actors = {}
    for name in ("r1", "r2", "r3"):
        auth.create_user(db, SYSTEM, username=name, password=f"{name}-password", role="rater")
        actors[name] = auth.authenticate(db, username=name, password=f"{name}-password")
    assign_raters(db, SYSTEM, study_name="S", rater_usernames=["r1", "r2"], raters_per_pair=2,
                  seed=3)
    api.set_database(db)
    client = TestClient(Starlette(routes=rating_api.routes("")))
    yield db, actors, client
    api.set_database(None)


def _first(db, actor) -> str:
    return rating.rater_queue(db, actor, study_name="S")[0].opaque_id


def _events(db) -> int:
    with db.read() as s:
        return s.scalar(select(func.count(RatingEvent.id)))


def test_a_save_answers_the_new_version_and_every_stored_count(env):
    db, actors, client = env
    r1 = actors["r1"]
    pair = _first(db, r1)
    client.cookies.set(SESSION_COOKIE, _login(db, r1))
    reply = client.post(URL, headers=HEADERS, json={
        "pair": pair, "version": 0, "cells": {"2s": 3, "4i": 1},
        "tag": rating_api.grid_tag(r1, pair)})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["version"] == 1 and body["changed"] == ["2s", "4i"]
    assert body["counts"] == {f"{c}{g}": 0 for c in range(1, 7) for g in "si"} | {
        "2s": 3, "4i": 1}
    assert body["saved_at"].endswith("+00:00")
    assert reply.headers["cache-control"] == "no-store"
    view = rating.get_pair(db, r1, opaque_id=pair)
    assert (view.counts[(2, True)], view.counts[(4, False)], view.version) == (3, 1, 1)
    # Without a tag (a grid of an older page) the save goes through too.
    reply = client.post(URL, headers=HEADERS,
                        json={"pair": pair, "version": 1, "cells": {"2s": 4}})
    assert reply.status_code == 200 and reply.json()["version"] == 2


def test_a_stale_version_is_refused_with_the_stored_counts(env):
    db, actors, client = env
    r1 = actors["r1"]
    pair = _first(db, r1)
    client.cookies.set(SESSION_COOKIE, _login(db, r1))
    # The newer tab stores 2; the older tab, still at version 0, clicks "+" (1).
    assert client.post(URL, headers=HEADERS, json={
        "pair": pair, "version": 0, "cells": {"1s": 2}}).status_code == 200
    events = _events(db)
    reply = client.post(URL, headers=HEADERS, json={"pair": pair, "version": 0,
                                                    "cells": {"1s": 1}})
    assert reply.status_code == 409
    body = reply.json()
    assert body["reason"] == "stale" and "changed in another window, reloaded" in body["message"]
    assert body["version"] == 1 and body["counts"]["1s"] == 2
    assert _events(db) == events
    assert rating.get_pair(db, r1, opaque_id=pair).counts[(1, True)] == 2


def test_no_live_session_is_401_and_nothing_is_written(env):
    db, actors, client = env
    r1 = actors["r1"]
    pair = _first(db, r1)
    body = {"pair": pair, "version": 0, "cells": {"3s": 1}}
    # No cookie; an unknown cookie (a server restarted on a new database, a stale browser).
    assert client.post(URL, headers=HEADERS, json=body).status_code == 401
    client.cookies.set(SESSION_COOKIE, "not-a-token")
    reply = client.post(URL, headers=HEADERS, json=body)
    assert reply.status_code == 401 and reply.json()["reason"] == "login"
    assert "Log in again" in reply.json()["message"]
    # A revoked session (logged out elsewhere, or its row deleted by the admin).
    token = _login(db, r1)
    client.cookies.set(SESSION_COOKIE, token)
    assert sessions.revoke_session(db, token=token, reason="test")
    assert client.post(URL, headers=HEADERS, json=body).status_code == 401
    token = _login(db, r1)
    client.cookies.set(SESSION_COOKIE, token)
    with db.begin() as s:
        s.execute(AuthSession.__table__.delete())
    assert client.post(URL, headers=HEADERS, json=body).status_code == 401
    # A deactivated account's open tab stores no further count.
    client.cookies.set(SESSION_COOKIE, _login(db, r1))
    auth.set_active(db, SYSTEM, username="r1", active=False)
    assert client.post(URL, headers=HEADERS, json=body).status_code == 401
    assert _events(db) == 0


def test_the_header_is_required(env):
    db, actors, client = env
    r1 = actors["r1"]
    client.cookies.set(SESSION_COOKIE, _login(db, r1))
    reply = client.post(URL, json={"pair": _first(db, r1), "version": 0, "cells": {"1s": 1}})
    assert reply.status_code == 403 and reply.json()["reason"] == "forbidden"
    reply = client.post(URL, headers={CSRF_HEADER: "yes"},
                        json={"pair": _first(db, r1), "version": 0, "cells": {"1s": 1}})
    assert reply.status_code == 403
    assert _events(db) == 0


@pytest.mark.parametrize(("body", "needle"), [
    (b"not json", "not JSON"),
    (b"[1, 2]", "JSON object"),
    (b'{"pair": "x", "version": 0, "cells": {"1s": 1}, "admin": true}', "unknown field"),
    (b'{"version": 0, "cells": {"1s": 1}}', "pair"),
    (b'{"pair": "P", "cells": {"1s": 1}}', "version"),
    (b'{"pair": "P", "version": -1, "cells": {"1s": 1}}', "version"),
    (b'{"pair": "P", "version": true, "cells": {"1s": 1}}', "version"),
    (b'{"pair": "P", "version": 0, "cells": [1]}', "cells"),
    (b'{"pair": "P", "version": 0, "cells": {"7s": 1}}', "unknown cell '7s'"),
    (b'{"pair": "P", "version": 0, "cells": {"1x": 1}}', "unknown cell"),
    (b'{"pair": "P", "version": 0, "cells": {"1s": "2"}}', "cells.1s"),
    (b'{"pair": "P", "version": 0, "cells": {"1s": 1.5}}', "cells.1s"),
    (b'{"pair": "P", "version": 0, "cells": {"1s": 100}}', "count"),
    (b'{"pair": "P", "version": 0, "cells": {"1s": 2, "2i": -1}}', "count"),
    (b'{"pair": "P", "version": 0, "cells": {}, "tag": 5}', "tag"),
])
def test_a_bad_body_is_400_naming_the_field_and_writes_nothing(env, body, needle):
    db, actors, client = env
    r1 = actors["r1"]
    client.cookies.set(SESSION_COOKIE, _login(db, r1))
    body = body.replace(b'"P"', f'"{_first(db, r1)}"'.encode())
    reply = client.post(URL, headers={**HEADERS, "Content-Type": "application/json"},
                        content=body)
    assert reply.status_code == 400, reply.text
    assert reply.json()["reason"] == "bad_request" and needle in reply.json()["message"]
    assert _events(db) == 0
    assert rating.get_pair(db, r1, opaque_id=_first(db, r1)).version == 0


def test_a_huge_body_is_refused(env):
    db, actors, client = env
    client.cookies.set(SESSION_COOKIE, _login(db, actors["r1"]))
    reply = client.post(URL, headers=HEADERS, content=b"{" + b" " * (api.MAX_JSON_BODY + 1))
    assert reply.status_code == 413 and "bytes" in reply.json()["message"]


def test_other_pairs_closed_studies_and_other_accounts_kept_changes(env):
    db, actors, client = env
    r1, r2, r3 = actors["r1"], actors["r2"], actors["r3"]
    pair = _first(db, r1)
    # r3 has no assignment: the pair is "not in your assignments", as a missing one is.
    client.cookies.set(SESSION_COOKIE, _login(db, r3))
    reply = client.post(URL, headers=HEADERS, json={"pair": pair, "version": 0,
                                                    "cells": {"1s": 1}})
    missing = client.post(URL, headers=HEADERS, json={"pair": "no-such", "version": 0,
                                                      "cells": {"1s": 1}})
    assert reply.status_code == missing.status_code == 404
    assert reply.json()["message"].replace(pair, "X") == \
        missing.json()["message"].replace("no-such", "X")
    # r2 shares the pair: a change r1 left in this browser (r1's tag) is not r2's to apply,
    # even at the same version number.
    client.cookies.set(SESSION_COOKIE, _login(db, r2))
    reply = client.post(URL, headers=HEADERS, json={
        "pair": pair, "version": 0, "cells": {"1s": 5}, "tag": rating_api.grid_tag(r1, pair)})
    assert reply.status_code == 404 and reply.json()["reason"] == "not_yours"
    assert not any(rating.get_pair(db, r2, opaque_id=pair).counts.values())
    # A closed study refuses every save.
    with db.begin() as s:
        s.execute(update(Study).values(status="closed"))
    reply = client.post(URL, headers=HEADERS, json={"pair": pair, "version": 0,
                                                    "cells": {"1s": 1}})
    assert reply.status_code == 403 and reply.json()["reason"] == "read_only"
    assert "closed" in reply.json()["message"]
    assert _events(db) == 0


def test_a_busy_database_is_503_and_the_same_save_goes_through_later(env, monkeypatch):
    db, actors, client = env
    monkeypatch.setattr(transactions, "SAVE_RETRY_SECONDS", 0.4)
    r1 = actors["r1"]
    pair = _first(db, r1)
    client.cookies.set(SESSION_COOKIE, _login(db, r1))
    body = {"pair": pair, "version": 0, "cells": {"6i": 2}}
    raw = sqlite3.connect(db.engine.url.database, isolation_level=None)
    raw.execute("BEGIN IMMEDIATE")
    try:
        reply = client.post(URL, headers=HEADERS, json=body)
    finally:
        raw.rollback()
        raw.close()
    assert reply.status_code == 503 and reply.json()["reason"] == "busy"
    assert "Not saved" in reply.json()["message"]
    assert _events(db) == 0
    reply = client.post(URL, headers=HEADERS, json=body)
    assert reply.status_code == 200 and reply.json()["counts"]["6i"] == 2


def test_the_route_is_mounted_with_the_app(env):
    paths = {route.path for route in api.routes("")}
    assert URL in paths
    assert api.url("/base/", rating_api.ROUTE) == "/base/_rc/api/rating/counts"
    with env[0].read() as s:
        assert s.scalar(select(func.count(Pair.id))) == 3
