"""Admin: create a study from a cases file (with images), ReXVal's two CSV files or RadPref;
add a metric's values computed elsewhere to a study (scores file).

Uploaded files are saved under the data folder (``job_inputs.new_upload_dir``) and parsed
here first, so a bad file is refused at once, named as it was uploaded (never by the server's
path). The layout (long: one row per candidate; wide: one column per generator) is chosen or
detected only when the columns leave no doubt; unknown columns are refused by name.
**Dry run** shows what the import would create (cases, pairs, sources, images found and
missing, warnings, problems) and writes nothing. A small import then runs inline with a
progress bar (it needs no model and takes seconds); an import with more than
``imports.WORKER_MIN_PAIRS`` (2,000) pairs or more than ``imports.WORKER_MIN_IMAGES`` (50)
images is queued as an ``import`` job instead: the worker de-identifies and writes it
(staged: the study appears only when complete) while the page shows the job panel
(progress, Cancel); the job id stays in the URL (``?import_job=``).

**RadPref** (CRIMSON's reader-preference files: ``preference_data.json`` and the annotators'
``user_N.json``) becomes a pairwise + 1-5 study (``backend.services.transfer.radpref``); the uploads
are parsed in memory (100 cases x 3 annotators is small) and the import is one transaction.

**Scores file** imports per-pair values of a metric computed elsewhere (an API, another
cluster, a notebook) into an existing study, as ``import-scores`` does
(``backend.services.scores.score_imports``: the same file, options and error messages, the file
named
as uploaded); below the form, the study's imports, newest first (the latest of each key is
what the study's views read).
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import streamlit as st

from radconcord.backend.datasets import radpref as radpref_files
from radconcord.backend.datasets import rexval
from radconcord.backend.datasets.pairs import read_cases
from radconcord.backend.errors import InvalidInput
from radconcord.backend.services import job_inputs
from radconcord.backend.services.scores import score_imports
from radconcord.backend.services.study_admin import studies
from radconcord.backend.services.transfer import imports, radpref
from radconcord.webapp import state
from radconcord.webapp.components import job_ref
from radconcord.webapp.components.job_panel import job_panel
from radconcord.webapp.components.score_now import score_now
from radconcord.webapp.components.uploads import call_with_uploads
from radconcord.webapp.components.warning_list import show_warnings

actor = state.require_actor()
state.require_admin_page(actor)
db = state.get_db()

JOB_KEY = "import_job"
#: The study the last import of this session created: the page offers to score it.
IMPORTED_KEY = "import_created_study"


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
        + ". Next: **Score now** (below) and **Assign raters**."
    )
    for warning in data["warnings"]:
        st.warning(warning)
    st.session_state[IMPORTED_KEY] = data["study_name"]


LAYOUTS = {
    "auto": "Detect (only when the columns leave no doubt)",
    "long": "Long: one row per candidate (case_id, reference, candidate, source)",
    "wide": "Wide: one column per generator",
}


def _show_preview(preview: imports.ImportPreview) -> None:
    """The dry run's findings; nothing was written."""
    with st.container(key="import_preview", border=True):
        st.markdown(f"**Dry run of {preview.file}** for study **{preview.study_name}**: "
                    "nothing was written.")
        layout = preview.layout + ("" if preview.layout_reason == "chosen"
                                   else f" (detected: {preview.layout_reason})")
        st.markdown(f"Layout: {layout}")
        c1, c2, c3, c4 = st.columns(4)
        c1.metric("Cases", preview.n_cases)
        c2.metric("Pairs", preview.n_pairs)
        c3.metric("Images found", preview.n_images,
                  help=(f"{preview.n_volumes} 3-D volume(s) (a DICOM series, a multi-frame"
                        f" DICOM or a NIfTI file) and {preview.n_images - preview.n_volumes}"
                        " 2-D film(s)") if preview.n_volumes else None)
        if preview.n_volumes:
            c3.caption(f"{preview.n_volumes} volume(s), "
                       f"{preview.n_images - preview.n_volumes} film(s)")
        c4.metric("Images missing", len(preview.missing_images))
        st.dataframe([{"Source": k, "Pairs": v} for k, v in preview.sources.items()],
                     hide_index=True, key="preview_sources")
        for missing in preview.missing_images[:50]:
            st.markdown(f"- missing image: {missing}")
        for warning in preview.warnings:
            st.warning(warning)
        for problem in preview.problems:
            st.error(problem)
        if preview.ok:
            st.success("Ready to import" + (" (on the worker: a large import)."
                                            if preview.runs_on_worker else "."))


