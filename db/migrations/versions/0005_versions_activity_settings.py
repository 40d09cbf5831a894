"""rating versions, rater activity spans, per-study settings

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24

* ``assignments.version``: bumped by every change to the rater's counts or done-state of the
  pair; a save carries the version the rater saw and a stale one is refused.
* ``activity_spans``: the rater's own active intervals (from the browser's input and focus
  events) attributed to the pair on screen; time on task is derived from them.
* ``assignments.active_seconds`` / ``last_active_at`` are reset: before 0005 each page run
  added the gap since the pair's last activity (capped at 60 s) even when the rater had been
  on other pairs meanwhile, about 4x the real time; a wrong number kept beside the right
  one would be read as time on task. From now on they are derived from activity spans.
* ``studies.settings``: per-study options (e.g. ``highlight_differences``), recorded with the
  study so an analysis can say how raters saw the pairs.
"""
import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("assignments") as batch:
        batch.add_column(sa.Column("version", sa.Integer(), nullable=False, server_default="0"))
    op.execute("UPDATE assignments SET active_seconds = 0, last_active_at = NULL")
    with op.batch_alter_table("studies") as batch:
        batch.add_column(sa.Column("settings", sa.JSON(), nullable=False,
                                   server_default=sa.text("'{}'")))
    op.create_table(
        "activity_spans",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("rater_id", sa.Integer(), nullable=False),
        sa.Column("assignment_id", sa.Integer(), nullable=False),
        sa.Column("client_id", sa.String(length=64), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("active_ms", sa.Integer(), nullable=False),
        sa.Column("events", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["rater_id"], ["users.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["assignment_id"], ["assignments.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("client_id", "assignment_id", "started_at",
                            name="uq_activity_spans_client_start"),
        sa.CheckConstraint("active_ms >= 0", name="ck_activity_spans_active_ms"),
    )
    op.create_index("ix_activity_spans_assignment", "activity_spans", ["assignment_id"])
    op.create_index("ix_activity_spans_rater_start", "activity_spans",
                    ["rater_id", "started_at"])


def downgrade() -> None:
    op.drop_index("ix_activity_spans_rater_start", table_name="activity_spans")
    op.drop_index("ix_activity_spans_assignment", table_name="activity_spans")
    op.drop_table("activity_spans")
    with op.batch_alter_table("studies") as batch:
        batch.drop_column("settings")
    with op.batch_alter_table("assignments") as batch:
        batch.drop_column("version")
