"""``python -m backend worker ...`` and ``python -m backend jobs list|cancel|workers``.

``worker`` runs a worker process: it announces itself in the ``workers`` table, takes jobs
of every kind (or of ``--kinds``) for its ``--device`` from the queue, and runs them with
warm models until SIGTERM/SIGINT (the current job is put back in the queue at its next
step) or, with ``--once``, until nothing is due. Run one per GPU (``--device cuda:N``) and
any number on CPU; they claim jobs safely on SQLite and PostgreSQL. A score job queued with
``chunks: K`` is split into ``score_chunk`` jobs that all of them take at once; ``jobs list``
shows it as its chunks combined and ``jobs cancel`` on it cancels them.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from radconcord.backend.cli.common import UserError, database, service_errors

if TYPE_CHECKING:
    from radconcord.backend.cli.common import Commands
    from radconcord.backend.runner.worker import Worker
    from radconcord.db.session import Database

log = logging.getLogger(__name__)


def register(subparsers: Commands | argparse._SubParsersAction) -> None:
    """Add the ``worker`` command and the ``jobs`` command group (both top-level)."""
    from radconcord.backend.jobs import DEFAULT_STALE_AFTER, kind_names

    w = subparsers.add_parser(
        "worker",
        help="run a worker: takes jobs (scoring, probes, builds, ...) from the database",
        description="Take jobs from the database and run them with warm models.",
    )
    w.add_argument(
        "--device", default="cpu", help="cpu (default), cuda (the first GPU) or cuda:N"
    )
    w.add_argument(
        "--kinds",
        default="",
        metavar="K1,K2",
        help=f"job kinds to take (default: all of {', '.join(kind_names())}; score"
        " includes score_chunk, the chunks of a split score job)",
    )
    w.add_argument("--once", action="store_true", help="process the jobs that are due, then exit")
    w.add_argument(
        "--poll", type=float, default=2.0, metavar="SECONDS", help="queue polling interval"
    )
    w.add_argument("--worker-id", default=None, metavar="ID", help="default host:pid:random")
    w.add_argument(
        "--stale-after",
        type=float,
        default=DEFAULT_STALE_AFTER,
        metavar="SECONDS",
        help="take over a running job whose heartbeat is older than this",
    )
    w.add_argument(
        "--heartbeat",
        type=float,
        default=None,
        metavar="SECONDS",
        help="heartbeat interval (default: stale-after / 4, at most 10)",
    )
    w.add_argument(
        "--batch-size", type=int, default=None, metavar="N",
        help="items per committed batch for kinds that batch (default 32)",
    )
    w.set_defaults(func=cmd_worker)

    j = subparsers.add_parser("jobs", help="list or cancel jobs, list workers")
    jsub = j.add_subparsers(dest="jobs_command", required=True)
    ls = jsub.add_parser("list", help="jobs, newest first")
    ls.add_argument("--study", metavar="NAME", help="only this study's jobs")
    ls.add_argument("--kind", metavar="KIND", help="only jobs of this kind")
    ls.add_argument("--limit", type=int, default=50, metavar="N", help="at most N (default 50)")
    ls.set_defaults(func=cmd_jobs_list)
    cancel = jsub.add_parser("cancel", help="cancel a queued or running job")
    cancel.add_argument("job_id", type=int, metavar="ID")
    cancel.set_defaults(func=cmd_jobs_cancel)
    workers = jsub.add_parser("workers", help="worker processes alive now")
    workers.add_argument("--all", action="store_true", help="also those that stopped or died")
    workers.set_defaults(func=cmd_jobs_workers)


def _check_cuda(device: str) -> None:
    """Refuse a GPU worker where that GPU does not exist (it would fail every model job)."""
    if not device.startswith("cuda"):
        return
    try:
        import torch
    except ImportError:
        raise UserError(f"--device {device}: torch is not installed here") from None
    index = int(device.split(":", 1)[1])
    if not torch.cuda.is_available():
        raise UserError(f"--device {device}: CUDA is not available here")
    if index >= torch.cuda.device_count():
        raise UserError(
            f"--device {device}: this machine has {torch.cuda.device_count()} GPU(s)"
        )


def build_worker(args: argparse.Namespace, db: Database) -> Worker:
    """The :class:`~backend.runner.worker.Worker` that ``args`` describe.

    Raises:
        UserError: a bad device, kind or timing.
    """
    from radconcord.backend.errors import InvalidInput
    from radconcord.backend.jobs.registry import KINDS
    from radconcord.backend.runner.worker import Worker, normalise_device

    if args.poll <= 0 or args.stale_after <= 0:
        raise UserError("--poll and --stale-after must be positive")
    if args.batch_size is not None and args.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1 (got {args.batch_size})")
    if args.heartbeat is not None and not 0 < args.heartbeat < args.stale_after:
        raise UserError("--heartbeat must be positive and shorter than --stale-after")
    try:
        device = normalise_device(args.device)
    except InvalidInput:
        raise UserError(f"--device: expected cpu, cuda or cuda:N, got '{args.device}'") from None
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise UserError(
            f"--kinds: unknown job kind(s) {', '.join(unknown)} (known: {', '.join(KINDS)})"
        )
    return Worker(
        db,
        device=device,
        kinds=kinds,
        stale_after=args.stale_after,
        worker_id=args.worker_id,
        heartbeat_every=args.heartbeat,
        batch_size=args.batch_size,
    )


def cmd_worker(args: argparse.Namespace) -> int:
    """Run a worker until stopped (or, with ``--once``, until nothing is due)."""
    with database() as db:
        worker = build_worker(args, db)
        _check_cuda(worker.device)
        if not logging.getLogger().isEnabledFor(logging.INFO):
            # A worker is a service: its job log is what an operator reads.
            logging.getLogger("radconcord.backend.jobs").setLevel(logging.INFO)
        previous = {}

        def on_signal(signum: int, _frame: object) -> None:
            if worker.stop_event.is_set():
                raise KeyboardInterrupt
            log.warning("signal %d: stopping at the current job's next step", signum)
            worker.stop_event.set()

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, on_signal)
        try:
            t0 = time.monotonic()
            print(
                f"worker {worker.worker_id} on {worker.device}"
                f" taking {', '.join(worker.kinds) or 'every kind'}",
                file=sys.stderr,
                flush=True,
            )
            n = worker.run_forever(once=args.once, poll=args.poll)
            log.info("worker %s: %d job(s) in %.1f s", worker.worker_id, n,
                     time.monotonic() - t0)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return 0


def _study_id(db: Database, name: str) -> int:
    from radconcord.backend.scoring.jobs import study_id_by_name

    with db.read() as s:
        sid = study_id_by_name(s, name)
    if sid is None:
        raise UserError(f"--study: no study named '{name}'")
    return sid


def _progress(job: Any) -> str:
    if not job.progress_total:
        return "-"
    return f"{job.progress_done}/{job.progress_total}"


def cmd_jobs_list(args: argparse.Namespace) -> int:
    """Print jobs, newest first, one line each."""
    from radconcord.backend import jobs

    if args.kind is not None and args.kind not in jobs.KINDS:
        raise UserError(f"--kind: unknown job kind '{args.kind}' (known: {', '.join(jobs.KINDS)})")
    if args.limit < 1:
        raise UserError(f"--limit must be at least 1 (got {args.limit})")
    with database() as db:
        sid = _study_id(db, args.study) if args.study is not None else None
        rows = jobs.list_jobs(db, kind=args.kind, study_id=sid, limit=args.limit)
        groups = {g.parent.id: g for g in jobs.groups(db, rows)}
    if not rows:
        print("no jobs")
        return 0
    print("id\tkind\tstatus\tprogress\tstudy\tworker\tmessage")
    for j in rows:
        status = j.status + (" (cancel requested)" if j.cancel_requested else "")
        text = j.error if j.status == jobs.FAILED else j.message
        group = groups.get(j.id)
        if group is not None:
            # A split job reads as its chunks combined: progress, status and what failed.
            n = len(group.workers)
            status = (f"{group.status} ({len(group.children)} chunks on {n} "
                      f"worker{'s' if n != 1 else ''})")
            text = "; ".join(group.problems) or group.parent.message
            print(
                f"{group.parent.id}\t{group.parent.kind}\t{status}\t{_progress(group)}"
                f"\t{group.parent.study_name or '-'}\t-\t{text}"
            )
            continue
        print(
            f"{j.id}\t{j.kind}\t{status}\t{_progress(j)}\t{j.study_name or '-'}"
            f"\t{j.worker_id or '-'}\t{(text or '').splitlines()[0] if text else ''}"
        )
    return 0


def cmd_jobs_cancel(args: argparse.Namespace) -> int:
    """Cancel one job and say what happened."""
    from radconcord.backend import jobs

    with database() as db, service_errors():
        before = jobs.get(db, args.job_id)
        split = jobs.group(db, args.job_id) if before is not None else None
        job = jobs.cancel(db, args.job_id)
    if split is not None and not split.finished:
        queued = sum(1 for c in split.children if c.status == jobs.QUEUED)
        running = sum(1 for c in split.children if c.status == jobs.RUNNING)
        print(f"job {job.id} ({job.kind}) split into {len(split.children)} chunk jobs: "
              f"{queued} queued cancelled, {running} running stop at their next step")
    elif before is not None and before.finished:
        print(f"job {job.id} ({job.kind}) already {job.status}: nothing to cancel")
    elif job.status == jobs.CANCELLED:
        print(f"job {job.id} ({job.kind}) cancelled")
    elif job.cancel_requested and job.status == jobs.RUNNING:
        print(f"job {job.id} ({job.kind}) is running: its worker stops it at the next step")
    else:
        print(f"job {job.id} ({job.kind}) {job.status}")
    return 0


def cmd_jobs_workers(args: argparse.Namespace) -> int:
    """Print the workers alive now (``--all``: every known one)."""
    from radconcord.backend import jobs

    with database() as db:
        rows = jobs.list_workers(db, include_gone=args.all)
    if not rows:
        print("no worker is running: start one with `python -m backend worker`")
        return 0
    print("id\tdevice\tkinds\tcurrent job\tlast heartbeat\tstate")
    for w in rows:
        state = "alive" if w.alive else ("stopped" if w.stopped_at else "not responding")
        beat = w.heartbeat_at.strftime("%Y-%m-%d %H:%M:%S") if w.heartbeat_at else "-"
        print(
            f"{w.id}\t{w.device}\t{','.join(w.kinds) or 'all'}"
            f"\t{w.current_job_id or '-'}\t{beat}\t{state}"
        )
    return 0
