"""time on task of pairwise judgements

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25

* ``judgement_spans``: the rater's own active intervals on a comparison of the Compare
  screen, as ``activity_spans`` are for a pair.
* ``judgements.active_seconds`` / ``last_active_at``: the union of a judgement's spans, as
  on an assignment (0 for judgements made before: no time was recorded for them).
"""
import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("judgements") as batch:
        batch.add_column(sa.Column("active_seconds", sa.Float(), nullable=False,
                                   server_default="0"))
        batch.add_column(sa.Column("last_active_at", sa.DateTime(timezone=True),
                                   nullable=True))
    op.create_table(
        "judgement_spans",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("rater_id", sa.Integer(), nullable=False),
        sa.Column("judgement_id", sa.Integer(), nullable=False),
        sa.Column("client_id", sa.String(length=64), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("active_ms", sa.Integer(), nullable=False),
        sa.Column("events", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["rater_id"], ["users.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["judgement_id"], ["judgements.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("client_id", "judgement_id", "started_at",
                            name="uq_judgement_spans_client_start"),
        sa.CheckConstraint("active_ms >= 0", name="ck_judgement_spans_active_ms"),
    )
    op.create_index("ix_judgement_spans_judgement", "judgement_spans", ["judgement_id"])


def downgrade() -> None:
    op.drop_index("ix_judgement_spans_judgement", table_name="judgement_spans")
    op.drop_table("judgement_spans")
    with op.batch_alter_table("judgements") as batch:
        batch.drop_column("last_active_at")
        batch.drop_column("active_seconds")
