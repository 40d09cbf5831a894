"""Migration 0009 (``score_imports``) from 0008 on SQLite: data kept, schema as the models,
and back down to 0008."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext

from radconcord.db.models import Base, ScoreImport
from radconcord.db.session import MIGRATIONS_DIR, make_engine, make_sessionmaker, upgrade


def test_0009_adds_score_imports_and_keeps_scores(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'old.db'}")
    upgrade(engine, "0008")
    now = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    with engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO studies (id, name, description, scheme, raters_per_pair, seed, "
            "status, provenance, created_at, settings) VALUES (1, 's', '', 'rexval', 1, 0, "
            "'open', '{}', :now, '{}')"), {"now": now})
        conn.execute(sa.text(
            "INSERT INTO metric_scores (id, input_hash, family, key, signature_hash, signature,"
            " value, device, seconds, created_at) VALUES (1, 'h', 'bleu', 'bleu4', 'x', "
            "'bleu4|v1', 0.5, 'cpu', 0, :now)"), {"now": now})
    assert "score_imports" not in sa.inspect(engine).get_table_names()

    upgrade(engine, "0009")
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar() == "0009"
        assert conn.execute(sa.text("SELECT key, value FROM metric_scores")).all() == [
            ("bleu4", 0.5)]
    # Later migrations (0010: image kinds) on top; the head schema is the models'.
    upgrade(engine)
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    with make_sessionmaker(engine).begin() as s:
        s.add(ScoreImport(study_id=1, key="ext", signature="external:ext|sha256:" + "0" * 64,
                          signature_hash="abc", higher_is_better=False, file_name="v.csv",
                          file_sha256="0" * 64, n_pairs=3, n_missing=1, imported_by="lead"))
    with make_sessionmaker(engine).begin() as s:
        row = s.scalars(sa.select(ScoreImport)).one()
        assert (row.key, row.higher_is_better, row.description, row.source, row.n_missing,
                row.imported_at is not None) == ("ext", False, "", "", 1, True)
    assert {ix["name"] for ix in sa.inspect(engine).get_indexes("score_imports")} == {
        "ix_score_imports_study_key"}

    # Deleting the study deletes its imports (the values stay in metric_scores).
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM studies WHERE id = 1"))
        assert conn.execute(sa.text("SELECT count(*) FROM score_imports")).scalar() == 0

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0008")
    assert "score_imports" not in sa.inspect(engine).get_table_names()
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM metric_scores")).scalar() == 1
    engine.dispose()
