"""Issue 24: a scripted rater (a bot) is flagged by QC within its first 10 pairs, alone in
its study, through the real JSON routes (``rating`` counts, ``activity`` spans) and the
rating service's Mark-done (what the page's button calls; it has no JSON route).

Before the absolute floors QC's flags were only relative (robust z against the other
raters, meaningless with 1 or 2 raters) plus all-zero runs, so this bot (3.7 s a pair, a
count in every pair) was never flagged.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from radconcord.backend.services.accounts import auth, sessions
from radconcord.backend.services.annotation import activity, rating
from radconcord.backend.services.quality import qc
from radconcord.backend.services.study_admin import study_settings
from radconcord.backend.services.study_admin.assignment import assign_raters
from radconcord.backend.types import Actor
from radconcord.webapp import api
from radconcord.webapp.api import activity as activity_api
from radconcord.webapp.api import rating as rating_api
from radconcord.webapp.state import CSRF_HEADER, SESSION_COOKIE

SYSTEM = Actor.system()
HEADERS = {CSRF_HEADER: "1"}
SECONDS_PER_PAIR = 3.7


def _login(db, actor) -> str:
    # Logged in 5 minutes ago: spans are credited only inside the rater's session.
    then = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    ticket = sessions.create_session(db, actor, now=then)
    return sessions.exchange_ticket(db, ticket.ticket, now=then).token


@pytest.fixture
def env(db, make_study, fast_password_hashing):
    make_study(db, "Bot study", 12)
    auth.create_user(db, SYSTEM, username="admin", password="admin-password", role="admin")
    auth.create_user(db, SYSTEM, username="bot", password="bot-password", role="rater")
    admin = auth.authenticate(db, username="admin", password="admin-password")
    bot = auth.authenticate(db, username="bot", password="bot-password")
    assign_raters(db, SYSTEM, study_name="Bot study", rater_usernames=["bot"],
                  raters_per_pair=1, seed=3)
    api.set_database(db)
    client = TestClient(Starlette(routes=[*rating_api.routes(""), *activity_api.routes("")]))
    client.cookies.set(SESSION_COOKIE, _login(db, bot))
    yield db, admin, bot, client
    api.set_database(None)


def _rate_like_a_bot(db, bot, client, n: int, *, send_time: bool):
    """Rate ``n`` pairs as a script does; yield after each the pair's 1-based count."""
    queue = [q.opaque_id for q in rating.rater_queue(db, bot, study_name="Bot study")]
    start = int(time.time() * 1000) - 120_000
    for i, pair in enumerate(queue[:n]):
        view = rating.get_pair(db, bot, opaque_id=pair)
        reply = client.post("/_rc/api/rating/counts", headers=HEADERS, json={
            "pair": pair, "cells": {"1s": i % 3, "4i": 1}, "version": view.version})
        assert reply.status_code == 200, reply.text
        if send_time:
            t0 = start + int(i * SECONDS_PER_PAIR * 1000)
            reply = client.post("/_rc/api/activity", headers=HEADERS, json={
                "client_id": "bot-client-0001", "account": activity.account_tag(bot),
                "spans": [{"pair": pair, "start": t0,
                           "end": t0 + int(SECONDS_PER_PAIR * 1000), "events": 4}]})
            assert reply.status_code == 200 and reply.json()["stored"] == 1, reply.text
        rating.complete_pair(db, bot, opaque_id=pair, confirm_zero=True)
        yield i + 1


@pytest.mark.parametrize("send_time", [True, False], ids=["with-time", "no-time-sent"])
def test_a_scripted_rater_is_flagged_within_its_first_ten_pairs(env, send_time):
    db, admin, bot, client = env
    flagged_at = None
    for done in _rate_like_a_bot(db, bot, client, 10, send_time=send_time):
        (row,) = qc.monitoring(db, admin, "Bot study").raters
        if row.flags and flagged_at is None:
            flagged_at = done
    assert flagged_at is not None and flagged_at <= 10
    result = qc.monitoring(db, admin, "Bot study")
    (row,) = result.raters
    assert result.flagged == ("bot",)
    assert any(f.startswith("implausible pace") for f in row.flags), row.flags
    if send_time:
        assert flagged_at <= 3  # the third pair under the time floor
        assert any(f.startswith("implausibly fast: 10 of 10 done pairs") for f in row.flags)
        assert row.median_seconds == pytest.approx(SECONDS_PER_PAIR, abs=0.05)
    # One rater: between-rater flags are off, and QC says so instead of staying silent.
    assert result.between_rater_note.startswith(
        "too few raters for between-rater flags (n < 3)")


def test_the_floors_are_study_settings_with_documented_defaults(env):
    db, admin, bot, client = env
    values = study_settings.study_settings(db, admin, "Bot study").values
    assert (values["qc_min_seconds_per_pair"], values["qc_min_seconds_per_film_pair"],
            values["qc_max_pairs_per_hour"]) == (10.0, 20.0, 180.0)
    # Floors off (0): the same bot is no longer flagged by them.
    study_settings.update_study_settings(db, admin, study_name="Bot study",
                                         qc_min_seconds_per_pair=0,
                                         qc_min_seconds_per_film_pair=0,
                                         qc_max_pairs_per_hour=0)
    list(_rate_like_a_bot(db, bot, client, 10, send_time=True))
    result = qc.monitoring(db, admin, "Bot study")
    assert result.floors.max_per_hour == 0
    (row,) = result.raters
    assert not any(f.startswith("implausib") for f in row.flags)
