"""Compare screen (pairwise mode): two candidate reports of one reference side by side.

The film is on the left; on the right the reference, then candidate A | candidate B, a 1-5
overall rating under each and "A is better / Tie / B is better" below. Keyboard first: **A**,
**T**, **B** give the preference, **1**-**5** rate A, **Shift+1**-**Shift+5** rate B,
**Ctrl+Enter** marks the comparison done, **P**/**N** go back and forth. Every click is
stored at once (``pairwise.save_judgement``) with the version the screen showed; a change
made meanwhile in another window is refused and the stored answer shown. The comparison on
screen is in the URL (``?comparison=<opaque id>``) so a reload returns to it. The rater
never sees which system wrote a candidate, scores or other raters' answers.
"""

from __future__ import annotations

import html

import streamlit as st

from backend.services import pairwise
from backend.services.errors import InvalidInput, ServiceError
from backend.services.types import Actor
from webapp import state
from webapp.components.image_viewer import viewer_panel

PARAM = "comparison"
STUDY_PARAM = "study"
FLASH_KEY = "compare_flash"  # {"text", "ok"}: one-off message after an action
END_KEY = "compare_study_done"  # study whose last comparison was just marked done
# (opaque id, version) of the comparison as last drawn: what the rater saw when clicking.
SEEN_KEY = "compare_seen"
SHORTCUTS = ("Keys: **A** / **T** / **B** which is better · **1**-**5** rate A · "
             "**Shift+1**-**5** rate B · **Ctrl+Enter** mark done · **P** / **N** previous "
             "/ next")
PREFERENCE_LABELS = (("A", "A is better", "A"), ("tie", "Tie", "T"), ("B", "B is better", "B"))
_BOX = ('<div class="rc-report" style="white-space: pre-wrap; font-size: clamp(0.8rem, 1.6vh,'
        ' 0.95rem); line-height: 1.38; padding: 0.45rem 0.6rem; border-radius: 0.5rem;'
        ' border: 1px solid {border}; background: {background}; max-height: {height};'
        ' overflow-y: auto;">{text}</div>')


def _box(label: str, text: str, *, border: str, background: str, height: str) -> None:
    st.markdown(f"**{label}**")
    # Escaped: report text is data, not markdown; line breaks as references so a blank line
    # does not end the HTML block.
    body = html.escape(text).replace("\n", "&#10;")
    st.markdown(_BOX.format(text=body, border=border, background=background, height=height),
                unsafe_allow_html=True)


def _go_to(opaque_id: str) -> None:
    st.query_params[PARAM] = opaque_id


def _first_open(actor: Actor, study_name: str | None) -> str | None:
    studies = state.call(pairwise.rater_studies, state.get_db(), actor)
    if not studies:
        return None
    chosen = [s for s in studies if s.name == study_name]
    unfinished = [s for s in studies if s.resume_opaque_id is not None]
    study = (chosen or unfinished or studies)[0]
    if study.resume_opaque_id is not None:
        return study.resume_opaque_id
    return state.call(pairwise.rater_comparisons, state.get_db(), actor, study.name)[0].opaque_id


def _seen_version(view: pairwise.ComparisonView) -> int:
    """The version on the rater's screen when they clicked: the one drawn by the last run.

    A click reruns the page, which reads the comparison again before handling it; saving
    with that fresh version would silently overwrite a change made in another window since.
    """
    seen = st.session_state.get(SEEN_KEY)
    if isinstance(seen, tuple) and seen[0] == view.opaque_id:
        return int(seen[1])
    return view.version


def _save(actor: Actor, view: pairwise.ComparisonView, **fields: object) -> None:
    """Store one field as the rater saw the comparison; a stale view is refused, reloaded."""
    state.require_live_session()
    try:
        pairwise.save_judgement(state.get_db(), actor, view.opaque_id,
                                expected_version=_seen_version(view), **fields)
    except pairwise.JudgementStale:
        st.session_state[FLASH_KEY] = {
            "ok": False, "text": "Not saved: this comparison changed in another window; the "
                                 "stored answer is shown. Check it and choose again."}
    except ServiceError as exc:
        state.stop_with_error(exc)


def _complete(actor: Actor, view: pairwise.ComparisonView) -> None:
    state.require_live_session()
    try:
        done = pairwise.complete(state.get_db(), actor, view.opaque_id,
                                 expected_version=_seen_version(view))
    except pairwise.JudgementStale:
        st.session_state[FLASH_KEY] = {
            "ok": False, "text": "Not marked done: this comparison changed in another window "
                                 "and is reloaded. Check it and mark it done again."}
        return
    except InvalidInput as exc:
        st.session_state[FLASH_KEY] = {"ok": False, "text": str(exc)}
        return
    except ServiceError as exc:
        state.stop_with_error(exc)
    if done.next_open_opaque_id is None:
        st.session_state[END_KEY] = view.study_name
        return
    st.session_state[FLASH_KEY] = {
        "ok": True, "text": f"Comparison {view.index} of {view.total} marked done."}
    _go_to(done.next_open_opaque_id)


def _rating_row(actor: Actor, view: pairwise.ComparisonView, side: str) -> None:
    """Five buttons 1-5 for one candidate; the stored rating is highlighted."""
    current = view.rating_a if side == "a" else view.rating_b
    st.caption(f"Overall rating of {side.upper()} (1 poor - 5 excellent): "
               + (f"**{current}**" if current else "not given"))
    cols = st.columns(5, gap="small")
    for value, col in zip(range(1, 6), cols, strict=True):
        key = str(value) if side == "a" else f"Shift+{value}"
        if col.button(str(value), key=f"rate_{side}_{value}", shortcut=key, width="stretch",
                      type="primary" if current == value else "secondary",
                      disabled=view.read_only):
            _save(actor, view, **{f"rating_{side}": value})
            st.rerun()


actor = state.require_actor()
db = state.get_db()
st.html("<style>[data-testid='stMainBlockContainer'] {padding-top: 1.5rem;}</style>")

opaque_id = st.query_params.get(PARAM)
if not opaque_id:
    opaque_id = _first_open(actor, st.query_params.get(STUDY_PARAM))
    if opaque_id is None:
        st.info("No comparisons are assigned to you yet. Your study lead will let you know.")
        st.stop()
    st.query_params[PARAM] = opaque_id

view = state.call(pairwise.get_comparison, db, actor, opaque_id)

if st.session_state.get(END_KEY) == view.study_name:
    with st.container(border=True, key="compare_end_screen"):
        st.subheader(f":material/task_alt: Study complete: {view.study_name}", anchor=False)
        st.markdown(f"You have marked **all {view.total} comparisons** of this study done. "
                    "**Thank you**; nothing else is needed from you.")
        if st.button("Review my answers", key="end_review", icon=":material/visibility:"):
            st.session_state.pop(END_KEY, None)
            st.rerun()
    st.stop()

with st.sidebar:
    st.caption(SHORTCUTS)

done_count = next((s.completed for s in state.call(pairwise.rater_studies, db, actor)
                   if s.name == view.study_name), 0)
flash = st.session_state.pop(FLASH_KEY, None)
head = st.columns([3.4, 1, 1, 1.25], vertical_alignment="center")
with head[0]:
    st.markdown(f"#### {view.study_name} · Comparison {view.index} of {view.total}")
    if flash and flash["ok"]:
        st.markdown(f":green-background[:green[:material/check_circle: {flash['text']}]] "
                    f"{done_count} of {view.total} done.")
    else:
        st.progress(done_count / view.total if view.total else 0.0,
                    text=f"{done_count} of {view.total} done")
with head[1]:
    if st.button("Previous", icon=":material/arrow_back:", shortcut="P", width="stretch",
                 disabled=view.prev_opaque_id is None, key="prev"):
        _go_to(view.prev_opaque_id)
        st.rerun()
with head[2]:
    if st.button("Next", icon=":material/arrow_forward:", shortcut="N", width="stretch",
                 disabled=view.next_opaque_id is None, key="next"):
        _go_to(view.next_opaque_id)
        st.rerun()
with head[3]:
    if st.button("Mark done", type="primary", icon=":material/done:", shortcut="Ctrl+Enter",
                 width="stretch", key="done", disabled=view.read_only,
                 help="Needs which is better and both ratings; opens the next open one."):
        _complete(actor, view)
        st.rerun()

if flash and not flash["ok"]:
    st.warning(flash["text"], icon=":material/sync_problem:")

left, right = st.columns([1, 2], gap="medium")
with left:
    viewer_panel(db, actor, view.images, pair_key=view.opaque_id)
with right:
    _box("Reference report", view.reference_text, border="#9bb7c4", background="#f3f8fa",
         height="22vh")
    col_a, col_b = st.columns(2, gap="medium")
    with col_a, st.container(key="candidate_a"):
        _box("Candidate A", view.candidate_a_text, border="#c9b28a", background="#fbf7ef",
             height="32vh")
        _rating_row(actor, view, "a")
    with col_b, st.container(key="candidate_b"):
        _box("Candidate B", view.candidate_b_text, border="#b5a3c9", background="#f7f3fb",
             height="32vh")
        _rating_row(actor, view, "b")
    chosen = dict((p, label) for p, label, _ in PREFERENCE_LABELS).get(view.preference or "")
    st.caption("Which candidate is better overall? " + (f"**{chosen}**" if chosen else
                                                        "not given"))
    pref_cols = st.columns(3, gap="small")
    for (value, label, key), col in zip(PREFERENCE_LABELS, pref_cols, strict=True):
        if col.button(label, key=f"pref_{value}", shortcut=key, width="stretch",
                      type="primary" if view.preference == value else "secondary",
                      disabled=view.read_only):
            _save(actor, view, preference=value)
            st.rerun()
    if view.read_only:
        st.caption("Study closed: read only")
    elif view.completed_at is not None:
        st.caption("Done · each change is stored at once")
    else:
        st.caption("Each change is stored at once")
# Drawn: the next click carries this version (see _seen_version).
st.session_state[SEEN_KEY] = (view.opaque_id, view.version)