def _run(folder: Path, names: dict[Path, str], large: bool,
         inline: Callable[[imports.ProgressFn], Any], queue: Callable[[], Any]) -> None:
    """Import inline (with a progress bar), or queue the import; the upload folder goes
    unless a job owns it."""
    queued = None
    try:
        if large:
            queued = call_with_uploads(folder, names, queue)
        else:
            bar = st.progress(0.0, text="Importing...")

            def progress(done: int, total: int, message: str) -> None:
                bar.progress(min(1.0, done / total) if total else 0.0, text=message)

            summary = call_with_uploads(folder, names, inline, progress)
            bar.empty()
    finally:
        if queued is None:
            shutil.rmtree(folder, ignore_errors=True)
    if queued is not None:
        job_ref.remember(JOB_KEY, queued.id)
    else:
        job_ref.forget(JOB_KEY)
        _show(summary)


st.title("Import")
cases_tab, rexval_tab, radpref_tab, scores_tab = st.tabs(
    ["Cases file", "ReXVal files", "RadPref files", "Scores file"])

with cases_tab:
    st.caption(
        "CSV or JSONL, one row per candidate (`case_id, reference, candidate, source`) or one "
        "column per generator; optional `images` column with file names separated by `;`. "
        "Upload the images named there (PNG, JPEG or DICOM), or give a folder on the server. "
        "**Dry run** first to see what would be imported."
    )
    with st.form("import_cases"):
        study_name = st.text_input("New study name", key="import_study")
        description = st.text_area("Description", key="import_description", height=80)
        cases_file = st.file_uploader("Cases file", type=["csv", "jsonl", "ndjson"],
                                      key="import_cases_file")
        layout = st.radio("Layout", list(LAYOUTS), format_func=LAYOUTS.get,
                          key="import_layout")
        image_files = st.file_uploader("Images", accept_multiple_files=True,
                                       type=["png", "jpg", "jpeg", "dcm", "dicom"],
                                       key="import_images")
        server_folder = st.text_input("...or images folder on the server", key="import_folder")
        left, right = st.columns(2)
        submitted = left.form_submit_button("Import", type="primary")
        dry_run = right.form_submit_button("Dry run (write nothing)", icon=":material/preview:")
    if submitted or dry_run:
        if not study_name.strip():
            st.error("Study name: give the new study a name.")
        elif cases_file is None:
            st.error("Cases file: choose a CSV or JSONL file.")
        else:
            folder = job_inputs.new_upload_dir()
            names: dict[Path, str] = {}
            preview = parsed = None
            try:
                path = _save(cases_file, folder)
                names[path] = cases_file.name
                for upload in image_files or []:
                    names[_save(upload, folder)] = upload.name
                images_dir = Path(server_folder).expanduser() if server_folder.strip() \
                    else folder
                if dry_run:
                    preview = call_with_uploads(
                        folder, names, imports.preview_import, db, actor,
                        study_name=study_name, cases_file=path, images_dir=images_dir,
                        layout=layout, file_name=cases_file.name)
                else:
                    parsed = call_with_uploads(folder, names, read_cases, path,
                                               images_dir=images_dir, layout=layout)
            except BaseException as exc:
                shutil.rmtree(folder, ignore_errors=True)
                if isinstance(exc, InvalidInput):
                    state.stop_with_error(exc)
                raise
            if preview is not None:
                # A dry run keeps nothing, not even the uploads.
                shutil.rmtree(folder, ignore_errors=True)
                _show_preview(preview)
            elif parsed is not None:
                cases = parsed.cases
                if parsed.layout_reason != "chosen":
                    st.caption(f"Layout: {parsed.layout} (detected: {parsed.layout_reason}).")
                provenance = {"file": cases_file.name,
                              "sha256": hashlib.sha256(cases_file.getvalue()).hexdigest(),
                              "layout": parsed.layout}
                _run(
                    folder, names, imports.needs_worker(*imports.cases_size(cases)),
                    inline=lambda progress: imports.import_cases(
                        db, actor, study_name=study_name.strip(), cases=cases,
                        description=description, provenance=provenance,
                        image_base=images_dir, progress=progress),
                    queue=lambda: imports.enqueue_import(
                        db, actor, fmt="cases", study_name=study_name.strip(),
                        upload_dir=folder, cases_file=path, images_dir=images_dir,
                        description=description, provenance=provenance, layout=layout,
                        file_names=names),
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
                inline=lambda progress: imports.import_rexval(
                    db, actor, gt_path=gt_path, ratings_path=ratings_path,
                    study_name=rexval_name.strip(), progress=progress),
                queue=lambda: imports.enqueue_import(
                    db, actor, fmt="rexval", study_name=rexval_name.strip(), upload_dir=folder,
                    gt_file=gt_path, ratings_file=ratings_path, file_names=names),
            )



