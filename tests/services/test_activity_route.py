"""``POST _rc/api/activity`` through Starlette: cookie auth, the CSRF header, body checks, and
the spans it stores (resends idempotent, other raters' pairs refused by index)."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from sqlalchemy import func, select
from starlette.applications import Starlette
from starlette.testclient import TestClient

from radconcord.backend.services.accounts import auth, sessions
from radconcord.backend.services.annotation import activity
from radconcord.backend.services.study_admin.assignment import assign_raters
from radconcord.backend.types import Actor
from radconcord.db.models import ActivitySpan, Assignment, Pair
from radconcord.webapp import api
from radconcord.webapp.api import activity as activity_api
from radconcord.webapp.state import CSRF_HEADER, SESSION_COOKIE

SYSTEM = Actor.system()
HEADERS = {CSRF_HEADER: "1"}


def _login(db, actor) -> str:
    # Logged in a minute ago: a span is credited only inside the rater's sessions, and the
    # spans these tests send start a few seconds before now.
    then = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    ticket = sessions.create_session(db, actor, now=then)
    return sessions.exchange_ticket(db, ticket.ticket, now=then).token


@pytest.fixture
def env(db, make_study, fast_password_hashing):
    make_study(db, "S", 4)
    actors = {}
    for name in ("r1", "r2"):
        auth.create_user(db, SYSTEM, username=name, password=f"{name}-password", role="rater")
        actors[name] = auth.authenticate(db, username=name, password=f"{name}-password")
    assign_raters(db, SYSTEM, study_name="S", rater_usernames=["r1", "r2"], raters_per_pair=1,
                  seed=3)
    api.set_database(db)
    client = TestClient(Starlette(routes=activity_api.routes("")))
    yield db, actors, client
    api.set_database(None)


def _pairs(db, actor) -> list[str]:
    with db.read() as s:
        return list(s.scalars(select(Pair.opaque_id).join(Assignment)
                              .where(Assignment.rater_id == actor.user_id)))


def test_spans_are_stored_once_and_others_refused(env):
    db, actors, client = env
    mine, theirs = _pairs(db, actors["r1"])[0], _pairs(db, actors["r2"])[0]
    now = int(time.time() * 1000)
    body = {"client_id": "page-load-abc123", "account": activity.account_tag(actors["r1"]),
            "spans": [
        {"pair": mine, "start": now - 6000, "end": now - 2000, "events": 9},
        {"pair": theirs, "start": now - 6000, "end": now - 2000, "events": 9},
    ]}
    client.cookies.set(SESSION_COOKIE, _login(db, actors["r1"]))
    reply = client.post("/_rc/api/activity", json=body, headers=HEADERS)
    assert reply.status_code == 200
    assert reply.json() == {"stored": 1, "duplicates": 0, "refused": [
        {"index": 1, "field": "pair",
         "message": f"span 1: pair {theirs!r} is not in your assignments"}]}
    # The resend after a lost reply (keepalive on pagehide, then the timer) stores nothing.
    reply = client.post("/_rc/api/activity", json=body, headers=HEADERS)
    assert reply.json()["stored"] == 0 and reply.json()["duplicates"] == 1
    with db.read() as s:
        assert s.scalar(select(func.count(ActivitySpan.id))) == 1
        secs = s.scalar(select(Assignment.active_seconds).join(Pair)
                        .where(Pair.opaque_id == mine))
    assert secs == pytest.approx(4.0)


def test_header_login_and_body_are_checked(env):
    db, actors, client = env
    mine = _pairs(db, actors["r1"])[0]
    now = int(time.time() * 1000)
    good = {"client_id": "page-load-abc123", "account": activity.account_tag(actors["r1"]),
            "spans": [{"pair": mine, "start": now - 1000, "end": now, "events": 1}]}
    # No cookie: 401, the browser keeps its spans.
    reply = client.post("/_rc/api/activity", json=good, headers=HEADERS)
    assert reply.status_code == 401 and reply.json()["reason"] == "login"
    client.cookies.set(SESSION_COOKIE, _login(db, actors["r1"]))
    # No header (a cross-site form): 403, nothing stored.
    assert client.post("/_rc/api/activity", json=good).status_code == 403
    cases = [
        (b"not json", "request body is not JSON"),
        (b"[1, 2]", "request body: must be an object with client_id, account and spans"),
        (b'{"client_id": "page-load-abc123", "spans": {}}', "spans: must be a list, got dict"),
        (b'{"client_id": "page-load-abc123", "spans": []}', "account: must be the account"),
        (f'{{"client_id": "x", "account": "{activity.account_tag(actors["r1"])}", '
         '"spans": []}'.encode(), "client_id: must be 8-64 letters"),
        (b'{"client_id": "page-load-abc123", "spans": [], "user": 3}',
         "request body: unknown field(s) 'user'"),
    ]
    for raw, message in cases:
        reply = client.post("/_rc/api/activity", content=raw, headers=HEADERS)
        assert reply.status_code == 400, raw[:40]
        assert reply.json()["reason"] == "invalid" and message in reply.json()["message"]
    # Over the cap: 413, refused before the body is read (tests/services/test_route_probes.py).
    reply = client.post("/_rc/api/activity", content=b" " * (api.MAX_JSON_BODY + 1),
                        headers=HEADERS)
    assert reply.status_code == 413 and "request body over" in reply.json()["message"]
    with db.read() as s:
        assert s.scalar(select(func.count(ActivitySpan.id))) == 0
    # A revoked session is a login again, not a store.
    token = client.cookies.get(SESSION_COOKIE)
    sessions.revoke_session(db, token=token, reason="logout")
    assert client.post("/_rc/api/activity", json=good, headers=HEADERS).status_code == 401


def test_spans_of_another_account_are_refused(env):
    """Spans kept through a logout (401) and sent after another rater logged in at the same
    browser are refused with 409, even for a pair both raters have: never credited to the
    wrong rater."""
    db, actors, client = env
    with db.begin() as s:
        shared = s.scalar(select(Pair.opaque_id).join(Assignment)
                          .where(Assignment.rater_id == actors["r1"].user_id))
        pair_id = s.scalar(select(Pair.id).where(Pair.opaque_id == shared))
        s.add(Assignment(study_id=s.scalar(select(Pair.study_id).where(Pair.id == pair_id)),
                         rater_id=actors["r2"].user_id, pair_id=pair_id, order_index=99))
    now = int(time.time() * 1000)
    body = {"client_id": "page-load-abc123", "account": activity.account_tag(actors["r1"]),
            "spans": [{"pair": shared, "start": now - 3000, "end": now, "events": 2}]}
    client.cookies.set(SESSION_COOKIE, _login(db, actors["r2"]))
    reply = client.post("/_rc/api/activity", json=body, headers=HEADERS)
    assert reply.status_code == 409 and reply.json()["reason"] == "account"
    with db.read() as s:
        assert s.scalar(select(func.count(ActivitySpan.id))) == 0
    # The same spans with r1's cookie are r1's.
    client.cookies.set(SESSION_COOKIE, _login(db, actors["r1"]))
    assert client.post("/_rc/api/activity", json=body, headers=HEADERS).json()["stored"] == 1
