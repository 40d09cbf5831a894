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

st.subheader("Order of each rater's pairs")
st.caption(
    "Random (default): each rater keeps the seeded order above. Adaptive: after every pair a "
    "rater completes, their remaining pairs are reordered so the next one shrinks the widest "
    "CI of your question fastest: pairs nobody has rated first (in a seeded order), then the "
    "pairs whose next rating moves the question most. Who rates which pair never changes; "
    "completed pairs and the pair a rater is on stay in place; raters see nothing new. The "
    "choice is recorded on the study and in its export manifest (it changes the sampling "
    "design)."
)
order_study = st.selectbox("Study", study_names, key="order_study")
current = state.call(assignment.get_strategy, db, actor, study_name=order_study)
st.write(f"Now: **{current.strategy}**"
         + (f", question `{current.question}`" if current.question else "")
         + f", seed {current.seed}.")
keys = state.call(assignment.scored_keys, db, actor, study_name=order_study)
with st.form("order"):
    strategy = st.radio("Strategy", ["random", "adaptive"], horizontal=True,
                        index=["random", "adaptive"].index(current.strategy),
                        key="order_strategy")
    kind = st.radio("Question (adaptive)", ["all metric taus", "tau difference of two metrics"],
                    horizontal=True, key="order_question",
                    index=1 if (current.question or "all") != "all" else 0)
    c1, c2 = st.columns(2)
    metric_a = c1.selectbox("Metric A", keys or ["(no scored metric)"], key="order_metric_a")
    metric_b = c2.selectbox("Metric B", keys or ["(no scored metric)"], key="order_metric_b",
                            index=1 if len(keys) > 1 else 0)
    order_seed = st.number_input("Tie-break seed", min_value=0, value=int(current.seed), step=1,
                                 key="order_seed")
    save_order = st.form_submit_button("Save order strategy")

if save_order:
    question = "all" if kind == "all metric taus" else f"tau_diff:{metric_a},{metric_b}"
    setting = state.call(assignment.set_strategy, db, actor, study_name=order_study,
                         strategy=strategy, question=question, seed=int(order_seed))
    st.success(f"{setting.study_name}: {setting.strategy} order"
               + (f" for {setting.question}" if setting.question else "")
               + f", seed {setting.seed}; {setting.reordered} open pair(s) moved.")
