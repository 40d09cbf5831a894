"""Adjudicate: the queue of disputed pairs of a study, and consensus counts for one pair.

For admins and for accounts that are adjudicators of a study. The raters' counts appear
anonymised (Rater A/B/C, stable per pair); sources and scores never appear. Admins also see
and change the queue rule here (two study settings).
"""

from __future__ import annotations

import math

import streamlit as st

from radconcord.backend.errors import ServiceError
from radconcord.backend.services.annotation.assignment_writes import CELLS
from radconcord.backend.services.quality import adjudication
from radconcord.backend.services.study_admin import study_settings
from radconcord.backend.types import CATEGORIES, Actor
from radconcord.webapp import state
from radconcord.webapp.components import reports
from radconcord.webapp.components.image_viewer import viewer_panel

STUDY_PARAM = "study"
PAIR_PARAM = "pair"
SAVED_KEY = "adjudicate_saved"


def _cell_label(category: int, significant: bool) -> str:
    return f"{category} {'significant' if significant else 'not significant'}"


def _rule_settings(actor: Actor, study: str) -> None:
    """The queue rule's two settings, editable by an admin."""
    db = state.get_db()
    current = state.call(study_settings.study_settings, db, actor, study).values
    with st.expander("Queue rule", expanded=False):
        with st.form("adjudicate_rule"):
            spread = st.number_input(
                study_settings.SETTINGS["adjudicate_significant_range"].label,
                min_value=0, max_value=99, step=1,
                value=int(current["adjudicate_significant_range"]), key="adj_rule_range")
            cat12 = st.checkbox(study_settings.SETTINGS["adjudicate_category_12"].label,
                                value=bool(current["adjudicate_category_12"]),
                                key="adj_rule_cat12")
            if st.form_submit_button("Save rule"):
                state.call(study_settings.update_study_settings, db, actor, study_name=study,
                           adjudicate_significant_range=int(spread),
                           adjudicate_category_12=bool(cat12))
                st.rerun()


def _prefill(view: adjudication.AdjudicationView) -> dict[tuple[int, bool], int]:
    """The stored consensus, else the raters' mean per cell rounded half up."""
    if view.consensus is not None:
        return dict(view.consensus.counts)
    if not view.raters:
        return dict.fromkeys(CELLS, 0)
    return {cell: math.floor(sum(r.counts[cell] for r in view.raters) / len(view.raters) + 0.5)
            for cell in CELLS}


def _raters_table(view: adjudication.AdjudicationView) -> None:
    if not view.raters:
        st.info("No rater has completed this pair yet.")
        return
    rows = []
    for category, significant in CELLS:
        row = {"Category": f"{category}. {CATEGORIES[category]}",
               "Significant": "yes" if significant else "no"}
        row.update({r.label: r.counts[(category, significant)] for r in view.raters})
        row["Differs"] = "⚠ differs" if (category, significant) in view.disagreeing else ""
        rows.append(row)
    # All twelve cells at once: the default height scrolls after ten rows and hides category 6.
    st.dataframe(rows, hide_index=True, width="stretch", height="content", key="adj_raters")


def _consensus_form(actor: Actor, study: str, view: adjudication.AdjudicationView) -> None:
    values = _prefill(view)
    # Keys carry the version, so a save or a newer stored consensus refills every input.
    prefix = f"adj_{view.opaque_id}_{view.version}"
    with st.form(f"{prefix}_form"):
        st.markdown("**Consensus counts**")
        head = st.columns([3, 1, 1])
        head[1].caption("Significant")
        head[2].caption("Not significant")
        entered: dict[tuple[int, bool], int] = {}
        for category in sorted(CATEGORIES):
            cols = st.columns([3, 1, 1], vertical_alignment="center")
            cols[0].markdown(f"{category}. {CATEGORIES[category]}")
            for col, significant in ((cols[1], True), (cols[2], False)):
                entered[(category, significant)] = int(col.number_input(
                    _cell_label(category, significant), min_value=0, max_value=99, step=1,
                    value=int(values[(category, significant)]),
                    key=f"{prefix}_{category}_{int(significant)}",
                    label_visibility="collapsed"))
        note = st.text_area(
            "Note (required when the consensus is none of the raters' counts)",
            value=view.consensus.note if view.consensus else "", key=f"{prefix}_note")
        if st.form_submit_button("Save consensus", type="primary"):
            _save(actor, study, view, entered, note)


