"""Kind ``report``: render a study's paper report into the data folder.

Params: ``study``, ``significant_only``, ``resamples``, ``seed``. The report is published
whole (``report.html``, ``figures/``, ``manifest.json``) under
``<data dir>/reports/<study>-<job id>/``; a retry of the same job (after a kill -9) finds
that folder complete and returns it instead of rendering again. The result is
``{"path": folder relative to the data folder, "files": [...], "figure_format", "summary"}``.
"""

from __future__ import annotations

import re
from typing import Any

from radconcord.backend.jobs.context import JobContext
from radconcord.backend.runner.kinds._common import param

REPORTS_DIR = "reports"


def report_folder_name(study: str, job_id: int) -> str:
    """A file-system-safe folder name for the report of ``study`` made by job ``job_id``."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", study).strip("._") or "study"
    return f"{safe[:80]}-{job_id}"


def run(ctx: JobContext, params: dict[str, Any]) -> dict[str, Any]:
    """Render and publish the report.

    Raises:
        NotFound: the study is gone.
        InvalidInput: bad params, or nothing to report on the study.
    """
    from radconcord.backend import config
    from radconcord.backend.services.evaluation import reports
    from radconcord.backend.util import MANIFEST

    study = param(params, "study", str)
    significant_only = param(params, "significant_only", bool, False)
    resamples = param(params, "resamples", int, 1000)
    seed = param(params, "seed", int, 0)
    base = config.data_dir()
    out_dir = base / REPORTS_DIR / report_folder_name(study, ctx.job_id)
    rel = out_dir.relative_to(base).as_posix()
    if (out_dir / MANIFEST).is_file():
        # publish_dir moves the folder in whole: a manifest means a finished earlier attempt.
        files = sorted(p.relative_to(out_dir).as_posix() for p in out_dir.rglob("*")
                       if p.is_file())
        return {"path": rel, "files": files, "summary": f"report of {study} in {rel}"}
    ctx.progress(0, 1, f"computing the report of {study}")
    bundle = reports.render_report(
        ctx.db, ctx.actor, study_name=study, significant_only=significant_only,
        resamples=resamples, seed=seed,
    )
    ctx.check()
    files = reports.write_report(bundle, out_dir, about={
        "study": study, "significant_only": significant_only, "resamples": resamples,
        "seed": seed, "job_id": ctx.job_id})
    ctx.progress(1, 1, "report written")
    return {"path": rel, "files": files, "figure_format": bundle.figure_format,
            "summary": f"report of {study} in {rel}"
                       + (f" ({bundle.note})" if bundle.note else "")}
