"""time on task bounded by the rater's sessions and timeline

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27

* ``activity_spans`` / ``judgement_spans``: ``session_id`` (the login session that posted
  the span), ``clip_start`` / ``clip_end`` (the part of the span inside the rater's
  sessions) and ``credited_seconds`` (the part of that no earlier span of the rater covers,
  on any pair: an instant of a rater's time is credited once); ``judgement_spans`` gets the
  ``(rater_id, started_at)`` index ``activity_spans`` has, for reading a rater's timeline.
* ``assignments.claimed_seconds`` / ``judgements.claimed_seconds``: the union of the spans
  as the browser sent them, beside the credited ``active_seconds``.

Spans stored before 0008 were not linked to a session: each keeps its whole interval as its
clip, and is credited, in the order the spans were received, for the part no earlier span of
the same rater covers. ``active_seconds`` becomes the sum of its spans' credit (the union as
before for a rater who was on one pair at a time; less where spans of different pairs
overlapped), ``claimed_seconds`` the union of its spans, and ``last_active_at`` the end of
its latest credited span.
"""
from __future__ import annotations

import bisect
import datetime as dt
from collections import defaultdict

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

SPAN_TABLES = (("activity_spans", "assignment_id", "assignments"),
               ("judgement_spans", "judgement_id", "judgements"))


def _utc(value: dt.datetime) -> dt.datetime:
    # SQLite hands datetimes back naive (stored as UTC).
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


class _Timeline:
    """Disjoint sorted intervals: what is already credited (a copy of the service's rule, so
    that this migration does not change when the service does)."""

    def __init__(self) -> None:
        self.starts: list[dt.datetime] = []
        self.ends: list[dt.datetime] = []

    def uncovered(self, a: dt.datetime, b: dt.datetime) -> float:
        covered = 0.0
        i = bisect.bisect_right(self.ends, a)
        while i < len(self.starts) and self.starts[i] < b:
            covered += (min(self.ends[i], b) - max(self.starts[i], a)).total_seconds()
            i += 1
        return max(0.0, (b - a).total_seconds() - covered)

    def add(self, a: dt.datetime, b: dt.datetime) -> None:
        i = bisect.bisect_left(self.ends, a)
        j = bisect.bisect_right(self.starts, b)
        if i < j:
            a, b = min(a, self.starts[i]), max(b, self.ends[j - 1])
        self.starts[i:j] = [a]
        self.ends[i:j] = [b]


def _union(intervals: list[tuple[dt.datetime, dt.datetime]]) -> float:
    total, current = 0.0, None
    for a, b in sorted(intervals):
        if current is None or a > current[1]:
            if current is not None:
                total += (current[1] - current[0]).total_seconds()
            current = (a, b)
        elif b > current[1]:
            current = (current[0], b)
    return total + ((current[1] - current[0]).total_seconds() if current else 0.0)


def upgrade() -> None:
    for table, _, owners in SPAN_TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("session_id", sa.Integer(), nullable=True))
            batch.add_column(sa.Column("clip_start", sa.DateTime(timezone=True),
                                       nullable=True))
            batch.add_column(sa.Column("clip_end", sa.DateTime(timezone=True), nullable=True))
            batch.add_column(sa.Column("credited_seconds", sa.Float(), nullable=False,
                                       server_default="0"))
            batch.create_foreign_key(f"fk_{table}_session", "auth_sessions", ["session_id"],
                                     ["id"], ondelete="SET NULL")
        with op.batch_alter_table(owners) as batch:
            batch.add_column(sa.Column("claimed_seconds", sa.Float(), nullable=False,
                                       server_default="0"))
    op.create_index("ix_judgement_spans_rater_start", "judgement_spans",
                    ["rater_id", "started_at"])
    _credit_old_spans()


def _tables(table: str, key: str, owners: str) -> tuple[sa.TableClause, sa.TableClause]:
    # Typed columns: SQLAlchemy writes and reads the datetimes as the models do (SQLite
    # compares them as text, so the format must be the same).
    when = sa.DateTime(timezone=True)
    spans = sa.table(table, sa.column("id", sa.Integer), sa.column("rater_id", sa.Integer),
                     sa.column(key, sa.Integer), sa.column("started_at", when),
                     sa.column("ended_at", when), sa.column("received_at", when),
                     sa.column("clip_start", when), sa.column("clip_end", when),
                     sa.column("credited_seconds", sa.Float))
    owner = sa.table(owners, sa.column("id", sa.Integer),
                     sa.column("active_seconds", sa.Float),
                     sa.column("claimed_seconds", sa.Float),
                     sa.column("last_active_at", when))
    return spans, owner


def _credit_old_spans() -> None:
    """Credit the spans stored so far by the one-instant-once rule, in the order received."""
    conn = op.get_bind()
    spans = []
    tables = [_tables(*names) for names in SPAN_TABLES]
    for order, ((_, key, _), (table, _)) in enumerate(zip(SPAN_TABLES, tables, strict=True)):
        for row in conn.execute(sa.select(table.c.id, table.c.rater_id, table.c[key],
                                          table.c.started_at, table.c.ended_at,
                                          table.c.received_at)):
            spans.append((row.rater_id, _utc(row.received_at), order, row.id, row[2],
                          _utc(row.started_at), _utc(row.ended_at)))
    spans.sort(key=lambda r: r[:4])
    timelines: dict[int, _Timeline] = defaultdict(_Timeline)
    owners: dict[tuple[int, int], dict] = defaultdict(
        lambda: {"credited": 0.0, "spans": [], "last": None})
    for rater_id, _, order, span_id, owner_id, start, end in spans:
        timeline = timelines[rater_id]
        credit = timeline.uncovered(start, end) if end > start else 0.0
        if end > start:
            timeline.add(start, end)
        table = tables[order][0]
        conn.execute(sa.update(table).where(table.c.id == span_id).values(
            clip_start=start, clip_end=end, credited_seconds=credit))
        owner = owners[(order, owner_id)]
        owner["credited"] += credit
        owner["spans"].append((start, end))
        if credit > 0 and (owner["last"] is None or end > owner["last"]):
            owner["last"] = end
    for (order, owner_id), owner in owners.items():
        table = tables[order][1]
        conn.execute(sa.update(table).where(table.c.id == owner_id).values(
            active_seconds=owner["credited"], claimed_seconds=_union(owner["spans"]),
            last_active_at=owner["last"]))


def downgrade() -> None:
    op.drop_index("ix_judgement_spans_rater_start", table_name="judgement_spans")
    for table, _, owners in SPAN_TABLES:
        with op.batch_alter_table(owners) as batch:
            batch.drop_column("claimed_seconds")
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(f"fk_{table}_session", type_="foreignkey")
            batch.drop_column("credited_seconds")
            batch.drop_column("clip_end")
            batch.drop_column("clip_start")
            batch.drop_column("session_id")
