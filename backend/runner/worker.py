"""The worker: the only process that loads models. It takes jobs of any kind from the queue.

A worker claims one job at a time (:func:`backend.jobs.queue.claim`), keeps a heartbeat
thread while it runs (so a long model forward pass does not look like a dead worker), calls
the kind's ``run(ctx, params)`` and records the outcome: done with its result, failed with a
reason, cancelled on request, or put back in the queue when the worker is asked to stop.
Metric instances live in one :class:`~backend.scoring.runner.MetricPool` for the whole
process: a model is loaded once and stays warm across jobs and kinds.

After ``kill -9`` the job stays ``running`` with an old heartbeat; the next worker takes it
over once the heartbeat is older than ``stale_after`` seconds (at most ``MAX_ATTEMPTS``
claims in all) and the kind, written to be safe to run again, finishes it.

Each worker announces itself in the ``workers`` table (id ``host:pid:random``, device, kinds,
current job, heartbeat) so the Metrics page can show who is alive; a clean exit sets
``stopped_at``. The command line (``python -m backend worker``) is in :mod:`backend.cli.jobs`.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from radconcord.backend.errors import InvalidInput, ServiceError
from radconcord.backend.jobs import queue, registry
from radconcord.backend.jobs.context import JobCancelled, JobContext, KindFn
from radconcord.backend.jobs.queue import (
    CANCELLED_BY_USER,
    CHUNK_KIND,
    CLAIM_LOST,
    WORKER_STOPPING,
    JobInfo,
)

if TYPE_CHECKING:
    from radconcord.backend.scoring.runner import MetricPool
    from radconcord.db.session import Database

log = logging.getLogger(__name__)

_WORKER_DEVICE = re.compile(r"cpu|cuda|cuda:[0-9]+")


def _user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions whose message is meant for the admin as is (no type name, no traceback)."""
    from radconcord.backend.metrics.base import MetricInputError, MetricUnavailable
    from radconcord.backend.scoring.runner import MetricFailed, ScoringError

    return (ServiceError, ScoringError, MetricUnavailable, MetricFailed, MetricInputError)


