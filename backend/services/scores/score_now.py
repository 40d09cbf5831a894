"""Scoring a study without a command: what "Score now" shows and queues, and the first start.

A page that needs metric scores (the dashboard, the disagreement explorer) shows
:func:`score_state` (scores present, a score job queued or running with its progress, a
worker alive or how to start one) and, for an admin, a button that calls :func:`score_now`.
Both queue the *offline* metric families (:func:`offline_families`): those that can run on
this machine and load no model and no image, so they need no download and finish in seconds
on a CPU worker. Model-based metrics are queued on the Metrics page, where their cost is
shown. The web process only queues: every metric runs in ``python -m backend worker``.

First start (:func:`queue_first_scoring`): when the web app opens a database on which it
seeds the demo, it queues one score job of the demo study's offline metrics, so the
dashboard of a new installation fills in by itself once the worker of
``scripts/run-app.sh`` runs. The job row is the record: a study that ever had a score job
(queued, done, failed or cancelled), or that already has scores, never gets another one
this way.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import func, select

from radconcord.backend import jobs as queue
from radconcord.backend.errors import InvalidInput, NotFound, require_admin
from radconcord.backend.metrics import registry
from radconcord.backend.services.jobs import JobView, WorkerStatus, worker_status
from radconcord.backend.services.repo import get_study
from radconcord.backend.services.scores.scoring import MetricInfo, describe_family, enqueue_scoring
from radconcord.backend.types import Actor
from radconcord.db.models import PAIR_STUDY, Job, MetricScore, Pair
from radconcord.db.session import Database

log = logging.getLogger(__name__)

#: ``created_by`` of the job queued on the first start (shown on the Metrics page).
FIRST_START = "first-start"
#: Job kind this module queues.
KIND = "score"


def offline_families(catalog: Sequence[MetricInfo] | None = None) -> list[str]:
    """The metric families that can run here with no model, no image and no download.

    Args:
        catalog: The metric catalogue (default: described now, without loading a model).

    Returns:
        Family names in registry order (may be empty, e.g. without a JRE METEOR is out).
    """
    if catalog is None:
        catalog = [describe_family(f) for f in registry.ENTRIES
                   if registry.ENTRIES[f].per_pair]
    return [m.family for m in catalog
            if m.available and not m.needs_model and not m.needs_image
            and registry.ENTRIES[m.family].per_pair]


@dataclass(frozen=True)
class ScoreState:
    """What a page that needs scores says about them.

    Attributes:
        study: The study.
        n_pairs: Its study pairs (training items and repeats are never scored for analysis).
        n_scored_pairs: Study pairs with at least one metric value.
        pending: The newest queued or running score job of the study, if any (a split
            job counts while any of its chunk jobs is queued or running).
        last: The newest finished score job of the study, if any.
        worker: Whether a worker is alive, and how to start one.
        offline: The families "Score now" queues (see :func:`offline_families`).
    """

    study: str
    n_pairs: int
    n_scored_pairs: int
    pending: JobView | None
    last: JobView | None
    worker: WorkerStatus
    offline: tuple[str, ...]

    @property
    def scored(self) -> bool:
        """Whether any study pair has a metric value."""
        return self.n_scored_pairs > 0

    @property
    def pending_unserved(self) -> bool:
        """Whether the pending job waits with no alive worker that may take it."""
        return self.pending is not None and any(
            j.id == self.pending.id for j in self.worker.waiting)


def _scored_pairs(db: Database, study_name: str) -> tuple[int, int]:
    with db.read() as s:
        sid = get_study(s, study_name).id
        n_pairs = s.scalar(select(func.count(Pair.id)).where(
            Pair.study_id == sid, Pair.kind == PAIR_STUDY)) or 0
        scored = s.scalar(
            select(func.count(func.distinct(Pair.id)))
            .join(MetricScore, MetricScore.input_hash == Pair.input_hash)
            .where(Pair.study_id == sid, Pair.kind == PAIR_STUDY)) or 0
    return int(n_pairs), int(scored)


def _pending(db: Database, runs: Sequence[JobView]) -> JobView | None:
    """The newest score job still queued or running, or split with a chunk job that is."""
    for job in runs:
        if not job.finished:
            return job
        split = queue.group(db, job.id) if job.child_ids else None
        if split is not None and not split.finished:
            return job
    return None


def score_state(db: Database, actor: Actor, study_name: str, *,
                catalog: Sequence[MetricInfo] | None = None) -> ScoreState:
    """The study's scores, its score jobs and the workers, for a "Score now" panel (admin).

    Args:
        db: The database.
        actor: Must be an admin.
        study_name: The study.
        catalog: The metric catalogue, when the caller has it cached.

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such study.
    """
    require_admin(actor)
    n_pairs, scored = _scored_pairs(db, study_name)
    with db.read() as s:
        sid = get_study(s, study_name).id
    runs = queue.list_jobs(db, kind=KIND, study_id=sid, limit=20)
    pending = _pending(db, runs)
    last = next((j for j in runs if j.finished and j is not pending), None)
    return ScoreState(study=study_name, n_pairs=n_pairs, n_scored_pairs=scored,
                      pending=pending, last=last, worker=worker_status(db, actor),
                      offline=tuple(offline_families(catalog)))


def score_now(db: Database, actor: Actor, study_name: str, *,
              catalog: Sequence[MetricInfo] | None = None) -> JobView:
    """Queue a score job of the study's offline metrics (admin only).

    A score job of the study that is still queued or running is returned instead of a second
    one (a double click queues nothing more).

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such study.
        InvalidInput: no metric family can run here without a model.
    """
    require_admin(actor)
    with db.read() as s:
        sid = get_study(s, study_name).id
    pending = _pending(db, queue.list_jobs(db, kind=KIND, study_id=sid, limit=20))
    if pending is not None:
        return pending
    families = offline_families(catalog)
    if not families:
        raise InvalidInput("no metric family can run on this machine without a model: see "
                           "the Metrics page for why each one is unavailable")
    # The check above spares the catalog work on a double click; this one is atomic (two
    # admins clicking at once both pass the first).
    return enqueue_scoring(db, actor, study_name, families, reuse_unfinished=True)


def queue_first_scoring(db: Database, study_name: str) -> JobView | None:
    """Queue the first score job of ``study_name`` (the demo study on a first start), once.

    Nothing is queued when the study does not exist, already has a metric value, or ever had
    a score job: the job row records that this was done.

    Returns:
        The queued job, or ``None`` when nothing was queued.
    """
    with db.read() as s:
        try:
            sid = get_study(s, study_name).id
        except NotFound:
            return None
        had_job = s.scalar(select(func.count(Job.id)).where(
            Job.study_id == sid, Job.kind == KIND)) or 0
    if had_job or _scored_pairs(db, study_name)[1]:
        return None
    families = offline_families()
    if not families:
        log.warning("first start: no offline metric can run here; %s is not scored",
                    study_name)
        return None
    job = enqueue_scoring(db, Actor(user_id=0, username=FIRST_START, role="admin"),
                          study_name, families)
    log.info("first start: queued score job #%d of %s (%s)", job.id, study_name,
             ", ".join(families))
    return job
