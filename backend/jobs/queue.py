"""The job queue, kept in the ``jobs`` table, and the roll of workers (``workers``).

A job moves ``queued -> running -> done | failed | cancelled``; a worker stopped politely
puts it back to ``queued``. Claiming is one conditional UPDATE (``WHERE id = ? AND (status =
'queued' OR the heartbeat is stale)``): on SQLite the write transaction is exclusive, on
PostgreSQL the second UPDATE waits for the first one's row lock and then re-checks its WHERE,
so two workers never run the same job. A job whose worker died (kill -9, power loss) is taken
over once its heartbeat is older than ``stale_after`` seconds, at most ``MAX_ATTEMPTS`` times
in all; after that it is failed with a reason instead of killing one more worker. Every
write by a worker is conditioned on ``worker_id`` so a worker that lost its claim cannot
overwrite the new owner's progress.

Cancelling a queued job finishes it at once; cancelling a running one sets
``cancel_requested``, which the running kind sees at its next ``ctx.progress``/``ctx.check``
(:mod:`backend.jobs.context`); the worker then marks it cancelled.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, delete, false, or_, select, true, update

from radconcord.backend import clock
from radconcord.backend.errors import InvalidInput, NotFound
from radconcord.backend.jobs import registry
from radconcord.db.models import Job, Study, WorkerProcess

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from sqlalchemy.orm import Session

    from radconcord.db.session import Database

QUEUED, RUNNING, DONE, FAILED, CANCELLED = "queued", "running", "done", "failed", "cancelled"
#: The combined status of a split job some of whose children failed or were cancelled.
PARTIAL = "partial"
#: Why a running job must stop: what :func:`heartbeat` and :func:`report_progress` return,
#: and :attr:`backend.jobs.context.JobCancelled.reason` (an admin cancelled it, another worker
#: took it over, this worker is shutting down).
CANCELLED_BY_USER, CLAIM_LOST, WORKER_STOPPING = "cancelled", "lost", "stopping"
#: States a job never leaves.
FINISHED = frozenset({DONE, FAILED, CANCELLED})
#: Seconds without heartbeat after which a running job is presumed orphaned.
DEFAULT_STALE_AFTER = 120.0
#: Claims after which a job whose worker stopped heartbeating is failed, not taken over again.
MAX_ATTEMPTS = 3
#: A worker whose last heartbeat is older than this many seconds is shown as not alive.
WORKER_ALIVE_AFTER = 60.0
#: Rows of workers gone for longer than this are deleted when a worker starts.
WORKER_FORGET_AFTER = dt.timedelta(days=7)

_DEVICE = re.compile(r"cpu|cuda|cuda:[0-9]+")

#: The kind of the jobs a split ``score`` job queues (one per chunk of its pairs).
CHUNK_KIND = "score_chunk"
#: Where a parent job records its children's ids: a key of its ``result``, written in the
#: same transaction that queues them (:func:`enqueue_children`).
CHILDREN_KEY = "chunks"


@dataclass(frozen=True)
class JobInfo:
    """A job as plain data (what pages, services and the CLI see).

    Attributes:
        id: Job id.
        kind: Registered kind (``score``, ``probes``, ...).
        study_id: The study it works on, if any.
        study_name: That study's name.
        params: The kind's JSON inputs.
        device: ``cpu``, ``cuda``, ``cuda:N`` or ``None`` (any worker).
        status: queued | running | done | failed | cancelled.
        progress_done: Steps done.
        progress_total: Steps in all (0 while unknown).
        message: Last progress message, or the summary of a finished job.
        result: The kind's JSON result once done.
        error: Why it failed.
        cancel_requested: An admin asked the running job to stop.
        created_by: Who queued it.
        worker_id: The worker that runs (or last ran) it.
        attempts: How many times a worker claimed it.
        heartbeat_at: Last sign of life of its worker.
        created_at: When it was queued.
        started_at: When its current (or last) run started.
        finished_at: When it finished.
    """

    id: int
    kind: str
    study_id: int | None
    study_name: str | None
    params: dict[str, Any]
    device: str | None
    status: str
    progress_done: int
    progress_total: int
    message: str
    result: dict[str, Any] | None
    error: str | None
    cancel_requested: bool
    created_by: str
    worker_id: str | None
    attempts: int
    heartbeat_at: dt.datetime | None
    created_at: dt.datetime | None
    started_at: dt.datetime | None
    finished_at: dt.datetime | None

    @property
    def fraction(self) -> float:
        """Progress between 0 and 1."""
        if not self.progress_total:
            return 0.0
        return min(1.0, max(0.0, self.progress_done / self.progress_total))

    @property
    def finished(self) -> bool:
        """Whether the job is done, failed or cancelled."""
        return self.status in FINISHED

    @property
    def metrics(self) -> tuple[str, ...]:
        """The metric names a ``score`` (or ``score_chunk``) job was queued with (empty for
        other kinds)."""
        if self.kind not in ("score", CHUNK_KIND):
            return ()
        return tuple(self.params.get("metrics") or ())

    @property
    def child_ids(self) -> tuple[int, ...]:
        """The jobs this one split its work into (:func:`enqueue_children`); empty if none."""
        return tuple(_child_ids(self.result))


@dataclass(frozen=True)
class WorkerInfo:
    """A worker process as it announced itself.

    Attributes:
        id: ``host:pid:random``.
        host: Host name.
        pid: Process id on that host.
        device: ``cpu`` or ``cuda:N``.
        kinds: Job kinds it takes (empty: all).
        current_job_id: The job it runs now, if any.
        started_at: When it started.
        heartbeat_at: Its last heartbeat.
        stopped_at: When it exited cleanly (``None`` while running or after a crash).
        alive: Not stopped and heartbeating recently.
    """

    id: str
    host: str
    pid: int
    device: str
    kinds: tuple[str, ...]
    current_job_id: int | None
    started_at: dt.datetime | None
    heartbeat_at: dt.datetime | None
    stopped_at: dt.datetime | None
    alive: bool


def _child_ids(result: dict[str, Any] | None) -> list[int]:
    """The children's ids a parent's ``result`` records (none unless a list of ids)."""
    ids = (result or {}).get(CHILDREN_KEY) if isinstance(result, dict) else None
    if not isinstance(ids, list):
        return []
    return [i for i in ids if isinstance(i, int) and not isinstance(i, bool)]


def _info(job: Job, study_name: str | None) -> JobInfo:
    return JobInfo(
        id=job.id,
        kind=job.kind,
        study_id=job.study_id,
        study_name=study_name,
        params=dict(job.params or {}),
        device=job.device,
        status=job.status,
        progress_done=job.progress_done or 0,
        progress_total=job.progress_total or 0,
        message=job.message or "",
        result=dict(job.result) if job.result is not None else None,
        error=job.error,
        cancel_requested=bool(job.cancel_requested),
        created_by=job.created_by or "",
        worker_id=job.worker_id,
        attempts=job.attempts or 0,
        heartbeat_at=clock.as_utc(job.heartbeat_at),
        created_at=clock.as_utc(job.created_at),
        started_at=clock.as_utc(job.started_at),
        finished_at=clock.as_utc(job.finished_at),
    )


def _reading(db: Database) -> AbstractContextManager[Session]:
    """A read-only transaction where the database offers one (no SQLite write lock)."""
    read = getattr(db, "read", None)
    return read() if read is not None else db.begin()


def check_device(device: str | None, *, what: str = "device") -> str | None:
    """Validate a device: ``None``, ``cpu``, ``cuda`` or ``cuda:N``.

    Raises:
        InvalidInput: anything else.
    """
    if device is None:
        return None
    if not isinstance(device, str) or not _DEVICE.fullmatch(device):
        raise InvalidInput(f"{what}: expected cpu, cuda or cuda:N, got {device!r}")
    return device


def _json_object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInput(f"{what}: expected a JSON object, got {type(value).__name__}")
    try:
        # NaN/inf are not JSON; PostgreSQL would refuse them at commit, SQLite keep garbage.
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{what}: not JSON-serialisable: {exc}") from None


def enqueue(
    db: Database,
    kind: str,
    params: dict[str, Any],
    *,
    study_id: int | None = None,
    device: str | None = None,
    created_by: str = "",
    reuse_unfinished: bool = False,
) -> int:
    """Queue a job of ``kind`` with JSON ``params``; returns its id.

    Args:
        db: The database.
        kind: A registered kind (:data:`backend.jobs.registry.KINDS`).
        params: The kind's inputs (a JSON object).
        study_id: The study it works on, if any (deleting the study deletes the job).
        device: ``cuda`` to run on a GPU worker only, ``cpu``/``cuda:N`` for that device
            only, ``None`` for any worker.
        created_by: Who queued it (shown on the Metrics page).
        reuse_unfinished: With ``study_id``: when a job of the same kind and study is still
            queued or running, return its id and queue nothing. The check and the insert
            hold the study's row lock, so two clicks at once queue one job.

    Raises:
        InvalidInput: unknown kind or device, params that are not a JSON object.
        NotFound: no study with ``study_id``.
    """
    try:
        registry.check_kind(kind)
    except registry.UnknownJobKind as exc:
        raise InvalidInput(str(exc)) from None
    clean = _json_object(params, f"job {kind!r} params")
    check_device(device)
    with db.begin() as s:
        if study_id is not None:
            found = select(Study.id).where(Study.id == study_id)
            if reuse_unfinished:
                # Only here: a plain enqueue must not wait on a caller's own lock of the
                # study.
                found = found.with_for_update()
            if s.scalar(found) is None:
                raise NotFound(f"no study with id {study_id}")
            if reuse_unfinished:
                pending = s.scalar(select(Job.id).where(
                    Job.kind == kind, Job.study_id == study_id,
                    Job.status.in_((QUEUED, RUNNING))).order_by(Job.id).limit(1))
                if pending is not None:
                    return int(pending)
                if kind == "score":
                    # A split score job is done once it queued its chunks: the study's
                    # scoring is pending while any of them is.
                    chunk = s.scalar(select(Job.params).where(
                        Job.kind == CHUNK_KIND, Job.study_id == study_id,
                        Job.status.in_((QUEUED, RUNNING))).order_by(Job.id).limit(1))
                    parent = (chunk or {}).get("parent")
                    if isinstance(parent, int) and s.get(Job, parent) is not None:
                        return parent
        job = Job(
            kind=kind,
            study_id=study_id,
            params=clean,
            device=device,
            status=QUEUED,
            created_by=created_by[:64],
            created_at=clock.utcnow(),
        )
        s.add(job)
        s.flush()
        return job.id


def get(db: Database, job_id: int) -> JobInfo | None:
    """The job with ``job_id`` or ``None``."""
    with _reading(db) as s:
        job = s.get(Job, job_id)
        if job is None:
            return None
        name = s.scalar(select(Study.name).where(Study.id == job.study_id))
        return _info(job, name)


def list_jobs(
    db: Database, *, kind: str | None = None, study_id: int | None = None, limit: int = 200
) -> list[JobInfo]:
    """Jobs, newest first, optionally of one kind and/or one study."""
    with _reading(db) as s:
        q = (
            select(Job, Study.name)
            .join(Study, Study.id == Job.study_id, isouter=True)
            .order_by(Job.id.desc())
            .limit(limit)
        )
        if kind is not None:
            q = q.where(Job.kind == kind)
        if study_id is not None:
            q = q.where(Job.study_id == study_id)
        return [_info(job, name) for job, name in s.execute(q)]


def cancel(db: Database, job_id: int) -> JobInfo:
    """Cancel a job: a queued one at once, a running one at its next progress report.

    A job that split its work (:func:`enqueue_children`) cancels its children the same way,
    in the same transaction, even when the parent itself is already done. A finished job is
    returned unchanged.

    Raises:
        NotFound: no job with ``job_id``.
    """
    now = clock.utcnow()
    with db.begin() as s:
        if s.get(Job, job_id) is None:
            raise NotFound(f"no job {job_id}")
        s.execute(
            update(Job)
            .where(Job.id == job_id, Job.status == QUEUED)
            .values(status=CANCELLED, finished_at=now, message="cancelled before it started")
            .execution_options(synchronize_session=False)
        )
        s.execute(
            update(Job)
            .where(Job.id == job_id, Job.status == RUNNING)
            .values(cancel_requested=True)
            .execution_options(synchronize_session=False)
        )
        # Read after the updates above: they waited for a parent's running split to commit
        # (row lock on PostgreSQL, the write lock on SQLite), so its children are seen here.
        children = _child_ids(s.scalar(select(Job.result).where(Job.id == job_id)))
        if children:
            s.execute(
                update(Job)
                .where(Job.id.in_(children), Job.status == QUEUED)
                .values(status=CANCELLED, finished_at=now,
                        message=f"cancelled with its parent job #{job_id}")
                .execution_options(synchronize_session=False)
            )
            s.execute(
                update(Job)
                .where(Job.id.in_(children), Job.status == RUNNING)
                .values(cancel_requested=True)
                .execution_options(synchronize_session=False)
            )
    info = get(db, job_id)
    assert info is not None
    return info


def wait(db: Database, job_id: int, *, timeout: float, poll: float = 0.1) -> JobInfo:
    """Poll until the job is finished; returns its final state.

    Raises:
        NotFound: no job with ``job_id``.
        TimeoutError: still not finished after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        info = get(db, job_id)
        if info is None:
            raise NotFound(f"no job {job_id}")
        if info.finished:
            return info
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"job {job_id} ({info.kind}) still {info.status} after {timeout:g} s"
                f" ({info.progress_done}/{info.progress_total} {info.message})"
            )
        time.sleep(poll)


