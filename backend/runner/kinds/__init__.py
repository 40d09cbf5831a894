"""Job kinds: one module per kind, each with ``run(ctx, params) -> dict | None``.

Registered in :data:`backend.jobs.registry.KINDS`; imported only by the worker that runs a
job of that kind. A kind must be safe to run again after a kill -9 (the job is retried):
it writes idempotently (the score cache) or stages its output and makes it visible in one
step at the end.
"""
