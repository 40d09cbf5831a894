"""Admin: create a study from a cases file (with images) or from ReXVal's two CSV files.

Uploaded files are written to a temporary folder only for the import: the importer copies
images into the data folder (de-identified, content-addressed) in one transaction, so a bad
file leaves nothing behind. Errors name the uploaded files by their own names, never by the
server's temporary path.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import streamlit as st

from backend.datasets.pairs import parse_cases
from backend.services import imports
from backend.services.errors import InvalidInput
from webapp import state
from webapp.components.uploads import call_with_uploads

actor = state.require_actor()
state.require_admin_page(actor)
db = state.get_db()


def _save(upload: st.runtime.uploaded_file_manager.UploadedFile, folder: Path) -> Path:
    # Only the base name: an uploaded name must never place a file outside the folder.
    name = Path(upload.name).name
    if not name or name in {".", ".."}:
        raise InvalidInput(f"upload: unusable file name {upload.name!r}")
    path = folder / name
    path.write_bytes(upload.getvalue())
    return path


def _show(summary: imports.ImportSummary) -> None:
    st.success(
        f"Created study **{summary.study_name}**: {summary.n_pairs} pairs from "
        f"{summary.n_cases} cases ({summary.n_cases_reused} reused), {summary.n_images} images"
        + (f", {summary.n_raters} raters and {summary.n_ratings} ratings" if summary.n_raters
           else "")
        + ". Next: **Assign raters**."
    )
    for warning in summary.warnings:
        st.warning(warning)


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
            with tempfile.TemporaryDirectory(prefix="radconcord-upload-") as tmp:
                folder = Path(tmp)
                names: dict[Path, str] = {}
                try:
                    path = _save(cases_file, folder)
                    names[path] = cases_file.name
                    for upload in image_files or []:
                        names[_save(upload, folder)] = upload.name
                except InvalidInput as exc:
                    state.stop_with_error(exc)
                images_dir = Path(server_folder).expanduser() if server_folder.strip() \
                    else folder
                cases = call_with_uploads(folder, names, parse_cases, path,
                                          images_dir=images_dir)
                provenance = {"file": cases_file.name,
                              "sha256": hashlib.sha256(cases_file.getvalue()).hexdigest()}
                with st.spinner("Importing..."):
                    summary = call_with_uploads(
                        folder, names, imports.import_cases, db, actor,
                        study_name=study_name.strip(), cases=cases, description=description,
                        provenance=provenance, image_base=images_dir)
            _show(summary)

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
            with tempfile.TemporaryDirectory(prefix="radconcord-upload-") as tmp:
                # Separate folders: the two uploads may carry the same file name.
                (Path(tmp) / "gt").mkdir()
                (Path(tmp) / "ratings").mkdir()
                gt_path = state.call(_save, gt_file, Path(tmp) / "gt")
                ratings_path = state.call(_save, ratings_file, Path(tmp) / "ratings")
                names = {gt_path: gt_file.name, ratings_path: ratings_file.name}
                with st.spinner("Importing..."):
                    summary = call_with_uploads(
                        Path(tmp), names, imports.import_rexval, db, actor, gt_path=gt_path,
                        ratings_path=ratings_path, study_name=rexval_name.strip())
            _show(summary)
