"""Job use cases for the admin pages: queue a job, watch it, cancel it, see the workers.

Long tasks never run in the web app: a page validates its inputs through its own service,
queues a job here (or through a kind-specific service such as
:func:`backend.services.scores.scoring.enqueue_scoring`) and polls :func:`job_status`. Every
function re-checks that the actor is an admin.

:class:`JobView` is the queue's own frozen record (:class:`backend.jobs.JobInfo`): the pages
see one shape of a job, built in one place.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from radconcord.backend import clock, jobs
from radconcord.backend.errors import InvalidInput, NotFound, require_admin
from radconcord.backend.jobs.queue import (
    WORKER_ALIVE_AFTER,
    JobGroup,
    JobInfo,
    WorkerInfo,
    can_take,
    chunk_label,
)
from radconcord.backend.services.repo import get_study
from radconcord.backend.types import Actor

if TYPE_CHECKING:
    from radconcord.db.session import Database

#: A job as the pages see it.
JobView = JobInfo
#: A worker process as the pages see it (``alive``: heartbeating recently).
WorkerView = WorkerInfo
#: A split job with its chunk jobs and their combined progress and status.
JobGroupView = JobGroup
#: ``chunk 2/4 (#17)``: a chunk job as the pages name it.
chunk_name = chunk_label


def study_id(db: Database, study_name: str) -> int:
    """The id of the study called ``study_name``.

    Raises:
        NotFound: no such study.
    """
    with db.read() as s:
        return get_study(s, study_name).id


def enqueue_job(
    db: Database,
    actor: Actor,
    *,
    kind: str,
    params: dict[str, Any],
    study_name: str | None = None,
    device: str | None = None,
    reuse_unfinished: bool = False,
) -> JobView:
    """Queue a job of ``kind`` (admin only); the kind's own service validates ``params``.

    With ``reuse_unfinished`` a job of the same kind and study still queued or running is
    returned instead of a new one (atomically: see :func:`backend.jobs.queue.enqueue`).

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no study called ``study_name``.
        InvalidInput: unknown kind or device, params that are not a JSON object.
    """
    require_admin(actor)
    sid = study_id(db, study_name) if study_name is not None else None
    job_id = jobs.enqueue(
        db, kind, params, study_id=sid, device=device, created_by=actor.username,
        reuse_unfinished=reuse_unfinished,
    )
    info = jobs.get(db, job_id)
    if info is None:  # deleted with its study between the two statements
        raise NotFound(f"job {job_id} vanished (was its study deleted?)")
    return info


def job_status(db: Database, actor: Actor, *, job_id: int) -> JobView:
    """One job's state (admin only).

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such job.
    """
    require_admin(actor)
    info = jobs.get(db, job_id)
    if info is None:
        raise NotFound(f"no job {job_id}")
    return info


def list_jobs(
    db: Database, actor: Actor, *, kind: str | None = None, study_name: str | None = None
) -> list[JobView]:
    """Jobs, newest first, optionally of one kind and/or one study (admin only).

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no study called ``study_name``.
        InvalidInput: unknown kind.
    """
    require_admin(actor)
    if kind is not None and kind not in jobs.KINDS:
        raise InvalidInput(f"unknown job kind {kind!r} (known: {', '.join(jobs.KINDS)})")
    sid = study_id(db, study_name) if study_name is not None else None
    return jobs.list_jobs(db, kind=kind, study_id=sid)


def cancel_job(db: Database, actor: Actor, *, job_id: int) -> JobView:
    """Cancel a job (admin only): a queued one now, a running one at its next step.

    A finished job is returned unchanged.

    Raises:
        PermissionDenied: the actor is not an admin.
        NotFound: no such job.
    """
    require_admin(actor)
    return jobs.cancel(db, job_id)


def job_groups(db: Database, actor: Actor, jobs_: list[JobView]) -> list[JobGroupView]:
    """The split jobs among ``jobs_`` with their chunk jobs' combined state (admin only):
    progress summed over the chunks, running while any chunk runs, done when all are done,
    partial or failed naming each chunk that failed or was cancelled.

    Raises:
        PermissionDenied: the actor is not an admin.
    """
    require_admin(actor)
    return jobs.groups(db, jobs_)


def list_workers(db: Database, actor: Actor, *, include_gone: bool = False) -> list[WorkerView]:
    """The worker processes alive now (and, with ``include_gone``, those that stopped).

    Raises:
        PermissionDenied: the actor is not an admin.
    """
    require_admin(actor)
    return jobs.list_workers(db, include_gone=include_gone)


def unserved(jobs_: list[JobView], workers: list[WorkerView]) -> list[JobView]:
    """The queued jobs that no alive worker may take (no worker at all, or none with the
    job's device or kind): the pages say so instead of showing a job that waits forever."""
    alive = [w for w in workers if w.alive]
    return [
        j for j in jobs_
        if j.status == jobs.QUEUED and not any(can_take(w, j) for w in alive)
    ]


#: How to start a worker, as the pages and the CLI say it.
START_WORKER = "python -m backend worker"


@dataclass(frozen=True)
class WorkerStatus:
    """Whether any worker is alive, for a status line.

    Attributes:
        alive: Workers heartbeating now.
        last_heartbeat: The newest heartbeat of any worker, alive or gone (``None``: no
            worker ever ran against this database).
        waiting: Queued jobs that no alive worker may take.
        message: One sentence for people: who is alive, or how to start one.
    """

    alive: tuple[WorkerView, ...]
    last_heartbeat: dt.datetime | None
    waiting: tuple[JobView, ...]
    message: str

    @property
    def any_alive(self) -> bool:
        """Whether at least one worker is alive."""
        return bool(self.alive)


def worker_status(db: Database, actor: Actor, *, now: dt.datetime | None = None) -> WorkerStatus:
    """Whether a worker is alive (heartbeat within ``WORKER_ALIVE_AFTER`` s) and which
    queued jobs wait with none that may take them (admin only).

    Raises:
        PermissionDenied: the actor is not an admin.
    """
    require_admin(actor)
    everyone = jobs.list_workers(db, include_gone=True)
    alive = tuple(w for w in everyone if w.alive)
    beats = [w.heartbeat_at for w in everyone if w.heartbeat_at is not None]
    last = max(beats) if beats else None
    waiting = tuple(unserved(jobs.list_jobs(db), list(alive)))
    if alive:
        devices = ", ".join(sorted({w.device for w in alive}))
        n = len(alive)
        message = f"{n} worker{'s' if n > 1 else ''} alive ({devices})"
    else:
        now = now or clock.utcnow()
        ago = ("no worker has ever run here" if last is None
               else f"the last heartbeat was {_age(now - last)} ago")
        message = (f"No worker is alive (none has sent a heartbeat in the last "
                   f"{WORKER_ALIVE_AFTER:.0f} s; {ago}): start one with `{START_WORKER}`")
    return WorkerStatus(alive=alive, last_heartbeat=last, waiting=waiting, message=message)


def _age(delta: dt.timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    if seconds < 2 * 86400:
        return f"{seconds // 3600} h"
    return f"{seconds // 86400} days"


@dataclass(frozen=True)
class FamilyStatus:
    """One metric family of a finished ``score`` job.

    Attributes:
        family: The family.
        status: ``done``, ``unavailable`` or ``failed``.
        detail: The reason (unavailable) or the error (failed); empty when done.
        computed: Pair inputs computed by the job.
        cached: Pair inputs found in the score cache.
    """

    family: str
    status: str
    detail: str
    computed: int
    cached: int


def score_families(job: JobView) -> list[FamilyStatus]:
    """The per-family status a ``score`` or ``score_chunk`` job recorded (empty for other
    kinds or no result).

    Results of jobs from before statuses were recorded count as done.
    """
    if job.kind not in ("score", jobs.CHUNK_KIND) or not job.result:
        return []
    out = []
    for family, entry in (job.result.get("families") or {}).items():
        entry = entry if isinstance(entry, dict) else {}
        status = str(entry.get("status") or "done")
        out.append(FamilyStatus(
            family=str(family), status=status,
            detail=str(entry.get("reason") or entry.get("error") or ""),
            computed=int(entry.get("computed") or 0), cached=int(entry.get("cached") or 0)))
    return out


def partial(job: JobView) -> bool:
    """Whether a done job left part of its work undone (a family unavailable or failed)."""
    return job.status == jobs.DONE and any(f.status != "done" for f in score_families(job))
