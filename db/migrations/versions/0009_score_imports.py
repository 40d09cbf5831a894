"""scores computed elsewhere, imported per study

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-28

* ``score_imports``: one row per imported metric key and file (study, key, direction,
  description, source, file name and sha256, pairs with and without a value, when and by
  whom). The values themselves are ``metric_scores`` rows of family ``external``; nothing
  existing changes.
"""
import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "score_imports",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("signature", sa.Text(), nullable=False),
        sa.Column("signature_hash", sa.String(length=32), nullable=False),
        sa.Column("higher_is_better", sa.Boolean(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("file_name", sa.String(length=255), nullable=False),
        sa.Column("file_sha256", sa.String(length=64), nullable=False),
        sa.Column("n_pairs", sa.Integer(), nullable=False),
        sa.Column("n_missing", sa.Integer(), nullable=False),
        sa.Column("imported_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("imported_by", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_score_imports_study_key", "score_imports", ["study_id", "key"])


def downgrade() -> None:
    op.drop_index("ix_score_imports_study_key", table_name="score_imports")
    op.drop_table("score_imports")
