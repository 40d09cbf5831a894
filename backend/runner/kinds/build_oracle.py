"""Kind ``build_oracle``: build a rating study from metric-oracle candidates.

Params (written by :func:`backend.services.study_admin.build_study.enqueue_build`): ``study_name``,
``tests`` and ``corpus`` (``"iu"`` or a corpus file), ``metrics``, ``per_metric``, ``top_k``,
``engine``, ``seed``, ``limit_tests``, ``raters``, ``raters_per_pair``, ``options``,
``description``, ``chunk_size`` and ``upload_dir`` (the page's uploads, relative to the data
folder, removed when the job ends).

Safe to run again after a kill -9: the study is written by the staged import (invisible
until complete; the killed run's staging study is removed before the retry imports), and the
job id is recorded in the study's provenance, so a retry that finds its own finished study
only completes the rater assignment. The result is
:func:`backend.services.study_admin.build_study.summary_to_json` of the build.
"""

from __future__ import annotations

from typing import Any

from radconcord.backend.jobs.context import CANCELLED_BY_USER, JobCancelled, JobContext
from radconcord.backend.runner.kinds._common import param


def run(ctx: JobContext, params: dict[str, Any]) -> dict[str, Any]:
    """Run the oracle build on the worker.

    Raises:
        InvalidInput: bad params, files or metrics (nothing is created).
        JobCancelled: cancelled, claim lost or worker stopping (nothing is created).
    """
    from radconcord.backend.services import job_inputs
    from radconcord.backend.services.study_admin import build_study

    upload_dir = param(params, "upload_dir", str, None)
    try:
        ctx.progress(0, 0, "loading the test reports and the corpus")
        top_k = param(params, "top_k", int, None)
        limit = param(params, "limit_tests", int, None)
        summary = build_study.build_study(
            ctx.db, ctx.actor,
            study_name=param(params, "study_name", str),
            tests=param(params, "tests", str),
            corpus=param(params, "corpus", str),
            metrics=[str(m) for m in param(params, "metrics", list)],
            per_metric=param(params, "per_metric", int, 1),
            top_k=top_k,
            engine=param(params, "engine", str, "local"),
            seed=param(params, "seed", int, 0),
            limit_tests=limit,
            raters=[str(r) for r in param(params, "raters", list, [])],
            raters_per_pair=param(params, "raters_per_pair", int, 1),
            options=param(params, "options", dict, {}),
            description=param(params, "description", str, ""),
            chunk_size=param(params, "chunk_size", int, build_study.oracle.DEFAULT_CHUNK),
            progress=ctx.progress,
            job_id=ctx.job_id,
            pool=ctx.pool,
            device=ctx.device,
        )
    except JobCancelled as exc:
        # Only a cancelled job is over; a lost claim or a stopping worker leaves the job to
        # another run, which still needs the uploads.
        if exc.reason == CANCELLED_BY_USER:
            job_inputs.remove_upload_dir(upload_dir)
        raise
    except Exception:
        job_inputs.remove_upload_dir(upload_dir)
        raise
    job_inputs.remove_upload_dir(upload_dir)
    out = build_study.summary_to_json(summary)
    out["summary"] = (f"study {summary.study_name}: {summary.n_pairs} pairs for "
                      f"{summary.n_cases} test reports")
    return out
