"""What a job kind gets to run: the database, its job (id, study, actor), the warm metric pool.

A kind reports progress through :meth:`JobContext.progress` (or calls
:meth:`JobContext.check` between steps that report nothing). Both raise
:class:`JobCancelled` when the job must stop: an admin cancelled it, another worker took it
over (this one was presumed dead), or this worker is shutting down. The kind lets the
exception propagate (cleaning up its staging area on the way, if it has one); the worker
records the outcome.

The context carries what the worker read when it claimed the job (its study and who queued
it), so a kind never reads its own job row again: :attr:`JobContext.study_id` and
:attr:`JobContext.actor`.

Within :mod:`backend.jobs` the imports run one way: context -> queue -> registry.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from radconcord.backend.errors import NotFound
from radconcord.backend.jobs import queue
from radconcord.backend.jobs.queue import CANCELLED_BY_USER, CLAIM_LOST, WORKER_STOPPING
from radconcord.backend.types import Actor
from radconcord.db.models import User

if TYPE_CHECKING:
    from radconcord.backend.scoring.runner import MetricPool
    from radconcord.db.session import Database

__all__ = [
    "CANCELLED_BY_USER",
    "CLAIM_LOST",
    "PROGRESS_EVERY",
    "SYSTEM_CREATORS",
    "WORKER_STOPPING",
    "JobCancelled",
    "JobContext",
    "KindFn",
]

#: ``created_by`` of the jobs queued by the command line or a script: they run as
#: :meth:`Actor.system`.
SYSTEM_CREATORS = frozenset({"", "system"})

#: Seconds between two progress writes of one job (the last step is always written).
PROGRESS_EVERY = 0.5


class JobCancelled(Exception):
    """The running job must stop now; ``reason`` says why (see the module docstring)."""

    def __init__(self, reason: str = CANCELLED_BY_USER) -> None:
        """Create the exception for ``reason`` (cancelled, lost or stopping)."""
        self.reason = reason
        super().__init__(
            {
                CANCELLED_BY_USER: "the job was cancelled",
                CLAIM_LOST: "another worker took the job over",
                WORKER_STOPPING: "the worker is stopping",
            }.get(reason, reason)
        )


@dataclass
class JobContext:
    """A running job as its kind sees it.

    Attributes:
        db: The database (the kind opens its own short transactions).
        job_id: The job's id.
        worker_id: The worker running it (every write of the queue is conditioned on it).
        device: ``cpu`` or ``cuda:N``: where this worker runs models.
        pool: The worker's warm metric instances (one per process: a model loads once).
        batch_size: Items per committed batch for kinds that batch (the worker's setting).
        stop_event: Set when the worker is asked to stop.
        study_id: The study the job works on (``None`` for a job without one).
        created_by: Who queued the job (``""`` or ``system``: the command line or a script).
    """

    db: Database
    job_id: int
    worker_id: str
    device: str
    pool: MetricPool
    batch_size: int = 32
    stop_event: threading.Event = field(default_factory=threading.Event)
    study_id: int | None = None
    created_by: str = ""
    _interrupt: str | None = field(default=None, init=False, repr=False)
    _last_write: float = field(default=0.0, init=False, repr=False)
    #: The last ``(done, total)`` the kind reported, written or not (throttled).
    last_progress: tuple[int, int] | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _actor: Actor | None = field(default=None, init=False, repr=False)

    @property
    def actor(self) -> Actor:
        """The account that queued the job, as an :class:`Actor` (read on first use).

        A job runs on behalf of the admin who queued it, as that account is now: a demoted
        or deactivated admin's queued job fails the service's own role check. Jobs queued by
        the command line or a script run as :meth:`Actor.system`.

        Raises:
            NotFound: the account that queued the job no longer exists.
        """
        if self._actor is None:
            self._actor = self._load_actor()
        return self._actor

    def _load_actor(self) -> Actor:
        name = self.created_by or ""
        if name in SYSTEM_CREATORS:
            return Actor.system()
        with self.db.begin() as s:
            user = s.scalar(select(User).where(User.username == name))
            if user is None:
                raise NotFound(
                    f"the account {name!r} that queued job {self.job_id} no longer exists"
                )
            role = user.role if user.active else "inactive"
            return Actor(user_id=user.id, username=user.username, role=role)

    def interrupt(self, reason: str) -> None:
        """Make the next :meth:`check` raise :class:`JobCancelled` for ``reason``.

        Called by the worker's heartbeat thread; the first reason wins (a lost claim is not
        turned into a cancellation by a later beat).
        """
        with self._lock:
            if self._interrupt is None:
                self._interrupt = reason

    @property
    def interrupted(self) -> str | None:
        """The reason the job must stop, or ``None``."""
        if self._interrupt is None and self.stop_event.is_set():
            return WORKER_STOPPING
        return self._interrupt

    def progress(self, done: int, total: int, message: str = "") -> None:
        """Record progress (and the heartbeat), at most every :data:`PROGRESS_EVERY` s.

        Raises:
            JobCancelled: the job was cancelled, its claim was lost, or the worker stops.
        """
        self.last_progress = (int(done), int(total))
        now = time.monotonic()
        if done >= total or now - self._last_write >= PROGRESS_EVERY:
            self._last_write = now
            state = queue.report_progress(
                self.db, self.job_id, self.worker_id, done, total, message
            )
            if state is not None:
                self.interrupt(state)
        self._raise_if_interrupted()

    def check(self) -> None:
        """Raise :class:`JobCancelled` if the job must stop; otherwise return at once.

        Reads the job row at most every :data:`PROGRESS_EVERY` s (the heartbeat thread
        also looks), so calling it in a tight loop is cheap.
        """
        now = time.monotonic()
        if self._interrupt is None and now - self._last_write >= PROGRESS_EVERY:
            self._last_write = now
            state = queue.heartbeat(self.db, self.job_id, self.worker_id)
            if state is not None:
                self.interrupt(state)
        self._raise_if_interrupted()

    def enqueue_children(self, kind: str, params: list[dict[str, Any]]) -> list[int]:
        """Queue one ``kind`` job per entry of ``params`` for this job, once (see
        :func:`backend.jobs.queue.enqueue_children`): a retry gets the ids queued before.

        Raises:
            JobCancelled: the job was cancelled or its claim was lost (nothing queued).
            InvalidInput: unknown kind, params that are not JSON objects.
        """
        state, ids = queue.enqueue_children(self.db, self.job_id, self.worker_id, kind, params)
        if state is not None:
            self.interrupt(state)
            self._raise_if_interrupted()
        return ids

    def _raise_if_interrupted(self) -> None:
        reason = self.interrupted
        if reason is not None:
            raise JobCancelled(reason)


#: The signature of a kind's ``run(ctx, params)``: its JSON result, or ``None``.
KindFn = Callable[[JobContext, dict[str, Any]], "dict[str, Any] | None"]
