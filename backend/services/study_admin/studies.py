"""Study listings and lifecycle: admins see every study with counts and sources (archived
ones on request), raters only their own; admins archive, unarchive and delete studies.

Lifecycle (admin only):

- **archive**: status ``archived``. The study is kept whole but hidden from raters (with
  ``archived`` in ``study_status.HIDDEN_STATUSES``) and from the default listings every admin page
  picks studies from (Dashboard, Assign, Export, Metrics, ...); :func:`list_studies` with
  ``archived=True`` lists them. Each change is recorded in the study's provenance
  (``lifecycle``: action, time, admin, previous status).
- **unarchive**: back to ``closed`` (raters see it read-only until an admin reopens it).
- **delete**: removes the study with its pairs, assignments, ratings, activity and jobs
  (and the image files no other study uses). A study with any rating (an error count, or
  a pair marked done with no error) is first exported
  (JSONL: pairs, ratings, images and manifest) into ``<data dir>/deleted-studies/``; if the
  export fails nothing is deleted. The study is hidden (archived) before the export, so no
  rating can change after it, then staged (``importing``) and deleted in short
  transactions; a delete cut short is finished by ``imports.cleanup_stale_imports``.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from radconcord.backend import clock, config
from radconcord.backend.errors import InvalidInput, require_admin
from radconcord.backend.services.annotation.rating import RaterStudy, rater_studies
from radconcord.backend.services.repo import get_study
from radconcord.backend.services.study_admin.study_settings import PAIRWISE, effective
from radconcord.backend.services.study_admin.study_status import ARCHIVED
from radconcord.backend.types import Actor
from radconcord.db.models import (
    PAIR_STUDY,
    STUDY_STAGING,
    Assignment,
    Comparison,
    Job,
    Judgement,
    Pair,
    Rating,
    Study,
)
from radconcord.db.session import Database

logger = logging.getLogger(__name__)

#: The status an unarchived study gets (read-only for raters until reopened).
UNARCHIVED_STATUS = "closed"
#: Folder under the data folder where a deleted study's ratings are exported first.
DELETED_EXPORTS_SUBDIR = "deleted-studies"
#: Provenance key of the archive/unarchive/delete record.
LIFECYCLE_KEY = "lifecycle"


@dataclass(frozen=True)
class StudySummary:
    """A study as an admin sees it."""

    name: str
    description: str
    status: str
    scheme: str
    raters_per_pair: int
    seed: int
    n_pairs: int
    n_cases: int
    n_raters: int
    n_assignments: int
    n_completed: int
    created_at: dt.datetime | None
    sources: dict[str, int] = field(default_factory=dict)  # candidate source -> pairs
    provenance: dict[str, Any] = field(default_factory=dict)
    #: The ``annotation_mode`` setting in force. In ``pairwise`` mode the work is judging
    #: comparisons, so ``n_raters``, ``n_assignments`` and ``n_completed`` count the raters'
    #: judgements (given, done) instead of pair assignments.
    annotation_mode: str = "counts"

    @property
    def unit(self) -> str:
        """What ``n_assignments`` counts: ``comparison`` (pairwise mode) or ``pair``."""
        return "comparison" if self.annotation_mode == PAIRWISE else "pair"


def _summary(s: Session, study: Study) -> StudySummary:
    n_pairs, n_cases = s.execute(
        select(func.count(Pair.id), func.count(func.distinct(Pair.case_id))).where(
            Pair.study_id == study.id, Pair.kind == PAIR_STUDY
        )
    ).one()
    mode = effective(study.settings)["annotation_mode"]
    if mode == PAIRWISE:
        # A judgement is the rater's assignment to a comparison and their answer in one.
        n_raters, n_assign, n_done = s.execute(
            select(
                func.count(func.distinct(Judgement.rater_id)),
                func.count(Judgement.id),
                func.count(Judgement.completed_at),
            )
            .join(Comparison, Comparison.id == Judgement.comparison_id)
            .where(Comparison.study_id == study.id)
        ).one()
    else:
        n_raters, n_assign, n_done = s.execute(
            select(
                func.count(func.distinct(Assignment.rater_id)),
                func.count(Assignment.id),
                func.count(Assignment.completed_at),
            ).where(Assignment.study_id == study.id)
        ).one()
    sources = dict(
        s.execute(
            select(Pair.source, func.count(Pair.id))
            .where(Pair.study_id == study.id, Pair.kind == PAIR_STUDY)
            .group_by(Pair.source)
            .order_by(Pair.source)
        ).all()
    )
    return StudySummary(
        name=study.name,
        description=study.description,
        status=study.status,
        scheme=study.scheme,
        raters_per_pair=study.raters_per_pair,
        seed=study.seed,
        n_pairs=int(n_pairs),
        n_cases=int(n_cases),
        n_raters=int(n_raters),
        n_assignments=int(n_assign),
        n_completed=int(n_done),
        created_at=clock.as_utc(study.created_at),
        sources={str(k): int(v) for k, v in sources.items()},
        provenance=copy.deepcopy(study.provenance or {}),
        annotation_mode=mode,
    )


def list_studies(db: Database, actor: Actor, *,
                 archived: bool = False) -> list[StudySummary] | list[RaterStudy]:
    """Studies visible to the actor, by name.

    Admins get a ``StudySummary`` per study (counts, sources, provenance): the studies in
    use, or with ``archived=True`` the archived ones only; raters get their own
    ``RaterStudy`` entries (done/total), which carry no sources or other raters' data.
    A study still being imported (status ``importing``) is listed to nobody.

    Args:
        db: the study database.
        actor: any account.
        archived: admins: list the archived studies instead of the others.
    """
    if not actor.is_admin:
        return rater_studies(db, actor)
    wanted = Study.status == ARCHIVED if archived else Study.status.not_in(
        (STUDY_STAGING, ARCHIVED))
    with db.read() as s:
        studies = s.scalars(select(Study).where(wanted).order_by(Study.name)).all()
        return [_summary(s, st) for st in studies]


def get_study_summary(db: Database, actor: Actor, *, study_name: str) -> StudySummary:
    """One study's summary (admin only).

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such study.
    """
    require_admin(actor)
    with db.read() as s:
        study = get_study(s, study_name)
        return _summary(s, study)


def _record(provenance: dict[str, Any] | None, action: str, actor: Actor,
            previous: str) -> dict[str, Any]:
    out = copy.deepcopy(provenance or {})
    out.setdefault(LIFECYCLE_KEY, []).append({
        "action": action, "at": clock.utcnow().isoformat(),
        "by": actor.username, "from": previous})
    return out


def _set_status(db: Database, actor: Actor, study_name: str, status: str, action: str,
                allowed_from: tuple[str, ...]) -> tuple[StudySummary, str]:
    require_admin(actor)
    with db.begin() as s:
        study = get_study(s, study_name)
        previous = study.status
        if previous not in allowed_from:
            raise InvalidInput(f"study {study_name!r} is {previous}; it cannot be {action}")
        study.status = status
        study.provenance = _record(study.provenance, action, actor, previous)
        s.flush()
        return _summary(s, study), previous


def archive_study(db: Database, actor: Actor, *, study_name: str) -> StudySummary:
    """Archive a study (admin only): kept whole, hidden from raters and default lists.

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such study.
        InvalidInput: the study is already archived.
    """
    summary, _ = _set_status(db, actor, study_name, ARCHIVED, "archived",
                             ("open", "closed", "draft"))
    return summary


def unarchive_study(db: Database, actor: Actor, *, study_name: str) -> StudySummary:
    """Bring an archived study back as ``closed`` (admin only).

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such study.
        InvalidInput: the study is not archived.
    """
    summary, _ = _set_status(db, actor, study_name, UNARCHIVED_STATUS, "unarchived",
                             (ARCHIVED,))
    return summary


@dataclass(frozen=True)
class DeleteSummary:
    """What a delete removed, and where the ratings were exported first.

    Attributes:
        study_name: The deleted study.
        n_pairs: Pairs removed.
        n_ratings: Rating cells removed (all of them are in the export).
        n_completed: Pairs raters had marked done (all-zero ones included), all exported.
        export_dir: The export written before the delete (``None``: nothing was rated).
        n_files_removed: Image files removed (no other study used them).
    """

    study_name: str
    n_pairs: int
    n_ratings: int
    n_completed: int
    export_dir: Path | None
    n_files_removed: int


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:60] or "study"


def delete_study(
    db: Database,
    actor: Actor,
    *,
    study_name: str,
    confirm: str,
    export_root: Path | None = None,
) -> DeleteSummary:
    """Delete a study, its pairs, assignments and ratings (admin only).

    When the study has any rating (a stored error count, or a pair a rater marked done with
    no error), they are exported first (format ``jsonl``, with the
    pairs, images and manifest) into ``export_root/<study>-<time>/``; the study is deleted
    only if that export succeeded. The study is hidden (archived) before it is exported, so
    the export holds every rating it ever had; if the export fails, its status is restored
    and nothing is deleted.

    Args:
        db: The database.
        actor: Must be an admin.
        study_name: The study.
        confirm: Must repeat the study's name exactly (a page asks the admin to type it).
        export_root: Where the export goes (default ``<data dir>/deleted-studies``).

    Returns:
        What was removed and where the ratings were exported.

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such study.
        InvalidInput: the confirmation does not match; a job of the study is queued or
            running; the export failed (nothing deleted).
    """
    from radconcord.backend.services.transfer import exports, imports

    require_admin(actor)
    if (confirm or "").strip() != study_name:
        raise InvalidInput(f"to delete study {study_name!r}, type its name exactly to confirm")
    with db.read() as s:
        study = get_study(s, study_name)
        study_id, previous, provenance = study.id, study.status, study.provenance
        busy = list(s.scalars(select(Job.id).where(
            Job.study_id == study_id, Job.status.in_(("queued", "running")))))
    if busy:
        raise InvalidInput(f"study {study_name!r} has job(s) {', '.join(f'#{j}' for j in busy)} "
                           "queued or running; cancel them (Metrics page) before deleting it")
    if previous != ARCHIVED:
        # Hidden first: from now on no rater can change a rating the export would miss.
        _set_status(db, actor, study_name, ARCHIVED, "archived (to delete)",
                    (previous,))
    with db.read() as s:
        n_pairs = s.scalar(select(func.count(Pair.id)).where(Pair.study_id == study_id)) or 0
        n_ratings = s.scalar(select(func.count(Rating.id)).join(Pair, Pair.id == Rating.pair_id)
                             .where(Pair.study_id == study_id)) or 0
        # A pair marked done with no error stored is a rating too (all zero).
        n_completed = s.scalar(select(func.count(Assignment.id)).where(
            Assignment.study_id == study_id, Assignment.completed_at.is_not(None))) or 0
    export_dir: Path | None = None
    if n_ratings or n_completed:
        root = Path(export_root) if export_root is not None else (
            config.data_dir() / DELETED_EXPORTS_SUBDIR)
        stamp = clock.utcnow().strftime("%Y%m%dT%H%M%SZ")
        target = root / f"{_slug(study_name)}-{stamp}"
        try:
            root.mkdir(parents=True, exist_ok=True)
            export_dir = exports.export_study(db, actor, study_name=study_name, fmt="jsonl",
                                              out_dir=target, with_scores=True,
                                              with_timing=True).out_dir
        except Exception as exc:
            with db.begin() as s:
                s.execute(update(Study).where(Study.id == study_id)
                          .values(status=previous, provenance=provenance))
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise InvalidInput(f"study {study_name!r} was not deleted: exporting its "
                               f"{n_ratings} rating cells and {n_completed} completed pairs "
                               f"to {target} failed ({reason})") from None
    with db.begin() as s:
        # Invisible everywhere from here; an interrupted delete is finished by the cleanup
        # of stale imports (its state names this process).
        s.execute(update(Study).where(Study.id == study_id).values(
            status=STUDY_STAGING,
            provenance={imports.IMPORT_STATE_KEY: {**imports.staging_state(),
                                                   "deleting": True}}))
    n_files = imports.delete_staged_study(db, study_id)
    logger.warning("study %r deleted by %s (%d pairs, %d rating cells, %d completed%s)",
                   study_name, actor.username, n_pairs, n_ratings, n_completed,
                   f", exported to {export_dir}" if export_dir else "")
    return DeleteSummary(study_name=study_name, n_pairs=int(n_pairs), n_ratings=int(n_ratings),
                         n_completed=int(n_completed), export_dir=export_dir,
                         n_files_removed=n_files)
