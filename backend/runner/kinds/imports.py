"""Kind ``import``: a large import (cases file with images, or ReXVal's files) on the worker.

Params (written by :func:`backend.services.transfer.imports.enqueue_import`): ``format`` (``cases``
or
``rexval``), ``study_name``, ``upload_dir`` and the files, all relative to the data folder
(:func:`backend.services.job_inputs.resolve_data_path` refuses anything outside it):
``cases_file`` and ``images_dir`` with ``description``, or ``gt_file`` and
``ratings_file``; ``provenance`` is stored on the study.

Safe to run again after a kill -9: the import writes an invisible staging study that the
retry's import removes (its process is dead) before writing its own, and the study records
the job id, so a retry that finds its own finished study reports it instead of importing a
second copy. The result holds the import's counts and warnings.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlalchemy import func, select

from radconcord.backend.errors import InvalidInput
from radconcord.backend.jobs.context import CANCELLED_BY_USER, JobCancelled, JobContext
from radconcord.backend.runner.kinds._common import param
from radconcord.db.models import STUDY_STAGING, Case, Image, Pair, Rating, Report, Study

#: Provenance key of the job that imported the study.
JOB_KEY = "job_id"


def _already_imported(ctx: JobContext, study_name: str) -> dict[str, Any] | None:
    """The counts of the study this job imported in a run that was killed before it ended."""
    with ctx.db.read() as s:
        study = s.execute(select(Study.id, Study.status, Study.provenance)
                          .where(Study.name == study_name)).first()
        if study is None or study.status == STUDY_STAGING:
            return None
        if (study.provenance or {}).get(JOB_KEY) != ctx.job_id:
            return None
        n_cases = s.scalar(select(func.count()).select_from(Case)
                           .where(Case.study_id == study.id))
        n_pairs = s.scalar(select(func.count()).select_from(Pair)
                           .where(Pair.study_id == study.id))
        n_reports = s.scalar(select(func.count()).select_from(Report).join(Case)
                             .where(Case.study_id == study.id))
        n_images = s.scalar(select(func.count()).select_from(Image).join(Case)
                            .where(Case.study_id == study.id))
        n_ratings = s.scalar(select(func.count()).select_from(Rating).join(Pair)
                             .where(Pair.study_id == study.id))
        n_raters = s.scalar(select(func.count(func.distinct(Rating.rater_id)))
                            .select_from(Rating).join(Pair).where(Pair.study_id == study.id))
    return {"study_id": study.id, "study_name": study_name, "n_cases": n_cases,
            "n_cases_reused": 0, "n_reports": n_reports, "n_images": n_images,
            "n_pairs": n_pairs, "n_raters": n_raters, "n_ratings": n_ratings,
            "warnings": [], "resumed": True}


def _import(ctx: JobContext, params: dict[str, Any]) -> dict[str, Any]:
    from radconcord.backend.datasets.pairs import parse_cases
    from radconcord.backend.services.job_inputs import resolve_data_path
    from radconcord.backend.services.transfer import imports

    fmt = param(params, "format", str)
    name = param(params, "study_name", str).strip()
    done = _already_imported(ctx, name)
    if done is not None:
        return done
    provenance = {**param(params, "provenance", dict, {}), JOB_KEY: ctx.job_id}
    actor = ctx.actor
    if fmt == "cases":
        images = resolve_data_path(param(params, "images_dir", str), "images folder")
        ctx.progress(0, 0, "reading the cases file")
        cases = parse_cases(resolve_data_path(param(params, "cases_file", str), "cases file"),
                            images_dir=images, layout=param(params, "layout", str, "auto"))
        summary = imports.import_cases(
            ctx.db, actor, study_name=name, cases=cases,
            description=param(params, "description", str, ""), provenance=provenance,
            image_base=images, progress=ctx.progress,
        )
    elif fmt == "rexval":
        summary = imports.import_rexval(
            ctx.db, actor, study_name=name,
            gt_path=resolve_data_path(param(params, "gt_file", str), "ReXVal pairs file"),
            ratings_path=resolve_data_path(param(params, "ratings_file", str),
                                           "ReXVal ratings file"),
            provenance=provenance, progress=ctx.progress,
        )
    else:
        raise InvalidInput(f"job params: unknown import format {fmt!r}")
    out = dataclasses.asdict(summary)
    out["warnings"] = list(summary.warnings)
    out["resumed"] = False
    return out


def named_as_uploaded(message: str, params: dict[str, Any]) -> str:
    """``message`` with the saved files' server paths replaced by their uploaded names.

    The page saved the uploads under the data folder; the admin knows them by the names they
    uploaded (params ``file_names``: data-relative path -> name), and the upload folder is
    "the uploaded files".
    """
    from radconcord.backend import config

    root = config.data_dir()
    names = param(params, "file_names", dict, {})
    # Longest first: a file's path contains its folder's.
    for rel, name in sorted(names.items(), key=lambda kv: -len(str(kv[0]))):
        for form in {str(root / rel), str((root / rel).resolve())}:
            message = message.replace(form, str(name))
    upload = param(params, "upload_dir", str, None)
    if upload:
        for form in {str(root / upload), str((root / upload).resolve())}:
            message = message.replace(form + "/", "").replace(form, "the uploaded files")
    return message


def run(ctx: JobContext, params: dict[str, Any]) -> dict[str, Any]:
    """Import the saved files; remove the upload folder once the job is over.

    Raises:
        InvalidInput: bad params or files (file, row and field named, as uploaded);
            nothing is created.
        JobCancelled: cancelled, claim lost or worker stopping (nothing is created).
    """
    from radconcord.backend.services.job_inputs import remove_upload_dir

    upload_dir = param(params, "upload_dir", str, None)
    try:
        try:
            out = _import(ctx, params)
        except InvalidInput as exc:
            text = named_as_uploaded(str(exc), params)
            if text == str(exc):
                raise
            raise InvalidInput(text) from None
    except JobCancelled as exc:
        # A lost claim or a stopping worker leaves the job to another run: keep the files.
        if exc.reason == CANCELLED_BY_USER:
            remove_upload_dir(upload_dir)
        raise
    except Exception:
        remove_upload_dir(upload_dir)
        raise
    remove_upload_dir(upload_dir)
    out["summary"] = f"study {out['study_name']}: {out['n_pairs']} pairs, {out['n_images']} images"
    return out
