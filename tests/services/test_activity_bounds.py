"""Time on task cannot be inflated (issue 21): what a rater's browser claims is credited only
where it is physically possible, through the real route (``POST _rc/api/activity``), on both
databases.

The attack of the issue: back-to-back 600 s spans with no input event, the same spans on three
pairs at once, a new ``client_id`` per batch, from a rater logged in ten minutes earlier. It
was credited 166.7 h on each pair. Now a rater's credited time over all pairs never exceeds
the wall-clock time of their sessions, an instant is credited to one pair only, a span needs
an input event, and a span outside the rater's sessions is clipped to them; the QC page's
service and the export say how much was clipped. The honest browser's spans (touching at a
change of pair, cut at every send) are credited exactly.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy import select
from starlette.applications import Starlette
from starlette.testclient import TestClient

from radconcord.backend import clock
from radconcord.backend.services.accounts import auth, sessions
from radconcord.backend.services.annotation import activity
from radconcord.backend.services.quality import qc
from radconcord.backend.services.study_admin.assignment import assign_raters
from radconcord.backend.services.transfer.exports import export_study
from radconcord.backend.types import Actor
from radconcord.db.models import ActivitySpan, Assignment, AuthSession, Pair, Study
from radconcord.webapp import api
from radconcord.webapp.api import activity as activity_api
from radconcord.webapp.state import CSRF_HEADER, SESSION_COOKIE

SYSTEM = Actor.system()
HEADERS = {CSRF_HEADER: "1"}
URL = "/_rc/api/activity"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _login(db, actor: Actor, *, ago: float) -> tuple[str, int]:
    """A cookie token of a session created ``ago`` seconds ago, and the session's id."""
    then = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=ago)
    ticket = sessions.create_session(db, actor, now=then)
    issued = sessions.exchange_ticket(db, ticket.ticket, now=then)
    return issued.token, issued.session_id


@pytest.fixture
def env(any_db, make_study, fast_password_hashing) -> Iterator[tuple]:
    """Study ``S`` (open, created now) with three pairs for each of r1 and r2, and a client of
    the activity route."""
    make_study(any_db, "S", 6)
    actors = {}
    for name in ("r1", "r2"):
        auth.create_user(any_db, SYSTEM, username=name, password=f"{name}-password",
                         role="rater")
        actors[name] = auth.authenticate(any_db, username=name, password=f"{name}-password")
    assign_raters(any_db, SYSTEM, study_name="S", rater_usernames=["r1", "r2"],
                  raters_per_pair=1, seed=3)
    api.set_database(any_db)
    client = TestClient(Starlette(routes=activity_api.routes("")))
    yield any_db, actors, client
    api.set_database(None)


def _pairs(db, actor: Actor) -> list[str]:
    with db.read() as s:
        return list(s.scalars(select(Pair.opaque_id).join(Assignment)
                              .where(Assignment.rater_id == actor.user_id)
                              .order_by(Assignment.order_index)))


def _credited(db, actor: Actor) -> dict[str, float]:
    """``opaque id -> Assignment.active_seconds`` (the time on task every page shows)."""
    with db.read() as s:
        return {oid: float(secs) for oid, secs in s.execute(
            select(Pair.opaque_id, Assignment.active_seconds).join(Assignment)
            .where(Assignment.rater_id == actor.user_id))}


def _claimed(db, actor: Actor) -> dict[str, float]:
    with db.read() as s:
        return {oid: float(secs) for oid, secs in s.execute(
            select(Pair.opaque_id, Assignment.claimed_seconds).join(Assignment)
            .where(Assignment.rater_id == actor.user_id))}


