"""What an attacker's probe of the app's routes found, each closed (issue 21).

* Bodies are capped before they are read: a ``Content-Length`` over the cap, or a chunked body
  that runs past it, gets JSON 413 on every route (the server-level memory check is in
  ``tests/e2e/test_request_limits_server.py``).
* Deeply nested JSON gets JSON 400 naming the problem, not a bare 500 (RecursionError).
* Ids of 2**63 or more are answered exactly as unknown ids (no OverflowError 500).
* A cell key with a trailing newline (``"1s\\n"``) is refused: keys match whole.
* A full disk during a save answers JSON 507 naming storage; nothing stored is lost, and the
  app logs one line naming the data folder.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from pathlib import Path

import pytest
from pydicom.data import get_testdata_file
from sqlalchemy import event, func, select
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from radconcord.backend.datasets.pairs import CandidateInput, CaseInput, ImageInput
from radconcord.backend.services import transactions
from radconcord.backend.services.accounts import auth, sessions
from radconcord.backend.services.annotation import error_records, images, rating
from radconcord.backend.services.study_admin import study_settings
from radconcord.backend.services.study_admin.assignment import assign_raters
from radconcord.backend.services.transfer.imports import import_cases
from radconcord.backend.types import Actor
from radconcord.backend.util import MAX_DB_ID, is_db_id
from radconcord.db.models import Case, Image, Rating, RatingEvent
from radconcord.webapp import api
from radconcord.webapp.api import activity as activity_api
from radconcord.webapp.api import error_records as records_api
from radconcord.webapp.api import images as images_api
from radconcord.webapp.api import rating as rating_api
from radconcord.webapp.state import CSRF_HEADER, SESSION_COOKIE

SYSTEM = Actor.system()
HEADERS = {CSRF_HEADER: "1"}
JSON_ROUTES = ["/_rc/api/rating/counts", "/_rc/api/activity", "/_rc/api/error-records/add",
               "/_rc/api/error-records/delete"]
OVERFLOW_IDS = [2**63, 2**64 + 5, 10**30]


def _login(db, actor) -> str:
    return sessions.exchange_ticket(db, sessions.create_session(db, actor).ticket).token


@pytest.fixture
def env(db, make_study, fast_password_hashing):
    make_study(db, "S", 3)
    auth.create_user(db, SYSTEM, username="r1", password="r1-password", role="rater")
    r1 = auth.authenticate(db, username="r1", password="r1-password")
    assign_raters(db, SYSTEM, study_name="S", rater_usernames=["r1"], raters_per_pair=1, seed=3)
    api.set_database(db)
    routes = [*rating_api.routes(""), *activity_api.routes(""), *records_api.routes("")]
    client = TestClient(Starlette(routes=routes))
    client.cookies.set(SESSION_COOKIE, _login(db, r1))
    yield db, r1, client
    api.set_database(None)


def _pair(db, actor) -> str:
    return rating.rater_queue(db, actor, study_name="S")[0].opaque_id


def _chunks(total: int, size: int = 16 * 1024):
    sent = 0
    while sent < total:
        yield b" " * min(size, total - sent)
        sent += size


@pytest.mark.parametrize("route", JSON_ROUTES)
def test_an_announced_body_over_the_cap_is_refused_before_it_is_read(env, route):
    _, _, client = env
    reply = client.post(route, headers=HEADERS, content=b"{" + b" " * api.MAX_JSON_BODY)
    assert reply.status_code == 413, reply.text
    body = reply.json()
    assert body["reason"] == "too_large" and body["limit"] == api.MAX_JSON_BODY
    assert body["message"] == f"request body over {api.MAX_JSON_BODY} bytes"


@pytest.mark.parametrize("route", JSON_ROUTES)
def test_a_chunked_body_is_read_only_up_to_the_cap(env, route):
    """Driven as the server drives the app: 16 KB body messages, no Content-Length (the test
    client would hand the route the whole body in one message)."""
    db, r1, _ = env
    app = Starlette(routes=[*rating_api.routes(""), *activity_api.routes(""),
                            *records_api.routes("")])
    cookie = f"{SESSION_COOKIE}={_login(db, r1)}"
    chunks = list(_chunks(10 * api.MAX_JSON_BODY))
    taken: list[int] = []
    sent: list[dict] = []

    async def receive():
        chunk = chunks[len(taken)]
        taken.append(len(chunk))
        return {"type": "http.request", "body": chunk, "more_body": len(taken) < len(chunks)}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": route, "raw_path": route.encode(),
             "query_string": b"", "root_path": "", "server": ("testserver", 80),
             "client": ("127.0.0.1", 1), "headers": [
                 (b"x-radconcord", b"1"), (b"cookie", cookie.encode()),
                 (b"transfer-encoding", b"chunked"), (b"content-type", b"application/json")]}
    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 413
    assert json.loads(sent[1]["body"])["reason"] == "too_large"
    # The route stopped at the first chunk past the cap instead of draining all ten caps.
    assert api.MAX_JSON_BODY < sum(taken) <= api.MAX_JSON_BODY + 16 * 1024


def test_a_lying_or_broken_content_length_is_refused():
    async def echo(request):
        return PlainTextResponse(str(len(await api.read_body(request, 100))))

    client = TestClient(Starlette(routes=[Route("/e", echo, methods=["POST"])]))
    with pytest.raises(api.BadBody, match="Content-Length: must be a whole number"):
        api.announced_length({"content-length": "12, 12"}, 100)
    with pytest.raises(api.BodyTooLarge):
        api.announced_length({"content-length": "9" * 30}, 100)
    assert api.announced_length({}, 100) is None
    assert client.post("/e", content=b"x" * 100).text == "100"


def test_the_middleware_refuses_a_long_body_on_any_app_route_before_the_route_runs():
    ran = []

    async def page(request):
        ran.append(request.url.path)
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/_rc/thing", page, methods=["GET", "POST"]),
                            Route("/other", page, methods=["POST"])],
                    middleware=[Middleware(api.BodyLimitMiddleware, prefix="/_rc/",
                                           limit=1000)])
    client = TestClient(app)
    reply = client.post("/_rc/thing", content=b"x" * 1001)
    assert reply.status_code == 413 and reply.json()["reason"] == "too_large"
    assert client.request("GET", "/_rc/thing", content=b"x" * 5000).status_code == 413
    assert ran == []
    assert client.post("/_rc/thing", content=b"x" * 1000).status_code == 200
    assert client.post("/other", content=b"x" * 5000).status_code == 200  # not ours to cap


def test_the_server_wires_the_middleware_under_the_base_path():
    from radconcord.webapp import server

    (wired,) = server.middleware()
    assert wired.cls is api.BodyLimitMiddleware
    assert wired.kwargs["prefix"].endswith("/_rc/")


def test_the_deployment_guide_gives_the_proxies_the_apps_body_limit():
    guide = (Path(__file__).resolve().parents[2] / "docs" / "deployment.md").read_text()
    kb = api.MAX_ROUTE_BODY // 1024
    assert f"client_max_body_size {kb}k;" in guide  # nginx
    assert f"max_size {kb}KB" in guide  # Caddy
    assert f"**{kb} KB**" in guide


@pytest.mark.parametrize("route", JSON_ROUTES)
def test_deeply_nested_json_gets_a_json_400(env, route):
    _, _, client = env
    reply = client.post(route, headers={**HEADERS, "Content-Type": "application/json"},
                        content=b"[" * 60000)
    assert reply.status_code == 400, reply.text
    assert reply.json()["message"] == "request body: JSON nested too deeply"
    deep_object = b'{"a":' * 10000 + b"1" + b"}" * 10000
    reply = client.post(route, headers=HEADERS, content=deep_object)
    assert reply.status_code == 400 and "nested too deeply" in reply.json()["message"]


def test_a_cell_key_must_match_whole(env):
    db, r1, client = env
    pair = _pair(db, r1)
    for key in ("1s\n", "1s ", " 1s", "1s\n2s", "11s"):
        reply = client.post("/_rc/api/rating/counts", headers=HEADERS,
                            json={"pair": pair, "version": 0, "cells": {key: 1}})
        assert reply.status_code == 400, (key, reply.text)
        assert "unknown cell" in reply.json()["message"]
    with db.read() as s:
        assert s.scalar(select(func.count(RatingEvent.id))) == 0


def test_is_db_id_is_the_sql_bigint_range():
    assert [is_db_id(v) for v in (1, MAX_DB_ID, 0, -1, MAX_DB_ID + 1, True, 1.0, "1")] == [
        True, True, False, False, False, False, False, False]


@pytest.mark.parametrize("record", OVERFLOW_IDS)
def test_deleting_a_record_with_an_overflowing_id_is_an_unknown_record(db, make_study,
                                                                       fast_password_hashing,
                                                                       record):
    make_study(db, "S", 2)
    auth.create_user(db, SYSTEM, username="r1", password="r1-password", role="rater")
    r1 = auth.authenticate(db, username="r1", password="r1-password")
    assign_raters(db, SYSTEM, study_name="S", rater_usernames=["r1"], raters_per_pair=1, seed=3)
    study_settings.update_study_settings(db, SYSTEM, study_name="S",
                                         annotation_mode="error_records")
    api.set_database(db)
    try:
        client = TestClient(Starlette(routes=records_api.routes("")))
        client.cookies.set(SESSION_COOKIE, _login(db, r1))
        pair = _pair(db, r1)
        unknown = client.post("/_rc/api/error-records/delete", headers=HEADERS,
                              json={"pair": pair, "version": 0, "record": 424242})
        huge = client.post("/_rc/api/error-records/delete", headers=HEADERS,
                           json={"pair": pair, "version": 0, "record": record})
        assert (huge.status_code, huge.json()["reason"]) == (unknown.status_code, "not_found")
        assert unknown.status_code == 404
        assert huge.json()["message"] == unknown.json()["message"].replace("424242",
                                                                          str(record))
        with pytest.raises(error_records.NotFound):
            error_records.delete_record(db, r1, opaque_id=pair, record_id=record)
    finally:
        api.set_database(None)


@pytest.fixture
def image_env(db, fast_password_hashing):
    import_cases(db, SYSTEM, study_name="S", cases=[CaseInput(
        case_id="cr", reference="No effusion.",
        candidates=[CandidateInput(text="Small effusion.", source="gen-a")],
        images=[ImageInput(path=Path(get_testdata_file("RG1_UNCR.dcm")), view="PA")])])
    images.clear_caches()
    actors = {}
    for name, role in (("r1", "rater"), ("boss", "admin")):
        auth.create_user(db, SYSTEM, username=name, password=f"{name}-password", role=role)
        actors[name] = auth.authenticate(db, username=name, password=f"{name}-password")
    with db.read() as s:
        assert s.scalar(select(func.count(Case.id))) == 1
        image_id = s.scalar(select(Image.id))
    api.set_database(db)
    yield db, actors, TestClient(Starlette(routes=images_api.routes(""))), image_id
    api.set_database(None)
    images.clear_caches()


@pytest.mark.parametrize("image_id", OVERFLOW_IDS)
def test_an_overflowing_image_id_is_answered_as_an_unknown_image(image_env, image_id):
    db, actors, client, real_id = image_env
    for who, status in (("boss", 404), ("r1", 403)):
        client.cookies.set(SESSION_COOKIE, _login(db, actors[who]))
        unknown = client.get(f"/_rc/api/images/{real_id + 1000}/pixels")
        huge = client.get(f"/_rc/api/images/{image_id}/pixels")
        assert (unknown.status_code, huge.status_code) == (status, status), huge.text
        assert huge.json()["reason"] == unknown.json()["reason"]
        assert huge.json()["message"] == unknown.json()["message"].replace(
            str(real_id + 1000), str(image_id))


def _real_sqlite_full_error() -> sqlite3.OperationalError:
    """The error SQLite itself raises when it cannot grow the file (``SQLITE_FULL``): made by
    capping a scratch database at its page count (``PRAGMA max_page_count``) and growing it."""
    scratch = sqlite3.connect(":memory:")
    try:
        scratch.execute("CREATE TABLE t (x TEXT)")
        scratch.execute("PRAGMA max_page_count = 2")
        scratch.execute("INSERT INTO t VALUES (?)", ("x" * 100_000,))
    except sqlite3.OperationalError as exc:
        return exc
    finally:
        scratch.close()
    raise AssertionError("SQLite grew past its max_page_count")


def test_storage_full_is_recognised_from_the_drivers_own_errors():
    from sqlalchemy.exc import OperationalError

    from radconcord.db.session import is_busy_error, is_storage_full

    full = _real_sqlite_full_error()
    assert full.sqlite_errorcode == sqlite3.SQLITE_FULL and "disk is full" in str(full)
    wrapped = OperationalError("INSERT", {}, full)
    assert is_storage_full(wrapped) and not is_busy_error(wrapped)
    assert is_storage_full(OSError(28, "No space left on device"))
    assert not is_storage_full(OperationalError("x", {}, sqlite3.OperationalError(
        "database is locked")))

    class PgError(Exception):
        sqlstate = "53100"
    assert is_storage_full(OperationalError("x", {}, PgError("could not extend file")))


def test_a_full_disk_answers_507_naming_storage_and_loses_nothing(env, caplog):
    """The disk fills in the middle of a save: SQLite's own ``SQLITE_FULL`` error (see
    :func:`_real_sqlite_full_error`) is raised by the INSERT of the rating's event, after the
    counts were updated in the same transaction."""
    db, r1, client = env
    pair = _pair(db, r1)
    first = client.post("/_rc/api/rating/counts", headers=HEADERS,
                        json={"pair": pair, "version": 0, "cells": {"2s": 1}})
    assert first.status_code == 200, first.text
    full = _real_sqlite_full_error()
    seen = []

    def disk_full(conn, cursor, statement, parameters, context, executemany):
        seen.append(statement.split()[0])
        if statement.lstrip().upper().startswith("INSERT INTO RATING_EVENTS"):
            raise full

    event.listen(db.engine, "before_cursor_execute", disk_full)
    caplog.set_level(logging.ERROR, logger="radconcord.backend.services.transactions")
    try:
        reply = client.post("/_rc/api/rating/counts", headers=HEADERS,
                            json={"pair": pair, "version": 1, "cells": {"2s": 5, "3i": 2}})
    finally:
        event.remove(db.engine, "before_cursor_execute", disk_full)
    assert "UPDATE" in seen or "INSERT" in seen  # the counts were written before the event
    assert reply.status_code == 507, reply.text
    assert reply.json() == {"reason": "storage", "message": transactions.STORAGE_FULL_MESSAGE}
    lines = [r.getMessage() for r in caplog.records if "storage full" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert f"data folder {Path(db.engine.url.database).resolve().parent}" in lines[0]
    # What was saved before is intact, and nothing of the refused save was half-written.
    view = rating.get_pair(db, r1, opaque_id=pair)
    assert view.version == 1 and view.counts[(2, True)] == 1 and view.counts[(3, False)] == 0
    with db.read() as s:
        assert s.scalar(select(func.count(RatingEvent.id))) == 1
        assert s.scalar(select(func.count(Rating.id))) == 1
    # Once there is room again the grid's resend goes through.
    again = client.post("/_rc/api/rating/counts", headers=HEADERS,
                        json={"pair": pair, "version": 1, "cells": {"2s": 5, "3i": 2}})
    assert again.status_code == 200 and again.json()["version"] == 2
