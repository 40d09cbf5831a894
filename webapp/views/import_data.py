"""Admin: create a study from a cases file (with images) or from ReXVal's two CSV files.

Uploaded files are saved under the data folder (``job_inputs.new_upload_dir``) and parsed
here first, so a bad file is refused at once, named as it was uploaded (never by the server's
path). A small import then runs inline (it needs no model and takes seconds); an import with
more than ``imports.WORKER_MIN_PAIRS`` (2,000) pairs or more than
``imports.WORKER_MIN_IMAGES`` (50) images is queued as an ``import`` job instead: the worker
de-identifies and writes it (staged: the study appears only when complete) while the page
shows the job panel (progress, Cancel); the job id stays in the URL (``?import_job=``).
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import streamlit as st

from backend.datasets import rexval
from backend.datasets.pairs import parse_cases
from backend.services import imports, job_inputs
from backend.services.errors import InvalidInput
from webapp import state
from webapp.components import job_ref
from webapp.components.job_panel import job_panel
from webapp.components.uploads import call_with_uploads

actor = state.require_actor()
state.require_admin_page(actor)
db = state.get_db()

JOB_KEY = "import_job"


def _save(upload: st.runtime.uploaded_file_manager.UploadedFile, folder: Path) -> Path:
    # Only the base name: an uploaded name must never place a file outside the folder.
    return job_inputs.save_upload(folder, upload.name, upload.getvalue())


def _show(summary: imports.ImportSummary | dict[str, Any]) -> None:
    data = summary if isinstance(summary, dict) else summary.__dict__
    st.success(
        f"Created study **{data['study_name']}**: {data['n_pairs']} pairs from "
        f"{data['n_cases']} cases ({data['n_cases_reused']} reused), {data['n_images']} images"
        + (f", {data['n_raters']} raters and {data['n_ratings']} ratings" if data["n_raters"]
           else "")
        + ". Next: **Assign raters**."
    )
    for warning in data["warnings"]:
        st.warning(warning)


def _run(folder: Path, names: dict[Path, str], large: bool, inline: Callable[[], Any],
         queue: Callable[[], Any]) -> None:
    """Import inline, or queue the import; the upload folder goes unless a job owns it."""
    queued = None
    try:
        if large:
            queued = call_with_uploads(folder, names, queue)
        else:
            with st.spinner("Importing..."):
                summary = call_with_uploads(folder, names, inline)
    finally:
        if queued is None:
            shutil.rmtree(folder, ignore_errors=True)
    if queued is not None:
        job_ref.remember(JOB_KEY, queued.id)
    else:
        job_ref.forget(JOB_KEY)
        _show(summary)


st.title("Import")
cases_tab, rexval_tab = st.tabs(["Cases file", "ReXVal files"])

with cases_tab:
    st.caption(
        "CSV or JSONL, one row per candidate (`case_id, reference, candidate, source`) or one "
        "column per generator; optional `images` column with file names separated by `;`. "
        "Upload the images named there (PNG, JPEG or DICOM), or give a folder on the server."
    )
    with st.form("import_cases"):
        study_name = st.text_input("New study name", key="import_study")
        description = st.text_area("Description", key="import_description", height=80)
        cases_file = st.file_uploader("Cases file", type=["csv", "jsonl", "ndjson"],
                                      key="import_cases_file")
        image_files = st.file_uploader("Images", accept_multiple_files=True,
                                       type=["png", "jpg", "jpeg", "dcm", "dicom"],
                                       key="import_images")
        server_folder = st.text_input("...or images folder on the server", key="import_folder")
        submitted = st.form_submit_button("Import", type="primary")
    if submitted:
        if not study_name.strip():
            st.error("Study name: give the new study a name.")
        elif cases_file is None:
            st.error("Cases file: choose a CSV or JSONL file.")
        else:
            folder = job_inputs.new_upload_dir()
            names: dict[Path, str] = {}
            try:
                path = _save(cases_file, folder)
                names[path] = cases_file.name
                for upload in image_files or []:
                    names[_save(upload, folder)] = upload.name
                images_dir = Path(server_folder).expanduser() if server_folder.strip() \
                    else folder
                cases = call_with_uploads(folder, names, parse_cases, path,
                                          images_dir=images_dir)
            except BaseException as exc:
                shutil.rmtree(folder, ignore_errors=True)
                if isinstance(exc, InvalidInput):
                    state.stop_with_error(exc)
                raise
            provenance = {"file": cases_file.name,
                          "sha256": hashlib.sha256(cases_file.getvalue()).hexdigest()}
            _run(
                folder, names, imports.needs_worker(*imports.cases_size(cases)),
                inline=lambda: imports.import_cases(
                    db, actor, study_name=study_name.strip(), cases=cases,
                    description=description, provenance=provenance, image_base=images_dir),
                queue=lambda: imports.enqueue_import(
                    db, actor, fmt="cases", study_name=study_name.strip(), upload_dir=folder,
                    cases_file=path, images_dir=images_dir, description=description,
                    provenance=provenance),
            )

with rexval_tab:
    st.caption("ReXVal (PhysioNet): `50_samples_gt_and_candidates.csv` and "
               "`6_valid_raters_per_rater_error_categories.csv`. Creates the pairs, one "
               "account per ReXVal rater and their ratings.")
    with st.form("import_rexval"):
        rexval_name = st.text_input("New study name", value="ReXVal", key="rexval_study")
        gt_file = st.file_uploader("Pairs file (gt and candidates)", type=["csv"],
                                   key="rexval_gt")
        ratings_file = st.file_uploader("Ratings file (per rater error categories)",
                                        type=["csv"], key="rexval_ratings")
        rexval_submitted = st.form_submit_button("Import ReXVal", type="primary")
    if rexval_submitted:
        if gt_file is None or ratings_file is None:
            st.error("Choose both ReXVal files.")
        else:
            folder = job_inputs.new_upload_dir()
            try:
                # Separate folders: the two uploads may carry the same file name.
                (folder / "gt").mkdir()
                (folder / "ratings").mkdir()
                gt_path = state.call(_save, gt_file, folder / "gt")
                ratings_path = state.call(_save, ratings_file, folder / "ratings")
                names = {gt_path: gt_file.name, ratings_path: ratings_file.name}
                gt = call_with_uploads(folder, names, rexval.read_gt, gt_path)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            n_pairs = sum(1 for row in gt.rows for text in row.candidates if text.strip())
            _run(
                folder, names, imports.needs_worker(n_pairs),
                inline=lambda: imports.import_rexval(
                    db, actor, gt_path=gt_path, ratings_path=ratings_path,
                    study_name=rexval_name.strip()),
                queue=lambda: imports.enqueue_import(
                    db, actor, fmt="rexval", study_name=rexval_name.strip(), upload_dir=folder,
                    gt_file=gt_path, ratings_file=ratings_path),
            )

job_id = job_ref.current(JOB_KEY)
if job_id is not None:
    st.subheader("Import on the worker")
    finished = job_panel(job_id, key="import")
    if finished is not None and finished.status == "done" and finished.kind == imports.KIND:
        _show(finished.result or {})
