"""What runs a job: the worker process and the code of each job kind.

The queue below the services (:mod:`backend.jobs`: the ``jobs`` table, the registry of
kind names and the context a kind runs with) is what pages and services use to enqueue and
watch; this package sits above the services, since a kind may call a service. The worker
(:mod:`backend.runner.worker`) claims a job from the queue and imports its kind
(:mod:`backend.runner.kinds`) only to run it.

A new kind: a module under ``backend/runner/kinds/`` with ``run(ctx, params) -> dict | None``
and one line in :data:`backend.jobs.registry.KINDS`.
"""
