"""What a job kind gets to run: the database, its job's identity, the warm metric pool.

A kind reports progress through :meth:`JobContext.progress` (or calls
:meth:`JobContext.check` between steps that report nothing). Both raise
:class:`JobCancelled` when the job must stop: an admin cancelled it, another worker took it
over (this one was presumed dead), or this worker is shutting down. The kind lets the
exception propagate (cleaning up its staging area on the way, if it has one); the worker
records the outcome.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from radconcord.backend.scoring.runner import MetricPool

#: Why a job was interrupted (``JobCancelled.reason``).
CANCELLED_BY_USER, CLAIM_LOST, WORKER_STOPPING = "cancelled", "lost", "stopping"

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
    """

    db: Any
    job_id: int
    worker_id: str
    device: str
    pool: MetricPool
    batch_size: int = 32
    stop_event: threading.Event = field(default_factory=threading.Event)
    _interrupt: str | None = field(default=None, init=False, repr=False)
    _last_write: float = field(default=0.0, init=False, repr=False)
    #: The last ``(done, total)`` the kind reported, written or not (throttled).
    last_progress: tuple[int, int] | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

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
        from radconcord.backend.jobs import queue

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
        from radconcord.backend.jobs import queue

        now = time.monotonic()
        if self._interrupt is None and now - self._last_write >= PROGRESS_EVERY:
            self._last_write = now
            state = queue.heartbeat(self.db, self.job_id, self.worker_id)
            if state is not None:
                self.interrupt(state)
        self._raise_if_interrupted()

    def _raise_if_interrupted(self) -> None:
        reason = self.interrupted
        if reason is not None:
            raise JobCancelled(reason)
