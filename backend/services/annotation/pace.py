"""The rater's pace over an hour: pairs left, an estimate of the time left, break reminders.

Two pure rules, and a service that feeds them the rater's own numbers:

* **Time left** (:func:`estimate_left`): the pairs not yet done times the rater's own median
  time on task per done pair (``Assignment.active_seconds``, measured from their activity
  spans, see :mod:`backend.services.annotation.activity`). Pairs done without measured time (rated
  before time on task existed, or with the tracker blocked) do not count. With fewer than
  :data:`MIN_DONE_FOR_ESTIMATE` timed pairs there is no estimate: the first pairs of a study
  are slow and a median of one or two says little.
* **Continuous work** (:func:`continuous_work`): the rater's activity spans (of any study:
  fatigue does not reset with a study) merged into one stretch as long as no gap between them
  is longer than :data:`PAUSE_SECONDS` (5 min). The current stretch is the one that ends with
  the latest span; it counts only while that span ended less than ``PAUSE_SECONDS`` ago (a
  rater back from a longer pause starts afresh). Its length is wall-clock minutes, short
  pauses included: a 2-minute look away is not a break.
* **Break reminder** (:func:`reminder_due`): due once the current stretch reaches the study's
  ``break_reminder_minutes`` (0 = off); dismissing it snoozes it for another period of the
  same stretch; a new stretch (after a real pause) starts the count again.

Nothing here reaches another rater's data: every query starts from the actor's own rows.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import select

from radconcord.backend import clock
from radconcord.backend.errors import InvalidInput, NotFound
from radconcord.backend.services.quality import qualification
from radconcord.backend.services.study_admin.study_settings import effective
from radconcord.backend.services.study_admin.study_status import HIDDEN_STATUSES
from radconcord.backend.types import Actor
from radconcord.db.models import PAIR_TRAINING, ActivitySpan, Assignment, Pair, Study
from radconcord.db.session import Database

#: A gap between activity spans longer than this (seconds) is a pause that ends a stretch.
PAUSE_SECONDS = 300.0
#: Timed done pairs needed before the time left is estimated.
MIN_DONE_FOR_ESTIMATE = 3
#: How far back the spans of the current stretch are read (longer stretches are cut there).
LOOKBACK = dt.timedelta(hours=12)


@dataclass(frozen=True)
class Estimate:
    """Pairs left and the time they should take.

    Attributes:
        pairs_left: Pairs of the study not yet marked done.
        seconds_left: ``pairs_left`` x the median time per timed done pair; None when fewer
            than ``MIN_DONE_FOR_ESTIMATE`` done pairs have a measured time.
        median_seconds: That median (None likewise).
        timed_pairs: Done pairs with a measured time (the median's basis).
    """

    pairs_left: int
    seconds_left: float | None
    median_seconds: float | None
    timed_pairs: int


def estimate_left(done_seconds: Iterable[float], pairs_left: int, *,
                  min_done: int = MIN_DONE_FOR_ESTIMATE) -> Estimate:
    """The time the pairs left should take at the rater's own median pace.

    Args:
        done_seconds: Time on task of each pair the rater has marked done (0: not measured).
        pairs_left: Pairs not done yet (at least 0).
        min_done: Timed done pairs needed for an estimate.

    Raises:
        InvalidInput: ``pairs_left`` is negative or a time is negative or not finite.
    """
    if pairs_left < 0:
        raise InvalidInput(f"pairs_left: must be 0 or more, got {pairs_left}")
    timed = []
    for value in done_seconds:
        value = float(value)
        if not math.isfinite(value) or value < 0:
            raise InvalidInput(f"done_seconds: {value!r} is not a time in seconds")
        if value > 0:
            timed.append(value)
    if len(timed) < min_done:
        return Estimate(pairs_left, None, None, len(timed))
    median = float(statistics.median(timed))
    return Estimate(pairs_left, median * pairs_left, median, len(timed))


def time_left_text(estimate: Estimate) -> str:
    """The header's words: ``"12 left · about 25 min left"`` (or the reason there is none).

    Minutes are rounded up (a last pair of 20 s is "about 1 min", never "0 min"); an hour or
    more reads ``"about 1 h 10 min left"``.
    """
    left = f"{estimate.pairs_left} left"
    if estimate.pairs_left == 0:
        return "none left"
    if estimate.seconds_left is None:
        return f"{left} · estimate after {MIN_DONE_FOR_ESTIMATE} pairs"
    minutes = max(1, math.ceil(estimate.seconds_left / 60))
    hours, rest = divmod(minutes, 60)
    span = f"{hours} h {rest:02d} min" if hours else f"{minutes} min"
    return f"{left} · about {span} left"


@dataclass(frozen=True)
class Stretch:
    """The rater's current stretch of work without a real pause.

    Attributes:
        started_at: Start of its first span (None: not working now).
        minutes: Its wall-clock length up to the end of its latest span (0 when none).
    """

    started_at: dt.datetime | None
    minutes: float


def continuous_work(spans: Iterable[tuple[dt.datetime, dt.datetime]], now: dt.datetime, *,
                    pause_seconds: float = PAUSE_SECONDS) -> Stretch:
    """The current stretch of work from activity spans (see the module docstring).

    Args:
        spans: ``(start, end)`` of the rater's activity spans, any order, may overlap (two
            tabs); naive datetimes are UTC. Empty or reversed spans are ignored.
        now: The current time.
        pause_seconds: A gap longer than this ends a stretch.
    """
    now = clock.as_utc(now)
    ordered = sorted((clock.as_utc(a), clock.as_utc(b)) for a, b in spans
                     if clock.as_utc(b) > clock.as_utc(a))
    # Spans ending in the future (a fast client clock) count up to now only.
    ordered = [(a, min(b, now)) for a, b in ordered if a < now]
    if not ordered:
        return Stretch(None, 0.0)
    pause = dt.timedelta(seconds=pause_seconds)
    start, end = ordered[0]
    for a, b in ordered[1:]:
        if a - end > pause:
            start = a  # a real pause: a new stretch begins
        end = max(end, b)
    if now - end > pause:
        return Stretch(None, 0.0)
    return Stretch(start, (end - start).total_seconds() / 60.0)


def reminder_due(stretch: Stretch, period_minutes: int, *,
                 snoozed: tuple[dt.datetime, float] | None = None) -> bool:
    """Whether to show the break reminder now.

    Args:
        stretch: The current stretch (:func:`continuous_work`).
        period_minutes: The study's ``break_reminder_minutes``; 0 turns reminders off.
        snoozed: ``(stretch start, minutes)`` when the rater dismissed the reminder: it stays
            away until that stretch reaches ``minutes + period``; a different stretch (the
            rater took a real pause since) ignores it.
    """
    if period_minutes <= 0 or stretch.started_at is None:
        return False
    threshold = float(period_minutes)
    if snoozed is not None and clock.as_utc(snoozed[0]) == clock.as_utc(stretch.started_at):
        threshold = float(snoozed[1]) + period_minutes
    return stretch.minutes >= threshold


def reminder_text(stretch: Stretch) -> str:
    """``"You've been rating for 52 min. A short break helps accuracy."``"""
    minutes = int(stretch.minutes)
    hours, rest = divmod(minutes, 60)
    span = f"{hours} h {rest:02d} min" if hours else f"{minutes} min"
    return f"You've been rating for {span}. A short break helps accuracy."


@dataclass(frozen=True)
class Pace:
    """What the rating screen's header shows about the rater's hour in one study.

    Attributes:
        study_name: The study.
        total: The rater's pairs in it.
        done: Those marked done.
        estimate: Pairs left and the time left (:func:`estimate_left`).
        stretch: The current stretch of work (:func:`continuous_work`).
        break_minutes: The study's ``break_reminder_minutes`` (0: no reminders).
    """

    study_name: str
    total: int
    done: int
    estimate: Estimate
    stretch: Stretch
    break_minutes: int


def rater_pace(db: Database, actor: Actor, *, study_name: str,
               now: dt.datetime | None = None) -> Pace:
    """The actor's own pace in one study: pairs left, time left, current stretch of work.

    Args:
        db: The study database.
        actor: The rater (only their own assignments and spans are read).
        study_name: A study with pairs assigned to the actor.
        now: The current time (tests pass it).

    Raises:
        NotFound: no such visible study, or none of its pairs are the actor's.
    """
    now = clock.as_utc(now) if now is not None else clock.utcnow()
    with db.read() as s:
        study = s.execute(
            select(Study.id, Study.settings)
            .where(Study.name == study_name, Study.status.not_in(HIDDEN_STATUSES))
        ).first()
        query = select(Assignment.completed_at, Assignment.active_seconds).where(
            Assignment.rater_id == actor.user_id, Assignment.study_id == study.id
        ) if study is not None else None
        if study is not None and not qualification.qualification(
                s, actor.user_id, study.id, study.settings).open:
            # While the gate holds the rater at the training items, only they are left:
            # the study pairs behind it are neither "left" nor part of the time estimate.
            query = query.join(Pair, Pair.id == Assignment.pair_id).where(
                Pair.kind == PAIR_TRAINING)
        rows = [] if query is None else s.execute(query).all()
        if not rows:
            raise NotFound(f"you have no pairs to rate in study {study_name!r}")
        spans: Sequence[tuple[dt.datetime, dt.datetime]] = s.execute(
            select(ActivitySpan.started_at, ActivitySpan.ended_at)
            .where(ActivitySpan.rater_id == actor.user_id,
                   ActivitySpan.ended_at >= now - LOOKBACK)
        ).all()
        settings = effective(study.settings)
    done = [float(seconds or 0.0) for completed, seconds in rows if completed is not None]
    estimate = estimate_left(done, len(rows) - len(done))
    return Pace(study_name=study_name, total=len(rows), done=len(done), estimate=estimate,
                stretch=continuous_work(spans, now),
                break_minutes=int(settings["break_reminder_minutes"]))


__all__ = [
    "LOOKBACK",
    "MIN_DONE_FOR_ESTIMATE",
    "PAUSE_SECONDS",
    "Estimate",
    "Pace",
    "Stretch",
    "continuous_work",
    "estimate_left",
    "rater_pace",
    "reminder_due",
    "reminder_text",
    "time_left_text",
]
