"""The scoring worker: ``python -m backend worker [--once] [--poll S] [--worker-id ID]``.

The worker is the only process that loads models. It claims one job at a time from the
database, keeps a heartbeat while it runs, scores the study's pairs through the runner (each
batch committed on its own, so progress survives a crash) and marks the job done or failed.
Metric instances live in a :class:`~backend.scoring.runner.MetricPool` for the whole process:
a model is loaded once and stays warm across jobs.

After ``kill -9`` the job stays ``running`` with an old heartbeat; the next worker takes it
over once the heartbeat is older than ``--stale-after`` seconds and, thanks to the score
cache, computes only the pairs that were not committed. SIGTERM/SIGINT stop the worker after
the current batch and put the job back in the queue.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from backend.metrics.base import MetricInputError, MetricUnavailable
from backend.scoring import jobs
from backend.scoring.runner import (
    DEFAULT_BATCH_SIZE,
    MetricFailed,
    MetricPool,
    ScoringError,
    score,
)

log = logging.getLogger(__name__)


class _Stop(Exception):
    """Raised from the progress callback to leave a job between batches."""


class Worker:
    """Takes jobs from the queue and runs them with warm metrics."""

    def __init__(
        self,
        db: Any,
        *,
        worker_id: str | None = None,
        stale_after: float = jobs.DEFAULT_STALE_AFTER,
        heartbeat_every: float | None = None,
        device: str = "auto",
        batch_size: int = DEFAULT_BATCH_SIZE,
        pool: MetricPool | None = None,
    ) -> None:
        """Create a worker.

        Args:
            db: The database holding the queue, the studies and the score cache.
            worker_id: Identity written on claimed jobs (default ``host:pid``).
            stale_after: Seconds without heartbeat after which a running job is taken over.
            heartbeat_every: Seconds between heartbeats (default a quarter of
                ``stale_after``, at most 10 s).
            device: ``auto``, ``cpu`` or ``cuda[:N]``.
            batch_size: Pairs per batch (each batch is one committed transaction).
            pool: Metric instances to reuse (default: a new pool for this worker).
        """
        self.db = db
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}"
        self.stale_after = float(stale_after)
        self.heartbeat_every = (
            float(heartbeat_every)
            if heartbeat_every is not None
            else min(10.0, self.stale_after / 4)
        )
        self.device = device
        self.batch_size = batch_size
        self.pool = pool or MetricPool()
        self.stop_event = threading.Event()

    def run_once(self) -> jobs.JobInfo | None:
        """Claim one job and run it; return it (final state) or ``None`` if none was due."""
        job = jobs.claim(self.db, worker_id=self.worker_id, stale_after=self.stale_after)
        if job is None:
            return None
        self._run(job)
        return jobs.get(self.db, job.id)

    def run(self, *, once: bool = False, poll: float = 2.0) -> int:
        """Process jobs until stopped; with ``once``, until the queue has nothing due.

        Returns:
            The number of jobs processed.
        """
        n = 0
        while not self.stop_event.is_set():
            job = self.run_once()
            if job is not None:
                n += 1
                continue
            if once:
                break
            self.stop_event.wait(poll)
        return n

    def _run(self, job: jobs.JobInfo) -> None:
        log.info("worker %s: job %d (%s) started", self.worker_id, job.id, job.study_name)
        lost = threading.Event()
        beat_stop = threading.Event()

        def beat() -> None:
            # Keeps the claim alive while a long batch (a model forward pass) runs.
            while not beat_stop.wait(self.heartbeat_every):
                try:
                    if not jobs.heartbeat(self.db, job.id, self.worker_id):
                        lost.set()
                        return
                except Exception as exc:  # the next beat retries; the job goes on
                    log.warning("heartbeat of job %d failed: %s", job.id, exc)

        beater = threading.Thread(target=beat, name=f"heartbeat-{job.id}", daemon=True)
        beater.start()
        try:
            if job.study_id is None:
                raise ScoringError("job has no study")
            pairs = jobs.study_pairs(self.db, job.study_id)

            def progress(done: int, total: int, message: str) -> None:
                if not jobs.report_progress(self.db, job.id, self.worker_id, done, total, message):
                    lost.set()
                if lost.is_set() or self.stop_event.is_set():
                    raise _Stop

            if not jobs.report_progress(
                self.db, job.id, self.worker_id, 0, 0, f"scoring {len(pairs)} pairs"
            ):
                raise _Stop
            table = score(
                pairs,
                job.metrics,
                options=job.options,
                device=self.device,
                batch_size=self.batch_size,
                db=self.db,
                progress=progress,
                pool=self.pool,
            )
            parts = [
                f"{f}: {r.computed} computed, {r.cached} cached"
                + (f" ({r.seconds:.1f} s on {r.device})" if r.computed else "")
                for f, r in table.families.items()
            ]
            if table.empty_ids:
                parts.append(f"{len(table.empty_ids)} pair(s) with an empty report -> nan")
            jobs.finish(self.db, job.id, self.worker_id, "; ".join(parts))
            log.info("worker %s: job %d done", self.worker_id, job.id)
        except _Stop:
            if lost.is_set():
                log.warning("worker %s lost job %d to another worker", self.worker_id, job.id)
            else:
                jobs.release(self.db, job.id, self.worker_id, "worker stopped; job re-queued")
                log.info("worker %s: job %d re-queued", self.worker_id, job.id)
        except (ScoringError, MetricUnavailable, MetricFailed, MetricInputError) as exc:
            jobs.fail(self.db, job.id, self.worker_id, str(exc))
            log.warning("job %d failed: %s", job.id, exc)
        except Exception as exc:
            # A bug in a metric must fail the job with a reason, never kill the worker.
            log.exception("job %d failed", job.id)
            jobs.fail(self.db, job.id, self.worker_id, f"{type(exc).__name__}: {exc}")
        finally:
            beat_stop.set()
            beater.join(timeout=5)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the worker's options to ``parser`` (shared by ``python -m backend worker``)."""
    parser.add_argument(
        "--once", action="store_true", help="process the jobs that are due, then exit"
    )
    parser.add_argument(
        "--poll", type=float, default=2.0, metavar="SECONDS", help="queue polling interval"
    )
    parser.add_argument("--worker-id", default=None, metavar="ID", help="default host:pid")
    parser.add_argument(
        "--stale-after",
        type=float,
        default=jobs.DEFAULT_STALE_AFTER,
        metavar="SECONDS",
        help="take over a running job whose heartbeat is older than this",
    )
    parser.add_argument(
        "--heartbeat",
        type=float,
        default=None,
        metavar="SECONDS",
        help="heartbeat interval (default: stale-after / 4, at most 10)",
    )
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    parser.add_argument(
        "--batch-size", type=int, default=DEFAULT_BATCH_SIZE, metavar="N", help="pairs per batch"
    )


