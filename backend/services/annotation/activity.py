"""Time on task from the rater's own activity: spans sent by the browser, credited per pair.

The rating page's invisible tracker (``webapp/components/activity``) watches the rater's own
input and focus events (keys, pointer presses and moves (at most one per 200 ms), wheel,
input, the window getting the focus, the tab becoming visible) and cuts them into *spans*:
intervals in which the rater was active on the pair on screen. ``scroll`` and an element's
``focusin`` are not used: a page re-render scrolls and focuses too, while the rater's own
scrolling and focusing come with wheel, key or pointer events. Loading the page counts as an
event. The rules, applied in the browser:

* The rater is active from an event until the next one, as long as the gap is at most the
  idle cut ``T`` (:func:`idle_cut_seconds`, ``RADCONCORD_IDLE_CUT_S``, default
  :data:`DEFAULT_IDLE_CUT_S` = 30 s). After the last event the activity continues up to ``T``
  (reading without touching anything), then stops: a longer gap adds at most ``T``.
* Nothing counts while the tab is hidden or the window has no focus.
* Time goes to the pair on screen: a change of pair ends the span of the old pair and (when
  the rater is still active) starts one for the new pair at that instant. A pair passed
  through in half a second gets half a second.
* Spans are sent every ~10 s, on a change of pair and when the page is hidden or left; each
  carries the page load's random ``client_id`` so a span resent after a lost reply is stored
  once (unique ``(client_id, assignment_id, started_at)``).
* Spans are tagged with the account they were measured for (:func:`account_tag`): spans
  kept through a logout (the server answered 401) are never sent for the next rater who logs
  in at the same browser (a shared reading-room workstation), even on a pair both rate.

The Compare screen (pairwise mode) has the same tracker: a span's ``pair`` is then the
comparison's opaque id, and the span is stored in ``judgement_spans`` against the rater's
judgement; ``Judgement.active_seconds`` is credited by the same rules as an assignment's,
on the same timeline of the rater.

This module checks and stores the spans and keeps the derived numbers. The browser's claims
are not taken on trust: what is **credited** must be physically possible.

* **Inside a session.** A span posted through the route is clipped to the lifetime of the
  login session that posted it (``created_at`` to its revocation, expiry or now), or of an
  earlier session of the same rater: spans the browser kept through a logout (401) are sent
  after the next login, and were measured in the session before. When a claim straddles a
  gap between sessions, the longest part inside one counts. That part is stored as the
  span's ``clip_start``/``clip_end``; a span with no part inside is stored with no clip and
  no credit. Spans stored by server code (no session; tests, simulations) keep their
  interval.
* **One pair at a time.** An instant of a rater's time is credited once, to one pair: a span
  is credited (``credited_seconds``) for the part of its clip that no span of the rater
  stored **before it** covers, on any pair, assignment or comparison, of any study. Two tabs
  on the same pair therefore count once (the union, as always), and spans of another pair
  that overlap an earlier one add nothing for the overlap; what was credited never moves
  when later spans arrive. The honest browser's spans at a change of pair touch (one ends
  when the next starts) and lose nothing.
* **At least one event.** A span must name at least one input event: its own, or (for a span
  that continues the activity of an earlier event: cut at a send, or started by a change of
  pair) the one it continues, which the browser counts for it.

So a rater's credited time over all pairs is the length of the union of their spans' clips:
for spans posted through the route, never more than the wall-clock time of their sessions.
The time on task of an assignment (``Assignment.active_seconds``) is the sum of its spans'
credit: for a rater on one pair at a time, the length of the union of its spans.
``claimed_seconds`` keeps the union of the spans as the browser sent them;
``claimed_seconds - active_seconds`` is the time clipped, shown on the QC page and in the
export. ``last_active_at`` is the end of the latest credited span. A rater's time in a study
is the sum over their assignments.

A span is refused (and the others of the batch are still stored) when its pair is not one of
the rater's assignments (the same message as a pair that does not exist, so ids cannot be
probed), its study is not open, it has no event, ends before it starts, lasts longer than
:data:`MAX_SPAN_SECONDS`, ends more than :data:`FUTURE_TOLERANCE_SECONDS` in the future or
started more than :data:`MAX_AGE` ago.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
import logging
import math
import os
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from radconcord.backend import clock
from radconcord.backend.errors import InvalidInput
from radconcord.backend.services.accounts import sessions
from radconcord.backend.services.study_admin.study_status import UNPUBLISHED_STATUSES
from radconcord.backend.types import Actor
from radconcord.db.models import (
    ActivitySpan,
    Assignment,
    AuthSession,
    Comparison,
    Judgement,
    JudgementSpan,
    Pair,
    Study,
)
from radconcord.db.session import Database

log = logging.getLogger(__name__)

IDLE_CUT_ENV = "RADCONCORD_IDLE_CUT_S"
#: Seconds of activity an event stands for when nothing follows it (the idle cut ``T``).
DEFAULT_IDLE_CUT_S = 30.0
FLUSH_ENV = "RADCONCORD_ACTIVITY_FLUSH_S"
#: Seconds between two sends of the browser's spans (also sent on a change of pair).
DEFAULT_FLUSH_S = 10.0
#: The longest span accepted (the browser cuts spans at every send, so they are ~10 s).
MAX_SPAN_SECONDS = 600.0
#: How far in the future a span may end (the browser corrects its clock by the server's).
FUTURE_TOLERANCE_SECONDS = 120.0
#: How old a span may be when it arrives (a laptop asleep with unsent spans).
MAX_AGE = dt.timedelta(days=7)
#: Most spans in one request.
MAX_SPANS_PER_BATCH = 500
#: A span needs an input event to count (its own, or the one it continues).
MIN_EVENTS_PER_SPAN = 1
MAX_EVENTS_PER_SPAN = 1_000_000
# PostgreSQL advisory lock namespace of a rater's timeline ("RC" + 1): one batch of a rater
# at a time decides what is credited (SQLite has one writer anyway).
TIMELINE_LOCK = 0x52430001
CLIENT_ID_RE = re.compile(r"[A-Za-z0-9_-]{8,64}")
#: Only open studies take time on task: a closed study's numbers are final.
OPEN_STATUS = "open"


def _env_seconds(name: str, default: float, low: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        log.warning("%s=%r is not a number of seconds; using %g", name, raw, default)
        return default
    if not math.isfinite(value) or value < low:
        log.warning("%s=%r is below %g s; using %g", name, raw, low, default)
        return default
    return value


def account_tag(actor: Actor) -> str:
    """The tag of the account the browser measures for (:func:`sessions.account_tag`).

    The rating page hands it to the tracker, which tags each span with it; the route refuses
    a batch whose tag is not the cookie's account's.
    """
    return sessions.account_tag(actor, "activity")


def idle_cut_seconds() -> float:
    """The idle cut ``T`` in seconds (``RADCONCORD_IDLE_CUT_S``; default 30, at least 0.5)."""
    return _env_seconds(IDLE_CUT_ENV, DEFAULT_IDLE_CUT_S, 0.5)


def flush_seconds() -> float:
    """Seconds between sends (``RADCONCORD_ACTIVITY_FLUSH_S``; default 10, at least 0.5)."""
    return _env_seconds(FLUSH_ENV, DEFAULT_FLUSH_S, 0.5)


@dataclass(frozen=True)
class SpanInput:
    """One active interval on one pair, as the browser reports it.

    Attributes:
        opaque_id: The pair on screen (the id the rater knows).
        started_at: Start (aware; naive values are taken as UTC).
        ended_at: End.
        events: Input and focus events seen in the span (at least 1: a span continuing the
            activity of an earlier event counts that event).
    """

    opaque_id: str
    started_at: dt.datetime
    ended_at: dt.datetime
    events: int = 1


@dataclass(frozen=True)
class RefusedSpan:
    """A span that was not stored, with the field at fault and why."""

    index: int
    field: str
    message: str


@dataclass(frozen=True)
class RecordResult:
    """Outcome of :func:`record_spans`.

    Attributes:
        stored: New spans written.
        duplicates: Spans already stored (a resend), left as they were.
        refused: Spans not stored, by their index in the batch.
        active_seconds: ``opaque_id -> time on task`` (credited) of each pair the batch
            touched.
        claimed_seconds: ``opaque_id -> union of the spans as sent`` of the same pairs.
    """

    stored: int
    duplicates: int
    refused: tuple[RefusedSpan, ...]
    active_seconds: dict[str, float]
    claimed_seconds: dict[str, float] = dataclasses.field(default_factory=dict)


class _Refused(Exception):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def _from_ms(value: object, field: str) -> dt.datetime:
    # Booleans are ints to Python; a timestamp that is a bool is a client bug.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _Refused(field, f"{field}: must be milliseconds since 1970 (a number), "
                              f"got {value!r}")
    try:
        return dt.datetime.fromtimestamp(float(value) / 1000.0, dt.UTC)
    except (OverflowError, OSError, ValueError):
        raise _Refused(field, f"{field}: {value!r} is not a valid time") from None


def _coerce(item: SpanInput | Mapping[str, Any]) -> SpanInput:
    """A span from a ``SpanInput`` or a JSON object ``{pair, start, end, events}`` (ms)."""
    if isinstance(item, SpanInput):
        if not isinstance(item.started_at, dt.datetime):
            raise _Refused("start", f"start: must be a datetime, got {item.started_at!r}")
        if not isinstance(item.ended_at, dt.datetime):
            raise _Refused("end", f"end: must be a datetime, got {item.ended_at!r}")
        span = SpanInput(str(item.opaque_id), clock.as_utc(item.started_at),
                         clock.as_utc(item.ended_at), item.events)
    elif isinstance(item, Mapping):
        unknown = sorted(set(item) - {"pair", "start", "end", "events"})
        if unknown:
            raise _Refused(unknown[0], f"unknown field(s) {', '.join(map(repr, unknown))}; "
                                       "a span has pair, start, end, events")
        pair = item.get("pair")
        if not isinstance(pair, str) or not pair:
            raise _Refused("pair", f"pair: must be the pair's id (text), got {pair!r}")
        span = SpanInput(pair, _from_ms(item.get("start"), "start"),
                         _from_ms(item.get("end"), "end"), item.get("events", 0))
    else:
        raise _Refused("span", f"must be an object with pair, start, end, events; got "
                               f"{type(item).__name__}")
    events = span.events
    if isinstance(events, bool) or not isinstance(events, int) or not (
            MIN_EVENTS_PER_SPAN <= events <= MAX_EVENTS_PER_SPAN):
        raise _Refused("events", f"events: must be an integer {MIN_EVENTS_PER_SPAN}-"
                                 f"{MAX_EVENTS_PER_SPAN} (a span without an input event "
                                 f"does not count), got {events!r}")
    return span


def _check_times(span: SpanInput, now: dt.datetime) -> None:
    length = (span.ended_at - span.started_at).total_seconds()
    if length < 0:
        raise _Refused("end", f"end: {span.ended_at.isoformat()} is before the start "
                              f"{span.started_at.isoformat()}")
    if length == 0:
        # Stored, it would take the start of the page's next span on the pair (one span per
        # page load, pair and start) and that span would be dropped as a resend.
        raise _Refused("end", "end: the span is empty (it ends when it starts)")
    if length > MAX_SPAN_SECONDS:
        raise _Refused("end", f"end: the span lasts {length:.0f} s, more than the "
                              f"{MAX_SPAN_SECONDS:.0f} s a span may last")
    ahead = (span.ended_at - now).total_seconds()
    if ahead > FUTURE_TOLERANCE_SECONDS:
        raise _Refused("end", f"end: {span.ended_at.isoformat()} is {ahead:.0f} s in the "
                              "future")
    if span.started_at < now - MAX_AGE:
        raise _Refused("start", f"start: {span.started_at.isoformat()} is older than "
                                f"{MAX_AGE.days} days")


def union_seconds(intervals: Iterable[tuple[dt.datetime, dt.datetime]]) -> float:
    """Length in seconds of the union of ``[start, end]`` intervals (overlaps count once).

    Args:
        intervals: ``(start, end)`` pairs in any order; empty or reversed ones add nothing.
    """
    total = 0.0
    current: tuple[dt.datetime, dt.datetime] | None = None
    for start, end in sorted((clock.as_utc(a), clock.as_utc(b)) for a, b in intervals):
        if end <= start:
            continue
        if current is None or start > current[1]:
            if current is not None:
                total += (current[1] - current[0]).total_seconds()
            current = (start, end)
        elif end > current[1]:
            current = (current[0], end)
    if current is not None:
        total += (current[1] - current[0]).total_seconds()
    return total


class _Timeline:
    """Disjoint, sorted intervals: the instants of a rater's time already credited."""

    def __init__(self, intervals: Iterable[tuple[dt.datetime, dt.datetime]] = ()) -> None:
        self._starts: list[dt.datetime] = []
        self._ends: list[dt.datetime] = []
        for a, b in intervals:
            self.add(clock.as_utc(a), clock.as_utc(b))

    def uncovered(self, a: dt.datetime, b: dt.datetime) -> float:
        """Seconds of ``[a, b]`` that no interval covers."""
        covered = 0.0
        i = bisect.bisect_right(self._ends, a)
        while i < len(self._starts) and self._starts[i] < b:
            covered += (min(self._ends[i], b) - max(self._starts[i], a)).total_seconds()
            i += 1
        return max(0.0, (b - a).total_seconds() - covered)

    def add(self, a: dt.datetime, b: dt.datetime) -> None:
        """Cover ``[a, b]`` too (merged with the intervals it overlaps or touches)."""
        if b <= a:
            return
        i = bisect.bisect_left(self._ends, a)
        j = bisect.bisect_right(self._starts, b)
        if i < j:
            a, b = min(a, self._starts[i]), max(b, self._ends[j - 1])
        self._starts[i:j] = [a]
        self._ends[i:j] = [b]


