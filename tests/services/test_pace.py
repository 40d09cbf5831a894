"""The rater's pace: time left from their own median per done pair, the current stretch of
continuous work from activity spans, and the break reminder's snooze rule; the pure rules are
checked against hand computations, the service on both databases."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import select, update

from radconcord.backend.errors import InvalidInput, NotFound
from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import pace, rating
from radconcord.backend.services.annotation.activity import SpanInput, record_spans
from radconcord.backend.services.study_admin.assignment import assign_raters
from radconcord.backend.types import Actor
from radconcord.db.models import Assignment, Pair, Study

SYSTEM = Actor.system()
T0 = dt.datetime(2026, 11, 24, 9, 0, tzinfo=dt.UTC)


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def spans(*pairs: tuple[float, float]) -> list[tuple[dt.datetime, dt.datetime]]:
    return [(at(a), at(b)) for a, b in pairs]


# -- time left (by hand) ---------------------------------------------------------------------


def test_estimate_is_pairs_left_times_the_median_of_timed_done_pairs():
    # Timed pairs 60, 90, 240 s (the 0 was not measured): median 90 s; 7 left -> 630 s.
    est = pace.estimate_left([60.0, 0.0, 240.0, 90.0], 7)
    assert (est.pairs_left, est.timed_pairs, est.median_seconds, est.seconds_left) == (
        7, 3, 90.0, 630.0)
    assert pace.time_left_text(est) == "7 left · about 11 min left"  # 10.5 min, rounded up
    # Four timed pairs: median of 30, 40, 50, 1000 is 45 s; 100 left -> 75 min.
    est = pace.estimate_left([30, 40, 1000, 50], 100)
    assert est.seconds_left == 4500.0
    assert pace.time_left_text(est) == "100 left · about 1 h 15 min left"
    # A last short pair still reads "about 1 min".
    assert pace.time_left_text(pace.estimate_left([10, 10, 10], 1)) == (
        "1 left · about 1 min left")


def test_no_estimate_before_three_timed_pairs_and_none_left_at_the_end():
    est = pace.estimate_left([100.0, 0.0, 120.0], 5)
    assert est.seconds_left is None and est.median_seconds is None and est.timed_pairs == 2
    assert pace.time_left_text(est) == "5 left · estimate after 3 pairs"
    assert pace.time_left_text(pace.estimate_left([], 12)) == (
        "12 left · estimate after 3 pairs")
    assert pace.time_left_text(pace.estimate_left([50, 60, 70], 0)) == "none left"
    with pytest.raises(InvalidInput, match="pairs_left: must be 0 or more, got -1"):
        pace.estimate_left([], -1)
    with pytest.raises(InvalidInput, match="done_seconds"):
        pace.estimate_left([float("nan")], 1)


# -- continuous work (by hand) ---------------------------------------------------------------


def test_stretch_joins_spans_across_short_pauses_and_breaks_at_long_ones():
    # 0-10, a 4 min pause, 14-30 (two overlapping tabs 20-25/22-28), now 31: one stretch
    # from 0 to 30 = 30 min (the short pause counts: looking away is not a break).
    work = spans((0, 10), (14, 20), (20, 25), (22, 28), (28, 30))
    stretch = pace.continuous_work(work, at(31))
    assert stretch == pace.Stretch(at(0), 30.0)
    # A 6 min pause at 30-36 ends the stretch: the new one is 36-40 = 4 min.
    stretch = pace.continuous_work(work + spans((36, 40)), at(40.5))
    assert stretch == pace.Stretch(at(36), 4.0)
    # Exactly 5 min is still a short pause (longer than 5 min ends a stretch).
    assert pace.continuous_work(spans((0, 10), (15, 20)), at(20)) == pace.Stretch(at(0), 20.0)
    # Order does not matter; naive datetimes are UTC.
    naive = [(a.replace(tzinfo=None), b.replace(tzinfo=None)) for a, b in work]
    assert pace.continuous_work(reversed(naive), at(31)) == pace.Stretch(at(0), 30.0)


def test_no_stretch_while_on_a_break_or_without_spans():
    work = spans((0, 50))
    assert pace.continuous_work(work, at(54)).minutes == 50.0  # 4 min since: still working
    assert pace.continuous_work(work, at(56)) == pace.Stretch(None, 0.0)  # on a break
    assert pace.continuous_work([], at(0)) == pace.Stretch(None, 0.0)
    # Empty/reversed spans are ignored; a span ending after "now" counts up to now.
    assert pace.continuous_work(spans((5, 5), (9, 3)), at(10)) == pace.Stretch(None, 0.0)
    assert pace.continuous_work(spans((0, 30)), at(20)) == pace.Stretch(at(0), 20.0)


def test_reminder_after_the_period_snoozes_for_another_and_resets_after_a_break():
    s52 = pace.Stretch(at(0), 52.0)
    assert pace.reminder_due(s52, 50)
    assert not pace.reminder_due(pace.Stretch(at(0), 49.9), 50)
    assert not pace.reminder_due(s52, 0)  # off
    assert not pace.reminder_due(pace.Stretch(None, 0.0), 50)
    assert pace.reminder_text(s52) == (
        "You've been rating for 52 min. A short break helps accuracy.")
    assert pace.reminder_text(pace.Stretch(at(0), 75.5)) == (
        "You've been rating for 1 h 15 min. A short break helps accuracy.")
    # Dismissed at 52 min: away until 102 min of the same stretch.
    snooze = (at(0), 52.0)
    assert not pace.reminder_due(pace.Stretch(at(0), 101.0), 50, snoozed=snooze)
    assert pace.reminder_due(pace.Stretch(at(0), 102.0), 50, snoozed=snooze)
    # A new stretch (after a real pause) ignores the old snooze.
    assert pace.reminder_due(pace.Stretch(at(120), 50.0), 50, snoozed=snooze)
    assert not pace.reminder_due(pace.Stretch(at(120), 20.0), 50, snoozed=snooze)


# -- the service -----------------------------------------------------------------------------


def _setup(db, make_study, n_pairs=5):
    make_study(db, "S", n_pairs)
    actors = {}
    for name in ("r1", "r2"):
        auth.create_user(db, SYSTEM, username=name, password=f"{name}-password", role="rater")
        actors[name] = auth.authenticate(db, username=name, password=f"{name}-password")
    assign_raters(db, SYSTEM, study_name="S", rater_usernames=["r1", "r2"],
                  raters_per_pair=2, seed=3)
    return actors


def test_rater_pace_reads_only_the_raters_own_times_and_spans(any_db, make_study,
                                                              fast_password_hashing):
    a = _setup(any_db, make_study)
    r1, r2 = a["r1"], a["r2"]
    queue = [q.opaque_id for q in rating.rater_queue(any_db, r1, study_name="S")]
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    start = now - dt.timedelta(minutes=55)

    p = pace.rater_pace(any_db, r1, study_name="S", now=now)
    assert (p.total, p.done, p.estimate.pairs_left, p.estimate.seconds_left) == (5, 0, 5, None)
    assert p.stretch == pace.Stretch(None, 0.0) and p.break_minutes == 50

    # r1 works 55 min on their first three pairs (spans of 5 min with 1 min gaps).
    batch = []
    for i in range(9):
        a0 = start + dt.timedelta(minutes=6 * i)
        batch.append(SpanInput(queue[i % 3], a0, min(a0 + dt.timedelta(minutes=5), now), 5))
    assert not record_spans(any_db, r1, client_id="tab-r1-0001", spans=batch, now=now).refused
    # r1's times per pair are the union of its spans: set them to known values by hand.
    with any_db.begin() as s:
        for oid, secs in zip(queue[:3], (100.0, 300.0, 200.0), strict=True):
            pair_id = s.scalar(select(Pair.id).where(Pair.opaque_id == oid))
            s.execute(update(Assignment).where(Assignment.rater_id == r1.user_id,
                                               Assignment.pair_id == pair_id)
                      .values(active_seconds=secs))
    for oid in queue[:2]:
        rating.complete_pair(any_db, r1, opaque_id=oid, confirm_zero=True)
    p = pace.rater_pace(any_db, r1, study_name="S", now=now)
    assert (p.done, p.estimate.pairs_left, p.estimate.seconds_left) == (2, 3, None)
    # Spans 0-5, 6-11, ..., 48-53 min after start; now is 55 min after: one stretch of 53.
    assert p.stretch.started_at == start and p.stretch.minutes == pytest.approx(53.0)
    assert pace.reminder_due(p.stretch, p.break_minutes)

    rating.complete_pair(any_db, r1, opaque_id=queue[2], confirm_zero=True)
    p = pace.rater_pace(any_db, r1, study_name="S", now=now)
    # Median of 100, 300, 200 s = 200 s; two pairs left -> 400 s.
    assert (p.done, p.estimate.median_seconds, p.estimate.seconds_left) == (3, 200.0, 400.0)

    # r2 shares the pairs but none of r1's time: no stretch, no estimate.
    p2 = pace.rater_pace(any_db, r2, study_name="S", now=now)
    assert (p2.done, p2.estimate.seconds_left, p2.stretch.started_at) == (0, None, None)

    # The study's setting: off.
    with any_db.begin() as s:
        s.execute(update(Study).where(Study.name == "S")
                  .values(settings={"break_reminder_minutes": 0}))
    p = pace.rater_pace(any_db, r1, study_name="S", now=now)
    assert p.break_minutes == 0 and not pace.reminder_due(p.stretch, p.break_minutes)


def test_rater_pace_of_a_study_not_theirs_is_not_found(any_db, make_study,
                                                       fast_password_hashing):
    a = _setup(any_db, make_study)
    make_study(any_db, "Other", 1)
    for name in ("Other", "Nope"):
        with pytest.raises(NotFound, match=f"you have no pairs to rate in study '{name}'"):
            pace.rater_pace(any_db, a["r1"], study_name=name)


def test_while_the_gate_holds_only_training_items_are_left(any_db, make_study,
                                                            fast_password_hashing):
    """A rater held at the training items has those left, not the study pairs behind the
    gate; once qualified, everything they hold counts again."""
    from radconcord.backend.services.quality import calibration
    from radconcord.backend.services.study_admin import study_settings

    make_study(any_db, "S", 5)
    calibration.mark_training(any_db, SYSTEM, study_name="S",
                              expert={4: {"1:1": 0}, 5: {"1:1": 0}}, source="panel")
    study_settings.update_study_settings(any_db, SYSTEM, study_name="S",
                                         qualification_items=2, qualification_max_error=0)
    auth.create_user(any_db, SYSTEM, username="r1", password="r1-password", role="rater")
    r1 = auth.authenticate(any_db, username="r1", password="r1-password")
    assign_raters(any_db, SYSTEM, study_name="S", rater_usernames=["r1"], raters_per_pair=1,
                  seed=3)
    held = pace.rater_pace(any_db, r1, study_name="S")
    assert (held.total, held.done) == (2, 0)
    for item in rating.rater_queue(any_db, r1, study_name="S"):
        rating.complete_pair(any_db, r1, opaque_id=item.opaque_id, confirm_zero=True)
    open_ = pace.rater_pace(any_db, r1, study_name="S")
    assert (open_.total, open_.done) == (5, 2)
