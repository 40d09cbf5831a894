"""Kind ``refit_radcliq``: refit RadCliQ on a study's ratings with cross-validated tau.

Params (written by :func:`backend.services.evaluation.refit.enqueue_refit`): ``study``,
``significant_only``, ``seed``, ``score_missing``. The four inputs are scored on the study's
pairs through the score cache with the worker's warm metrics (batch by batch, so a retry
after a kill -9 computes only what was not stored), then the refit is computed; nothing else
is written. The result is :func:`backend.services.evaluation.refit.refit_study`'s JSON.
"""

from __future__ import annotations

from typing import Any

from radconcord.backend.jobs.context import JobContext
from radconcord.backend.runner.kinds._common import param


def run(ctx: JobContext, params: dict[str, Any]) -> dict[str, Any]:
    """Score the inputs and refit on the worker.

    Raises:
        NotFound: the study is gone.
        ServiceError: an input metric failed.
        JobCancelled: cancelled, claim lost or worker stopping (between batches).
    """
    from radconcord.backend.services.evaluation import refit

    study = param(params, "study", str)
    ctx.progress(0, 0, f"scoring the RadCliQ inputs on {study}")
    out = refit.refit_study(
        ctx.db, ctx.actor, study_name=study,
        significant_only=param(params, "significant_only", bool, False),
        seed=param(params, "seed", int, 0),
        score_missing=param(params, "score_missing", bool, True),
        device=ctx.device, progress=ctx.progress, pool=ctx.pool,
    )
    fit = out["refit"]
    if fit.get("available"):
        tau = fit.get("cv_kendall_tau_b")
        out["summary"] = (f"refit on {fit['n']} pairs: cross-validated Kendall tau-b "
                          + ("n/a" if tau is None else f"{tau:.3f}") + f" ({fit['cv_scheme']})")
    else:
        out["summary"] = f"no refit: {fit.get('reason', 'inputs missing')}"
    return out