def _merge(intervals: Iterable[tuple[dt.datetime, dt.datetime]]
           ) -> list[tuple[dt.datetime, dt.datetime]]:
    merged: list[tuple[dt.datetime, dt.datetime]] = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def session_windows(s: Session, rater_id: int, session_id: int, now: dt.datetime
                    ) -> list[tuple[dt.datetime, dt.datetime]]:
    """When the rater was logged in, as far as a span posted by ``session_id`` may claim.

    The lifetimes of the posting session and of the rater's sessions created before it
    (spans kept in the browser through a logout come after the next login), each from its
    creation to its revocation, its expiry or ``now``, whichever is first; sessions whose
    ticket was never exchanged for a cookie were never logged in and are left out.

    Args:
        s: The caller's SQLAlchemy session.
        rater_id: The rater.
        session_id: The login session that posted the spans.
        now: The server's time.

    Returns:
        Merged ``(start, end)`` intervals in time order; empty when the session is not the
        rater's.
    """
    posting = s.execute(select(AuthSession.user_id, AuthSession.created_at)
                        .where(AuthSession.id == session_id)).first()
    if posting is None or posting.user_id != rater_id:
        return []
    rows = s.execute(select(AuthSession.created_at, AuthSession.expires_at,
                            AuthSession.revoked_at)
                     .where(AuthSession.user_id == rater_id,
                            AuthSession.created_at <= posting.created_at,
                            AuthSession.token_sha256.is_not(None))).all()
    windows = []
    for created, expires, revoked in rows:
        ends = [now, clock.as_utc(expires)]
        ends += [clock.as_utc(revoked)] if revoked is not None else []
        windows.append((clock.as_utc(created), min(ends)))
    return _merge(windows)


