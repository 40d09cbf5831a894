"""Admin: every study with its size and sources, the live progress of one study, its
settings (every key of ``backend.services.study_admin.study_settings.SETTINGS``, drawn by type: a
toggle,
a choice, a number with its bounds; each with its caveat and last change), and archive /
unarchive / delete.

Archived studies are listed only under the "Archived" filter here; every other page picks
from the studies in use. Deleting asks for the study's name typed out; a study with ratings
is exported first (the page says where)."""

from __future__ import annotations

import streamlit as st

from radconcord.backend.errors import ServiceError
from radconcord.backend.services.study_admin import (
    getting_started,
    progress,
    studies,
    study_settings,
    study_status,
)
from radconcord.webapp import state
from radconcord.webapp.components import tables
from radconcord.webapp.components.getting_started import getting_started_panel
from radconcord.webapp.components.score_now import score_now

actor = state.require_actor()
state.require_admin_page(actor)
db = state.get_db()

FLASH = "studies_flash"
SETTINGS_ERROR = "studies_settings_error"

st.title("Studies & progress")
getting_started_panel(state.call(getting_started.getting_started, db, actor,
                                study_name=st.session_state.get("progress_study")),
                      score_now=lambda study: score_now(db, actor, study,
                                                        key="getting_started_score_now"))
flash = st.session_state.pop(FLASH, None)
if flash:
    st.success(flash)
# A refused settings change (set by its callback), at the top: the study may be gone.
refused = st.session_state.pop(SETTINGS_ERROR, None)
if refused:
    st.error(refused, icon=":material/error:")
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
            "Mode": study_settings.mode_label(s.annotation_mode),
            "Pairs": s.n_pairs,
            "Cases": s.n_cases,
            "Raters": s.n_raters,
            "Raters per pair": s.raters_per_pair,
            # A preference study's raters judge comparisons: its progress is judgements.
            "Ratings done": f"{s.n_completed} / {s.n_assignments}"
                            + (" judgements" if s.unit == "comparison" else ""),
            "Sources": ", ".join(f"{k or '(none)'} ({v})" for k, v in s.sources.items()),
        }
        for s in summaries
    ],
    hide_index=True,
    width="stretch",
)
st.caption(" ".join(
    f"**{study_settings.mode_label(mode)}**: {study_settings.mode_summary(mode)}"
    for mode in dict.fromkeys(s.annotation_mode for s in summaries)))

study_name = st.selectbox("Progress of", [s.name for s in summaries], key="progress_study")




def _setting_key(name: str, key: str) -> str:
    return f"setting_{name}_{key}"


def _change_setting(name: str, key: str) -> None:
    """Record one setting the lead changed (a widget callback; the rerun shows the result)."""
    widget = _setting_key(name, key)
    value = st.session_state.get(widget)
    spec = study_settings.SETTINGS[key]
    if spec.type is int and isinstance(value, float) and value.is_integer():
        value = int(value)
    try:
        study_settings.update_study_settings(
            state.get_db(), state.require_live_session(), study_name=name, **{key: value})
    except ServiceError as exc:
        # Nothing was recorded: the widget goes back to the value in force, and the page
        # says which setting was refused and why.
        st.session_state[SETTINGS_ERROR] = f"Not saved: {spec.label}: {exc}"
        st.session_state.pop(widget, None)


def _last_change(current: study_settings.StudySettings, key: str) -> str:
    change = next((h for h in reversed(current.history)
                   if isinstance(h, dict) and h.get("key") == key), None)
    if change is None:
        return "Never changed."
    when = str(change.get("at", ""))[:19].replace("T", " ")
    before, after = (study_settings.display_value(key, change.get(side))
                     for side in ("from", "to"))
    return (f"Last changed {when} UTC by {change.get('by', '?')} "
            f"(from {before!r} to {after!r}).")