def _post(client: TestClient, actor: Actor, spans: list[dict], client_id: str) -> dict:
    body = {"client_id": client_id, "account": activity.account_tag(actor), "spans": spans}
    reply = client.post(URL, json=body, headers=HEADERS)
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_the_attack_of_the_issue_is_bounded_by_the_session(env, tmp_path):
    """Back-to-back 600 s spans over the last 200 min, no events, then with one event, the
    same on three pairs, a new client id per batch, from a session ten minutes old: at most
    ten minutes are credited over all pairs (the old code credited 200 min to each)."""
    db, actors, client = env
    r1 = actors["r1"]
    p1, p2, p3 = _pairs(db, r1)
    session_age = 600.0
    token, session_id = _login(db, r1, ago=session_age)
    with db.read() as s:
        logged_in = clock.as_utc(s.get(AuthSession, session_id).created_at).timestamp()
    client.cookies.set(SESSION_COOKIE, token)
    end = _now_ms()
    starts = [end - 600_000 * (i + 1) for i in range(20)]

    def batch(pair: str, events: int) -> list[dict]:
        return [{"pair": pair, "start": s, "end": s + 600_000, "events": events}
                for s in starts]

    # No input event at all: refused one by one, nothing stored.
    reply = _post(client, r1, batch(p1, 0), "attack-batch-00")
    assert reply["stored"] == 0
    assert {r["field"] for r in reply["refused"]} == {"events"} and len(reply["refused"]) == 20
    assert all(v == 0.0 for v in _credited(db, r1).values())
    # One event each, the same instants on three pairs, a new page load per batch and again.
    for n, pair in enumerate((p1, p2, p3, p1, p2, p3)):
        assert _post(client, r1, batch(pair, 1), f"attack-batch-{n + 1:02d}")["refused"] == []
    wall = time.time() - logged_in
    credited = _credited(db, r1)
    assert sum(credited.values()) <= wall + 1e-3
    assert all(v <= wall + 1e-3 for v in credited.values())
    # All of the session's ten minutes (the spans cover them) went to the first pair sent.
    assert credited[p1] == pytest.approx(session_age, abs=1.0)
    assert credited[p2] == credited[p3] == 0.0
    # What was claimed stays visible beside it: 200 min per pair, the rest clipped.
    claimed = _claimed(db, r1)
    assert claimed == {p: pytest.approx(12_000.0) for p in (p1, p2, p3)}
    clipping = {c.rater: c for c in qc.time_clipping(db, SYSTEM, "S")}
    assert clipping["r1"].noticeable and "r2" not in clipping
    assert clipping["r1"].clipped_seconds == pytest.approx(36_000.0 - credited[p1], abs=1e-3)
    with db.read() as s:
        numbers = {oid: pos + 1 for oid, pos in s.execute(select(Pair.opaque_id, Pair.position))}
    assert clipping["r1"].pairs == tuple(sorted(numbers[p] for p in (p1, p2, p3)))
    # The export says it per assignment; its spans carry their credit.
    out = tmp_path / "export"
    export_study(db, SYSTEM, study_name="S", fmt="jsonl", out_dir=out, with_timing=True)
    rows = [json.loads(line) for line in (out / "assignments.jsonl").read_text().splitlines()]
    mine = {r["pair_id"]: r for r in rows if r["pair_id"] in (p1, p2, p3)}
    assert sum(r["active_seconds"] for r in mine.values()) <= wall + 1e-3
    for oid, row in mine.items():
        assert row["claimed_seconds"] == pytest.approx(12_000.0)
        assert row["clipped_seconds"] == pytest.approx(12_000.0 - credited[oid], abs=1e-3)
    spans = [json.loads(line)
             for line in (out / "activity_spans.jsonl").read_text().splitlines()]
    assert len(spans) == 120  # six batches of 20: the resends under new ids are stored too
    assert sum(s["credited_seconds"] for s in spans) == pytest.approx(credited[p1], abs=1e-3)
    manifest = json.loads((out / "manifest.json").read_text())
    assert "clipped_seconds" in manifest["timing"]["rules"]


def test_an_instant_is_credited_to_one_pair(env):
    """Spans of different pairs over the same instants (two tabs, or a forged batch): the
    pair whose span was stored first keeps them; two tabs on one pair still count once, and
    the honest change of pair (one span ends when the next starts) loses nothing."""
    db, actors, client = env
    r1 = actors["r1"]
    p1, p2, p3 = _pairs(db, r1)
    token, _ = _login(db, r1, ago=300)
    client.cookies.set(SESSION_COOKIE, token)
    t = _now_ms() - 120_000
    _post(client, r1, [{"pair": p1, "start": t, "end": t + 10_000, "events": 4},
                       {"pair": p2, "start": t + 10_000, "end": t + 14_000, "events": 2}],
          "tab-one-00000001")
    _post(client, r1, [{"pair": p3, "start": t + 5_000, "end": t + 20_000, "events": 9},
                       {"pair": p1, "start": t + 2_000, "end": t + 12_000, "events": 3}],
          "tab-two-00000002")
    credited = _credited(db, r1)
    # p1: 0-10 s, then 10-12 s were p2's already; p2: 10-14 s; p3: only 14-20 s was free.
    assert credited == {p1: pytest.approx(10.0), p2: pytest.approx(4.0),
                        p3: pytest.approx(6.0)}
    assert sum(credited.values()) == pytest.approx(20.0)  # the union of all the spans
    assert _claimed(db, r1) == {p1: pytest.approx(12.0), p2: pytest.approx(4.0),
                                p3: pytest.approx(15.0)}
    # Touching spans of an honest change of pair: nothing clipped.
    u = t + 30_000
    _post(client, r1, [{"pair": p1, "start": u, "end": u + 3_000, "events": 5},
                       {"pair": p2, "start": u + 3_000, "end": u + 3_500, "events": 1},
                       {"pair": p3, "start": u + 3_500, "end": u + 7_000, "events": 1}],
          "tab-one-00000001")
    after = _credited(db, r1)
    assert (after[p1] - credited[p1], after[p2] - credited[p2], after[p3] - credited[p3]) == (
        pytest.approx(3.0), pytest.approx(0.5), pytest.approx(3.5))


