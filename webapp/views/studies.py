"""Admin: every study with its size and sources, the live progress of one study, its
settings (highlight differences), and archive / unarchive / delete.

Archived studies are listed only under the "Archived" filter here; every other page picks
from the studies in use. Deleting asks for the study's name typed out; a study with ratings
is exported first (the page says where)."""

from __future__ import annotations

import streamlit as st

from backend.services import progress, studies, study_settings
from webapp import state
from webapp.components import tables

actor = state.require_actor()
state.require_admin_page(actor)
db = state.get_db()

FLASH = "studies_flash"

st.title("Studies & progress")
flash = st.session_state.pop(FLASH, None)
if flash:
    st.success(flash)
show = st.segmented_control("Show", ["In use", "Archived"], default="In use",
                            key="studies_filter") or "In use"
archived = show == "Archived"
summaries = state.call(studies.list_studies, db, actor, archived=archived)
if not summaries:
    st.info("No archived studies." if archived
            else "No studies yet. Use **Import** to create one.")
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


def _toggle_highlight(name: str) -> None:
    # A callback: the rerun that follows shows the recorded state.
    value = bool(st.session_state[f"highlight_{name}"])
    state.call(study_settings.update_study_settings, state.get_db(),
               state.require_live_session(), study_name=name, highlight_differences=value)


def settings_panel(name: str) -> None:
    """The study's settings (recorded with the study, exported with it)."""
    current = state.call(study_settings.study_settings, db, actor, name)
    spec = study_settings.SETTINGS["highlight_differences"]
    st.toggle(spec.label, value=current.highlight_differences, key=f"highlight_{name}",
              on_change=_toggle_highlight, args=(name,))
    changed = current.changed_at.get(spec.key)
    st.caption(f"Off by default. {spec.caveat}"
               + (f" Last changed {changed[:19].replace('T', ' ')} UTC." if changed else ""))


def lifecycle_panel(name: str, status: str) -> None:
    """Archive or unarchive, and delete (with the study's name typed to confirm)."""
    if status == studies.ARCHIVED:
        st.caption("Archived: kept, hidden from raters and from the other pages' lists. "
                   "Unarchive brings it back as closed.")
        if st.button("Unarchive", key="unarchive_study", icon=":material/unarchive:"):
            done = state.call(studies.unarchive_study, db, actor, study_name=name)
            st.session_state[FLASH] = f"Study {done.name} is {done.status} again."
            st.rerun()
    else:
        st.caption("Archive keeps the study and its ratings but hides it from raters and "
                   "from the lists of the other pages; it can be unarchived.")
        if st.button("Archive", key="archive_study", icon=":material/archive:"):
            state.call(studies.archive_study, db, actor, study_name=name)
            st.session_state[FLASH] = (f"Study {name} archived: see it under "
                                       "Show: Archived.")
            st.rerun()
    st.markdown("**Delete**")
    st.caption("Deletes the study, its pairs, assignments and ratings. A study with ratings "
               "is exported first (JSONL: pairs, ratings, images, manifest) into the data "
               "folder; if the export fails nothing is deleted.")
    typed = st.text_input(f"Type the study name ({name}) to confirm", key=f"delete_confirm_{name}")
    if st.button("Delete study", key="delete_study", type="primary",
                 icon=":material/delete_forever:", disabled=typed.strip() != name):
        done = state.call(studies.delete_study, db, actor, study_name=name, confirm=typed)
        where = (f" Its {done.n_ratings} rating cells were exported first to "
                 f"`{done.export_dir}`." if done.export_dir else " It had no ratings.")
        st.session_state[FLASH] = f"Deleted study {name} ({done.n_pairs} pairs).{where}"
        st.rerun()


chosen = next(s for s in summaries if s.name == study_name)
with st.expander("Settings", expanded=False):
    settings_panel(study_name)
with st.expander("Archive or delete", expanded=False):
    lifecycle_panel(study_name, chosen.status)


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
                    # Text cells as on the dashboard: a missing value is a blank, never
                    # the grey "None" st.dataframe draws.
                    "Time on task": tables.minutes_seconds(r.active_seconds),
                    "Median per pair": tables.minutes_seconds(r.median_seconds),
                    "Last active": tables.when(r.last_active_at),
                }
                for r in prog.raters
            ],
            hide_index=True,
            width="stretch",
            column_config={
                "Progress": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0),
            },
        )
    with st.expander(f"Pairs ({prog.n_pairs})"):
        st.dataframe(
            [
                {"Pair": p.number, "Pair id": p.opaque_id, "Source": tables.text(p.source),
                 "Raters": p.assigned, "Done": p.completed}
                for p in prog.pairs
            ],
            hide_index=True,
            width="stretch",
        )


progress_panel(study_name)
