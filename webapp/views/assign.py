"""Admin: give a study's pairs to raters (k raters per pair, seeded and reproducible); in a
preference (pairwise) study, create its comparisons and give each to k raters instead."""

from __future__ import annotations

import streamlit as st

from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import pairwise
from radconcord.backend.services.quality import calibration
from radconcord.backend.services.study_admin import (
    assignment,
    progress,
    studies,
    study_settings,
)
from radconcord.webapp import state

actor = state.require_actor()
state.require_admin_page(actor)
db = state.get_db()

st.title("Assign raters")
st.caption("Each pair (in a preference study: each comparison) gets k raters, balanced "
           "across raters; every rater gets their own seeded order. Re-running never moves "
           "existing assignments, it only adds missing ones (new pairs, new raters, a "
           "larger k).")

study_names = [s.name for s in state.call(studies.list_studies, db, actor)]
raters = [u.username for u in state.call(auth.list_users, db, actor)
          if u.role == "rater" and u.active]
if not study_names:
    st.info("No studies yet: import cases first.")
    st.stop()
if not raters:
    st.info("No active rater accounts yet.")
    st.stop()

# Outside the form: the page shows what the chosen study's mode asks for (pairs to rate,
# or comparisons to create and judge) as soon as the study is chosen.
study_name = st.selectbox("Study", study_names, key="assign_study")
mode = state.call(study_settings.study_settings, db, actor, study_name).annotation_mode
st.caption(f"Mode: **{study_settings.mode_label(mode)}**. "
           f"{study_settings.mode_summary(mode)}")


def _comparisons_panel(name: str) -> None:
    """A preference study: create its comparisons, then give each to k raters (the
    services of ``python -m backend pairwise make`` and ``pairwise assign``)."""
    for level, message in st.session_state.pop("pairwise_flash", []):
        getattr(st, level)(message)
    prog = state.call(progress.study_progress, db, actor, study_name=name)
    st.markdown(f"**{len(prog.comparisons)} comparisons** (two candidates of one reference "
                f"each), {prog.n_assignments} judgements given to {len(prog.raters)} "
                f"rater(s), {prog.n_completed} done.")
    with st.form("pairwise_make"):
        st.caption("1. Create a comparison for every two candidates of each reference. "
                   "Which candidate is shown as A is a seeded draw; comparisons that exist "
                   "are kept, so creating again adds only what is missing.")
        make_seed = st.number_input("Seed of the A/B sides", min_value=0, value=0, step=1,
                                    key="pairwise_make_seed")
        make = st.form_submit_button("Create comparisons", type="primary")
    if make:
        made = state.call(pairwise.make_comparisons, db, actor, name, seed=int(make_seed))
        st.session_state["pairwise_flash"] = [(
            "success", f"{made.study_name}: {made.created} new comparisons ({made.total} in "
                       f"all, {made.references} references with 2+ candidates, "
                       f"seed={made.seed}).")]
        st.rerun()
    with st.form("pairwise_assign"):
        st.caption("2. Give each comparison to k raters, balanced across raters; each rater "
                   "gets their own seeded order. Assigning again only adds what is missing.")
        chosen_pw = st.multiselect("Raters", raters, default=raters, key="pairwise_raters")
        p1, p2 = st.columns(2)
        k_pw = p1.number_input("Raters per comparison (k)", min_value=1,
                               max_value=max(1, len(raters)), value=1, step=1,
                               key="pairwise_k")
        seed_pw = p2.number_input("Seed", min_value=0, value=0, step=1, key="pairwise_seed",
                                  help="Recorded on the study; the same seed gives the same "
                                       "orders.")
        give = st.form_submit_button("Assign comparisons", type="primary",
                                     disabled=not prog.comparisons)
    if give:
        done = state.call(pairwise.assign_judgements, db, actor, name, list(chosen_pw),
                          int(k_pw), int(seed_pw))
        st.session_state["pairwise_flash"] = [(
            "success", f"{done.created} new judgements in {done.study_name} "
                       f"({done.n_comparisons} comparisons, k={done.raters_per_comparison}, "
                       f"seed={done.seed}): "
                       + ", ".join(f"{u} {n}" for u, n in done.per_rater.items()) + ".")]
        st.rerun()
    if not prog.comparisons:
        st.caption("Create the comparisons first: then they can be assigned.")