def _setting_widget(name: str, spec: study_settings.Setting, value: object) -> None:
    """One setting's widget, chosen by its type: toggle, select, or number input."""
    key = _setting_key(name, spec.key)
    common = {"key": key, "on_change": _change_setting, "args": (name, spec.key)}
    if spec.type is bool:
        st.toggle(spec.label, value=bool(value), **common)
    elif spec.choices is not None:
        options = list(spec.choices)
        # Shown by meaning (an annotation mode by its name); the stored value is unchanged.
        st.selectbox(spec.label, options,
                     index=options.index(value) if value in options else 0,
                     format_func=lambda v, k=spec.key: str(study_settings.display_value(k, v)),
                     **common)
    elif spec.type is int:
        st.number_input(
            spec.label, value=int(value), step=1,
            min_value=int(spec.minimum) if spec.minimum is not None else None,
            max_value=int(spec.maximum) if spec.maximum is not None else None, **common)
    elif spec.type is float:
        st.number_input(
            spec.label, value=float(value), step=0.05, format="%.2f",
            min_value=float(spec.minimum) if spec.minimum is not None else None,
            max_value=float(spec.maximum) if spec.maximum is not None else None, **common)
    else:
        st.text_input(spec.label, value=str(value), **common)


def _bounds(spec: study_settings.Setting) -> str:
    if spec.choices is not None:
        return "One of " + ", ".join(str(study_settings.display_value(spec.key, c))
                                     for c in spec.choices) + "."
    if spec.minimum is not None and spec.maximum is not None:
        return f"From {spec.minimum:g} to {spec.maximum:g}."
    if spec.minimum is not None:
        return f"At least {spec.minimum:g}."
    return ""


def settings_panel(name: str) -> None:
    """Every study setting, drawn by its type, with its caveat and last change.

    Settings are recorded with the study (each change with its time and admin) and exported
    with it; ``python -m backend study-settings`` changes the same values.
    """
    current = state.call(study_settings.study_settings, db, actor, name)
    for spec in study_settings.SETTINGS.values():
        _setting_widget(name, spec, current.values[spec.key])
        if spec.key == "annotation_mode":
            # What raters do in each mode, in one line each.
            st.caption("  \n".join(f"**{m.label}**: {m.summary}"
                                   for m in study_settings.ANNOTATION_MODES.values()))
        default = spec.default if spec.type is not bool else ("on" if spec.default else "off")
        default = study_settings.display_value(spec.key, default)
        st.caption(" ".join(part for part in (
            f"Default {default}.", _bounds(spec), spec.caveat, _last_change(current, spec.key))
            if part))


def lifecycle_panel(name: str, status: str) -> None:
    """Archive or unarchive, and delete (with the study's name typed to confirm)."""
    if status == study_status.ARCHIVED:
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
# Monitoring, intra-rater agreement (repeats), unsure flags and training standing: one page.
st.page_link("views/qc.py", label="Quality control: rater monitoring, intra-rater agreement, "
             "flagged pairs, training", icon=":material/fact_check:")


@st.fragment(run_every="15s")
def progress_panel(name: str) -> None:
    """Live progress of one study (refreshes itself while the page is open)."""
    prog = state.call(progress.study_progress, state.get_db(), actor, study_name=name)
    pairwise = prog.unit == "comparison"
    st.caption(f"Mode: **{study_settings.mode_label(prog.annotation_mode)}**. "
               f"{study_settings.mode_summary(prog.annotation_mode)}")
    c1, c2, c3 = st.columns(3)
    c1.metric("Pairs", prog.n_pairs)
    if pairwise:
        # A preference study's raters judge comparisons: its progress is their judgements.
        c2.metric("Judgements done", f"{prog.n_completed} / {prog.n_assignments}")
        c3.metric("Comparisons fully judged",
                  f"{prog.n_comparisons_fully_judged} / {len(prog.comparisons)}")
    else:
        c2.metric("Ratings done", f"{prog.n_completed} / {prog.n_assignments}")
        c3.metric("Pairs fully rated", f"{prog.n_pairs_fully_rated} / {prog.n_pairs}")
    st.progress(prog.n_completed / prog.n_assignments if prog.n_assignments else 0.0)

    st.subheader("Raters")
    if not prog.raters:
        st.info("No comparisons given to raters yet: use **Assign raters**." if pairwise
                else "No raters assigned yet: use **Assign raters**.")
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
                    ("Median per comparison" if pairwise else "Median per pair"):
                        tables.minutes_seconds(r.median_seconds),
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
    if pairwise:
        with st.expander(f"Comparisons ({len(prog.comparisons)})"):
            st.dataframe(
                [
                    {"Comparison": c.number, "Comparison id": c.opaque_id,
                     "Sources (A vs B)": c.sources, "Raters": c.assigned, "Done": c.completed}
                    for c in prog.comparisons
                ],
                hide_index=True,
                width="stretch",
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
