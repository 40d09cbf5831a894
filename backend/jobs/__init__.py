"""One job system: every long task runs in a worker process, pages only queue and watch.

``backend.jobs`` holds the queue (the ``jobs`` table), the registry of job kinds and the
context a kind runs with; it sits below the services. The worker and the kinds live in
:mod:`backend.runner`, above the services. Importing this package loads no model code: the
web app queues jobs through it and the worker imports a kind's module only to run one.

A new kind: a module under ``backend/runner/kinds/`` with ``run(ctx, params) -> dict | None``
and one line in :data:`backend.jobs.registry.KINDS`.
"""

from radconcord.backend.jobs.context import JobCancelled, JobContext
from radconcord.backend.jobs.queue import (
    CANCELLED,
    CHUNK_KIND,
    DEFAULT_STALE_AFTER,
    DONE,
    FAILED,
    MAX_ATTEMPTS,
    QUEUED,
    RUNNING,
    JobGroup,
    JobInfo,
    WorkerInfo,
    cancel,
    enqueue,
    get,
    group,
    groups,
    list_jobs,
    list_workers,
    wait,
)
from radconcord.backend.jobs.registry import KINDS, UnknownJobKind, kind_names, load_kind

__all__ = [
    "CANCELLED",
    "CHUNK_KIND",
    "DEFAULT_STALE_AFTER",
    "DONE",
    "FAILED",
    "KINDS",
    "MAX_ATTEMPTS",
    "QUEUED",
    "RUNNING",
    "JobCancelled",
    "JobContext",
    "JobGroup",
    "JobInfo",
    "UnknownJobKind",
    "WorkerInfo",
    "cancel",
    "enqueue",
    "get",
    "group",
    "groups",
    "kind_names",
    "list_jobs",
    "list_workers",
    "load_kind",
    "wait",
]
