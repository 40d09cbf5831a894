"""Admin: give a study's pairs to raters (k raters per pair, seeded and reproducible)."""

from __future__ import annotations

import streamlit as st

from backend.services import assignment, auth, studies
from webapp import state

actor = state.require_actor()
state.require_admin_page(actor)
db = state.get_db()

st.title("Assign raters")
st.caption("Each pair gets k raters, balanced across raters; every rater gets their own "
           "seeded order. Re-running never moves existing assignments, it only adds missing "
           "ones (new pairs, new raters, a larger k).")

study_names = [s.name for s in state.call(studies.list_studies, db, actor)]
raters = [u.username for u in state.call(auth.list_users, db, actor)
          if u.role == "rater" and u.active]
if not study_names:
    st.info("No studies yet: import cases first.")
    st.stop()
if not raters:
    st.info("No active rater accounts yet.")
    st.stop()

with st.form("assign"):
    study_name = st.selectbox("Study", study_names, key="assign_study")
    chosen = st.multiselect("Raters", raters, default=raters, key="assign_raters")
    c1, c2 = st.columns(2)
    k = c1.number_input("Raters per pair (k)", min_value=1, max_value=max(1, len(raters)),
                        value=1, step=1, key="assign_k")
    seed = c2.number_input("Seed", min_value=0, value=0, step=1, key="assign_seed",
                           help="Recorded on the study; the same seed gives the same orders.")
    submitted = st.form_submit_button("Assign", type="primary")

if submitted:
    summary = state.call(assignment.assign_raters, db, actor, study_name=study_name,
                         rater_usernames=list(chosen), raters_per_pair=int(k), seed=int(seed))
    st.success(f"{summary.created} new assignments in {summary.study_name} "
               f"({summary.n_pairs} pairs, k={summary.raters_per_pair}, seed={summary.seed}).")
    st.dataframe(
        [{"Rater": name, "Pairs assigned": n} for name, n in summary.per_rater.items()],
        hide_index=True,
    )