def _show_radpref(summary: radpref.RadPrefImportSummary) -> None:
    with st.container(key="radpref_result", border=True):
        if summary.dry_run:
            st.markdown(f"**Dry run** for study **{summary.study_name}**: nothing was written.")
        else:
            st.success(f"Created study **{summary.study_name}** (pairwise, 1-5 ratings). "
                       "Next: **Score now** (below), then the **Dashboard** or **Export**.")
        c1, c2, c3, c4 = st.columns(4)
        c1.metric("Cases", summary.n_cases)
        c2.metric("Raters", len(summary.raters))
        c3.metric("Judgements", summary.n_judgements)
        c4.metric("Error records", summary.n_error_records)
        st.dataframe([{"Rater account": u, "New": u in summary.new_raters}
                      for u in summary.raters], hide_index=True, key="radpref_raters")
        if summary.new_raters:
            st.caption("New accounts have no usable password: nobody logs in as an "
                       "annotator unless you set one on the Accounts page.")
        show_warnings(summary.warnings,
                      summary="each names something kept as it is in the files")


with radpref_tab:
    st.caption(
        "RadPref (CRIMSON project, MIT licence): `preference_data.json` and the annotator "
        "files `user_1.json`, `user_2.json`, ... (from `radiologist_annotations/`). Creates a "
        "pairwise study (two candidates per case, 1-5 rating each), one rater account per "
        "annotator, their errors as per-error records and the derived ReXVal counts. "
        "**Dry run** first to check the files.")
    with st.form("import_radpref"):
        radpref_name = st.text_input("New study name", value="RadPref", key="radpref_study")
        pref_file = st.file_uploader("preference_data.json", type=["json"],
                                     key="radpref_preferences")
        user_files = st.file_uploader("Annotator files (user_N.json)", type=["json"],
                                      accept_multiple_files=True, key="radpref_users")
        left, right = st.columns(2)
        radpref_submitted = left.form_submit_button("Import RadPref", type="primary")
        radpref_dry = right.form_submit_button("Dry run (write nothing)",
                                               icon=":material/preview:")
    if radpref_submitted or radpref_dry:
        if not radpref_name.strip():
            st.error("Study name: give the new study a name.")
        elif pref_file is None:
            st.error("preference_data.json: choose the preferences file.")
        elif not user_files:
            st.error("Annotator files: choose at least one user_N.json file.")
        else:
            try:
                # Parsed from the uploaded bytes, so every error names the file as uploaded.
                data = radpref_files.parse(
                    (pref_file.name, pref_file.getvalue()),
                    [(u.name, u.getvalue()) for u in user_files])
            except InvalidInput as exc:
                state.stop_with_error(exc)
            result = state.call(radpref.import_radpref, db, actor, data=data,
                                study_name=radpref_name.strip(), dry_run=bool(radpref_dry))
            if not result.dry_run:
                st.session_state[IMPORTED_KEY] = result.study_name
            _show_radpref(result)