def _clip(span: SpanInput, windows: Sequence[tuple[dt.datetime, dt.datetime]] | None
          ) -> tuple[dt.datetime, dt.datetime] | None:
    """The longest part of the span inside one window (None: no part); ``windows`` None:
    the whole span (server code, no session)."""
    if windows is None:
        return span.started_at, span.ended_at
    best: tuple[dt.datetime, dt.datetime] | None = None
    for lo, hi in windows:
        a, b = max(span.started_at, lo), min(span.ended_at, hi)
        if b > a and (best is None or b - a > best[1] - best[0]):
            best = (a, b)
    return best


def _timeline(s: Session, rater_id: int, lo: dt.datetime, hi: dt.datetime) -> _Timeline:
    """The rater's credited instants that may overlap ``[lo, hi]``, from both span tables."""
    # A clip lies inside its span, and a span lasts at most MAX_SPAN_SECONDS.
    since = lo - dt.timedelta(seconds=MAX_SPAN_SECONDS)
    intervals: list[tuple[dt.datetime, dt.datetime]] = []
    for table in (ActivitySpan, JudgementSpan):
        intervals.extend(s.execute(
            select(table.clip_start, table.clip_end)
            .where(table.rater_id == rater_id, table.clip_start.is_not(None),
                   table.started_at >= since, table.started_at <= hi)).all())
    return _Timeline((a, b) for a, b in intervals if b is not None)


