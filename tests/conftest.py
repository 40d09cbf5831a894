"""Shared fixtures: a fresh database per test, on SQLite and on a real PostgreSQL server.

- ``db``: a migrated SQLite ``Database`` in ``tmp_path`` (``RADCONCORD_DATA_DIR`` points there).
- ``pg_url``: URL of the maintenance database of a PostgreSQL server started once per session
  by ``tests/pgserver.py``; fails (never skips) when the server binaries are missing.
- ``any_db``: parametrized over ``sqlite`` and ``postgres`` (a new database per test).
- ``make_study``: inserts a study with N reference/candidate pairs straight through the models,
  for tests that need pairs without going through the importers.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from radconcord.backend.scoring.hashing import input_hash
from radconcord.db.session import Database
from tests.pgserver import PgServer, PgServerError


@pytest.fixture
def db(tmp_path, monkeypatch) -> Iterator[Database]:
    """A fresh, migrated SQLite database in ``tmp_path``."""
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    database = Database(f"sqlite:///{tmp_path / 'radconcord.db'}")
    yield database
    database.dispose()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One PostgreSQL server for the whole session."""
    try:
        server = PgServer().start()
    except PgServerError as exc:
        pytest.fail(f"PostgreSQL tests need a local server: {exc}", pytrace=False)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def pg_url(pg_server: PgServer) -> str:
    """URL of the server's ``postgres`` database (create per-test databases from it)."""
    return pg_server.url("postgres")


PG_TEMPLATE = "radconcord_migrated"


@pytest.fixture(scope="session")
def pg_template(pg_server: PgServer) -> str:
    """Name of a database migrated once, that per-test databases are copied from."""
    database = Database(pg_server.create_database(PG_TEMPLATE))
    database.dispose()  # CREATE DATABASE ... TEMPLATE needs the template to be idle
    return PG_TEMPLATE


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def any_db(request, tmp_path, monkeypatch) -> Iterator[Database]:
    """A fresh, migrated database on SQLite and, in a second run, on PostgreSQL."""
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    if request.param == "sqlite":
        database = Database(f"sqlite:///{tmp_path / 'radconcord.db'}")
        yield database
        database.dispose()
        return
    server: PgServer = request.getfixturevalue("pg_server")
    template: str = request.getfixturevalue("pg_template")
    name = f"t_{uuid.uuid4().hex[:16]}"
    # Copying a migrated template is much faster than migrating each new database.
    database = Database(server.create_database(name, template=template))
    yield database
    database.dispose()
    server.drop_database(name)


@pytest.fixture
def make_study() -> Callable[..., list[str]]:
    """Factory ``make_study(db, name, n_pairs, sources=("gen-a", "gen-b"))`` -> opaque ids.

    Each case gets one reference and one candidate per source (pairs cycle through the
    sources); the input hash follows the project's definition (backend/scoring/hashing.py).
    """
    from radconcord.db.models import Case, Pair, Report, Study

    def _make(
        database: Database, name: str, n_pairs: int, sources: tuple[str, ...] = ("gen-a", "gen-b")
    ) -> list[str]:
        opaque: list[str] = []
        with database.begin() as s:
            study = Study(name=name, description=f"{name} (test)", status="open")
            s.add(study)
            s.flush()
            for i in range(n_pairs):
                case = Case(external_id=f"{name}-case-{i}", study_id=study.id)
                s.add(case)
                s.flush()
                ref_text = f"Reference {i}: no focal consolidation."
                cand_text = f"Candidate {i}: small left effusion."
                ref = Report(case_id=case.id, role="reference", text=ref_text)
                source = sources[i % len(sources)]
                cand = Report(case_id=case.id, role="candidate", source=source, text=cand_text)
                s.add_all([ref, cand])
                s.flush()
                digest = input_hash(ref_text, cand_text)
                oid = uuid.uuid4().hex[:12]
                s.add(
                    Pair(
                        study_id=study.id,
                        case_id=case.id,
                        reference_id=ref.id,
                        candidate_id=cand.id,
                        source=source,
                        opaque_id=oid,
                        position=i,
                        input_hash=digest,
                    )
                )
                opaque.append(oid)
        return opaque

    return _make


@pytest.fixture
def fast_password_hashing(monkeypatch) -> None:
    """Cheap argon2 parameters for tests that create many accounts (real argon2id still)."""
    from argon2 import PasswordHasher

    from radconcord.backend.services.accounts import auth

    cheap = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
    monkeypatch.setattr(auth, "_hasher", cheap)
