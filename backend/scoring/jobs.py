"""The scoring job queue, kept in the ``scoring_jobs`` table.

A job moves ``queued -> running -> done | failed``; a worker stopped politely puts it back to
``queued``. Claiming is one conditional UPDATE (``WHERE id = ? AND (status = 'queued' OR the
heartbeat is stale)``), so two workers never run the same job, and a job whose worker died
(kill -9, power loss) is taken over once its heartbeat is older than ``stale_after`` seconds.
Every write by a worker is conditioned on ``worker_id`` so a worker that lost its claim
cannot overwrite the new owner's progress.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from backend import config
from backend.metrics import registry
from backend.scoring.runner import ScorePair, ScoringError
from db.models import STUDY_STAGING, Image, Pair, Report, ScoringJob, Study

QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"
DEFAULT_STALE_AFTER = 120.0
#: Claims after which a job whose worker stopped heartbeating is failed, not taken over again.
MAX_ATTEMPTS = 3


@dataclass(frozen=True)
class JobInfo:
    """A scoring job as plain data."""

    id: int
    study_id: int | None
    study_name: str | None
    metrics: list[str]
    options: dict[str, dict[str, Any]]
    status: str
    progress_done: int
    progress_total: int
    message: str
    error: str | None
    worker_id: str | None
    heartbeat_at: dt.datetime | None
    created_at: dt.datetime | None
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    attempts: int = 0

    @property
    def fraction(self) -> float:
        """Progress between 0 and 1."""
        return self.progress_done / self.progress_total if self.progress_total else 0.0


def utcnow() -> dt.datetime:
    """Timezone-aware now."""
    return dt.datetime.now(dt.UTC)


def _aware(value: dt.datetime | None) -> dt.datetime | None:
    # SQLite hands back naive datetimes; everything is stored in UTC.
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value


def _info(job: ScoringJob, study_name: str | None) -> JobInfo:
    return JobInfo(
        id=job.id,
        study_id=job.study_id,
        study_name=study_name,
        metrics=list(job.metrics or []),
        options={k: dict(v) for k, v in (job.options or {}).items()},
        status=job.status,
        progress_done=job.progress_done,
        progress_total=job.progress_total,
        message=job.message,
        error=job.error,
        worker_id=job.worker_id,
        heartbeat_at=_aware(job.heartbeat_at),
        created_at=_aware(job.created_at),
        started_at=_aware(job.started_at),
        finished_at=_aware(job.finished_at),
        attempts=job.attempts or 0,
    )


def validate_request(
    metrics: Sequence[str], options: Mapping[str, Mapping[str, Any]] | None
) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """Check metric names and option families without importing any metric.

    Raises:
        ScoringError: unknown name, nothing requested, or options for a family not requested.
    """
    names = [m.strip() for m in metrics if m and m.strip()]
    try:
        families = registry.resolve(names)
    except registry.UnknownMetric as exc:
        raise ScoringError(str(exc)) from None
    if not families:
        raise ScoringError("no metrics requested")
    opts = {str(k): dict(v) for k, v in (options or {}).items()}
    stray = sorted(set(opts) - set(families))
    if stray:
        raise ScoringError(f"options given for metric(s) not requested: {', '.join(stray)}")
    return names, opts


def enqueue(
    db: Any,
    *,
    study_id: int,
    metrics: Sequence[str],
    options: Mapping[str, Mapping[str, Any]] | None = None,
) -> JobInfo:
    """Queue a job scoring study ``study_id`` with ``metrics``.

    Raises:
        ScoringError: see :func:`validate_request`, or the study does not exist.
    """
    names, opts = validate_request(metrics, options)
    with db.begin() as s:
        study = s.get(Study, study_id)
        if study is None or study.status == STUDY_STAGING:
            raise ScoringError(f"no study with id {study_id}")
        job = ScoringJob(study_id=study_id, metrics=names, options=opts, status=QUEUED)
        s.add(job)
        s.flush()
        return _info(job, study.name)


def _stale(cutoff: dt.datetime) -> Any:
    return (ScoringJob.status == RUNNING) & or_(
        ScoringJob.heartbeat_at.is_(None), ScoringJob.heartbeat_at < cutoff
    )


def _claimable(cutoff: dt.datetime, max_attempts: int) -> Any:
    return or_(
        ScoringJob.status == QUEUED,
        _stale(cutoff) & (ScoringJob.attempts < max_attempts),
    )


def claim(
    db: Any,
    *,
    worker_id: str,
    stale_after: float = DEFAULT_STALE_AFTER,
    max_attempts: int = MAX_ATTEMPTS,
) -> JobInfo | None:
    """Atomically take the oldest queued job, or a running one whose heartbeat is stale.

    A stale job that workers have already taken ``max_attempts`` times is marked failed
    instead: its workers keep dying on it (out of memory, a crashing extension), and taking
    it again would only kill the next one.

    Args:
        db: The database.
        worker_id: This worker's identity (written on the job).
        stale_after: Seconds without heartbeat after which a running job is taken over.
        max_attempts: Claims after which a stale job is failed rather than taken over.

    Returns:
        The claimed job, or ``None`` when there is nothing to do.
    """
    now = utcnow()
    cutoff = now - dt.timedelta(seconds=stale_after)
    with db.begin() as s:
        s.execute(
            update(ScoringJob)
            .where(_stale(cutoff), ScoringJob.attempts >= max_attempts)
            .values(
                status=FAILED,
                finished_at=now,
                error=f"its worker stopped responding {max_attempts} times while running it"
                " (killed, out of memory?); see the worker logs, then queue it again",
            )
            .execution_options(synchronize_session=False)
        )
        ids = s.scalars(
            select(ScoringJob.id)
            .where(_claimable(cutoff, max_attempts))
            .order_by(ScoringJob.id)
            .limit(10)
        ).all()
        for job_id in ids:
            res = s.execute(
                update(ScoringJob)
                .where(ScoringJob.id == job_id, _claimable(cutoff, max_attempts))
                .values(
                    status=RUNNING,
                    worker_id=worker_id,
                    heartbeat_at=now,
                    started_at=now,
                    error=None,
                    attempts=ScoringJob.attempts + 1,
                )
                .execution_options(synchronize_session=False)
            )
            if res.rowcount == 1:
                job = s.get(ScoringJob, job_id, populate_existing=True)
                assert job is not None
                name = s.scalar(select(Study.name).where(Study.id == job.study_id))
                return _info(job, name)
    return None


def _owned_update(db: Any, job_id: int, owner: str, /, **values: Any) -> bool:
    with db.begin() as s:
        res = s.execute(
            update(ScoringJob)
            .where(
                ScoringJob.id == job_id,
                ScoringJob.worker_id == owner,
                ScoringJob.status == RUNNING,
            )
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        return res.rowcount == 1


def heartbeat(db: Any, job_id: int, worker_id: str) -> bool:
    """Refresh the heartbeat; ``False`` when this worker no longer owns the job."""
    return _owned_update(db, job_id, worker_id, heartbeat_at=utcnow())


def report_progress(
    db: Any, job_id: int, worker_id: str, done: int, total: int, message: str
) -> bool:
    """Record progress (and heartbeat); ``False`` when this worker no longer owns the job."""
    return _owned_update(
        db,
        job_id,
        worker_id,
        progress_done=done,
        progress_total=total,
        message=message[:2000],
        heartbeat_at=utcnow(),
    )


def finish(db: Any, job_id: int, worker_id: str, message: str) -> bool:
    """Mark the job done."""
    return _owned_update(
        db, job_id, worker_id, status=DONE, message=message[:2000], finished_at=utcnow()
    )


def fail(db: Any, job_id: int, worker_id: str, error: str) -> bool:
    """Mark the job failed with ``error`` (shown to the admin)."""
    return _owned_update(
        db, job_id, worker_id, status=FAILED, error=error[:4000], finished_at=utcnow()
    )


def release(db: Any, job_id: int, worker_id: str, message: str = "") -> bool:
    """Put a job this worker owns back in the queue (polite shutdown: not a failed attempt)."""
    return _owned_update(
        db, job_id, worker_id, status=QUEUED, worker_id=None, heartbeat_at=None, message=message,
        attempts=ScoringJob.attempts - 1,
    )


def get(db: Any, job_id: int) -> JobInfo | None:
    """The job with ``job_id`` or ``None``."""
    with _reading(db) as s:
        job = s.get(ScoringJob, job_id)
        if job is None:
            return None
        name = s.scalar(select(Study.name).where(Study.id == job.study_id))
        return _info(job, name)


def list_jobs(db: Any, *, study_id: int | None = None, limit: int = 200) -> list[JobInfo]:
    """Jobs, newest first, optionally of one study."""
    with _reading(db) as s:
        q = (
            select(ScoringJob, Study.name)
            .join(Study, Study.id == ScoringJob.study_id, isouter=True)
            .order_by(ScoringJob.id.desc())
            .limit(limit)
        )
        if study_id is not None:
            q = q.where(ScoringJob.study_id == study_id)
        return [_info(job, name) for job, name in s.execute(q)]


def study_id_by_name(session: Session, name: str) -> int | None:
    """The id of the study called ``name`` (a study still being imported has none yet)."""
    return session.scalar(
        select(Study.id).where(Study.name == name, Study.status != STUDY_STAGING)
    )


def _reading(db: Any) -> Any:
    """A read-only transaction where the database offers one (no SQLite write lock)."""
    read = getattr(db, "read", None)
    return read() if read is not None else db.begin()


def study_pairs(db: Any, study_id: int, *, data_dir: Path | None = None) -> list[ScorePair]:
    """The pairs of a study as runner inputs, in position order.

    Texts come from ``Report``, image paths from ``Image`` (relative to the data folder), and
    the cache key is the ``input_hash`` stored on the ``Pair`` row, so that the dashboard
    finds what the runner stores.
    """
    base = data_dir or config.data_dir()
    # A read of every pair of a large study: it must not hold the write lock meanwhile.
    with _reading(db) as s:
        ref = Report.__table__.alias("ref")
        cand = Report.__table__.alias("cand")
        rows = s.execute(
            select(Pair.id, Pair.case_id, Pair.input_hash, ref.c.text, cand.c.text)
            .join(ref, ref.c.id == Pair.reference_id)
            .join(cand, cand.c.id == Pair.candidate_id)
            .where(Pair.study_id == study_id)
            .order_by(Pair.position)
        ).all()
        case_ids = sorted({r[1] for r in rows})
        images: dict[int, list[tuple[str, str]]] = {}
        for start in range(0, len(case_ids), 500):
            chunk = case_ids[start : start + 500]
            for case_id, path, sha in s.execute(
                select(Image.case_id, Image.path, Image.sha256)
                .where(Image.case_id.in_(chunk))
                .order_by(Image.id)
            ):
                images.setdefault(case_id, []).append((path, sha))
    out: list[ScorePair] = []
    for pair_id, case_id, ih, ref_text, cand_text in rows:
        imgs = images.get(case_id, [])
        out.append(
            ScorePair(
                id=str(pair_id),
                reference=ref_text,
                candidate=cand_text,
                images=tuple(base / p for p, _ in imgs),
                image_sha256s=tuple(sha for _, sha in imgs),
                stored_hash=ih,
            )
        )
    return out
