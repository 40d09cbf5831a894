"""Adjudicate: the queue of disputed pairs of a study, and consensus counts for one pair.

For admins and for accounts that are adjudicators of a study. The raters' counts appear
anonymised (Rater A/B/C, stable per pair); sources and scores never appear. Admins also see
and change the queue rule here (two study settings).
"""

from __future__ import annotations

import math

import streamlit as st

from radconcord.backend.errors import ServiceError
from radconcord.backend.services.accounts import sessions
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
# The film | adjudication columns, as on the rating screen: viewer.js drags their split and
# takes both into full screen (viewer.css styles a container of this key there).
SPLIT_KEY = "rc_split"
FILM_SPLIT = [1.2, 1]  # film : raters, consensus and reports, until the split is dragged


def split_tag(actor: Actor) -> str:
    """An opaque per-account name for the split the browser remembers (no user name); not
    the rating screen's, whose other column holds other things."""
    return sessions.account_tag(actor, "adjudicate-film-split")


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
    # Narrow beside the film: the category stays pinned while the raters scroll sideways.
    config = {"Category": st.column_config.TextColumn(width=190, pinned=True),
              "Significant": st.column_config.TextColumn("Sig.", width=44,
                                                         help="Clinically significant"),
              "Differs": st.column_config.TextColumn(width=78)}
    config.update({r.label: st.column_config.NumberColumn(width=64) for r in view.raters})
    # All twelve cells at once: the default height scrolls after ten rows and hides category 6.
    st.dataframe(rows, hide_index=True, width="stretch", height="content", key="adj_raters",
                 column_config=config)


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
# Less blank space above the header, as on the rating screen: the film starts high enough to
# take the window's height under the title and the two pickers.
st.html("<style>[data-testid='stMainBlockContainer'] {padding: 1rem 1rem 1rem 1rem;}"
        "</style>")
# The consensus form sits below the fold at 1280x800: the film column sticks under the
# app's header (3.75rem) while the adjudication column scrolls past it, so the film stays in
# full view while the consensus is typed. flex-start: a stretched column is as tall as the
# row and could not stick; its height is the viewer's, which viewer.js fits to the window.
st.html(f"<style>.st-key-{SPLIT_KEY} [data-testid='stHorizontalBlock'] > "
        "[data-testid='stColumn']:first-child {position: sticky; top: 3.75rem; "
        "align-self: flex-start; max-height: calc(100vh - 3.75rem); z-index: 1;}</style>")
names = state.call(adjudication.adjudicated_studies, db, actor)
if not names:
    st.title("Adjudicate")
    st.info("You are not an adjudicator of any study.")
    st.stop()
title_col, study_col, pair_col = st.columns([0.9, 1.1, 2.6], vertical_alignment="bottom")
title_col.title("Adjudicate")
wanted = st.query_params.get(STUDY_PARAM)
study = study_col.selectbox("Study", names,
                            index=names.index(wanted) if wanted in names else 0,
                            key="adj_study")
if study != wanted:
    st.query_params[STUDY_PARAM] = study
    if wanted is not None:
        st.query_params.pop(PAIR_PARAM, None)

entries = state.call(adjudication.queue, db, actor, study_name=study)
n_done = sum(e.adjudicated for e in entries)
queue_line = f"{len(entries)} pair(s) in the queue, {n_done} adjudicated."
if not entries:
    if actor.is_admin:
        _rule_settings(actor, study)
    st.caption(queue_line)
    st.info("No pair needs adjudication under the current rule.")
    st.stop()

by_id = {e.opaque_id: e for e in entries}
current = st.query_params.get(PAIR_PARAM)
if current not in by_id:
    current = next((e.opaque_id for e in entries if not e.adjudicated), entries[0].opaque_id)
ids = list(by_id)
chosen = pair_col.selectbox(
    "Pair", ids, index=ids.index(current), key=f"adj_pair_{study}_{current}",
    format_func=lambda oid: f"Pair {by_id[oid].pair_number}: {by_id[oid].reason}"
    + (" (done)" if by_id[oid].adjudicated else ""))
if chosen != current:
    _go(chosen)
    st.rerun()
st.query_params[PAIR_PARAM] = current

view = state.call(adjudication.get_item, db, actor, study_name=study, opaque_id=current)
stored = "" if view.consensus is None else (
    f" Stored consensus by {view.consensus.adjudicator}, version {view.version}"
    + (f", {view.consensus.updated_at:%Y-%m-%d %H:%M} UTC" if view.consensus.updated_at
       else "") + ".")
st.caption(queue_line + stored)


def _adjudication_column() -> None:
    """Beside the film (and in its full screen): the queue, the raters' counts, the
    consensus, Previous/Next, then the reports."""
    if actor.is_admin:
        _rule_settings(actor, study)
    # Folded: the Pair list above names each pair's reason too.
    with st.expander(f"Queue: {len(entries)} pair(s)", expanded=False):
        st.dataframe([{"Pair": e.pair_number, "Reason": e.reason,
                       "Done": "✓" if e.adjudicated else ""} for e in entries],
                     hide_index=True, width="stretch", key="adj_queue")
    if view.reason:
        st.caption(f"Pair {view.pair_number} is in the queue: {view.reason}")
    _raters_table(view)
    saved = st.session_state.get(SAVED_KEY)
    if saved and saved[0] == view.opaque_id:
        if saved[1].startswith("Consensus saved"):
            st.success(saved[1])
        else:
            st.warning(saved[1])
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
    reports.report_pair(view.reference_text, view.candidate_text)


if view.images:
    # The film is the dominant pane, as on the rating screen; the split is the adjudicator's.
    with st.container(key=SPLIT_KEY):
        left, right = st.columns(FILM_SPLIT, gap="small")
    with left:
        viewer_panel(db, actor, view.images, pair_key=view.opaque_id,
                     split_owner=split_tag(actor))
    with right:
        _adjudication_column()
else:
    _adjudication_column()
