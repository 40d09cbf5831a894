"""Demo seeding: accounts, the bundled demo study and its assignment, idempotently.

Demo credentials (documented in the README, hence public)::

    admin   / radconcord-admin    (admin)
    rater1  / radconcord-rater1   (rater)
    rater2  / radconcord-rater2   (rater)

Because these passwords are published, the web app seeds the demo only for a server that
listens on loopback alone (``webapp/state.py``: ``server.address`` 127.0.0.1, localhost or
::1, and ``RADCONCORD_SEED_DEMO`` not 0), and ``backend.services.accounts.sessions.login`` refuses
any of them from a client that is not this machine
(:func:`backend.services.accounts.demo_accounts.published_passwords`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from radconcord.backend.services.accounts import auth
from radconcord.backend.services.accounts.demo_accounts import DEMO_RATERS, DEMO_USERS
from radconcord.backend.services.study_admin import assignment, demo_ratings
from radconcord.backend.types import Actor
from radconcord.db.models import Study, User
from radconcord.db.session import Database, upgrade

log = logging.getLogger(__name__)

DEMO_STUDY = "Demo study"
DEMO_SEED = 0
#: The second demo study: one SYNTHETIC chest CT volume (``backend/datasets/demo_ct.py``).
#: Its name sorts after the chest study's, so a rater's screen still opens on that one.
DEMO_CT_STUDY = "Demo study (CT)"


@dataclass(frozen=True)
class SeedResult:
    """What ``seed_demo`` created (empty/zero when everything was already there)."""

    created_users: tuple[str, ...]
    study_name: str
    study_created: bool
    n_pairs: int
    assignments_created: int
    # Completed assignments of the constructed raters ("demo ratings (constructed)").
    constructed_assignments: int = 0


def import_demo(db: Database, actor: Actor, *, study_name: str = DEMO_STUDY,
                raters_per_pair: int = 1, seed: int = 0) -> Any:
    """Import the bundled demo study (admin only); returns the ``ImportSummary``.

    Unlike :func:`seed_demo` it creates no accounts and no assignments, and it records the
    demo assets' description and case notes as the study's provenance.

    Args:
        db: The study database.
        actor: Must be an admin.
        study_name: Name of the new study.
        raters_per_pair: Raters each pair should get.
        seed: Assignment seed recorded on the study.
    """
    # Imported lazily: the importer and the demo assets are only needed when importing.
    from radconcord.backend.datasets.demo import demo_cases, demo_description, demo_notes
    from radconcord.backend.services.transfer.imports import import_cases

    return import_cases(
        db,
        actor,
        study_name=study_name,
        cases=demo_cases(),
        description=demo_description(),
        raters_per_pair=raters_per_pair,
        seed=seed,
        provenance={"kind": "demo", "source": "assets/demo/cases.json",
                    "notes": demo_notes()},
    )


def ensure_database(db: Database) -> str | None:
    """Bring the schema to the latest migration (idempotent) and return its revision.

    ``Database()`` already migrates on construction; this is for ``init-db`` and for databases
    opened with ``migrate=False``.
    """
    from sqlalchemy import text

    upgrade(db.engine)
    with db.engine.connect() as conn:
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def seed_demo(db: Database) -> SeedResult:
    """Create the demo accounts and study, assign both raters to every pair, and add the
    constructed raters' completed counts ("demo ratings (constructed)", see
    ``backend/services/study_admin/demo_ratings.py``).

    Safe to run again: existing accounts (and their passwords) and an existing demo study are
    left alone; only missing assignments are added, and constructed ratings only once.
    """
    system = Actor.system()
    with db.begin() as s:
        existing = set(s.scalars(select(User.username)))
        study_exists = s.scalar(select(Study.id).where(Study.name == DEMO_STUDY)) is not None
    created = []
    for username, password, role, display in DEMO_USERS:
        if username not in existing:
            auth.create_user(
                db, system, username=username, password=password, role=role, display_name=display
            )
            created.append(username)
    if not study_exists:
        # Imported lazily: the importer and the demo assets are only needed on first seeding.
        from radconcord.backend.datasets.demo import demo_cases
        from radconcord.backend.services.transfer.imports import import_cases

        import_cases(
            db,
            system,
            study_name=DEMO_STUDY,
            cases=demo_cases(),
            description="Demo chest X-ray reports written for RadConcord (not patient data).",
            raters_per_pair=len(DEMO_RATERS),
            seed=DEMO_SEED,
        )
    summary = assignment.assign_raters(
        db,
        system,
        study_name=DEMO_STUDY,
        rater_usernames=list(DEMO_RATERS),
        raters_per_pair=len(DEMO_RATERS),
        seed=DEMO_SEED,
    )
    # After the demo raters' assignment (their screens keep their open pairs): the
    # constructed raters' completed counts, so the dashboard, QC and the report show numbers
    # at once, labelled "demo ratings (constructed)" (study_admin/demo_ratings.py).
    constructed = demo_ratings.add_constructed_ratings(db, system, study_name=DEMO_STUDY)
    log.info("demo seeded: users %s, study created %s", created, not study_exists)
    return SeedResult(
        created_users=tuple(created),
        study_name=DEMO_STUDY,
        study_created=not study_exists,
        n_pairs=summary.n_pairs,
        assignments_created=summary.created,
        constructed_assignments=constructed,
    )


def seed_ct_demo(db: Database) -> SeedResult:
    """Import the demo CT study (one synthetic chest CT phantom, three candidates) and assign
    both demo raters to every pair; wherever the chest demo is seeded, after it.

    The phantom is written into a staging folder and imported through the import service
    like any NIfTI volume (de-identified, stored under the data folder's ``volumes/``); the
    staging folder is removed afterwards. Safe to run again: an existing study is left alone
    and only missing assignments are added. The demo accounts must exist
    (:func:`seed_demo` creates them).
    """
    import tempfile
    from pathlib import Path

    system = Actor.system()
    with db.begin() as s:
        study_exists = s.scalar(select(Study.id).where(Study.name == DEMO_CT_STUDY)) is not None
    if not study_exists:
        # Imported lazily: the importer and the phantom are only needed on first seeding.
        from radconcord.backend.datasets import demo_ct
        from radconcord.backend.services.transfer.imports import import_cases

        with tempfile.TemporaryDirectory(prefix="radconcord-ct-demo-") as tmp:
            import_cases(
                db,
                system,
                study_name=DEMO_CT_STUDY,
                cases=[demo_ct.ct_demo_case(Path(tmp))],
                description=demo_ct.DESCRIPTION,
                raters_per_pair=len(DEMO_RATERS),
                seed=DEMO_SEED,
                provenance={"kind": "demo", "source": "backend/datasets/demo_ct.py",
                            "synthetic": True, "notes": {demo_ct.CASE_ID: demo_ct.NOTES},
                            "written_errors": demo_ct.ct_demo_errors()},
            )
    summary = assignment.assign_raters(
        db,
        system,
        study_name=DEMO_CT_STUDY,
        rater_usernames=list(DEMO_RATERS),
        raters_per_pair=len(DEMO_RATERS),
        seed=DEMO_SEED,
    )
    log.info("demo CT study seeded: created %s", not study_exists)
    return SeedResult(
        created_users=(),
        study_name=DEMO_CT_STUDY,
        study_created=not study_exists,
        n_pairs=summary.n_pairs,
        assignments_created=summary.created,
    )
