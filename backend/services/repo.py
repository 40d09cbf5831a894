"""Lookups shared by services; they take the caller's session and never open one."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from radconcord.backend.errors import NotFound
from radconcord.db.models import STUDY_STAGING, Study


def get_study(s: Session, name: str, *, for_update: bool = False) -> Study:
    """The study called ``name``.

    Args:
        s: The caller's session.
        name: Study name.
        for_update: Lock the row (PostgreSQL) for a read-modify-write.

    Raises:
        NotFound: no such study (a study still being imported does not exist yet).
    """
    query = select(Study).where(Study.name == name, Study.status != STUDY_STAGING)
    if for_update:
        query = query.with_for_update()
    study = s.scalar(query)
    if study is None:
        raise NotFound(f"no study named {name!r}")
    return study
