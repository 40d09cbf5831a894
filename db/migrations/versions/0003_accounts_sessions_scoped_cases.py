"""accounts, database sessions, login throttling; cases scoped by study

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24

Cases used to be global (``external_id`` unique), so a second study importing a case id
that another study used changed the first study's images. Each case now belongs to one
study. A case shared by pairs of several studies is split here: the first study keeps it,
every other study gets its own copy of the case, its images (same files: stored images are
content-addressed and never modified) and the reports its pairs use.
"""
from collections import defaultdict

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


# Typed, so that the JSON column round-trips on both databases.
_IMAGES = sa.table(
    "images", sa.column("id", sa.Integer), sa.column("case_id", sa.Integer),
    sa.column("path", sa.String), sa.column("format", sa.String), sa.column("view", sa.String),
    sa.column("sha256", sa.String), sa.column("width", sa.Integer),
    sa.column("height", sa.Integer), sa.column("meta", sa.JSON),
)


def _split_shared_cases(conn: sa.Connection) -> None:
    rows = conn.execute(
        sa.text("SELECT DISTINCT case_id, study_id FROM pairs ORDER BY case_id, study_id")
    ).all()
    studies_of: dict[int, list[int]] = defaultdict(list)
    for case_id, study_id in rows:
        studies_of[case_id].append(study_id)
    for case_id, study_ids in studies_of.items():
        conn.execute(sa.text("UPDATE cases SET study_id = :s WHERE id = :c"),
                     {"s": study_ids[0], "c": case_id})
        if len(study_ids) == 1:
            continue
        case = conn.execute(sa.text("SELECT external_id, created_at FROM cases WHERE id = :c"),
                            {"c": case_id}).one()
        images = conn.execute(
            sa.select(*[c for c in _IMAGES.c if c.name != "id"])
            .where(_IMAGES.c.case_id == case_id).order_by(_IMAGES.c.id)).mappings().all()
        for study_id in study_ids[1:]:
            new_case = conn.execute(
                sa.text("INSERT INTO cases (external_id, created_at, study_id) "
                        "VALUES (:e, :t, :s) RETURNING id"),
                {"e": case.external_id, "t": case.created_at, "s": study_id}).scalar_one()
            if images:
                conn.execute(sa.insert(_IMAGES), [{**img, "case_id": new_case}
                                                  for img in images])
            used = conn.execute(
                sa.text("SELECT reference_id, candidate_id FROM pairs "
                        "WHERE case_id = :c AND study_id = :s"),
                {"c": case_id, "s": study_id}).all()
            report_map: dict[int, int] = {}
            for report_id in sorted({r for row in used for r in row}):
                rep = conn.execute(
                    sa.text("SELECT role, source, text, created_at FROM reports WHERE id = :r"),
                    {"r": report_id}).one()
                report_map[report_id] = conn.execute(
                    sa.text("INSERT INTO reports (case_id, role, source, text, created_at) "
                            "VALUES (:c, :role, :src, :txt, :t) RETURNING id"),
                    {"c": new_case, "role": rep.role, "src": rep.source, "txt": rep.text,
                     "t": rep.created_at}).scalar_one()
            for old_ref, old_cand in set(used):
                conn.execute(
                    sa.text("UPDATE pairs SET case_id = :nc, reference_id = :nr, "
                            "candidate_id = :ncand WHERE case_id = :c AND study_id = :s "
                            "AND reference_id = :r AND candidate_id = :cand"),
                    {"nc": new_case, "nr": report_map[old_ref], "ncand": report_map[old_cand],
                     "c": case_id, "s": study_id, "r": old_ref, "cand": old_cand})


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("must_change_password", sa.Boolean(), nullable=False,
                                   server_default=sa.false()))
        batch.add_column(sa.Column("password_changed_at", sa.DateTime(timezone=True),
                                   nullable=True))

    op.create_table(
        "auth_sessions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("token_sha256", sa.String(length=64), nullable=True),
        sa.Column("ticket_sha256", sa.String(length=64), nullable=True),
        sa.Column("ticket_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("credential_stamp", sa.String(length=64), nullable=False),
        sa.Column("client", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_reason", sa.String(length=32), nullable=True),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_sha256"),
        sa.UniqueConstraint("ticket_sha256"),
    )
    op.create_index("ix_auth_sessions_user_id", "auth_sessions", ["user_id"])
    op.create_table(
        "login_throttles",
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("last_failure_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("locked_until", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("key"),
    )

    conn = op.get_bind()
    # The global unique constraint on external_id has no name in 0001: PostgreSQL calls it
    # cases_external_id_key, SQLite reflects it unnamed (named here by the convention). It
    # goes before the split, which creates cases with the same external id.
    names = [u["name"] for u in sa.inspect(conn).get_unique_constraints("cases")
             if u["column_names"] == ["external_id"]]
    old_name = names[0] if names and names[0] else "uq_cases_external_id"
    with op.batch_alter_table(
        "cases", naming_convention={"uq": "uq_%(table_name)s_%(column_0_name)s"}
    ) as batch:
        batch.add_column(sa.Column("study_id", sa.Integer(), nullable=True))
        batch.drop_constraint(old_name, type_="unique")
    _split_shared_cases(conn)
    with op.batch_alter_table("cases") as batch:
        batch.create_unique_constraint("uq_cases_study_external", ["study_id", "external_id"])
        batch.create_foreign_key("fk_cases_study_id_studies", "studies", ["study_id"], ["id"],
                                 ondelete="CASCADE")
        batch.create_index("ix_cases_study_id", ["study_id"])


def downgrade() -> None:
    # Splitting shared cases cannot be undone; restoring a global unique external_id would
    # fail on a database where two studies now hold the same case id.
    raise NotImplementedError("migration 0003 cannot be downgraded")