def _lock_timeline(s: Session, rater_id: int) -> None:
    """Hold the rater's timeline until the transaction ends (PostgreSQL).

    Two tabs of the rater sending spans of different pairs at once lock no common
    assignment row; without this both could credit the same instant.
    """
    if s.get_bind().dialect.name == "postgresql":
        s.execute(text("SELECT pg_advisory_xact_lock(:ns, :rater)"),
                  {"ns": TIMELINE_LOCK, "rater": rater_id})


def _insert_ignore(s: Session) -> Any:  # noqa: ANN401 - a dialect's insert construct
    dialect = s.get_bind().dialect.name
    if dialect == "postgresql":
        return pg_insert
    if dialect == "sqlite":
        return sqlite_insert
    raise RuntimeError(f"unsupported database dialect {dialect!r}")  # pragma: no cover


def _refresh(s: Session, owner: Assignment | Judgement) -> float:
    if isinstance(owner, Judgement):
        table, column = JudgementSpan, JudgementSpan.judgement_id
    else:
        table, column = ActivitySpan, ActivitySpan.assignment_id
    rows = s.execute(select(table.started_at, table.ended_at, table.clip_end,
                            table.credited_seconds).where(column == owner.id)).all()
    # Credits of one rater never overlap (each instant once): their sum is exact.
    owner.active_seconds = float(sum(float(c or 0.0) for *_, c in rows))
    owner.claimed_seconds = union_seconds((a, b) for a, b, _, _ in rows)
    owner.last_active_at = max((clock.as_utc(e) for _, _, e, c in rows if e is not None and c),
                               default=None)
    return float(owner.active_seconds)


