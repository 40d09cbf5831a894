"""Admin: every study with its size and sources, and the live progress of one study."""

from __future__ import annotations

import streamlit as st

from backend.services import progress, studies
from webapp import state

actor = state.require_actor()
state.require_admin_page(actor)
db = state.get_db()

st.title("Studies & progress")
summaries = state.call(studies.list_studies, db, actor)
if not summaries:
    st.info("No studies yet. Use **Import** to create one.")
    st.stop()

st.dataframe(
    [
        {
            "Study": s.name,
            "Status": s.status,
            "Pairs": s.n_pairs,
            "Cases": s.n_cases,
            "Raters": s.n_raters,
            "Raters per pair": s.raters_per_pair,
            "Ratings done": f"{s.n_completed} / {s.n_assignments}",
            "Sources": ", ".join(f"{k or '(none)'} ({v})" for k, v in s.sources.items()),
        }
        for s in summaries
    ],
    hide_index=True,
    width="stretch",
)

study_name = st.selectbox("Progress of", [s.name for s in summaries], key="progress_study")


@st.fragment(run_every="15s")
def progress_panel(name: str) -> None:
    """Live progress of one study (refreshes itself while the page is open)."""
    prog = state.call(progress.study_progress, state.get_db(), actor, study_name=name)
    c1, c2, c3 = st.columns(3)
    c1.metric("Pairs", prog.n_pairs)
    c2.metric("Ratings done", f"{prog.n_completed} / {prog.n_assignments}")
    c3.metric("Pairs fully rated", f"{prog.n_pairs_fully_rated} / {prog.n_pairs}")
    st.progress(prog.n_completed / prog.n_assignments if prog.n_assignments else 0.0)

    st.subheader("Raters")
    if not prog.raters:
        st.info("No raters assigned yet: use **Assign raters**.")
    else:
        st.dataframe(
            [
                {
                    "Rater": r.username,
                    "Name": r.display_name,
                    "Done": r.completed,
                    "Assigned": r.total,
                    "Progress": r.completed / r.total if r.total else 0.0,
                    "Time on task (min)": r.active_seconds / 60,
                    "Last active": r.last_active_at,
                }
                for r in prog.raters
            ],
            hide_index=True,
            width="stretch",
            column_config={
                "Progress": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0),
                "Time on task (min)": st.column_config.NumberColumn(format="%.1f"),
                "Last active": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm"),
            },
        )
    with st.expander(f"Pairs ({prog.n_pairs})"):
        st.dataframe(
            [
                {"Position": p.position, "Pair id": p.opaque_id, "Source": p.source,
                 "Raters": p.assigned, "Done": p.completed}
                for p in prog.pairs
            ],
            hide_index=True,
            width="stretch",
        )


progress_panel(study_name)
