"""Time on task from activity spans, on both databases: a scripted rater whose true times are
known sends spans (two tabs overlapping, resends, idle gaps), and the stored time per pair and
per rater must be the union of what it did; bad spans are refused one by one, by name."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import func, select, update

from radconcord.backend import clock
from radconcord.backend.errors import InvalidInput
from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import activity
from radconcord.backend.services.annotation.activity import SpanInput
from radconcord.backend.services.study_admin import progress
from radconcord.backend.services.study_admin.assignment import assign_raters
from radconcord.backend.types import Actor
from radconcord.db.models import ActivitySpan, Assignment, Pair, Study

SYSTEM = Actor.system()
T0 = dt.datetime(2026, 11, 24, 9, 0, tzinfo=dt.UTC)
NOW = T0 + dt.timedelta(hours=1)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def span(pair: str, start: float, end: float, events: int = 3) -> SpanInput:
    return SpanInput(pair, at(start), at(end), events)


def _setup(db, make_study, *, raters=("r1", "r2"), k=2, n_pairs=4):
    make_study(db, "S", n_pairs)
    actors = {}
    for name in raters:
        auth.create_user(db, SYSTEM, username=name, password=f"{name}-password", role="rater")
        actors[name] = auth.authenticate(db, username=name, password=f"{name}-password")
    assign_raters(db, SYSTEM, study_name="S", rater_usernames=list(raters),
                  raters_per_pair=k, seed=3)
    return actors


def _mine(db, actor) -> list[str]:
    with db.read() as s:
        return list(s.scalars(
            select(Pair.opaque_id).join(Assignment, Assignment.pair_id == Pair.id)
            .where(Assignment.rater_id == actor.user_id).order_by(Assignment.order_index)))


def _seconds(db, actor) -> dict[str, float]:
    with db.read() as s:
        return {oid: secs for oid, secs in s.execute(
            select(Pair.opaque_id, Assignment.active_seconds)
            .join(Assignment, Assignment.pair_id == Pair.id)
            .where(Assignment.rater_id == actor.user_id))}


def test_union_of_two_tabs_resends_and_idle_gaps(any_db, make_study, fast_password_hashing):
    r1 = _setup(any_db, make_study)["r1"]
    p1, p2, p3, _ = _mine(any_db, r1)
    # Tab A: 0-10 and 10-20 s on p1 (one stretch cut at a send), then an idle gap (the
    # browser ends the span T after the last event), 50-54 s on p1 again, 54-56 s on p2.
    tab_a = [span(p1, 0, 10), span(p1, 10, 20), span(p1, 50, 54), span(p2, 54, 56)]
    res = activity.record_spans(any_db, r1, client_id="tab-a-0001", spans=tab_a, now=NOW)
    assert (res.stored, res.duplicates, res.refused) == (4, 0, ())
    assert res.active_seconds == {p1: pytest.approx(24.0), p2: pytest.approx(2.0)}
    # Tab B on the same pair at the same time (5-15 s) and 30-35 s: overlaps count once.
    res = activity.record_spans(any_db, r1, client_id="tab-b-0002",
                                spans=[span(p1, 5, 15), span(p1, 30, 35)], now=NOW)
    assert res.stored == 2 and res.active_seconds == {p1: pytest.approx(29.0)}
    # A resend after a lost reply changes nothing.
    res = activity.record_spans(any_db, r1, client_id="tab-a-0001", spans=tab_a, now=NOW)
    assert (res.stored, res.duplicates) == (0, 4)
    # A pair passed through in half a second gets half a second (the old measure: ~61 s).
    activity.record_spans(any_db, r1, client_id="tab-a-0001",
                          spans=[span(p3, 56, 56.5, events=1)], now=NOW)
    times = _seconds(any_db, r1)
    assert times[p1] == pytest.approx(29.0)
    assert times[p2] == pytest.approx(2.0)
    assert times[p3] == pytest.approx(0.5)
    with any_db.read() as s:
        assert s.scalar(select(func.count(ActivitySpan.id))) == 7
        last = s.scalar(select(Assignment.last_active_at).join(Pair)
                        .where(Pair.opaque_id == p1))
    assert clock.as_utc(last) == at(54)
    # Progress: the rater's total is the sum over pairs, the median over pairs with time.
    prog = progress.study_progress(any_db, SYSTEM, study_name="S")
    by_user = {r.username: r for r in prog.raters}
    assert by_user["r1"].active_seconds == pytest.approx(31.5)
    assert by_user["r1"].median_seconds == pytest.approx(2.0)
    assert by_user["r1"].pairs_with_time == 3
    assert clock.as_utc(by_user["r1"].last_active_at) == at(56.5)
    assert by_user["r2"].active_seconds == 0.0 and by_user["r2"].median_seconds is None


def test_json_spans_in_milliseconds(any_db, make_study, fast_password_hashing):
    r1 = _setup(any_db, make_study)["r1"]
    p1 = _mine(any_db, r1)[0]
    ms = int(T0.timestamp() * 1000)
    res = activity.record_spans(
        any_db, r1, client_id="page-load-123",
        spans=[{"pair": p1, "start": ms, "end": ms + 4250, "events": 17}], now=NOW)
    assert res.stored == 1 and res.active_seconds[p1] == pytest.approx(4.25)
    with any_db.read() as s:
        row = s.scalar(select(ActivitySpan))
        assert (row.active_ms, row.events, row.client_id) == (4250, 17, "page-load-123")
        assert row.rater_id == r1.user_id


def test_bad_spans_are_refused_one_by_one(any_db, make_study, fast_password_hashing):
    actors = _setup(any_db, make_study, k=1)
    r1, r2 = actors["r1"], actors["r2"]
    mine, theirs = _mine(any_db, r1)[0], _mine(any_db, r2)[0]
    now_ms = int(NOW.timestamp() * 1000)
    batch = [
        span(mine, 0, 3),                                   # 0: fine
        span(theirs, 0, 3),                                 # 1: another rater's pair
        span("no-such-pair", 0, 3),                         # 2: no such pair
        span(mine, 10, 5),                                  # 3: ends before it starts
        span(mine, 0, activity.MAX_SPAN_SECONDS + 1),       # 4: too long
        SpanInput(mine, NOW + dt.timedelta(minutes=5),
                  NOW + dt.timedelta(minutes=6), 1),        # 5: in the future
        SpanInput(mine, NOW - dt.timedelta(days=8),
                  NOW - dt.timedelta(days=8) + dt.timedelta(seconds=2), 1),  # 6: too old
        span(mine, 20, 22, events=-1),                      # 7: negative events
        {"pair": mine, "start": "yesterday", "end": now_ms},  # 8: not a number
        {"pair": mine, "start": now_ms - 500, "end": now_ms, "who": "x"},  # 9: unknown
        [1, 2, 3],                                          # 10: not an object
        {"pair": mine, "start": True, "end": now_ms},       # 11: a boolean
        span(mine, 30, 30),                                 # 12: empty
    ]
    res = activity.record_spans(any_db, r1, client_id="tab-0000001", spans=batch, now=NOW)
    assert res.stored == 1 and res.active_seconds == {mine: pytest.approx(3.0)}
    refused = {r.index: (r.field, r.message) for r in res.refused}
    assert sorted(refused) == list(range(1, 13))
    assert refused[1] == ("pair", f"span 1: pair {theirs!r} is not in your assignments")
    assert refused[2] == ("pair", "span 2: pair 'no-such-pair' is not in your assignments")
    assert refused[3][0] == "end" and "before the start" in refused[3][1]
    assert refused[4][0] == "end" and "more than the 600 s" in refused[4][1]
    assert refused[5][0] == "end" and "in the future" in refused[5][1]
    assert refused[6][0] == "start" and "older than 7 days" in refused[6][1]
    assert refused[7][0] == "events"
    assert refused[8] == ("start", "span 8: start: must be milliseconds since 1970 (a number),"
                                   " got 'yesterday'")
    assert refused[9][0] == "who" and "unknown field" in refused[9][1]
    assert refused[10][0] == "span"
    assert refused[11][0] == "start"
    assert refused[12] == ("end", "span 12: end: the span is empty (it ends when it starts)")
    # Another rater's pair got nothing.
    assert _seconds(any_db, r2)[theirs] == 0.0
    with any_db.read() as s:
        assert s.scalar(select(func.count(ActivitySpan.id))) == 1

    for bad in ("short", "x" * 65, "bad id!", 42):
        with pytest.raises(InvalidInput, match="client_id"):
            activity.record_spans(any_db, r1, client_id=bad, spans=[span(mine, 0, 1)], now=NOW)
    with pytest.raises(InvalidInput, match="at most 500"):
        activity.record_spans(any_db, r1, client_id="tab-0000001",
                              spans=[span(mine, 0, 1)] * 501, now=NOW)


def test_closed_and_hidden_studies_take_no_time(any_db, make_study, fast_password_hashing):
    r1 = _setup(any_db, make_study)["r1"]
    p1 = _mine(any_db, r1)[0]
    for status, message in (("closed", "study 'S' is closed; its time on task no longer "
                                       "changes"),
                            ("draft", f"pair {p1!r} is not in your assignments")):
        with any_db.begin() as s:
            s.execute(update(Study).values(status=status))
        res = activity.record_spans(any_db, r1, client_id="tab-0000001",
                                    spans=[span(p1, 0, 5)], now=NOW)
        assert res.stored == 0 and [r.message for r in res.refused] == [f"span 0: {message}"]
    assert _seconds(any_db, r1)[p1] == 0.0


def test_union_seconds_and_summary():
    assert activity.union_seconds([]) == 0.0
    assert activity.union_seconds([(at(5), at(15)), (at(0), at(10)), (at(20), at(20)),
                                   (at(30), at(25)), (at(14), at(16))]) == pytest.approx(16.0)
    assert activity.union_seconds([(at(0), at(1)), (at(1), at(2))]) == pytest.approx(2.0)
    # Naive datetimes are UTC (SQLite hands them back naive).
    naive = at(0).replace(tzinfo=None)
    assert activity.union_seconds([(naive, at(3))]) == pytest.approx(3.0)
    summary = activity.summarize([0.0, 4.0, 2.0, 10.0])
    assert (summary.total_seconds, summary.pairs_with_time, summary.median_seconds) == (
        16.0, 3, 4.0)
    assert activity.summarize([0.0]).median_seconds is None


def test_idle_cut_and_flush_settings(monkeypatch):
    monkeypatch.delenv(activity.IDLE_CUT_ENV, raising=False)
    assert activity.idle_cut_seconds() == activity.DEFAULT_IDLE_CUT_S == 30.0
    monkeypatch.setenv(activity.IDLE_CUT_ENV, "2.5")
    assert activity.idle_cut_seconds() == 2.5
    for bad in ("soon", "0", "-3", "nan"):
        monkeypatch.setenv(activity.IDLE_CUT_ENV, bad)
        assert activity.idle_cut_seconds() == 30.0
    monkeypatch.setenv(activity.FLUSH_ENV, "1")
    assert activity.flush_seconds() == 1.0


def test_two_tabs_sending_at_once_lose_nothing(any_db, make_study, fast_password_hashing):
    """Both tabs' batches land in the union, whatever the interleaving (the assignment row is
    locked while a batch is stored and the union recomputed)."""
    import threading

    r1 = _setup(any_db, make_study)["r1"]
    p1 = _mine(any_db, r1)[0]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def tab(name: str, offset: float) -> None:
        try:
            for i in range(8):
                barrier.wait(timeout=30)
                start = offset + 20 * i
                activity.record_spans(any_db, r1, client_id=f"{name}-000000",
                                      spans=[span(p1, start, start + 4)], now=NOW)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=tab, args=(n, o)) for n, o in (("tab-a", 0), ("tab-b", 10))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    # 16 disjoint spans of 4 s: every one counted.
    assert _seconds(any_db, r1)[p1] == pytest.approx(64.0)


def test_spans_on_a_comparison_go_to_the_raters_judgement(any_db, make_study,
                                                          fast_password_hashing):
    """The Compare screen's spans name the comparison's opaque id: they are stored against
    the rater's own judgement (union, resends once), a pair's spans still go to the
    assignment in the same batch, and another rater's comparison is refused like an
    unknown id."""
    from radconcord.db.models import Comparison, Judgement, JudgementSpan

    actors = _setup(any_db, make_study, raters=("r1", "r2"), k=1)
    r1, r2 = actors["r1"], actors["r2"]
    pair = _mine(any_db, r1)[0]
    with any_db.begin() as s:
        study = s.scalar(select(Study).where(Study.name == "S"))
        ids = list(s.scalars(select(Pair.id).order_by(Pair.position)))
        comp = Comparison(study_id=study.id, pair_a_id=ids[0], pair_b_id=ids[1], position=0,
                          opaque_id="cmp-opaque-1")
        s.add(comp)
        s.flush()
        s.add(Judgement(rater_id=r1.user_id, comparison_id=comp.id, order_index=0))
    spans = [span("cmp-opaque-1", 0, 10), span("cmp-opaque-1", 5, 12), span(pair, 12, 15)]
    res = activity.record_spans(any_db, r1, client_id="compare-01", spans=spans, now=NOW)
    assert (res.stored, res.refused) == (3, ())
    assert res.active_seconds == {"cmp-opaque-1": pytest.approx(12.0),
                                  pair: pytest.approx(3.0)}
    again = activity.record_spans(any_db, r1, client_id="compare-01", spans=spans[:2],
                                  now=NOW)
    assert (again.stored, again.duplicates) == (0, 2)
    with any_db.read() as s:
        judgement = s.scalar(select(Judgement))
        assert judgement.active_seconds == pytest.approx(12.0)
        assert clock.as_utc(judgement.last_active_at) == at(12)
        assert s.scalar(select(func.count(JudgementSpan.id))) == 2
        assert s.scalar(select(func.count(ActivitySpan.id))) == 1
    other = activity.record_spans(any_db, r2, client_id="compare-02",
                                  spans=[span("cmp-opaque-1", 20, 25)], now=NOW)
    assert other.stored == 0
    assert other.refused[0].message == ("span 0: pair 'cmp-opaque-1' is not in your "
                                        "assignments")