def _show_scores(summary: score_imports.ScoreImportSummary) -> None:
    with st.container(key="scores_result", border=True):
        st.success(f"Imported {len(summary.imports)} metric key(s) from {summary.file_name} "
                   f"into study **{summary.study_name}**. They show on the **Dashboard**, "
                   "the explorer, the report and the export with scores, marked as imported.")
        for line in summary.lines():
            st.markdown(f"- {line}")


def _score_history(study: str) -> None:
    history = state.call(score_imports.list_score_imports, db, actor, study_name=study)
    if not history:
        st.caption(f"Study {study!r} has no imported scores yet.")
        return
    st.markdown(f"**Imported scores of {study}** (newest first; the study reads the latest "
                "import of each key, older values stay stored)")
    st.dataframe([{"Key": i.key,
                   "Direction": "higher is better" if i.higher_is_better else "lower is better",
                   "File": i.file_name, "Pairs with a value": i.n_pairs,
                   "Missing": i.n_missing, "Description": i.description,
                   "Source": i.source, "Imported": i.imported_at, "By": i.imported_by,
                   "Signature": i.signature} for i in history],
                 hide_index=True, key="scores_history")


with scores_tab:
    st.caption(
        "Values of a metric computed elsewhere (an API, another cluster, a notebook), CSV or "
        "JSONL: each row names a pair by `pair_number` (1-based, as in the study's JSONL "
        "export) or `pair_id` (the export's opaque id), with a `value` column (give the "
        "metric key) or one column per metric key (all imported, or the keys given). The key "
        "must not be a registered metric's. Importing another file for a key keeps the old "
        "values and makes the new ones the study's.")
    score_studies = [s.name for s in state.call(studies.list_studies, db, actor)]
    with st.form("import_scores"):
        scores_study = st.selectbox("Study", score_studies, key="scores_study")
        scores_file = st.file_uploader("Scores file", type=["csv", "jsonl", "ndjson", "json"],
                                       key="scores_file")
        scores_metric = st.text_input(
            "Metric key", key="scores_metric",
            help="The key of the 'value' column; for a file with one column per key, the "
                 "keys to import, comma-separated (empty: every column).")
        s1, s2 = st.columns(2)
        scores_lower = s1.checkbox("Lower is better", key="scores_lower",
                                   help="For every imported key (default: higher is better).")
        scores_lower_keys = s2.text_input(
            "...or lower is better for these keys only", key="scores_lower_keys",
            help="Comma-separated keys of this file.")
        scores_description = st.text_input("Description", key="scores_description")
        scores_source = st.text_input("Source (URL or text)", key="scores_source")
        scores_missing = st.checkbox(
            "Allow missing values", key="scores_allow_missing",
            help="Accept blank/NaN values and pairs without a row; they get no value.")
        scores_submitted = st.form_submit_button("Import scores", type="primary")
    if scores_submitted:
        if not scores_study:
            st.error("Study: import a study first.")
        elif scores_file is None:
            st.error("Scores file: choose a CSV or JSONL file.")
        else:
            folder = job_inputs.new_upload_dir()
            try:
                path = _save(scores_file, folder)
                lower: bool | str = scores_lower_keys if scores_lower_keys.strip() \
                    else scores_lower
                _show_scores(call_with_uploads(
                    folder, {path: scores_file.name}, score_imports.import_scores, db, actor,
                    study_name=scores_study, path=path, metric=scores_metric.strip() or None,
                    lower_is_better=lower, description=scores_description,
                    source=scores_source, allow_missing=scores_missing,
                    file_name=scores_file.name))
            finally:
                # The values are in the database; the upload is not kept.
                shutil.rmtree(folder, ignore_errors=True)
    if scores_study:
        _score_history(scores_study)

job_id = job_ref.current(JOB_KEY)
if job_id is not None:
    st.subheader("Import on the worker")
    finished = job_panel(job_id, key="import")
    if finished is not None and finished.status == "done" and finished.kind == imports.KIND:
        _show(finished.result or {})

# A new study has no metric scores: offer them at once (the worker scores; the panel
# follows the job), for the last study this session imported while it still exists.
imported = st.session_state.get(IMPORTED_KEY)
if imported and imported in score_studies:
    st.subheader(f"Next: score {imported}")
    score_now(db, actor, imported, key="import_score_now")
