"""Admin: perturbation probes (VLScore paper, Tables 2-3) on a study's reference reports.

Each reference report is changed in known ways (clinically significant: remove a finding
sentence, swap left/right, change severity; insignificant: remove a non-clinical sentence,
reword non-informative words) and scored against its original with the chosen metrics, by the
worker through the score cache: the page queues a ``probes`` job, follows it with the job panel
(progress, Cancel) and draws the job's result. The job id stays in the URL (``?probe_job=``),
so a reload finds it. Delta = mean(insignificant) - mean(significant) on the oriented scores:
a metric that follows radiologists has a positive Delta.
"""

from __future__ import annotations

import streamlit as st

from radconcord.backend.services.scores import probes, scoring
from radconcord.backend.services.study_admin import studies
from radconcord.webapp import state
from radconcord.webapp.components import job_ref, plots
from radconcord.webapp.components.csv_download import csv_download
from radconcord.webapp.components.job_panel import job_panel

actor = state.require_actor()
state.require_admin_page(actor)
db = state.get_db()

# Preselected: lexical metrics run in a blink on a CPU worker.
FAST_KINDS = {"lexical"}
JOB_KEY = "probe_job"


@st.cache_data(ttl=60, show_spinner=False)
def _catalog() -> list[scoring.MetricInfo]:
    return scoring.metric_catalog()


st.title("Perturbation probes")
st.caption("Does a metric penalise clinically significant edits more than meaningless ones? "
           "Each perturbed reference is scored against the original report.")
study_names = [s.name for s in state.call(studies.list_studies, db, actor)]
if not study_names:
    st.info("No studies yet: import cases first.")
    st.stop()

catalog = _catalog()
available = [m for m in catalog if m.available]
with st.form("probes"):
    c1, c2, c3 = st.columns([3, 1, 1])
    study = c1.selectbox("Study", study_names, key="probe_study")
    seed = int(c2.number_input("Seed", min_value=0, value=0, step=1, key="probe_seed"))
    max_reports = int(c3.number_input("Max reports", min_value=1,
                                      max_value=probes.MAX_REPORTS_LIMIT, value=100, step=10,
                                      key="probe_max"))
    families = st.multiselect(
        "Metrics", [m.family for m in available],
        default=[m.family for m in available if m.kind in FAST_KINDS][:3],
        key="probe_metrics",
        help="The worker scores them; model metrics are fastest on a GPU worker.",
    )
    submitted = st.form_submit_button("Run probes", type="primary")

if submitted:
    if not families:
        st.warning("Choose at least one metric.")
    else:
        job = state.call(probes.enqueue_probes, db, actor, study_name=study,
                         metrics=list(families), seed=seed, max_reports=max_reports)
        job_ref.remember(JOB_KEY, job.id)

job_id = job_ref.current(JOB_KEY)
if job_id is None:
    st.stop()
finished = job_panel(job_id, key="probes")
if finished is None or finished.status != "done" or finished.kind != probes.KIND:
    st.stop()
result = state.call(probes.result_from_json, finished.result or {})

st.subheader(f"{result.study}: {result.n_reports} reference reports, seed {result.seed}")
st.dataframe(
    [{"Perturbation": k.label, "Clinically significant": k.significant,
      "Reports perturbed": k.n, "Nothing to perturb": k.n_skipped} for k in result.kinds],
    hide_index=True, width="stretch", key="probe_kinds",
)
kinds = [k for k in result.kinds if k.n]
st.dataframe(
    [
        {
            "Metric": r.key,
            "Direction": "higher is better" if r.higher_is_better else "lower is better",
            **{k.label: r.means.get(k.kind) for k in kinds},
            "Mean significant": r.mean_significant,
            "Mean insignificant": r.mean_insignificant,
            "Delta": r.delta,
        }
        for r in result.rows
    ],
    hide_index=True, width="stretch", key="probe_table",
    column_config={c: st.column_config.NumberColumn(format="%.4f")
                   for c in [k.label for k in kinds]
                   + ["Mean significant", "Mean insignificant", "Delta"]},
)
csv_download(
    [{"Metric": r.key, "Higher is better": r.higher_is_better,
      **{k.label: r.means.get(k.kind) for k in kinds},
      "Mean significant": r.mean_significant, "Mean insignificant": r.mean_insignificant,
      "Delta": r.delta} for r in result.rows],
    file_name=f"{result.study}-probes.csv", key="probe_download",
)
st.caption("Means of the significant/insignificant groups are over the types' means, on "
           "oriented scores (lower-is-better metrics negated). Delta > 0: the metric "
           "penalises significant changes more.")
for family, reason in result.unavailable.items():
    st.warning(f"{family} could not run here: {reason}")
if result.rows:
    st.plotly_chart(
        plots.probe_bars([{"key": r.key, "means": r.means} for r in result.rows],
                         [(k.kind, k.label, k.significant) for k in kinds]),
        key="probe_chart", width="stretch",
    )
with st.expander(f"Perturbed reports ({len(result.examples)})"):
    examples = [{"Perturbation": e.kind, "Change": e.detail, "Perturbed": e.perturbed,
                 "Original": e.original, **e.scores} for e in result.examples]
    st.dataframe(examples, hide_index=True, width="stretch", key="probe_examples")
    csv_download(examples, file_name=f"{result.study}-perturbed-reports.csv",
                 key="probe_examples_download")
