"""Alembic environment: runs on the connection handed over by ``db.session.upgrade``."""

from __future__ import annotations

from alembic import context

from radconcord.backend import config
from radconcord.db.models import Base
from radconcord.db.session import make_engine

target_metadata = Base.metadata


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None:
        url = context.config.get_main_option("sqlalchemy.url") or config.database_url()
        with make_engine(url).connect() as conn:
            context.configure(connection=conn, target_metadata=target_metadata,
                              render_as_batch=True)
            with context.begin_transaction():
                context.run_migrations()
        return
    context.configure(connection=connection, target_metadata=target_metadata,
                      render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


run_migrations_online()