def test_spans_outside_the_raters_sessions_are_clipped(env):
    """A span is credited only inside the session that posted it, or an earlier session of
    the same rater (spans kept through a logout are sent after the next login): not before
    the first login, not while logged out, not in the future."""
    db, actors, client = env
    r1 = actors["r1"]
    p1, p2, p3 = _pairs(db, r1)
    _, first = _login(db, r1, ago=1800)               # 30 min ago ...
    sessions.revoke_session(db, first, now=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=20))
    token, _ = _login(db, r1, ago=600)                # ... logged out 10 min, back 10 min ago
    client.cookies.set(SESSION_COOKIE, token)
    now = _now_ms()
    minute = 60_000
    reply = _post(client, r1, [
        # Straddles the first login (35 -> 29 min ago): the last minute counts.
        {"pair": p1, "start": now - 35 * minute, "end": now - 29 * minute, "events": 3},
        # Kept through the logout: measured 25 min ago, in the first session.
        {"pair": p1, "start": now - 25 * minute, "end": now - 24 * minute, "events": 3},
        # While logged out (15 min ago): nothing.
        {"pair": p2, "start": now - 15 * minute, "end": now - 14 * minute, "events": 3},
        # Ends a minute in the future (within the clock tolerance): clipped at now.
        {"pair": p3, "start": now - 30_000, "end": now + minute, "events": 3},
    ], "page-load-0000001")
    assert reply["stored"] == 4 and reply["refused"] == []
    credited = _credited(db, r1)
    assert credited[p1] == pytest.approx(120.0, abs=0.5)
    assert credited[p2] == 0.0
    assert 30.0 <= credited[p3] <= 31.0
    with db.read() as s:
        linked = set(s.scalars(select(ActivitySpan.session_id)))
        gap = s.execute(select(ActivitySpan.clip_start, ActivitySpan.credited_seconds)
                        .join(Assignment).join(Pair).where(Pair.opaque_id == p2)).one()
    # Every span names the session that posted it; the one in the gap has no clip.
    assert linked == {sessions.resolve_token(db, token).session_id}
    assert tuple(gap) == (None, 0.0)


def test_a_span_needs_an_input_event(env):
    db, actors, client = env
    r1 = actors["r1"]
    p1 = _pairs(db, r1)[0]
    token, _ = _login(db, r1, ago=120)
    client.cookies.set(SESSION_COOKIE, token)
    t = _now_ms() - 60_000
    reply = _post(client, r1, [{"pair": p1, "start": t, "end": t + 5_000, "events": 0},
                               {"pair": p1, "start": t + 5_000, "end": t + 9_000},
                               {"pair": p1, "start": t + 9_000, "end": t + 10_000,
                                "events": 1}], "page-load-0000002")
    assert reply["stored"] == 1
    assert [(r["index"], r["field"]) for r in reply["refused"]] == [(0, "events"),
                                                                      (1, "events")]
    assert _credited(db, r1)[p1] == pytest.approx(1.0)


