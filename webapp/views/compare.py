"""Compare screen (pairwise mode): two candidate reports of one reference side by side.

The film is on the left; on the right the reference, then candidate A | candidate B, a 1-5
overall rating under each and "A is better / Tie / B is better" below. Keyboard first: **A**,
**T**, **B** give the preference, **1**-**5** rate A, **Shift+1**-**Shift+5** rate B,
**Ctrl+Enter** marks the comparison done, **P**/**N** go back and forth. Every click is
stored at once (``pairwise.save_judgement``) with the version the screen showed; a change
made meanwhile in another window is refused and the stored answer shown. The comparison on
screen is in the URL (``?comparison=<opaque id>``) so a reload returns to it. The rater
never sees which system wrote a candidate, scores or other raters' answers. Time on task is
measured as on the rating screen (``webapp/components/activity.py``), per comparison.
"""

from __future__ import annotations

import html

import streamlit as st

from radconcord.backend.errors import ServiceError
from radconcord.backend.services.annotation import pairwise
from radconcord.backend.types import Actor
from radconcord.webapp import state
from radconcord.webapp.components.activity import activity_tracker
from radconcord.webapp.components.image_viewer import viewer_panel

PARAM = "comparison"
STUDY_PARAM = "study"
FLASH_KEY = "compare_flash"  # {"text", "ok"}: one-off message after an action
END_KEY = "compare_study_done"  # study whose last comparison was just marked done
# (opaque id, version) of the comparison as last drawn: what the rater saw when clicking.
SEEN_KEY = "compare_seen"
PENDING_KEY = "compare_pending"  # ("done" | "go", opaque id | None), see _later
SHORTCUTS = ("Keys: **A** / **T** / **B** which is better · **1**-**5** rate A · "
             "**Shift+1**-**5** rate B · **Ctrl+Enter** mark done · **P** / **N** previous "
             "/ next")
PREFERENCE_LABELS = (("A", "A is better", "A"), ("tie", "Tie", "T"), ("B", "B is better", "B"))
_BOX = ('<div class="rc-report" style="white-space: pre-wrap; font-size: clamp(0.8rem, 1.6vh,'
        ' 0.95rem); line-height: 1.38; padding: 0.45rem 0.6rem; border-radius: 0.5rem;'
        ' border: 1px solid {border}; background: {background}; max-height: {height};'
        ' overflow-y: auto;">{text}</div>')


# Streamlit's hint "Shift + N" is wider than a fifth of a candidate column at 1280 px and
# squeezes the digit itself out of the B rating buttons: shown as "⇧N" instead (the button's
# aria-label still names Shift + N).
_B_KEY_HINTS = "".join(
    f".st-key-rate_b_{n} kbd {{font-size: 0;}} "
    f".st-key-rate_b_{n} kbd::after {{content: '\u21e7{n}'; font-size: 0.75rem;}} "
    for n in range(1, 6))


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
    study = state.study_to_open(state.call(pairwise.rater_studies, state.get_db(), actor),
                                study_name)
    if study is None:
        return None
    if study.resume_opaque_id is not None:
        return study.resume_opaque_id
    return state.call(pairwise.rater_comparisons, state.get_db(), actor, study.name)[0].opaque_id


def _on_screen() -> str | None:
    """The comparison a click is for: the one in the URL of the run that handles it."""
    return st.query_params.get(PARAM)


def _seen_version(opaque_id: str) -> int | None:
    """The version on the rater's screen when they clicked: the last one drawn or written.

    Saving with a version read afresh would silently overwrite a change made in another
    window since; ``None`` (no check) only when this window never drew the comparison.
    """
    seen = st.session_state.get(SEEN_KEY)
    if isinstance(seen, tuple) and seen[0] == opaque_id:
        return int(seen[1])
    return None


def _own_write(saved: pairwise.JudgementSaved) -> None:
    """Remember the version this window just wrote as seen.

    A key pressed while the page is still drawing after the previous key's save interrupts
    that run before it records what it drew; without this the rater's own previous key would
    make the next one look like a change from another window and be refused.
    """
    st.session_state[SEEN_KEY] = (saved.opaque_id, saved.version)


def _save(**fields: object) -> None:
    """Button callback: store one field as the rater saw the comparison; a stale view is
    refused and the stored answer drawn.

    Callbacks, not ``if st.button(...): ...; st.rerun()``: keys pressed faster than the page
    redraws reach one run together, and a ``st.rerun`` after the first would drop the rest.
    """
    actor = state.require_live_session()
    opaque_id = _on_screen()
    if not opaque_id:
        return
    try:
        saved = pairwise.save_judgement(state.get_db(), actor, opaque_id,
                                        expected_version=_seen_version(opaque_id), **fields)
    except pairwise.JudgementStale:
        st.session_state[FLASH_KEY] = {
            "ok": False, "text": "Not saved: this comparison changed in another window; the "
                                 "stored answer is shown. Check it and choose again."}
    except ServiceError as exc:
        st.session_state[FLASH_KEY] = {"ok": False, "text": f"Not saved: {exc}"}
    else:
        _own_write(saved)