# -- what workers do ------------------------------------------------------------------------


def _stale(cutoff: dt.datetime) -> ColumnElement[bool]:
    return (Job.status == RUNNING) & or_(Job.heartbeat_at.is_(None), Job.heartbeat_at < cutoff)


def _device_filter(worker_device: str) -> ColumnElement[bool]:
    """Jobs a worker on ``worker_device`` may take: any-device jobs and its own."""
    allowed = [worker_device]
    if worker_device.startswith("cuda"):
        allowed.append("cuda")
    return or_(Job.device.is_(None), Job.device.in_(allowed))


def _claimable(
    cutoff: dt.datetime, max_attempts: int, device: str, kinds: Sequence[str]
) -> ColumnElement[bool]:
    return (
        or_(
            Job.status == QUEUED,
            _stale(cutoff) & (Job.attempts < max_attempts) & (Job.cancel_requested == false()),
        )
        & Job.kind.in_(list(kinds))
        & _device_filter(device)
    )


def claim(
    db: Database,
    *,
    worker_id: str,
    device: str = "cpu",
    kinds: Sequence[str] | None = None,
    stale_after: float = DEFAULT_STALE_AFTER,
    max_attempts: int = MAX_ATTEMPTS,
) -> JobInfo | None:
    """Atomically take the oldest due job this worker may run.

    Due: queued, or running with a heartbeat older than ``stale_after`` (its worker died).
    A stale job that workers have already taken ``max_attempts`` times is failed instead
    (its workers keep dying on it: out of memory, a crashing extension), and a stale job
    whose cancellation was requested is marked cancelled: neither is run again.

    Args:
        db: The database.
        worker_id: This worker's identity (written on the job).
        device: This worker's device (``cpu`` or ``cuda:N``): it takes jobs for any device,
            for its own, and (on a GPU) for ``cuda``.
        kinds: Kinds it takes (default: every registered kind).
        stale_after: Seconds without heartbeat after which a running job is taken over.
        max_attempts: Claims after which a stale job is failed rather than taken over.

    Returns:
        The claimed job, or ``None`` when there is nothing to do.
    """
    kinds = list(kinds) if kinds else registry.kind_names()
    now = clock.utcnow()
    cutoff = now - dt.timedelta(seconds=stale_after)
    # An idle worker polls every few seconds: look first without the write lock, which on
    # SQLite would make raters' saves wait behind every poll of every worker.
    with _reading(db) as s:
        if s.scalar(
            select(Job.id).where(or_(Job.status == QUEUED, _stale(cutoff))).limit(1)
        ) is None:
            return None
    with db.begin() as s:
        s.execute(
            update(Job)
            .where(_stale(cutoff), Job.cancel_requested == true())
            .values(
                status=CANCELLED,
                finished_at=now,
                message="cancelled (its worker had stopped responding)",
            )
            .execution_options(synchronize_session=False)
        )
        s.execute(
            update(Job)
            .where(_stale(cutoff), Job.attempts >= max_attempts)
            .values(
                status=FAILED,
                finished_at=now,
                error=f"its worker stopped responding {max_attempts} times while running it"
                " (killed, out of memory?); see the worker logs, then queue it again",
            )
            .execution_options(synchronize_session=False)
        )
        due = _claimable(cutoff, max_attempts, device, kinds)
        ids = s.scalars(select(Job.id).where(due).order_by(Job.id).limit(10)).all()
        for job_id in ids:
            res = s.execute(
                update(Job)
                .where(Job.id == job_id, due)
                .values(
                    status=RUNNING,
                    worker_id=worker_id,
                    heartbeat_at=now,
                    started_at=now,
                    error=None,
                    attempts=Job.attempts + 1,
                )
                .execution_options(synchronize_session=False)
            )
            if res.rowcount == 1:
                job = s.get(Job, job_id, populate_existing=True)
                assert job is not None
                name = s.scalar(select(Study.name).where(Study.id == job.study_id))
                return _info(job, name)
    return None