def test_the_compare_screen_follows_the_same_rules(env):
    """Judgement spans share the rater's timeline with pair spans and the session bound."""
    from radconcord.db.models import Comparison, Judgement

    db, actors, client = env
    r1 = actors["r1"]
    p1 = _pairs(db, r1)[0]
    with db.begin() as s:
        study = s.scalar(select(Study).where(Study.name == "S"))
        ids = list(s.scalars(select(Pair.id).order_by(Pair.position)))
        comp = Comparison(study_id=study.id, pair_a_id=ids[0], pair_b_id=ids[1], position=0,
                          opaque_id="cmp-bounds-1")
        s.add(comp)
        s.flush()
        s.add(Judgement(rater_id=r1.user_id, comparison_id=comp.id, order_index=0))
    token, _ = _login(db, r1, ago=60)
    client.cookies.set(SESSION_COOKIE, token)
    now = _now_ms()
    reply = _post(client, r1, [
        {"pair": p1, "start": now - 40_000, "end": now - 20_000, "events": 5},
        # Overlaps the pair's span by 10 s, and starts before the login (70 s ago).
        {"pair": "cmp-bounds-1", "start": now - 70_000, "end": now - 10_000, "events": 5},
        {"pair": "cmp-bounds-1", "start": now - 5_000, "end": now - 1_000, "events": 0},
    ], "compare-page-001")
    assert reply["stored"] == 2 and [r["field"] for r in reply["refused"]] == ["events"]
    with db.read() as s:
        j = s.scalar(select(Judgement))
        judged, claimed = float(j.active_seconds), float(j.claimed_seconds)
    # Logged in 60 s ago: 60 -> 40 s ago and 20 -> 10 s ago are the comparison's.
    assert judged == pytest.approx(30.0, abs=0.5)
    assert claimed == pytest.approx(60.0)
    assert _credited(db, r1)[p1] == pytest.approx(20.0)
    clipping = {c.rater: c for c in qc.time_clipping(db, SYSTEM, "S")}
    assert clipping["r1"].comparisons == (1,)


