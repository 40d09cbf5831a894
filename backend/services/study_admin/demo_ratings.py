"""Constructed demo ratings: the seeded demo study's answers before anyone has rated.

So that a fresh start shows correlations, a QC table and the HTML report at once, the demo
study is seeded with the counts of three constructed raters (``CONSTRUCTED_RATERS``): the
errors each candidate was written with (``assets/demo/constructed_errors.json``, written by
us from the candidates' texts, not by radiologists) plus the seeded noise model of
:class:`backend.datasets.demo.NoiseModel`. They are labelled "demo ratings (constructed)"
wherever they appear: the study's description and provenance (``constructed_ratings``: the
label, the raters, the source file, the noise model) carry the label into the Studies page,
the HTML report and the export manifest, and :func:`ratings_note` is the flag the dashboard
and QC pages show.

The constructed raters are accounts of their own, inactive and without a usable password:
nobody logs in as them and nobody assigns them more work. The demo raters ``rater1`` and
``rater2`` keep their own open assignments, so the rating screens are not empty.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import insert, select

from radconcord.backend import clock
from radconcord.backend.datasets.demo import (
    CONSTRUCTED_KEY,
    CONSTRUCTED_LABEL,
    NoiseModel,
    constructed_counts,
    constructed_errors,
)
from radconcord.backend.errors import InvalidInput, require_admin
from radconcord.backend.services.repo import get_study
from radconcord.backend.types import Actor
from radconcord.db.models import PAIR_STUDY, Assignment, Case, Pair, Rating, RatingEvent, User
from radconcord.db.session import Database

log = logging.getLogger(__name__)

#: (username, display name) of the constructed raters.
CONSTRUCTED_RATERS: tuple[tuple[str, str], ...] = (
    ("constructed_a", "Constructed rater A (demo ratings, not a person)"),
    ("constructed_b", "Constructed rater B (demo ratings, not a person)"),
    ("constructed_c", "Constructed rater C (demo ratings, not a person)"),
)
#: Appended to the demo study's description.
DESCRIPTION_NOTE = (
    f" Contains {CONSTRUCTED_LABEL}: three constructed raters whose counts are the errors "
    "the candidates were written with plus seeded noise (assets/demo/README.md), not "
    "radiologists' ratings.")


def note_of(provenance: dict[str, Any] | None) -> str | None:
    """The label of a study whose provenance records constructed ratings, else ``None``."""
    info = (provenance or {}).get(CONSTRUCTED_KEY)
    if not isinstance(info, dict):
        return None
    raters = ", ".join(info.get("raters") or ())
    return (f"This study holds {CONSTRUCTED_LABEL}: {raters} are not radiologists; their "
            "counts are the errors each candidate was written with plus seeded noise "
            "(assets/demo/README.md). Rate as rater1/rater2 to add real ones.")


def constructed_raters(provenance: dict[str, Any] | None) -> frozenset[str]:
    """Usernames whose ratings in a study are constructed (not entered in this app)."""
    info = (provenance or {}).get(CONSTRUCTED_KEY)
    if not isinstance(info, dict):
        return frozenset()
    return frozenset(str(r) for r in info.get("raters") or ())


def ratings_note(db: Database, actor: Actor, *, study_name: str) -> str | None:
    """The "demo ratings (constructed)" label of a study, or ``None`` (admin only)."""
    require_admin(actor)
    with db.read() as s:
        return note_of(get_study(s, study_name).provenance)


def add_constructed_ratings(db: Database, actor: Actor, *, study_name: str,
                            model: NoiseModel = NoiseModel()) -> int:
    """Give every study pair of the demo study the counts of the constructed raters.

    Idempotent: a study that already records them is left alone (returns 0). Each
    constructed rater gets a completed assignment per pair (after the demo raters' own, so
    their order is unchanged), 12 rating cells and an ``import`` rating event per cell.

    Returns:
        The number of completed constructed assignments created.

    Raises:
        PermissionDenied: not an admin (or the system).
        InvalidInput: a study pair whose (case, source) has no written errors.
    """
    from radconcord.backend.services.transfer.imports import unusable_hashes

    require_admin(actor)
    errors = constructed_errors()
    with db.read() as s:
        study = get_study(s, study_name)
        if note_of(study.provenance) is not None:
            return 0
        existing = set(s.scalars(select(User.username).where(
            User.username.in_([u for u, _ in CONSTRUCTED_RATERS]))))
    # Hashing is slow by design: outside the write transaction (SQLite's lock).
    hashes = unusable_hashes([i for i, (u, _) in enumerate(CONSTRUCTED_RATERS)
                              if u not in existing])
    now = clock.utcnow()
    with db.begin() as s:
        study = get_study(s, study_name, for_update=True)
        if note_of(study.provenance) is not None:
            return 0
        ids: dict[str, int] = {}
        for index, (username, display) in enumerate(CONSTRUCTED_RATERS):
            user = s.scalar(select(User).where(User.username == username))
            if user is None:
                # Inactive, random password nobody keeps: attribution only.
                user = User(username=username, display_name=display, role="rater",
                            password_hash=hashes[index], active=False)
                s.add(user)
                s.flush()
            elif user.role != "rater":
                raise InvalidInput(f"user {username!r} exists and is not a rater")
            ids[username] = user.id
        pairs = s.execute(
            select(Pair.id, Pair.position, Pair.source, Pair.case_id)
            .where(Pair.study_id == study.id, Pair.kind == PAIR_STUDY)
            .order_by(Pair.position)).all()
        external = dict(s.execute(select(Case.id, Case.external_id).where(
            Case.id.in_({p.case_id for p in pairs}))).all())
        assignments, ratings, events = [], [], []
        for username, rater_id in ids.items():
            for order, pair in enumerate(pairs):
                key = (str(external[pair.case_id]), pair.source)
                if key not in errors:
                    raise InvalidInput(f"constructed demo errors: no entry for {key[0]}/"
                                       f"{key[1]}")
                assignments.append({
                    "study_id": study.id, "rater_id": rater_id, "pair_id": pair.id,
                    "order_index": order, "completed_at": now, "active_seconds": 0.0})
                counts = constructed_counts(errors[key], rater=username, case_id=key[0],
                                            source=key[1], model=model)
                for (category, significant), count in sorted(counts.items()):
                    ratings.append({
                        "rater_id": rater_id, "pair_id": pair.id, "category": category,
                        "significant": significant, "count": count, "created_at": now,
                        "updated_at": now})
                    events.append({
                        "rater_id": rater_id, "pair_id": pair.id, "action": "import",
                        "category": category, "significant": significant, "old_count": None,
                        "new_count": count, "at": now})
        for model_cls, rows in ((Assignment, assignments), (Rating, ratings),
                                (RatingEvent, events)):
            if rows:
                s.execute(insert(model_cls), rows)
        # Every pair now has the demo raters and the constructed ones.
        raters = {r for (r,) in s.execute(select(Assignment.rater_id).where(
            Assignment.study_id == study.id)).all()}
        study.raters_per_pair = max(study.raters_per_pair, len(raters))
        study.description = (study.description or "").rstrip() + DESCRIPTION_NOTE
        study.provenance = {
            **(study.provenance or {}),
            "kind": (study.provenance or {}).get("kind") or "demo",
            CONSTRUCTED_KEY: {
                "label": CONSTRUCTED_LABEL,
                "raters": list(ids),
                "source": "assets/demo/constructed_errors.json",
                "written_by": "the RadConcord developers, from the candidates' texts "
                              "(not radiologists)",
                "noise_model": model.as_dict(),
            },
        }
    log.info("demo study %s: %d constructed assignments", study_name, len(assignments))
    return len(assignments)