def run_from_args(args: argparse.Namespace, db: Any | None = None) -> int:
    """Run a worker configured by parsed ``args``; returns the exit status."""
    from backend.cli import UserError

    if args.poll <= 0 or args.stale_after <= 0 or args.batch_size < 1:
        raise UserError("--poll and --stale-after must be positive, --batch-size at least 1")
    if args.heartbeat is not None and not 0 < args.heartbeat < args.stale_after:
        raise UserError("--heartbeat must be positive and shorter than --stale-after")
    if db is None:
        from db.session import Database

        db = Database()
    worker = Worker(
        db,
        worker_id=args.worker_id,
        stale_after=args.stale_after,
        heartbeat_every=args.heartbeat,
        device=args.device,
        batch_size=args.batch_size,
    )
    previous = {}

    def on_signal(signum: int, _frame: object) -> None:
        if worker.stop_event.is_set():
            raise KeyboardInterrupt
        log.warning("signal %d: stopping after the current batch", signum)
        worker.stop_event.set()

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, on_signal)
    try:
        t0 = time.monotonic()
        n = worker.run(once=args.once, poll=args.poll)
        log.info("worker %s: %d job(s) in %.1f s", worker.worker_id, n, time.monotonic() - t0)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of a stand-alone worker process (``python -m backend.scoring.worker``)."""
    from backend.cli import UserError

    parser = argparse.ArgumentParser(prog="python -m backend worker")
    add_arguments(parser)
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(list(argv) if argv is not None else None)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return run_from_args(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
