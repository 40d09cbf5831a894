"""rating quality control and annotation modes

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25

* ``pairs.kind`` (``study`` | ``training`` | ``repeat``), ``pairs.repeat_of_id`` and
  ``pairs.expert`` (a training item's reference counts): calibration items and hidden
  intra-rater repeats are pairs of the study that no analysis of study ratings counts. The
  triplet constraint now includes ``kind`` so a repeat may show the same texts again.
* ``assignments.flagged_at`` / ``flag_note``: "I'm unsure / flag this pair".
* ``study_roles``: per-study adjudicators.
* ``adjudications``: consensus counts with a note.
* ``error_records``: per-error records (candidate spans, omissions) the counts derive from.
* ``comparisons`` / ``judgements``: pairwise mode (which is better, 1-5 ratings).
"""
import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pairs") as batch:
        batch.add_column(sa.Column("kind", sa.String(length=16), nullable=False,
                                   server_default="study"))
        batch.add_column(sa.Column("repeat_of_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("expert", sa.JSON(), nullable=True))
        batch.drop_constraint("uq_pairs_triplet", type_="unique")
        batch.create_unique_constraint(
            "uq_pairs_triplet", ["study_id", "reference_id", "candidate_id", "kind"])
        batch.create_check_constraint("ck_pairs_kind", "kind IN ('study', 'training', 'repeat')")
        batch.create_foreign_key("fk_pairs_repeat_of", "pairs", ["repeat_of_id"], ["id"],
                                 ondelete="CASCADE")
        batch.create_index("ix_pairs_repeat_of_id", ["repeat_of_id"])
    with op.batch_alter_table("assignments") as batch:
        batch.add_column(sa.Column("flagged_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("flag_note", sa.Text(), nullable=True))
    op.create_table(
        "study_roles",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("study_id", "user_id", "role", name="uq_study_roles"),
        sa.CheckConstraint("role IN ('adjudicator')", name="ck_study_roles_role"),
    )
    op.create_index("ix_study_roles_study_id", "study_roles", ["study_id"])
    op.create_index("ix_study_roles_user_id", "study_roles", ["user_id"])
    op.create_table(
        "adjudications",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("pair_id", sa.Integer(), nullable=False),
        sa.Column("adjudicator_id", sa.Integer(), nullable=False),
        sa.Column("counts", sa.JSON(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["pair_id"], ["pairs.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["adjudicator_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("pair_id"),
    )
    op.create_table(
        "error_records",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("rater_id", sa.Integer(), nullable=False),
        sa.Column("pair_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("category", sa.Integer(), nullable=False),
        sa.Column("significant", sa.Boolean(), nullable=False),
        sa.Column("candidate_start", sa.Integer(), nullable=True),
        sa.Column("candidate_end", sa.Integer(), nullable=True),
        sa.Column("candidate_text", sa.Text(), nullable=True),
        sa.Column("reference_start", sa.Integer(), nullable=True),
        sa.Column("reference_end", sa.Integer(), nullable=True),
        sa.Column("reference_text", sa.Text(), nullable=True),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("details", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["rater_id"], ["users.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["pair_id"], ["pairs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.CheckConstraint("category BETWEEN 1 AND 6", name="ck_error_records_category"),
        sa.CheckConstraint("kind IN ('span', 'omission')", name="ck_error_records_kind"),
    )
    op.create_index("ix_error_records_rater_pair", "error_records", ["rater_id", "pair_id"])
    op.create_index("ix_error_records_pair_id", "error_records", ["pair_id"])
    op.create_table(
        "comparisons",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("pair_a_id", sa.Integer(), nullable=False),
        sa.Column("pair_b_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("opaque_id", sa.String(length=32), nullable=False),
        sa.Column("meta", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["pair_a_id"], ["pairs.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["pair_b_id"], ["pairs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("opaque_id"),
        sa.UniqueConstraint("study_id", "pair_a_id", "pair_b_id", name="uq_comparisons_pairs"),
        sa.UniqueConstraint("study_id", "position", name="uq_comparisons_position"),
    )
    op.create_index("ix_comparisons_study_id", "comparisons", ["study_id"])
    op.create_table(
        "judgements",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("rater_id", sa.Integer(), nullable=False),
        sa.Column("comparison_id", sa.Integer(), nullable=False),
        sa.Column("order_index", sa.Integer(), nullable=False),
        sa.Column("preference", sa.String(length=8), nullable=True),
        sa.Column("rating_a", sa.Integer(), nullable=True),
        sa.Column("rating_b", sa.Integer(), nullable=True),
        sa.Column("details", sa.JSON(), nullable=True),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["rater_id"], ["users.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["comparison_id"], ["comparisons.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("rater_id", "comparison_id", name="uq_judgements_rater_comparison"),
        sa.CheckConstraint("preference IS NULL OR preference IN ('A', 'B', 'tie')",
                           name="ck_judgements_preference"),
        sa.CheckConstraint("rating_a IS NULL OR rating_a BETWEEN 1 AND 5",
                           name="ck_judgements_rating_a"),
        sa.CheckConstraint("rating_b IS NULL OR rating_b BETWEEN 1 AND 5",
                           name="ck_judgements_rating_b"),
    )
    op.create_index("ix_judgements_rater_order", "judgements", ["rater_id", "order_index"])
    op.create_index("ix_judgements_comparison_id", "judgements", ["comparison_id"])


def downgrade() -> None:
    op.drop_table("judgements")
    op.drop_table("comparisons")
    op.drop_table("error_records")
    op.drop_table("adjudications")
    op.drop_table("study_roles")
    with op.batch_alter_table("assignments") as batch:
        batch.drop_column("flag_note")
        batch.drop_column("flagged_at")
    with op.batch_alter_table("pairs") as batch:
        batch.drop_index("ix_pairs_repeat_of_id")
        batch.drop_constraint("fk_pairs_repeat_of", type_="foreignkey")
        batch.drop_constraint("ck_pairs_kind", type_="check")
        batch.drop_constraint("uq_pairs_triplet", type_="unique")
        batch.create_unique_constraint(
            "uq_pairs_triplet", ["study_id", "reference_id", "candidate_id"])
        batch.drop_column("expert")
        batch.drop_column("repeat_of_id")
        batch.drop_column("kind")