def _owned(job_id: int, owner: str) -> ColumnElement[bool]:
    return (Job.id == job_id) & (Job.worker_id == owner) & (Job.status == RUNNING)


def _owned_update(db: Database, job_id: int, owner: str, /, **values: Any) -> str | None:
    """Update a job this worker runs; returns why it must stop (``None``: carry on)."""
    with db.begin() as s:
        res = s.execute(
            update(Job)
            .where(_owned(job_id, owner))
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        if res.rowcount != 1:
            return CLAIM_LOST
        requested = s.scalar(select(Job.cancel_requested).where(Job.id == job_id))
        return CANCELLED_BY_USER if requested else None


def heartbeat(db: Database, job_id: int, worker_id: str) -> str | None:
    """Refresh the job's heartbeat.

    Returns:
        ``None`` to carry on, ``"lost"`` when this worker no longer owns the job,
        ``"cancelled"`` when an admin asked it to stop.
    """
    return _owned_update(db, job_id, worker_id, heartbeat_at=clock.utcnow())


def report_progress(
    db: Database, job_id: int, worker_id: str, done: int, total: int, message: str
) -> str | None:
    """Record progress (and heartbeat); returns what :func:`heartbeat` returns."""
    return _owned_update(
        db,
        job_id,
        worker_id,
        progress_done=int(done),
        progress_total=int(total),
        message=str(message)[:2000],
        heartbeat_at=clock.utcnow(),
    )


def finish(
    db: Database, job_id: int, worker_id: str, result: dict[str, Any] | None, message: str
) -> bool:
    """Mark the job done with its JSON ``result``; ``False`` if this worker lost it."""
    return (
        _owned_update(
            db,
            job_id,
            worker_id,
            status=DONE,
            result=result,
            message=message[:2000],
            finished_at=clock.utcnow(),
        )
        != CLAIM_LOST
    )


def _progress_values(progress: tuple[int, int] | None) -> dict[str, int]:
    if progress is None:
        return {}
    return {"progress_done": int(progress[0]), "progress_total": int(progress[1])}


def fail(
    db: Database, job_id: int, worker_id: str, error: str, *,
    progress: tuple[int, int] | None = None,
) -> bool:
    """Mark the job failed with ``error`` (shown to the admin); ``False`` if lost.

    ``progress`` (done, total) records how far it got (the last report may have been
    throttled).
    """
    return (
        _owned_update(
            db, job_id, worker_id, status=FAILED, error=error[:4000], finished_at=clock.utcnow(),
            **_progress_values(progress),
        )
        != CLAIM_LOST
    )


def mark_cancelled(
    db: Database, job_id: int, worker_id: str, message: str = "cancelled", *,
    progress: tuple[int, int] | None = None,
) -> bool:
    """Mark a job this worker stopped on request as cancelled; ``False`` if lost."""
    return (
        _owned_update(
            db, job_id, worker_id, status=CANCELLED, message=message[:2000],
            finished_at=clock.utcnow(), **_progress_values(progress),
        )
        != CLAIM_LOST
    )


def release(db: Database, job_id: int, worker_id: str, message: str = "") -> bool:
    """Put a job this worker owns back in the queue (polite shutdown: not a failed attempt)."""
    return (
        _owned_update(
            db,
            job_id,
            worker_id,
            status=QUEUED,
            worker_id=None,
            heartbeat_at=None,
            message=message[:2000],
            attempts=Job.attempts - 1,
        )
        != CLAIM_LOST
    )


def enqueue_children(
    db: Database, job_id: int, worker_id: str, kind: str, params: Sequence[dict[str, Any]]
) -> tuple[str | None, list[int]]:
    """Queue ``kind`` jobs with ``params`` for the running job ``job_id``, at most once.

    The children are inserted, and their ids recorded in the parent's ``result`` under
    :data:`CHILDREN_KEY`, in one transaction that first updates the parent row as its owner:
    a parent killed -9 after the commit finds its children on retry and queues none again;
    one killed before it queued none; a worker that lost its claim queues nothing. Children
    take the parent's study, device and ``created_by``.

    Args:
        db: The database.
        job_id: The parent job (running, owned by ``worker_id``).
        worker_id: The worker running it.
        kind: A registered kind for the children.
        params: One JSON object per child, in order.

    Returns:
        ``(None, ids)`` with the children's ids (those queued earlier, on a retry), or
        ``(reason, [])`` when the parent must stop instead (``lost`` or ``cancelled``).

    Raises:
        InvalidInput: unknown kind, params that are not JSON objects.
    """
    try:
        registry.check_kind(kind)
    except registry.UnknownJobKind as exc:
        raise InvalidInput(str(exc)) from None
    clean = [_json_object(p, f"job {kind!r} params") for p in params]
    now = clock.utcnow()
    with db.begin() as s:
        # The owner's write comes first: it takes the row lock (PostgreSQL) or is already
        # under the write lock (SQLite), so the check below and the inserts are one step.
        res = s.execute(
            update(Job).where(_owned(job_id, worker_id)).values(heartbeat_at=now)
            .execution_options(synchronize_session=False)
        )
        if res.rowcount != 1:
            return CLAIM_LOST, []
        parent = s.get(Job, job_id, populate_existing=True)
        assert parent is not None
        if parent.cancel_requested:
            return CANCELLED_BY_USER, []
        recorded = _child_ids(parent.result)
        if recorded:
            return None, recorded
        children = [
            Job(kind=kind, study_id=parent.study_id, params=p, device=parent.device,
                status=QUEUED, created_by=parent.created_by, created_at=now)
            for p in clean
        ]
        s.add_all(children)
        s.flush()
        ids = [c.id for c in children]
        parent.result = {**(parent.result or {}), CHILDREN_KEY: ids}
        return None, ids


@dataclass(frozen=True)
class JobGroup:
    """A job that split its work into child jobs, with their combined state.

    Attributes:
        parent: The parent job.
        children: Its children, in chunk order.
        status: queued | running | done | partial | failed | cancelled, over the children
            (the parent's own status when it has none).
        progress_done: Steps done, summed over the children.
        progress_total: Steps in all, summed (a child not started yet counts its planned
            ``steps`` param).
        workers: The distinct workers that run or ran a child.
        problems: One line per child that failed or was cancelled: which chunk, and why.
    """

    parent: JobInfo
    children: tuple[JobInfo, ...]
    status: str
    progress_done: int
    progress_total: int
    workers: tuple[str, ...]
    problems: tuple[str, ...]

    @property
    def fraction(self) -> float:
        """Progress between 0 and 1."""
        if not self.progress_total:
            return 0.0
        return min(1.0, max(0.0, self.progress_done / self.progress_total))

    @property
    def finished(self) -> bool:
        """Whether every child is finished."""
        return self.status not in (QUEUED, RUNNING)


def chunk_label(child: JobInfo) -> str:
    """``chunk 2/4 (#17)``: a child job as people read it."""
    index, of = child.params.get("chunk"), child.params.get("of")
    where = f"chunk {int(index) + 1}/{of}" if isinstance(index, int) and of else "chunk"
    return f"{where} (#{child.id})"


def _short_of(child: JobInfo) -> bool:
    """Whether a done child left part of its work undone (its ``outcome`` says which)."""
    outcome = (child.result or {}).get("outcome")
    return isinstance(outcome, str) and outcome not in ("done", "split")


def _group_of(parent: JobInfo, children: Sequence[JobInfo]) -> JobGroup:
    done_steps = total_steps = 0
    for c in children:
        planned = c.params.get("steps")
        total = c.progress_total or (int(planned) if isinstance(planned, int) else 0)
        total_steps += total
        done_steps += total if c.status == DONE else min(c.progress_done, total)
    problems = tuple(
        f"{chunk_label(c)} {c.status}: "
        + ((c.error or c.message or c.status).splitlines() or [""])[0]
        for c in children if c.status in (FAILED, CANCELLED)
    ) + tuple(
        # A chunk done without one of its families (unavailable on that worker, failed).
        f"{chunk_label(c)} {c.result['outcome']}"
        for c in children if c.status == DONE and _short_of(c)
    )
    if not children:
        status = parent.status
    elif any(not c.finished for c in children):
        status = RUNNING if any(c.status != QUEUED for c in children) else QUEUED
    else:
        n_done = sum(1 for c in children if c.status == DONE and not _short_of(c))
        if n_done == len(children):
            status = DONE
        elif n_done or any(c.status == DONE for c in children):
            status = PARTIAL
        else:
            status = FAILED if any(c.status == FAILED for c in children) else CANCELLED
    workers = tuple(dict.fromkeys(c.worker_id for c in children if c.worker_id))
    return JobGroup(parent=parent, children=tuple(children), status=status,
                    progress_done=done_steps, progress_total=total_steps,
                    workers=workers, problems=problems)


def group(db: Database, job_id: int) -> JobGroup | None:
    """The job ``job_id`` with its children's combined state; ``None`` when it has none
    (yet: a split job records its children when it queues them).

    Raises:
        NotFound: no job with ``job_id``.
    """
    parent = get(db, job_id)
    if parent is None:
        raise NotFound(f"no job {job_id}")
    ids = parent.child_ids
    if not ids:
        return None
    with _reading(db) as s:
        rows = s.execute(
            select(Job, Study.name).join(Study, Study.id == Job.study_id, isouter=True)
            .where(Job.id.in_(list(ids)))
        ).all()
        by_id = {job.id: _info(job, name) for job, name in rows}
    return _group_of(parent, [by_id[i] for i in ids if i in by_id])


def groups(db: Database, jobs: Sequence[JobInfo]) -> list[JobGroup]:
    """The groups of those of ``jobs`` that split their work, in the order given."""
    out = []
    for j in jobs:
        g = group(db, j.id) if j.child_ids else None
        if g is not None:
            out.append(g)
    return out


# -- the roll of workers --------------------------------------------------------------------


def register_worker(
    db: Database, worker_id: str, *, host: str, pid: int, device: str, kinds: Sequence[str]
) -> None:
    """Announce a worker (replacing an old row of the same id) and forget long-gone ones."""
    now = clock.utcnow()
    with db.begin() as s:
        s.execute(
            delete(WorkerProcess)
            .where(
                or_(WorkerProcess.id == worker_id,
                    WorkerProcess.heartbeat_at < now - WORKER_FORGET_AFTER)
            )
            .execution_options(synchronize_session=False)
        )
        s.add(
            WorkerProcess(
                id=worker_id,
                host=host[:128],
                pid=pid,
                device=device,
                kinds=list(kinds),
                current_job_id=None,
                started_at=now,
                heartbeat_at=now,
            )
        )


def worker_heartbeat(db: Database, worker_id: str, current_job_id: int | None) -> None:
    """Refresh a worker's heartbeat and the job it runs now."""
    with db.begin() as s:
        s.execute(
            update(WorkerProcess)
            .where(WorkerProcess.id == worker_id)
            .values(heartbeat_at=clock.utcnow(), current_job_id=current_job_id)
            .execution_options(synchronize_session=False)
        )


def stop_worker(db: Database, worker_id: str) -> None:
    """Record a worker's clean exit."""
    now = clock.utcnow()
    with db.begin() as s:
        s.execute(
            update(WorkerProcess)
            .where(WorkerProcess.id == worker_id)
            .values(stopped_at=now, heartbeat_at=now, current_job_id=None)
            .execution_options(synchronize_session=False)
        )


def list_workers(
    db: Database, *, alive_after: float = WORKER_ALIVE_AFTER, include_gone: bool = False
) -> list[WorkerInfo]:
    """Workers, most recently started first; only the alive ones unless ``include_gone``."""
    cutoff = clock.utcnow() - dt.timedelta(seconds=alive_after)
    with _reading(db) as s:
        rows = s.scalars(
            select(WorkerProcess).order_by(WorkerProcess.started_at.desc(), WorkerProcess.id)
        ).all()
        out = []
        for w in rows:
            beat = clock.as_utc(w.heartbeat_at)
            alive = w.stopped_at is None and beat is not None and beat >= cutoff
            if alive or include_gone:
                out.append(
                    WorkerInfo(
                        id=w.id,
                        host=w.host,
                        pid=w.pid,
                        device=w.device,
                        kinds=tuple(w.kinds or ()),
                        current_job_id=w.current_job_id,
                        started_at=clock.as_utc(w.started_at),
                        heartbeat_at=beat,
                        stopped_at=clock.as_utc(w.stopped_at),
                        alive=alive,
                    )
                )
        return out


def can_take(worker: WorkerInfo, job: JobInfo) -> bool:
    """Whether ``worker`` may claim ``job`` (device and kinds; the rule :func:`claim` applies)."""
    if worker.kinds and job.kind not in worker.kinds:
        return False
    if job.device is None or job.device == worker.device:
        return True
    return job.device == "cuda" and worker.device.startswith("cuda")


def json_result(value: Any) -> dict[str, Any] | None:
    """A kind's return value as a JSON object (``None`` stays ``None``).

    Raises:
        InvalidInput: not a dict, or not JSON-serialisable (NaN included).
    """
    if value is None:
        return None
    return _json_object(value, "job result")
