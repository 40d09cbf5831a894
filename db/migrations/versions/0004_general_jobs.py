"""one job table for every long task, and the workers table

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24

``scoring_jobs`` becomes ``jobs`` (kind ``score``): every existing row is kept with its id,
status, progress, timestamps and attempts; its metrics and options move into ``params``.
"""
import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_OLD = sa.table(
    "scoring_jobs", sa.column("id", sa.Integer), sa.column("study_id", sa.Integer),
    sa.column("metrics", sa.JSON), sa.column("options", sa.JSON),
    sa.column("status", sa.String), sa.column("progress_done", sa.Integer),
    sa.column("progress_total", sa.Integer), sa.column("message", sa.Text),
    sa.column("error", sa.Text), sa.column("worker_id", sa.String),
    sa.column("attempts", sa.Integer), sa.column("heartbeat_at", sa.DateTime(timezone=True)),
    sa.column("created_at", sa.DateTime(timezone=True)),
    sa.column("started_at", sa.DateTime(timezone=True)),
    sa.column("finished_at", sa.DateTime(timezone=True)),
)


def upgrade() -> None:
    jobs = op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=True),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("device", sa.String(length=32), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("progress_done", sa.Integer(), nullable=False),
        sa.Column("progress_total", sa.Integer(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("created_by", sa.String(length=64), nullable=False),
        sa.Column("worker_id", sa.String(length=128), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_jobs_study_id", "jobs", ["study_id"])
    op.create_index("ix_jobs_status_kind", "jobs", ["status", "kind"])
    op.create_table(
        "workers",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("host", sa.String(length=128), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("device", sa.String(length=32), nullable=False),
        sa.Column("kinds", sa.JSON(), nullable=False),
        sa.Column("current_job_id", sa.Integer(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("stopped_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    conn = op.get_bind()
    rows = conn.execute(sa.select(_OLD).order_by(_OLD.c.id)).mappings().all()
    if rows:
        conn.execute(sa.insert(jobs), [
            {"id": r["id"], "kind": "score", "study_id": r["study_id"],
             "params": {"metrics": list(r["metrics"] or []),
                        "options": dict(r["options"] or {})},
             "device": None, "status": r["status"], "progress_done": r["progress_done"],
             "progress_total": r["progress_total"], "message": r["message"] or "",
             "result": None, "error": r["error"], "cancel_requested": False,
             "created_by": "", "worker_id": r["worker_id"], "attempts": r["attempts"] or 0,
             "heartbeat_at": r["heartbeat_at"], "created_at": r["created_at"],
             "started_at": r["started_at"], "finished_at": r["finished_at"]}
            for r in rows])
        if conn.dialect.name == "postgresql":  # explicit ids do not advance the sequence
            conn.execute(sa.text(
                "SELECT setval(pg_get_serial_sequence('jobs', 'id'), (SELECT max(id) FROM jobs))"))
    op.drop_table("scoring_jobs")


def downgrade() -> None:
    raise NotImplementedError("migration 0004 cannot be downgraded")
