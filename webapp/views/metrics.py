"""Admin: the metric catalogue (available or why not), queue scoring, watch the jobs."""

from __future__ import annotations

import streamlit as st

from backend.services import scoring, studies
from webapp import state

actor = state.require_actor()
state.require_admin_page(actor)
db = state.get_db()


@st.cache_data(ttl=60, show_spinner="Checking which metrics can run here...")
def _catalog() -> list[scoring.MetricInfo]:
    # Instantiating every family imports its module; a minute's cache keeps reruns quick
    # while a newly installed dependency or model still shows up soon.
    return scoring.metric_catalog()


st.title("Metrics")
catalog = _catalog()
n_available = sum(1 for m in catalog if m.available)
st.caption(f"{n_available} of {len(catalog)} metric families can run on this machine. "
           "Scoring runs in the worker process (`python -m backend worker`), never in the web "
           "app; results are cached by pair content and metric signature.")

st.dataframe(
    [
        {
            "Family": m.family,
            "Kind": m.kind,
            "Outputs": ", ".join(
                f"{k} {'↑' if m.directions[k] else '↓'}" if k in m.directions else k
                for k in m.keys
            ),
            "Available": m.available,
            "Why not": m.reason or "",
            "Model": m.needs_model,
            "Image": m.needs_image,
            "Signature": m.signature or "",
        }
        for m in catalog
    ],
    hide_index=True,
    width="stretch",
    column_config={
        "Available": st.column_config.CheckboxColumn(width="small"),
        "Model": st.column_config.CheckboxColumn(width="small", help="Loads model weights"),
        "Image": st.column_config.CheckboxColumn(width="small", help="Needs the images"),
        "Why not": st.column_config.TextColumn(width="large"),
    },
)

st.subheader("Score a study")
study_names = [s.name for s in state.call(studies.list_studies, db, actor)]
if not study_names:
    st.info("No studies yet: import cases first.")
else:
    with st.form("enqueue"):
        study_name = st.selectbox("Study", study_names, key="score_study")
        available = [m.family for m in catalog if m.available]
        families = st.multiselect(
            "Metric families", [m.family for m in catalog], default=available[:1],
            key="score_families",
            help="An unavailable family can be queued for a worker on another machine; a "
                 "worker that cannot run it records why.",
        )
        submitted = st.form_submit_button("Queue scoring job", type="primary")
    if submitted:
        if not families:
            st.warning("Choose at least one metric family.")
        else:
            job = state.call(scoring.enqueue_scoring, db, actor, study_name=study_name,
                             metrics=list(families))
            st.success(f"Queued job #{job.id}: {', '.join(job.metrics)} on {job.study_name}.")


@st.fragment(run_every="3s")
def jobs_panel() -> None:
    """Scoring jobs with their live progress."""
    jobs = state.call(scoring.list_jobs, state.get_db(), actor)
    if not jobs:
        st.caption("No scoring jobs yet.")
        return
    st.dataframe(
        [
            {
                "Job": j.id,
                "Study": j.study_name or "",
                "Metrics": ", ".join(j.metrics),
                "Status": j.status,
                "Progress": j.fraction,
                "Done": f"{j.progress_done} / {j.progress_total}",
                "Message": j.error or j.message,
                "Worker": j.worker_id or "",
                "Queued": j.created_at,
            }
            for j in jobs
        ],
        hide_index=True,
        width="stretch",
        column_config={
            "Progress": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0),
            "Queued": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm:ss"),
        },
    )


st.subheader("Jobs")
jobs_panel()