def default_worker_id() -> str:
    """``host:pid:random``: unique even when a pid is reused on the same host."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def normalise_device(device: str) -> str:
    """``cpu`` or ``cuda:N`` (a bare ``cuda`` is the first GPU).

    Raises:
        InvalidInput: anything else.
    """
    dev = (device or "").strip().lower()
    if not _WORKER_DEVICE.fullmatch(dev):
        raise InvalidInput(f"worker device: expected cpu, cuda or cuda:N, got {device!r}")
    return "cuda:0" if dev == "cuda" else dev


class Worker:
    """Takes jobs from the queue and runs them with warm metrics."""

    def __init__(
        self,
        db: Database,
        *,
        device: str = "cpu",
        kinds: Sequence[str] | None = None,
        stale_after: float = queue.DEFAULT_STALE_AFTER,
        worker_id: str | None = None,
        heartbeat_every: float | None = None,
        max_attempts: int = queue.MAX_ATTEMPTS,
        batch_size: int | None = None,
        pool: MetricPool | None = None,
    ) -> None:
        """Create a worker (nothing is written until it first looks for a job).

        Args:
            db: The database holding the queue and everything the kinds read and write.
            device: ``cpu``, ``cuda`` (the first GPU) or ``cuda:N``.
            kinds: Job kinds it takes (default: all registered kinds).
            stale_after: Seconds without heartbeat after which a running job is taken over.
            worker_id: Identity written on claimed jobs (default ``host:pid:random``).
            heartbeat_every: Seconds between heartbeats (default a quarter of
                ``stale_after``, at most 10 s).
            max_attempts: Claims after which a job whose workers keep dying is failed.
            batch_size: Items per committed batch for kinds that batch (default: the
                scoring runner's).
            pool: Metric instances to reuse (default: a new pool for this worker).

        Raises:
            InvalidInput: unknown device or kind, non-positive timings.
        """
        from radconcord.backend.scoring.runner import DEFAULT_BATCH_SIZE, MetricPool

        if stale_after <= 0:
            raise InvalidInput(f"stale_after must be positive (got {stale_after})")
        self.db = db
        self.device = normalise_device(device)
        names = [k.strip() for k in (kinds or ()) if k and k.strip()]
        for name in names:
            try:
                registry.check_kind(name)
            except registry.UnknownJobKind as exc:
                raise InvalidInput(f"worker kinds: {exc}") from None
        # A split score job's chunks are score work: a worker taking ``score`` takes them too.
        if "score" in names and CHUNK_KIND not in names:
            names.append(CHUNK_KIND)
        self.kinds: tuple[str, ...] = tuple(dict.fromkeys(names))
        self.worker_id = worker_id or default_worker_id()
        self.stale_after = float(stale_after)
        self.heartbeat_every = (
            float(heartbeat_every)
            if heartbeat_every is not None
            else min(10.0, self.stale_after / 4)
        )
        if not 0 < self.heartbeat_every < self.stale_after:
            raise InvalidInput("heartbeat interval must be positive and shorter than stale_after")
        self.max_attempts = max_attempts
        self.batch_size = batch_size or DEFAULT_BATCH_SIZE
        self.pool = pool if pool is not None else MetricPool()
        self.stop_event = threading.Event()
        self._registered = False
        self._last_beat = 0.0

    # -- the roll of workers -------------------------------------------------------------

    def register(self) -> None:
        """Announce this worker in the ``workers`` table (done on first use)."""
        if not self._registered:
            queue.register_worker(
                self.db,
                self.worker_id,
                host=socket.gethostname(),
                pid=os.getpid(),
                device=self.device,
                kinds=self.kinds,
            )
            self._registered = True
            self._last_beat = time.monotonic()

    def close(self) -> None:
        """Record a clean exit (``stopped_at``) and free the warm models."""
        if self._registered:
            queue.stop_worker(self.db, self.worker_id)
            self._registered = False
        self.pool.close()

    def _beat_if_due(self) -> None:
        if time.monotonic() - self._last_beat >= self.heartbeat_every:
            self._last_beat = time.monotonic()
            try:
                queue.worker_heartbeat(self.db, self.worker_id, None)
            except Exception as exc:  # the next beat retries; an idle worker goes on
                log.warning("worker heartbeat failed: %s", exc)

    # -- jobs ----------------------------------------------------------------------------

    def run_once(self) -> JobInfo | None:
        """Claim one due job and run it; its final state, or ``None`` if none was due."""
        self.register()
        job = queue.claim(
            self.db,
            worker_id=self.worker_id,
            device=self.device,
            kinds=self.kinds or None,
            stale_after=self.stale_after,
            max_attempts=self.max_attempts,
        )
        if job is None:
            self._beat_if_due()
            return None
        self._run(job)
        return queue.get(self.db, job.id)

    def run_forever(self, *, once: bool = False, poll: float = 2.0) -> int:
        """Process jobs until stopped; with ``once``, until nothing is due.

        Sets ``stopped_at`` on the way out, however it leaves.

        Returns:
            The number of jobs processed.
        """
        n = 0
        try:
            while not self.stop_event.is_set():
                try:
                    job = self.run_once()
                except Exception:
                    if once:
                        raise
                    # The database went away for a moment (restart, network, lock timeout):
                    # a long-running worker waits and tries again rather than exit; its job,
                    # if it had one, is taken over once its heartbeat is stale.
                    log.exception("worker %s: queue unavailable; retrying in %.0f s",
                                  self.worker_id, max(poll, 5.0))
                    self.stop_event.wait(max(poll, 5.0))
                    continue
                if job is not None:
                    n += 1
                    continue
                if once:
                    break
                self.stop_event.wait(poll)
        finally:
            try:
                self.close()
            except Exception as exc:  # the row then just stops heartbeating: shown not alive
                log.warning("worker %s: could not record its exit: %s", self.worker_id, exc)
        return n

    def _run(self, job: JobInfo) -> None:
        log.info("worker %s: job %d (%s) started", self.worker_id, job.id, job.kind)
        ctx = JobContext(
            db=self.db,
            job_id=job.id,
            worker_id=self.worker_id,
            device=self.device,
            pool=self.pool,
            batch_size=self.batch_size,
            stop_event=self.stop_event,
            study_id=job.study_id,
            created_by=job.created_by,
        )
        beat_stop = threading.Event()

        def beat() -> None:
            # Keeps the claim alive while a long step runs, and carries a cancellation
            # request to the context so the kind's next check sees it without a query.
            while not beat_stop.wait(self.heartbeat_every):
                try:
                    state = queue.heartbeat(self.db, job.id, self.worker_id)
                    if state is not None:
                        ctx.interrupt(state)
                    queue.worker_heartbeat(self.db, self.worker_id, job.id)
                    self._last_beat = time.monotonic()
                    if state == CLAIM_LOST:
                        return
                except Exception as exc:  # the next beat retries; the job goes on
                    log.warning("heartbeat of job %d failed: %s", job.id, exc)

        try:
            queue.worker_heartbeat(self.db, self.worker_id, job.id)
        except Exception as exc:
            log.warning("worker heartbeat failed: %s", exc)
        beater = threading.Thread(target=beat, name=f"heartbeat-{job.id}", daemon=True)
        beater.start()
        try:
            self._execute(job, ctx)
        finally:
            beat_stop.set()
            beater.join(timeout=30)
            try:
                queue.worker_heartbeat(self.db, self.worker_id, None)
                self._last_beat = time.monotonic()
            except Exception as exc:
                log.warning("worker heartbeat failed: %s", exc)

    def _execute(self, job: JobInfo, ctx: JobContext) -> None:
        try:
            run: KindFn = registry.load_kind(job.kind)
            result = queue.json_result(run(ctx, dict(job.params)))
        except JobCancelled as exc:
            self._interrupted(job, exc.reason, ctx.last_progress)
            return
        except Exception as exc:
            if ctx.interrupted == CLAIM_LOST:
                # The failure may well come from the takeover; the new owner decides.
                log.warning("worker %s lost job %d (then: %s)", self.worker_id, job.id, exc)
                return
            if isinstance(exc, _user_errors()):
                error = str(exc)
                log.warning("job %d (%s) failed: %s", job.id, job.kind, exc)
            else:
                # A bug in a kind or a metric fails the job with a reason, never the worker.
                log.exception("job %d (%s) failed", job.id, job.kind)
                error = f"{type(exc).__name__}: {exc}"
            queue.fail(self.db, job.id, self.worker_id, error, progress=ctx.last_progress)
            return
        summary = result.get("summary") if result else None
        message = summary if isinstance(summary, str) and summary else "done"
        if queue.finish(self.db, job.id, self.worker_id, result, message):
            log.info("worker %s: job %d done", self.worker_id, job.id)
        else:
            log.warning("worker %s lost job %d before recording it done", self.worker_id, job.id)

    def _interrupted(
        self, job: JobInfo, reason: str, progress: tuple[int, int] | None
    ) -> None:
        if reason == WORKER_STOPPING:
            # An admin's cancel that arrived meanwhile wins over putting it back in the queue.
            if queue.heartbeat(self.db, job.id, self.worker_id) == CANCELLED_BY_USER:
                reason = CANCELLED_BY_USER
        if reason == CLAIM_LOST:
            log.warning("worker %s lost job %d to another worker", self.worker_id, job.id)
        elif reason == WORKER_STOPPING:
            queue.release(self.db, job.id, self.worker_id, "worker stopped; job re-queued")
            log.info("worker %s: job %d re-queued", self.worker_id, job.id)
        else:
            done = f" after {progress[0]} of {progress[1]} steps" if progress else ""
            queue.mark_cancelled(
                self.db, job.id, self.worker_id, f"cancelled{done}", progress=progress
            )
            log.info("worker %s: job %d cancelled", self.worker_id, job.id)
