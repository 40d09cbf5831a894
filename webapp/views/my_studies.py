"""Rater: the studies assigned to me, my progress in each, and where to resume.

Count studies open on the Rate screen, pairwise studies (comparisons) on the Compare screen.
"""

from __future__ import annotations

import streamlit as st

from radconcord.backend.services.annotation import pairwise, rating
from radconcord.backend.services.study_admin import study_settings
from radconcord.webapp import state

actor = state.require_actor()
db = state.get_db()

st.title("My studies")


def _mode(mode: str) -> None:
    """The study's annotation mode by its name, and what the rater does in it."""
    st.caption(f"{study_settings.mode_label(mode)}: {study_settings.mode_summary(mode)}")


def _open_label(completed: int, resume: str | None) -> str:
    """Start (nothing done yet), Resume (some done) or Review (all done)."""
    if resume is None:
        return "Review"
    return "Start" if completed == 0 else "Resume"

my_studies = state.call(rating.rater_studies, db, actor)
comparisons = state.call(pairwise.rater_studies, db, actor)
if not my_studies and not comparisons:
    st.info("No pairs are assigned to you yet. Your study lead will let you know.")
    st.stop()

for study in comparisons:
    with st.container(border=True):
        top = st.columns([4, 1], vertical_alignment="center")
        with top[0]:
            st.markdown(f"**{study.name}**")
            _mode(study_settings.PAIRWISE)
            st.progress(study.completed / study.total if study.total else 0.0,
                        text=f"{study.completed} of {study.total} comparisons done")
        with top[1]:
            label = _open_label(study.completed, study.resume_opaque_id)
            if st.button(label, key=f"compare-{study.name}", type="primary", width="stretch"):
                params = {"study": study.name}
                if study.resume_opaque_id:
                    params["comparison"] = study.resume_opaque_id
                state.switch_page("views/compare.py", query_params=params)

for study in my_studies:
    with st.container(border=True):
        top = st.columns([4, 1], vertical_alignment="center")
        with top[0]:
            st.markdown(f"**{study.name}**" + (" · closed" if study.status == "closed" else ""))
            _mode(study.annotation_mode)
            if study.description:
                st.caption(study.description)
            if study.training_total:
                # Held at the training items: progress over what the rater can reach, not
                # over study pairs the gate keeps closed.
                st.progress(study.training_done / study.training_total,
                            text=f"{study.training_done} of {study.training_total} training "
                                 "items done")
            else:
                st.progress(study.completed / study.total if study.total else 0.0,
                            text=f"{study.completed} of {study.total} done")
            if study.qualification:
                # The qualification gate holds the rater at the training items (or they
                # did not qualify): say so here, not only on the rating screen.
                (st.info if study.resume_opaque_id else st.warning)(study.qualification)
        with top[1]:
            label = _open_label(study.completed, study.resume_opaque_id)
            if st.button(label, key=f"open-{study.name}", type="primary", width="stretch"):
                params = {"study": study.name}
                if study.resume_opaque_id:
                    params["pair"] = study.resume_opaque_id
                state.switch_page("views/rate.py", query_params=params)