def refresh_assignment(s: Session, assignment: Assignment) -> float:
    """Recompute an assignment's cached time on task from its spans (caller's session).

    Returns:
        The new ``active_seconds`` (the sum of its spans' credit).
    """
    return _refresh(s, assignment)


def refresh_judgement(s: Session, judgement: Judgement) -> float:
    """Recompute a judgement's cached time on task from its spans (caller's session).

    Returns:
        The new ``active_seconds`` (the sum of its spans' credit).
    """
    return _refresh(s, judgement)


def record_spans(
    db: Database,
    actor: Actor,
    *,
    client_id: str,
    spans: Sequence[SpanInput | Mapping[str, Any]],
    now: dt.datetime | None = None,
    session_id: int | None = None,
) -> RecordResult:
    """Store a batch of the rater's activity spans and update their pairs' time on task.

    Each valid span is stored once (a resend of the same ``client_id``, pair and start is a
    duplicate, not an error); each invalid one is refused with its index, field and reason
    while the rest of the batch is stored. A stored span is clipped to the rater's sessions
    (when ``session_id`` is given) and credited for the part of its clip no earlier span of
    the rater covers (see the module's rules). The touched assignments' ``active_seconds``
    (sum of their spans' credit), ``claimed_seconds`` (union of their spans as sent) and
    ``last_active_at`` are recomputed in the same transaction, with the rater's timeline and
    the assignment rows locked, so two tabs sending at once neither lose each other's spans
    nor both get credited for the same instant.

    Args:
        db: The study database.
        actor: The rater (only their own assignments and judgements take spans).
        client_id: The page load that measured the spans (8-64 letters, digits, ``-``, ``_``).
        spans: ``SpanInput`` values or JSON objects ``{"pair", "start", "end", "events"}``
            with times in milliseconds since 1970 (UTC).
        now: The server's time (default: now); tests pass it.
        session_id: The login session that posted the spans (the route passes the cookie's):
            their credit is clipped to :func:`session_windows`. ``None``: spans from server
            code, kept whole.

    Raises:
        InvalidInput: a bad ``client_id`` or more than ``MAX_SPANS_PER_BATCH`` spans.
    """
    if not isinstance(client_id, str) or not CLIENT_ID_RE.fullmatch(client_id):
        raise InvalidInput(f"client_id: must be 8-64 letters, digits, '-' or '_', got "
                           f"{client_id!r}")
    if len(spans) > MAX_SPANS_PER_BATCH:
        raise InvalidInput(f"spans: {len(spans)} in one batch, at most {MAX_SPANS_PER_BATCH}")
    now = clock.as_utc(now) if now is not None else clock.utcnow()
    refused: list[RefusedSpan] = []
    valid: list[tuple[int, SpanInput]] = []
    for index, item in enumerate(spans):
        try:
            span = _coerce(item)
            _check_times(span, now)
        except _Refused as exc:
            refused.append(RefusedSpan(index, exc.field, f"span {index}: {exc.message}"))
            continue
        valid.append((index, span))
    if not valid:
        return RecordResult(0, 0, tuple(refused), {})

    wanted = sorted({span.opaque_id for _, span in valid})
    stored = duplicates = 0
    times: dict[str, float] = {}
    claimed: dict[str, float] = {}
    with db.begin() as s:
        _lock_timeline(s, actor.user_id)
        rows = s.execute(
            select(Assignment, Pair.opaque_id, Study.status, Study.name)
            .join(Pair, Pair.id == Assignment.pair_id)
            .join(Study, Study.id == Assignment.study_id)
            .where(Assignment.rater_id == actor.user_id, Pair.opaque_id.in_(wanted))
            .order_by(Assignment.id)
            # Two tabs of the same rater sending at once: the second waits, then unions the
            # first one's committed spans too (PostgreSQL; SQLite has one writer anyway).
            .with_for_update(of=Assignment)
        ).all()
        found: dict[str, tuple[Assignment | Judgement, str, str]] = {
            oid: (a, status, name) for a, oid, status, name in rows}
        # Ids that are no pair of the rater's may be comparisons of theirs (Compare screen).
        others = [oid for oid in wanted if oid not in found]
        if others:
            found.update({oid: (j, status, name) for j, oid, status, name in s.execute(
                select(Judgement, Comparison.opaque_id, Study.status, Study.name)
                .join(Comparison, Comparison.id == Judgement.comparison_id)
                .join(Study, Study.id == Comparison.study_id)
                .where(Judgement.rater_id == actor.user_id, Comparison.opaque_id.in_(others))
                .order_by(Judgement.id)
                .with_for_update(of=Judgement)
            ).all()})
        accepted: list[tuple[SpanInput, Assignment | Judgement]] = []
        for index, span in valid:
            hit = found.get(span.opaque_id)
            # A study never shown to raters answers like a pair that does not exist; an
            # archived one was shown (a late span from an old tab) and is refused by name
            # below, as a closed one is (study_status explains the two policies).
            if hit is None or hit[1] in UNPUBLISHED_STATUSES:
                refused.append(RefusedSpan(
                    index, "pair", f"span {index}: pair {span.opaque_id!r} is not in your "
                                   "assignments"))
                continue
            owner, status, study_name = hit
            if status != OPEN_STATUS:
                refused.append(RefusedSpan(
                    index, "pair", f"span {index}: study {study_name!r} is {status}; its "
                                   "time on task no longer changes"))
                continue
            accepted.append((span, owner))
        windows = (session_windows(s, actor.user_id, session_id, now)
                   if session_id is not None else None)
        clips = [_clip(span, windows) for span, _ in accepted]
        bounded = [c for c in clips if c is not None]
        timeline = (_timeline(s, actor.user_id, min(a for a, _ in bounded),
                              max(b for _, b in bounded)) if bounded else _Timeline())
        touched: dict[str, Assignment | Judgement] = {}
        insert = _insert_ignore(s)
        for (span, owner), clip in zip(accepted, clips, strict=True):
            values = dict(
                rater_id=actor.user_id, client_id=client_id, started_at=span.started_at,
                ended_at=span.ended_at,
                active_ms=round((span.ended_at - span.started_at).total_seconds() * 1000),
                events=int(span.events), received_at=now, session_id=session_id,
                clip_start=clip[0] if clip else None, clip_end=clip[1] if clip else None,
                credited_seconds=timeline.uncovered(*clip) if clip else 0.0)
            if isinstance(owner, Judgement):
                table, key = JudgementSpan, "judgement_id"
            else:
                table, key = ActivitySpan, "assignment_id"
            # RETURNING tells a stored row from a skipped one on both databases (the ORM
            # reports a rowcount of 1 for a skipped insert on PostgreSQL).
            inserted = s.execute(
                insert(table).values(**values, **{key: owner.id})
                .on_conflict_do_nothing(index_elements=["client_id", key, "started_at"])
                .returning(table.id)
            ).first()
            if inserted is not None:
                stored += 1
                # Only what was stored is credited: a resend's instants are its original's.
                if clip is not None:
                    timeline.add(*clip)
            else:
                duplicates += 1
            touched[span.opaque_id] = owner
        s.flush()
        for oid, owner in touched.items():
            times[oid] = _refresh(s, owner)
            claimed[oid] = float(owner.claimed_seconds)
    refused.sort(key=lambda r: r.index)
    return RecordResult(stored, duplicates, tuple(refused), times, claimed)


