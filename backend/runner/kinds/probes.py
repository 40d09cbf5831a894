"""Kind ``probes``: perturbation probes of a study's reference reports (admin's request).

Params (written by :func:`backend.services.scores.probes.enqueue_probes`):
``{"study": NAME, "metrics": [names...], "seed": int, "max_reports": int}``.

The result is :func:`backend.services.scores.probes.result_to_json` of the run: the per-type
summary, one row per metric key and every perturbed report with its scores, which the
Perturbation probes page draws. Scores go through the score cache batch by batch, so a run
retried after a kill -9 computes only what the killed run had not stored, and nothing else is
written: there is nothing partial to see.
"""

from __future__ import annotations

from typing import Any

from radconcord.backend.jobs.context import JobContext
from radconcord.backend.runner.kinds._common import param


def run(ctx: JobContext, params: dict[str, Any]) -> dict[str, Any]:
    """Run the probes on the worker's device with its warm metrics.

    Raises:
        InvalidInput: bad params, unknown metric, nothing to perturb.
        NotFound: the study is gone.
        ServiceError: a metric failed.
        JobCancelled: cancelled, claim lost or worker stopping (between batches).
    """
    from radconcord.backend.services.scores import probes

    study = param(params, "study", str)
    metrics = param(params, "metrics", list)
    ctx.progress(0, 0, f"perturbing the reference reports of {study}")
    result = probes.run_probes(
        ctx.db, ctx.actor, study_name=study, metrics=[str(m) for m in metrics],
        seed=param(params, "seed", int, 0), max_reports=param(params, "max_reports", int, 100),
        device=ctx.device, progress=ctx.progress, pool=ctx.pool,
    )
    out = probes.result_to_json(result)
    out["summary"] = (f"{len(result.examples)} perturbed reports from {result.n_reports} "
                      f"references; {len(result.rows)} metric keys")
    return out
