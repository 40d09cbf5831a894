"""The error records routes through Starlette: 200 with records and derived counts, 409 for a
stale version (nothing written), 401 without a live session, 403 without the header or on a
closed study, 404 for another rater's pair or record, 400 for a bad body or a counts study,
503 when the database stays busy."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy import func, select, update
from starlette.applications import Starlette
from starlette.testclient import TestClient

from radconcord.backend.services import transactions
from radconcord.backend.services.accounts import auth, sessions
from radconcord.backend.services.annotation import rating
from radconcord.backend.services.study_admin import study_settings
from radconcord.backend.services.study_admin.assignment import assign_raters
from radconcord.backend.types import Actor
from radconcord.db.models import ErrorRecord, RatingEvent, Study
from radconcord.webapp import api
from radconcord.webapp.api import error_records as records_api
from radconcord.webapp.state import CSRF_HEADER, SESSION_COOKIE

SYSTEM = Actor.system()
HEADERS = {CSRF_HEADER: "1"}
URL = "/_rc/api/error-records"
ADD = f"{URL}/add"
DELETE = f"{URL}/delete"


def _login(db, actor) -> str:
    ticket = sessions.create_session(db, actor)
    return sessions.exchange_ticket(db, ticket.ticket).token


def _make_env(db, make_study, mode):
    make_study(db, "S", 3)
    actors = {}
    for name in ("r1", "r2"):
        auth.create_user(db, SYSTEM, username=name, password=f"{name}-password", role="rater")
        actors[name] = auth.authenticate(db, username=name, password=f"{name}-password")
    assign_raters(db, SYSTEM, study_name="S", rater_usernames=["r1"], raters_per_pair=1,
                  seed=3)
    if mode != "counts":
        study_settings.update_study_settings(db, SYSTEM, study_name="S", annotation_mode=mode)
    api.set_database(db)
    return db, actors, TestClient(Starlette(routes=records_api.routes("")))


@pytest.fixture
def env(any_db, make_study, fast_password_hashing):
    yield _make_env(any_db, make_study, "error_records")
    api.set_database(None)


def _first(db, actor) -> str:
    return rating.rater_queue(db, actor, study_name="S")[0].opaque_id


def _written(db) -> tuple[int, int]:
    with db.read() as s:
        return (s.scalar(select(func.count(ErrorRecord.id))),
                s.scalar(select(func.count(RatingEvent.id))))


def _span(pair, version=0, **extra):
    # make_study's candidates read "Candidate <i>: small left effusion."
    return {"pair": pair, "version": version, "kind": "span", "category": 1,
            "significant": True, "candidate_start": 19, "candidate_end": 32} | extra


def test_add_list_and_delete_answer_records_counts_and_version(env):
    db, actors, client = env
    r1 = actors["r1"]
    pair = _first(db, r1)
    client.cookies.set(SESSION_COOKIE, _login(db, r1))
    reply = client.post(ADD, headers=HEADERS, json=_span(pair, note="side"))
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["version"] == 1 and body["counts"]["1s"] == 1
    assert body["saved_at"].endswith("+00:00")
    assert reply.headers["cache-control"] == "no-store"
    (record,) = body["records"]
    assert (record["kind"], record["candidate_text"], record["note"]) == (
        "span", "left effusion", "side")
    # An omission against the reference, then the GET shows both.
    reply = client.post(ADD, headers=HEADERS, json={
        "pair": pair, "version": 1, "kind": "omission", "category": 2, "significant": False,
        "reference_start": 0, "reference_end": 12})
    assert reply.status_code == 200, reply.text
    listed = client.get(URL, params={"pair": pair})
    assert listed.status_code == 200
    assert listed.json()["version"] == 2 and listed.json()["saved_at"] is None
    assert [r["kind"] for r in listed.json()["records"]] == ["span", "omission"]
    assert listed.json()["counts"]["2i"] == 1
    reply = client.post(DELETE, headers=HEADERS,
                        json={"pair": pair, "version": 2, "record": record["id"]})
    assert reply.status_code == 200
    assert reply.json()["counts"]["1s"] == 0 and reply.json()["version"] == 3
    assert rating.get_pair(db, r1, opaque_id=pair).counts[(1, True)] == 0


def test_a_stale_version_is_409_with_what_is_stored_and_nothing_written(env):
    db, actors, client = env
    r1 = actors["r1"]
    pair = _first(db, r1)
    client.cookies.set(SESSION_COOKIE, _login(db, r1))
    first = client.post(ADD, headers=HEADERS, json=_span(pair)).json()["records"][0]
    written = _written(db)
    reply = client.post(ADD, headers=HEADERS, json=_span(pair, category=3))
    assert reply.status_code == 409
    body = reply.json()
    assert body["reason"] == "stale" and body["version"] == 1 and body["counts"]["1s"] == 1
    assert [r["id"] for r in body["records"]] == [first["id"]]
    reply = client.post(DELETE, headers=HEADERS,
                        json={"pair": pair, "version": 0, "record": first["id"]})
    assert reply.status_code == 409
    assert _written(db) == written


def test_no_session_is_401_and_no_header_is_403(env):
    db, actors, client = env
    pair = _first(db, actors["r1"])
    assert client.get(URL, params={"pair": pair}).status_code == 401
    reply = client.post(ADD, headers=HEADERS, json=_span(pair))
    assert reply.status_code == 401 and reply.json()["reason"] == "login"
    client.cookies.set(SESSION_COOKIE, "not-a-token")
    assert client.post(DELETE, headers=HEADERS,
                       json={"pair": pair, "version": 0, "record": 1}).status_code == 401
    client.cookies.set(SESSION_COOKIE, _login(db, actors["r1"]))
    for url in (ADD, DELETE):
        reply = client.post(url, json=_span(pair))
        assert reply.status_code == 403 and reply.json()["reason"] == "forbidden"
    assert _written(db) == (0, 0)


def test_another_raters_pair_or_record_is_404(env):
    db, actors, client = env
    r1, r2 = actors["r1"], actors["r2"]
    pair = _first(db, r1)
    client.cookies.set(SESSION_COOKIE, _login(db, r1))
    record = client.post(ADD, headers=HEADERS, json=_span(pair)).json()["records"][0]
    # A record id of the actor's pair that is not theirs (none other exists): 404.
    reply = client.post(DELETE, headers=HEADERS,
                        json={"pair": pair, "version": 1, "record": record["id"] + 1})
    assert reply.status_code == 404 and "not among your records" in reply.json()["message"]
    # r2 has no assignment of the pair: the same answer as for a pair that does not exist.
    client.cookies.set(SESSION_COOKIE, _login(db, r2))
    written = _written(db)
    for reply in (client.get(URL, params={"pair": pair}),
                  client.get(URL, params={"pair": "nope"}),
                  client.post(ADD, headers=HEADERS, json=_span(pair, version=1)),
                  client.post(DELETE, headers=HEADERS,
                              json={"pair": pair, "version": 1, "record": record["id"]})):
        assert reply.status_code == 404, reply.text
        assert reply.json()["reason"] == "not_found"
        assert "is not in your assignments" in reply.json()["message"]
        assert "left effusion" not in reply.text
    assert _written(db) == written


@pytest.mark.parametrize(("body", "message"), [
    ([1, 2], "request body: must be a JSON object"),
    ({"pair": 5, "version": 0}, "pair: must be"),
    ({"version": -1}, "version: must be a whole number"),
    ({"extra": 1}, "unknown field(s) extra"),
    ({"candidate_end": 999}, "candidate_start/candidate_end"),
    ({"category": "2"}, "category: must be an integer 1-6"),
    ({"kind": "word"}, "kind: must be"),
])
def test_a_bad_body_is_400_naming_the_field(env, body, message):
    db, actors, client = env
    pair = _first(db, actors["r1"])
    client.cookies.set(SESSION_COOKIE, _login(db, actors["r1"]))
    payload = body if isinstance(body, list) else _span(pair) | body
    reply = client.post(ADD, headers=HEADERS, json=payload)
    assert reply.status_code == 400 and reply.json()["reason"] == "bad_request"
    assert message in reply.json()["message"]
    reply = client.post(ADD, headers=HEADERS, content=b"{not json")
    assert reply.status_code == 400 and "not JSON" in reply.json()["message"]
    reply = client.post(DELETE, headers=HEADERS, json={"pair": pair, "version": 0,
                                                      "record": "1"})
    assert reply.status_code == 400 and "record: must be a record id" in reply.text
    assert client.get(URL).status_code == 400
    assert _written(db) == (0, 0)


@pytest.mark.parametrize(("body", "message"), [
    ({"category": 2}, "category: an error span marks the candidate, so its category is 1 or 3 "
                      "or 4 or 5, got 2"),
    ({"category": 6}, "so its category is 1 or 3 or 4 or 5, got 6"),
    ({"kind": "omission", "category": 1, "candidate_start": None, "candidate_end": None,
      "reference_start": 0, "reference_end": 12},
     "category: an omission marks the reference, so its category is 2 or 6, got 1"),
    ({"kind": "omission", "category": 4, "candidate_start": None, "candidate_end": None,
      "reference_start": 0, "reference_end": 12}, "so its category is 2 or 6, got 4"),
])
def test_a_category_the_kind_cannot_carry_is_400_with_the_rule(env, body, message):
    db, actors, client = env
    pair = _first(db, actors["r1"])
    client.cookies.set(SESSION_COOKIE, _login(db, actors["r1"]))
    reply = client.post(ADD, headers=HEADERS, json=_span(pair) | body)
    assert reply.status_code == 400 and reply.json()["reason"] == "bad_request"
    assert message in reply.json()["message"]
    assert _written(db) == (0, 0)
    assert client.get(URL, params={"pair": pair}).json()["version"] == 0


def test_a_closed_study_is_403_read_only(env):
    db, actors, client = env
    pair = _first(db, actors["r1"])
    client.cookies.set(SESSION_COOKIE, _login(db, actors["r1"]))
    with db.begin() as s:
        s.execute(update(Study).values(status="closed"))
    reply = client.post(ADD, headers=HEADERS, json=_span(pair))
    assert reply.status_code == 403 and reply.json()["reason"] == "read_only"
    assert client.get(URL, params={"pair": pair}).status_code == 200
    assert _written(db) == (0, 0)


def test_a_counts_study_is_400(any_db, make_study, fast_password_hashing):
    db, actors, client = _make_env(any_db, make_study, "counts")
    try:
        pair = _first(db, actors["r1"])
        client.cookies.set(SESSION_COOKIE, _login(db, actors["r1"]))
        reply = client.post(ADD, headers=HEADERS, json=_span(pair))
        assert reply.status_code == 400
        assert "does not use per-error records" in reply.json()["message"]
        assert _written(db) == (0, 0)
    finally:
        api.set_database(None)


def test_a_busy_database_is_503(db, make_study, fast_password_hashing, monkeypatch):
    db, actors, client = _make_env(db, make_study, "error_records")
    try:
        monkeypatch.setattr(transactions, "SAVE_RETRY_SECONDS", 0.4)
        pair = _first(db, actors["r1"])
        client.cookies.set(SESSION_COOKIE, _login(db, actors["r1"]))
        raw = sqlite3.connect(db.engine.url.database, isolation_level=None)
        raw.execute("BEGIN IMMEDIATE")
        try:
            reply = client.post(ADD, headers=HEADERS, json=_span(pair))
        finally:
            raw.rollback()
            raw.close()
        assert reply.status_code == 503 and reply.json()["reason"] == "busy"
        assert _written(db) == (0, 0)
        assert client.post(ADD, headers=HEADERS, json=_span(pair)).status_code == 200
    finally:
        api.set_database(None)


def test_the_routes_are_mounted_with_the_app():
    paths = {route.path for route in api.routes("")}
    assert {URL, ADD, DELETE} <= paths