def clipped_seconds(claimed: float | None, credited: float | None) -> float:
    """Time the browser claimed for a pair but the rules did not credit (never negative).

    Args:
        claimed: ``claimed_seconds`` (the union of the spans as sent).
        credited: ``active_seconds``.
    """
    # Rounded to the microsecond the spans are stored with: no 1e-13 s of float noise.
    return round(max(0.0, float(claimed or 0.0) - float(credited or 0.0)), 6)


@dataclass(frozen=True)
class RaterTime:
    """One rater's time on task in a study.

    Attributes:
        total_seconds: Sum of the time on task of the rater's pairs.
        pairs_with_time: Pairs with any active time.
        median_seconds: Median time per pair over those pairs (None when none).
    """

    total_seconds: float
    pairs_with_time: int
    median_seconds: float | None


def summarize(seconds: Iterable[float]) -> RaterTime:
    """Total, count and median of per-pair times (pairs without time left out of the median).

    The one definition used by the dashboard, the progress page and a reader of the export.
    """
    values = [float(v) for v in seconds]
    worked = [v for v in values if v > 0]
    return RaterTime(total_seconds=float(sum(values)), pairs_with_time=len(worked),
                     median_seconds=float(statistics.median(worked)) if worked else None)


__all__ = [
    "DEFAULT_FLUSH_S",
    "DEFAULT_IDLE_CUT_S",
    "FLUSH_ENV",
    "IDLE_CUT_ENV",
    "account_tag",
    "clipped_seconds",
    "MAX_SPANS_PER_BATCH",
    "MAX_SPAN_SECONDS",
    "MIN_EVENTS_PER_SPAN",
    "RaterTime",
    "RecordResult",
    "RefusedSpan",
    "SpanInput",
    "flush_seconds",
    "idle_cut_seconds",
    "record_spans",
    "refresh_assignment",
    "refresh_judgement",
    "session_windows",
    "summarize",
    "union_seconds",
]