def test_two_tabs_at_once_cannot_both_take_an_instant(env):
    """Two page loads of one rater posting spans of different pairs over the same instants at
    the same moment: the rater's timeline is locked, so the instants are credited once
    (PostgreSQL would otherwise let both transactions see the other's spans missing)."""
    db, actors, _ = env
    r1 = actors["r1"]
    p1, p2, _ = _pairs(db, r1)
    _, session_id = _login(db, r1, ago=3600)
    base = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=30)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def tab(pair: str, name: str) -> None:
        try:
            for i in range(6):
                barrier.wait(timeout=30)
                start = base + dt.timedelta(seconds=20 * i)
                activity.record_spans(db, r1, client_id=f"{name}-0000000", session_id=session_id,
                                      spans=[activity.SpanInput(
                                          pair, start, start + dt.timedelta(seconds=10), 2)])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=tab, args=a) for a in ((p1, "tab-a"), (p2, "tab-b"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors
    credited = _credited(db, r1)
    assert credited[p1] + credited[p2] == pytest.approx(60.0)


# -- migration 0008 ---------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_url(request, tmp_path) -> Iterator[str]:
    """The URL of an empty database (no schema) on SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'old.db'}"
        return
    server = request.getfixturevalue("pg_server")
    name = f"m_{uuid.uuid4().hex[:16]}"
    yield server.create_database(name)
    server.drop_database(name)


def test_0008_credits_old_spans_once_and_keeps_what_was_claimed(empty_url):
    """Spans stored before 0008 (no session known) get their interval as clip and are
    credited in the order received, an instant once across pairs and comparisons; each
    assignment and judgement gets credited and claimed time, and the schema matches the
    models."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from radconcord.db.models import ActivitySpan, Base, Judgement, JudgementSpan
    from radconcord.db.session import make_engine, make_sessionmaker, upgrade

    engine = make_engine(empty_url)
    upgrade(engine, "0007")
    t0 = dt.datetime(2026, 11, 1, 9, 0, tzinfo=dt.UTC)

    def at(seconds: float) -> dt.datetime:
        return t0 + dt.timedelta(seconds=seconds)

    with engine.begin() as conn:
        run = conn.execute
        run(sa.text("INSERT INTO users (id, username, display_name, role, password_hash, "
                    "active, must_change_password, created_at) VALUES "
                    "(1, 'r1', '', 'rater', 'x', :t, :f, :now), "
                    "(2, 'r2', '', 'rater', 'x', :t, :f, :now)"),
            {"t": True, "f": False, "now": t0})
        run(sa.text("INSERT INTO studies (id, name, description, scheme, raters_per_pair, seed, "
                    "status, provenance, created_at, settings) VALUES (1, 's', '', 'rexval', "
                    "1, 0, 'open', '{}', :now, '{}')"), {"now": t0})
        run(sa.text("INSERT INTO cases (id, study_id, external_id, created_at) VALUES "
                    "(1, 1, 'c', :now)"), {"now": t0})
        run(sa.text("INSERT INTO reports (id, case_id, role, text, created_at) VALUES "
                    "(1, 1, 'reference', 'a', :now), (2, 1, 'candidate', 'b', :now), "
                    "(3, 1, 'candidate', 'c', :now)"), {"now": t0})
        run(sa.text("INSERT INTO pairs (id, study_id, case_id, reference_id, candidate_id, "
                    "source, opaque_id, position, input_hash, kind) VALUES "
                    "(1, 1, 1, 1, 2, 's', 'o1', 0, 'h', 'study'), "
                    "(2, 1, 1, 1, 3, 't', 'o2', 1, 'i', 'study')"))
        run(sa.text("INSERT INTO assignments (id, study_id, rater_id, pair_id, order_index, "
                    "active_seconds, version) VALUES (1, 1, 1, 1, 0, 15, 0), "
                    "(2, 1, 1, 2, 1, 10, 0), (3, 1, 2, 1, 0, 10, 0)"))
        run(sa.text("INSERT INTO comparisons (id, study_id, pair_a_id, pair_b_id, position, "
                    "opaque_id, meta) VALUES (1, 1, 1, 2, 0, 'cmp', '{}')"))
        run(sa.text("INSERT INTO judgements (id, rater_id, comparison_id, order_index, version, "
                    "updated_at, active_seconds) VALUES (1, 1, 1, 0, 0, :now, 10)"),
            {"now": t0})
        spans = sa.table("activity_spans", *[sa.column(c) for c in (
            "id", "rater_id", "assignment_id", "client_id", "started_at", "ended_at",
            "active_ms", "events", "received_at")])
        jspans = sa.table("judgement_spans", *[sa.column(c) for c in (
            "id", "rater_id", "judgement_id", "client_id", "started_at", "ended_at",
            "active_ms", "events", "received_at")])

        def row(i, rater, owner, key, a, b, received):
            return {"id": i, "rater_id": rater, key: owner, "client_id": f"tab-{i:05d}",
                    "started_at": at(a), "ended_at": at(b), "active_ms": int((b - a) * 1000),
                    "events": 0, "received_at": at(received)}

        run(sa.insert(spans), [
            row(1, 1, 1, "assignment_id", 0, 10, 10),     # r1 pair 1: 0-10 (first)
            row(2, 1, 2, "assignment_id", 5, 15, 20),     # r1 pair 2: 5-15, 5-10 taken
            row(3, 1, 1, "assignment_id", 8, 13, 30),     # r1 pair 1 again: 10-13 taken
            row(4, 2, 3, "assignment_id", 0, 10, 40),     # r2: own timeline, all of it
        ])
        run(sa.insert(jspans), [row(1, 1, 1, "judgement_id", 12, 22, 50)])  # 15-22 free
        if engine.dialect.name == "postgresql":  # explicit ids do not advance the sequences
            for name in ("users", "studies", "cases", "reports", "pairs", "assignments",
                         "comparisons", "judgements", "activity_spans", "judgement_spans"):
                run(sa.text(f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), "
                            f"(SELECT max(id) FROM {name}))"))
    upgrade(engine)
    with make_sessionmaker(engine).begin() as s:
        credit = dict(s.execute(select(ActivitySpan.id, ActivitySpan.credited_seconds)).all())
        assert credit == {1: pytest.approx(10.0), 2: pytest.approx(5.0), 3: 0.0,
                          4: pytest.approx(10.0)}
        first = s.get(ActivitySpan, 1)
        assert (clock.as_utc(first.clip_start), clock.as_utc(first.clip_end),
                first.session_id) == (at(0), at(10), None)
        times = {a.id: (a.active_seconds, a.claimed_seconds, clock.as_utc(a.last_active_at))
                 for a in s.scalars(select(Assignment))}
        assert times == {1: (pytest.approx(10.0), pytest.approx(13.0), at(10)),
                         2: (pytest.approx(5.0), pytest.approx(10.0), at(15)),
                         3: (pytest.approx(10.0), pytest.approx(10.0), at(10))}
        judgement = s.get(Judgement, 1)
        assert (judgement.active_seconds, judgement.claimed_seconds) == (
            pytest.approx(7.0), pytest.approx(10.0))
        assert s.scalar(select(JudgementSpan.credited_seconds)) == pytest.approx(7.0)
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    engine.dispose()
