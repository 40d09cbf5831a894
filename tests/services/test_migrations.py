"""The Alembic migrations build exactly the schema the models describe, on both databases."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from db.models import Base


def test_migrated_schema_matches_the_models(any_db):
    """``any_db`` was created by running every migration (``Database(migrate=True)``)."""
    with any_db.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []
