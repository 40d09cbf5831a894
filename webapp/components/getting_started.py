"""The getting-started panel of the admin's landing page: import -> assign -> rate -> score ->
dashboard -> report/export, each step with its state for the study and a link to its page.

Render-only: the states come from ``backend.services.study_admin.getting_started``. The
panel can be dismissed for this browser session ("Hide"); "Show getting started" in the
sidebar's Help menu (``webapp/app.py``) brings it back.
"""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st
from streamlit.errors import StreamlitAPIException

from radconcord.backend.services.study_admin.getting_started import (
    DONE,
    IN_PROGRESS,
    WAITING,
    GettingStarted,
)

#: Session key: the panel was hidden in this browser session.
DISMISSED_KEY = "getting_started_dismissed"
#: The page script of each router url_path a step links to.
SCRIPTS = {
    "import": "views/import_data.py",
    "assign": "views/assign.py",
    "studies": "views/studies.py",
    "dashboard": "views/dashboard.py",
    "export": "views/export.py",
}
#: State -> (icon, words).
STATES = {
    DONE: (":material/check_circle:", "done"),
    IN_PROGRESS: (":material/pending:", "in progress"),
    WAITING: (":material/hourglass_empty:", "waiting"),
}
TODO_LOOK = (":material/radio_button_unchecked:", "to do")


def dismissed() -> bool:
    """Whether the lead hid the panel in this browser session."""
    return bool(st.session_state.get(DISMISSED_KEY))


def show_again() -> None:
    """Bring the panel back (the Help menu's button)."""
    st.session_state.pop(DISMISSED_KEY, None)


def _dismiss() -> None:
    st.session_state[DISMISSED_KEY] = True


def getting_started_panel(guide: GettingStarted, *,
                          score_now: Callable[[str], None] | None = None) -> None:
    """Draw the steps of ``guide`` (nothing when dismissed).

    Args:
        guide: The steps and their states.
        score_now: Draws the "Score now" block for a study; shown under the score step while
            that step is not done, so a freshly imported study is scored from here.
    """
    if dismissed():
        return
    with st.container(border=True, key="getting_started"):
        head, hide = st.columns([6, 1])
        next_step = guide.next_step
        head.subheader("Getting started" + (f": {guide.study}" if guide.study else ""))
        if next_step is not None:
            head.caption(f"Next: **{next_step.title}**. {next_step.detail}")
        elif guide.waiting:
            # Nothing is the admin's to do: say what the study waits on, not a rater's step.
            head.caption(f"Next: {guide.waiting}")
        else:
            head.caption("Next: all steps are done.")
        hide.button("Hide", key="getting_started_hide", on_click=_dismiss,
                    icon=":material/close:",
                    help="Hide this panel; the sidebar's Help menu brings it back.")
        for number, step in enumerate(guide.steps, start=1):
            icon, words = STATES.get(step.state, TODO_LOOK)
            left, right = st.columns([2.2, 5])
            label = f"{number}. {step.title}"
            with left:
                try:
                    st.page_link(SCRIPTS[step.page], label=label, icon=icon)
                except StreamlitAPIException:
                    # The page runs outside the router (no registered page to link to).
                    st.markdown(f"{icon} {label}")
            right.markdown(f"**{words}**: {step.detail}")
            if step.key == "score" and step.state != DONE and score_now and guide.study:
                with right:
                    score_now(guide.study)