if mode == study_settings.PAIRWISE:
    _comparisons_panel(study_name)
    submitted = False
else:
    with st.form("assign"):
        chosen = st.multiselect("Raters", raters, default=raters, key="assign_raters")
        c1, c2 = st.columns(2)
        k = c1.number_input("Raters per pair (k)", min_value=1,
                            max_value=max(1, len(raters)), value=1, step=1, key="assign_k")
        seed = c2.number_input("Seed", min_value=0, value=0, step=1, key="assign_seed",
                               help="Recorded on the study; the same seed gives the same "
                                    "orders.")
        submitted = st.form_submit_button("Assign", type="primary")

if submitted:
    summary = state.call(assignment.assign_raters, db, actor, study_name=study_name,
                         rater_usernames=list(chosen), raters_per_pair=int(k), seed=int(seed))
    extras = "".join(
        f"; {n} {what}" for n, what in ((summary.training_created, "training-item assignments"),
                                        (summary.repeats_created, "hidden repeats")) if n)
    st.success(f"{summary.created} new assignments in {summary.study_name} "
               f"({summary.n_pairs} pairs, k={summary.raters_per_pair}, seed={summary.seed})"
               f"{extras}.")
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
    "completed pairs, the pair a rater is on, training items, hidden repeats and the pairs "
    "they repeat stay in place; raters see nothing new. The "
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

st.subheader("Quality control")
st.caption(
    "Training (calibration) items: pairs with reference counts (an expert's or a consensus) "
    "that every rater of the study does first; after each one the rater sees the expert's "
    "counts beside theirs. Their answers never enter the study's statistics or its ratings "
    "export. A pair that already has ratings may be marked: those ratings then leave the "
    "study's statistics. Pair numbers are those of the dashboard and the exports."
)
qc_study = st.selectbox("Study", study_names, key="qc_study")
# A change is reported after the rerun that shows its effect in the tables below.
for level, message in st.session_state.pop("qc_flash", []):
    getattr(st, level)(message)
items = state.call(calibration.list_training, db, actor, study_name=qc_study)
if items:
    st.dataframe(
        [{"Pair": i.pair_number, "Pair id": i.opaque_id,
          "Expert total": sum(i.expert_counts.values()), "Counts from": i.expert_source,
          "Raters": i.raters, "Done": i.done} for i in items],
        hide_index=True, key="qc_training_table",
    )
else:
    st.markdown("No training items in this study yet.")


def _numbers(text: str) -> list[int] | None:
    """Pair numbers typed as ``1, 3, 5`` (None when blank); a bad entry stops the page."""
    if not text.strip():
        return None
    try:
        return [int(p) for p in text.replace(" ", "").split(",") if p]
    except ValueError:
        st.error(f"Pairs: give pair numbers separated by commas, got {text!r}.")
        st.stop()


def _flash(*messages: tuple[str, str]) -> None:
    st.session_state["qc_flash"] = list(messages)
    st.rerun()


def _marked(result: calibration.MarkResult) -> None:
    messages = [("success", f"{result.study_name}: pair(s) "
                 f"{', '.join(map(str, result.pair_numbers))} marked as training items; "
                 f"{result.assignments_created} new training assignment(s).")]
    if result.ratings_left_study:
        messages.append(("warning", f"{result.ratings_left_study} completed rating(s) of "
                         "these pairs no longer count in the study's statistics and "
                         "exports."))
    _flash(*messages)


source_choice = st.radio("Mark training items from",
                         ["CSV of expert counts", "an expert account", "adjudicated consensus"],
                         horizontal=True, key="qc_source")
