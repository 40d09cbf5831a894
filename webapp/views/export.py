"""Admin: export a study (ReXVal CSV files or JSONL with images) with its manifest, or a
pairwise study as RadPref files (``preference_data.json`` and ``user_N.json``, as a zip)."""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path

import streamlit as st

from radconcord.backend import clock, config
from radconcord.backend.services.study_admin import studies
from radconcord.backend.services.transfer import exports, radpref
from radconcord.webapp import state
from radconcord.webapp.components.warning_list import show_warnings

actor = state.require_actor()
state.require_admin_page(actor)
db = state.get_db()

LAST_EXPORT_KEY = "last_export"
RADPREF_EXPORT_KEY = "last_radpref_export"


def _zip_folder(folder: Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                archive.write(path, arcname=f"{folder.name}/{path.relative_to(folder)}")
    return buffer.getvalue()


st.title("Export")
st.caption("ReXVal format writes the two ReXVal CSV files; JSONL writes pairs, ratings and "
           "the de-identified images. Both come with `manifest.json` (versions, provenance, "
           "sha256 of every file). Metric scores (with their signatures) and completion "
           "times with time on task can be added, so the dashboard's numbers can be "
           "recomputed from the export alone. Exports are kept in the data folder.")

study_names = [s.name for s in state.call(studies.list_studies, db, actor)]
if not study_names:
    st.info("No studies yet: import cases first.")
    st.stop()

with st.form("export"):
    study_name = st.selectbox("Study", study_names, key="export_study")
    fmt = st.radio("Format", exports.FORMATS, horizontal=True, key="export_format",
                   format_func=lambda f: {"rexval": "ReXVal CSV", "jsonl": "JSONL"}.get(f, f))
    with_scores = st.checkbox(
        "Include metric scores", key="export_scores",
        help="metric_scores: every cached score of the study's pairs with its signature; "
             "the one the dashboard uses for each metric is marked chosen.")
    with_timing = st.checkbox(
        "Include completion times and time on task", key="export_timing",
        help="assignments (completed at, active seconds per rater and pair) and "
             "activity_spans (the measured activity behind them).")
    submitted = st.form_submit_button("Export", type="primary")

if submitted:
    stamp = clock.utcnow().strftime("%Y%m%dT%H%M%SZ")
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", study_name).strip("-") or "study"
    out_dir = config.data_dir() / "exports" / f"{slug}-{fmt}-{stamp}"
    summary = state.call(exports.export_study, db, actor, study_name=study_name, fmt=fmt,
                         out_dir=out_dir, with_scores=with_scores, with_timing=with_timing)
    st.session_state[LAST_EXPORT_KEY] = summary

summary = st.session_state.get(LAST_EXPORT_KEY)
if summary is not None:
    st.success(f"Exported **{summary.study_name}** as {summary.format}: {summary.n_pairs} "
               f"pairs, {summary.n_rating_rows} rating rows, to `{summary.out_dir}`.")
    st.dataframe([{"File": name} for name in summary.files], hide_index=True)
    if summary.out_dir.is_dir():
        st.download_button(
            "Download as .zip", data=_zip_folder(summary.out_dir),
            file_name=f"{summary.out_dir.name}.zip", mime="application/zip",
            icon=":material/download:", on_click="ignore", key="export_download",
        )

st.subheader("RadPref files")
st.caption("A pairwise study (e.g. one imported from RadPref) as CRIMSON's RadPref layout: "
           "`preference_data.json` and `radiologist_annotations/user_N.json`. An imported "
           "study gives back the imported files unchanged; judgements made in the app are "
           "added, one file per rater.")
with st.form("export_radpref"):
    radpref_study = st.selectbox("Study", study_names, key="radpref_export_study")
    radpref_submitted = st.form_submit_button("Export as RadPref")
if radpref_submitted:
    st.session_state[RADPREF_EXPORT_KEY] = state.call(radpref.export_radpref, db, actor,
                                                      study_name=radpref_study)
radpref_export = st.session_state.get(RADPREF_EXPORT_KEY)
if radpref_export is not None:
    st.success(f"**{radpref_export.study_name}** as RadPref: {radpref_export.n_cases} cases, "
               f"{radpref_export.n_annotators} annotators, {radpref_export.n_judgements} "
               "judgements.")
    show_warnings(radpref_export.warnings, summary="each names something left out")
    radpref_slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", radpref_export.study_name).strip("-")
    st.download_button(
        "Download RadPref .zip", data=radpref_export.zip_bytes(),
        file_name=f"{radpref_slug or 'study'}-radpref.zip", mime="application/zip",
        icon=":material/download:", on_click="ignore", key="radpref_download",
    )