def _later(action: str, target: str | None = None) -> None:
    """Button callback of Mark done, Previous and Next: run once this run's saves are done.

    Streamlit calls the callbacks of keys folded into one run in no fixed order; a Mark done
    typed after the last rating must see that rating stored.
    """
    st.session_state[PENDING_KEY] = (action, target)


def _run_pending() -> None:
    """Do the Mark done or move asked by a callback of this run (see :func:`_later`)."""
    pending = st.session_state.pop(PENDING_KEY, None)
    if not pending:
        return
    action, target = pending
    if action == "done":
        _complete()
    elif target:
        _go_to(target)


def _complete() -> None:
    """Mark done: needs a preference and both ratings; opens the next open one."""
    actor = state.require_live_session()
    opaque_id = _on_screen()
    if not opaque_id:
        return
    try:
        done = pairwise.complete(state.get_db(), actor, opaque_id,
                                 expected_version=_seen_version(opaque_id))
    except pairwise.JudgementStale:
        st.session_state[FLASH_KEY] = {
            "ok": False, "text": "Not marked done: this comparison changed in another window "
                                 "and is reloaded. Check it and mark it done again."}
        return
    except ServiceError as exc:
        st.session_state[FLASH_KEY] = {"ok": False, "text": str(exc)}
        return
    _own_write(done)
    try:
        view = pairwise.get_comparison(state.get_db(), actor, opaque_id)
    except ServiceError as exc:
        st.session_state[FLASH_KEY] = {"ok": False, "text": str(exc)}
        return
    if done.next_open_opaque_id is None:
        st.session_state[END_KEY] = view.study_name
        return
    st.session_state[FLASH_KEY] = {
        "ok": True, "text": f"Comparison {view.index} of {view.total} marked done."}
    _go_to(done.next_open_opaque_id)


def _rating_row(view: pairwise.ComparisonView, side: str) -> None:
    """Five buttons 1-5 for one candidate; the stored rating is highlighted."""
    current = view.rating_a if side == "a" else view.rating_b
    st.caption(f"Overall rating of {side.upper()} (1 poor - 5 excellent): "
               + (f"**{current}**" if current else "not given"))
    cols = st.columns(5, gap="small")
    for value, col in zip(range(1, 6), cols, strict=True):
        key = str(value) if side == "a" else f"Shift+{value}"
        col.button(str(value), key=f"rate_{side}_{value}", shortcut=key, width="stretch",
                   type="primary" if current == value else "secondary",
                   disabled=view.read_only, on_click=_save,
                   kwargs={f"rating_{side}": value})


actor = state.require_actor()
db = state.get_db()
# Less blank space above the title than other pages, but enough that the 60 px top
# navigation bar does not cover the title and the buttons beside it.
st.html("<style>[data-testid='stMainBlockContainer'] {padding-top: 2.5rem;}" + _B_KEY_HINTS
        + "</style>")

_run_pending()
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

# Time on task: the rater's own input and focus events, attributed to the comparison on
# screen (every run, never in a fragment, as on the rating page).
activity_tracker(view.opaque_id, actor)

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
    st.button("Previous", icon=":material/arrow_back:", shortcut="P", width="stretch",
              disabled=view.prev_opaque_id is None, key="prev", on_click=_later,
              args=("go", view.prev_opaque_id))
with head[2]:
    st.button("Next", icon=":material/arrow_forward:", shortcut="N", width="stretch",
              disabled=view.next_opaque_id is None, key="next", on_click=_later,
              args=("go", view.next_opaque_id))
with head[3]:
    st.button("Mark done", type="primary", icon=":material/done:", shortcut="Ctrl+Enter",
              width="stretch", key="done", disabled=view.read_only, on_click=_later, args=("done",),
              help="Needs which is better and both ratings; opens the next open one.")

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
        _rating_row(view, "a")
    with col_b, st.container(key="candidate_b"):
        _box("Candidate B", view.candidate_b_text, border="#b5a3c9", background="#f7f3fb",
             height="32vh")
        _rating_row(view, "b")
    chosen = dict((p, label) for p, label, _ in PREFERENCE_LABELS).get(view.preference or "")
    st.caption("Which candidate is better overall? " + (f"**{chosen}**" if chosen else
                                                        "not given"))
    pref_cols = st.columns(3, gap="small")
    for (value, label, key), col in zip(PREFERENCE_LABELS, pref_cols, strict=True):
        col.button(label, key=f"pref_{value}", shortcut=key, width="stretch",
                   type="primary" if view.preference == value else "secondary",
                   disabled=view.read_only, on_click=_save, kwargs={"preference": value})
    if view.read_only:
        st.caption("Study closed: read only")
    elif view.completed_at is not None:
        st.caption("Done · each change is stored at once")
    else:
        st.caption("Each change is stored at once")
# Drawn: the next click carries this version (see _seen_version).
st.session_state[SEEN_KEY] = (view.opaque_id, view.version)