with st.form("qc_mark"):
    upload = text = expert_name = None
    if source_choice == "CSV of expert counts":
        st.caption("One row per cell, ReXVal ratings columns: "
                   f"`{','.join(calibration.CSV_COLUMNS)}` (cells not given are 0).")
        upload = st.file_uploader("CSV file", type=["csv"], key="qc_csv_file")
        text = st.text_area("...or paste the CSV", key="qc_csv_text", height=100)
    elif source_choice == "an expert account":
        users = [u.username for u in state.call(auth.list_users, db, actor) if u.active]
        expert_name = st.selectbox("Expert account (their completed counts)", users,
                                   key="qc_expert")
    pairs_text = st.text_input("Pairs (blank: every pair the source has)", key="qc_pairs")
    mark = st.form_submit_button("Mark as training items")

if mark:
    numbers = _numbers(pairs_text)
    if source_choice == "CSV of expert counts":
        if upload is not None:
            csv_text, label = upload.getvalue().decode("utf-8-sig", "replace"), upload.name
        elif text and text.strip():
            csv_text, label = text, "pasted"
        else:
            st.error("CSV: upload a file or paste its text.")
            st.stop()
        _marked(state.call(calibration.mark_from_csv, db, actor, study_name=qc_study,
                           text=csv_text, pair_numbers=numbers,
                           source=f"expert CSV {label}"))
    elif source_choice == "an expert account":
        _marked(state.call(calibration.mark_from_rater, db, actor, study_name=qc_study,
                           username=str(expert_name), pair_numbers=numbers))
    else:
        _marked(state.call(calibration.mark_from_adjudication, db, actor, study_name=qc_study,
                           pair_numbers=numbers))

if items:
    with st.form("qc_unmark"):
        chosen_items = st.multiselect(
            "Training items to make study pairs again (only items no rater has done)",
            [i.pair_number for i in items], key="qc_unmark_pairs")
        unmark = st.form_submit_button("Unmark")
    if unmark and chosen_items:
        result = state.call(calibration.unmark_training, db, actor, study_name=qc_study,
                            pair_numbers=chosen_items)
        _flash(("success", f"{result.study_name}: pair(s) "
                f"{', '.join(map(str, result.pair_numbers))} are study pairs again "
                f"({result.assignments_removed} open training assignment(s) removed); "
                "assign again to give them raters."))

values = state.call(study_settings.study_settings, db, actor, qc_study).values
with st.form("qc_rules"):
    c1, c2, c3 = st.columns(3)
    q_items = c1.number_input(
        "Qualification: training items to pass (0: no gate)", min_value=0,
        value=int(values["qualification_items"]), step=1, key="qc_items")
    q_error = c2.number_input(
        "Largest difference of total counts that passes", min_value=0,
        value=int(values["qualification_max_error"]), step=1, key="qc_max_error")
    share = c3.number_input(
        "Repeat share (hidden repeats per rater, 0-0.5)", min_value=0.0, max_value=0.5,
        value=float(values["repeat_share"]), step=0.05, key="qc_repeat_share",
        help="Saving gives the assigned raters their repeats now; raters assigned later "
             "get theirs with the assignment.")
    save_rules = st.form_submit_button("Save quality-control settings")
if save_rules:
    state.call(study_settings.update_study_settings, db, actor, study_name=qc_study,
               qualification_items=int(q_items), qualification_max_error=int(q_error),
               repeat_share=float(share))
    # A share set after the raters were assigned would otherwise wait for another Assign
    # (the form above this one): give the repeats now, placed as Assign would.
    added = state.call(assignment.add_missing_repeats, db, actor, study_name=qc_study)
    _flash(("success", f"{qc_study}: qualification {int(q_items)} item(s) within "
            f"{int(q_error)}, repeat share {float(share):g}"
            + (f"; {added} hidden repeats added to the raters' queues." if added else ".")))

status = state.call(calibration.qualification_status, db, actor, study_name=qc_study)
if status:
    st.markdown("**Qualification per rater**")
    st.dataframe(
        [{"Rater": r.rater, "Training items": r.training, "Done": r.done, "Passed": r.passed,
          "Needed": r.required,
          "Status": r.status}
         for r in status],
        hide_index=True, key="qc_status_table",
    )