def _save(actor: Actor, study: str, view: adjudication.AdjudicationView,
          counts: dict[tuple[int, bool], int], note: str) -> None:
    state.require_live_session()
    try:
        result = adjudication.record(state.get_db(), actor, study_name=study,
                                     opaque_id=view.opaque_id, counts=counts, note=note,
                                     expected_version=view.version)
    except adjudication.StaleAdjudication as exc:
        # Another window saved first: show the stored consensus (new version, new inputs).
        st.session_state[SAVED_KEY] = (view.opaque_id, str(exc))
        st.rerun()
    except ServiceError as exc:
        # Said above the form, which keeps what was typed; the page (and Previous/Next)
        # stays.
        st.session_state[SAVED_KEY] = (view.opaque_id, f"Not saved: {exc}")
        st.rerun()
    st.session_state[SAVED_KEY] = (view.opaque_id,
                                   f"Consensus saved (version {result.version}).")
    st.rerun()


def _go(opaque_id: str) -> None:
    st.query_params[PAIR_PARAM] = opaque_id
    st.session_state.pop(SAVED_KEY, None)


actor = state.require_actor()
db = state.get_db()
st.title("Adjudicate")
names = state.call(adjudication.adjudicated_studies, db, actor)
if not names:
    st.info("You are not an adjudicator of any study.")
    st.stop()
wanted = st.query_params.get(STUDY_PARAM)
study = st.selectbox("Study", names, index=names.index(wanted) if wanted in names else 0,
                     key="adj_study")
if study != wanted:
    st.query_params[STUDY_PARAM] = study
    if wanted is not None:
        st.query_params.pop(PAIR_PARAM, None)

if actor.is_admin:
    _rule_settings(actor, study)

entries = state.call(adjudication.queue, db, actor, study_name=study)
n_done = sum(e.adjudicated for e in entries)
st.caption(f"{len(entries)} pair(s) in the queue, {n_done} adjudicated.")
if not entries:
    st.info("No pair needs adjudication under the current rule.")
    st.stop()
# Folded: at 1280x800 the whole queue would push the film and the counts below the fold; the
# Pair list below names each pair's reason too.
with st.expander(f"Queue: {len(entries)} pair(s)", expanded=False):
    st.dataframe([{"Pair": e.pair_number, "Reason": e.reason,
                   "Done": "✓" if e.adjudicated else ""} for e in entries],
                 hide_index=True, width="stretch", key="adj_queue")

by_id = {e.opaque_id: e for e in entries}
current = st.query_params.get(PAIR_PARAM)
if current not in by_id:
    current = next((e.opaque_id for e in entries if not e.adjudicated), entries[0].opaque_id)
ids = list(by_id)
chosen = st.selectbox(
    "Pair", ids, index=ids.index(current), key=f"adj_pair_{study}_{current}",
    format_func=lambda oid: f"Pair {by_id[oid].pair_number}: {by_id[oid].reason}"
    + (" (done)" if by_id[oid].adjudicated else ""))
if chosen != current:
    _go(chosen)
    st.rerun()
st.query_params[PAIR_PARAM] = current

view = state.call(adjudication.get_item, db, actor, study_name=study, opaque_id=current)
st.subheader(f"Pair {view.pair_number}")
if view.reason:
    st.caption(f"In the queue: {view.reason}")
saved = st.session_state.get(SAVED_KEY)
if saved and saved[0] == view.opaque_id:
    if saved[1].startswith("Consensus saved"):
        st.success(saved[1])
    else:
        st.warning(saved[1])
if view.consensus is not None:
    st.caption(f"Stored consensus by {view.consensus.adjudicator}, version {view.version}"
               + (f", {view.consensus.updated_at:%Y-%m-%d %H:%M} UTC"
                  if view.consensus.updated_at else "") + ".")

left, right = st.columns([1, 1.25], gap="medium")
with left:
    viewer_panel(db, actor, view.images, pair_key=view.opaque_id)
with right:
    reports.report_pair(view.reference_text, view.candidate_text)
_raters_table(view)
_consensus_form(actor, study, view)

prev_col, next_col = st.columns(2)
with prev_col:
    if view.prev_opaque_id and st.button("Previous in queue", key="adj_prev"):
        _go(view.prev_opaque_id)
        st.rerun()
with next_col:
    if view.next_opaque_id and st.button("Next in queue", key="adj_next", type="primary"):
        _go(view.next_opaque_id)
        st.rerun()
