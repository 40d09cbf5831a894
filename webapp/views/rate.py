"""Rating screen: one reference/candidate pair at a time beside its images.

The pair being rated is in the URL (``?pair=<opaque id>``) so a reload returns to it. Every
count change is saved at once through ``rating.set_count``; the grid is re-read from the
service on every run, so what is shown is what is stored. A change the service could not
store because the database stayed busy (``rating.SaveFailed``) is kept in the session and
shown in its cell marked "Not saved"; the next change of that pair, or **Retry saving**,
writes it. Nothing the rater entered is dropped without a message. The rater never sees the
candidate's source, metric scores or other raters' answers: the service returns none of them.
"""

from __future__ import annotations

import datetime as dt
import logging

import streamlit as st

from backend.services import rating
from backend.services.errors import ServiceError
from backend.services.types import Actor
from webapp import state
from webapp.components.count_grid import cell_key, count_grid
from webapp.components.image_viewer import viewer_panel
from webapp.components.reports import report_pair

PAIR_PARAM = "pair"
STUDY_PARAM = "study"
STATUS_KEY = "rate_save_status"  # {"pair": opaque_id, "ok": bool, "text": str}
CONFIRM_KEY = "rate_confirm_zero"  # opaque id awaiting the all-zero confirmation
FLASH_KEY = "rate_flash"  # one-off message shown after moving to another pair
# {opaque_id: {(category, significant): count}}: entered, not stored yet (database busy).
UNSAVED_KEY = "rate_unsaved"

log = logging.getLogger(__name__)


def _clock(moment: dt.datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.astimezone().strftime("%H:%M:%S")


def _go_to(opaque_id: str) -> None:
    st.query_params[PAIR_PARAM] = opaque_id
    st.session_state.pop(CONFIRM_KEY, None)


def _unsaved(opaque_id: str) -> dict[tuple[int, bool], int]:
    """The pair's counts entered but not yet stored (kept across runs of the page)."""
    return st.session_state.setdefault(UNSAVED_KEY, {}).setdefault(opaque_id, {})


def _note_activity(actor: Actor, opaque_id: str) -> None:
    """Time on task, best effort: a busy database must never cost the rater their page."""
    try:
        rating.record_activity(state.get_db(), actor, opaque_id=opaque_id)
    except rating.SaveFailed:
        log.info("time on task of pair %s not recorded: database busy", opaque_id)


def _save_pending(actor: Actor, opaque_id: str) -> None:
    """Store every unsaved cell of the pair and remember the outcome for display.

    A cell stays unsaved (and on screen) when the database is busy; a value the service
    refuses for another reason (a closed study) is dropped with that reason shown.
    """
    # Widget callbacks run before the router re-checks the session: a deactivated or
    # logged-out tab must not store one more count.
    state.require_live_session()
    db = state.get_db()
    pending = _unsaved(opaque_id)
    status = None
    saved_at = None
    for (category, significant), count in sorted(pending.items()):
        try:
            result = rating.set_count(db, actor, opaque_id=opaque_id, category=category,
                                      significant=significant, count=count)
        except rating.SaveFailed as exc:
            status = {"pair": opaque_id, "ok": False, "text": str(exc)}
            break  # still busy: the other cells would only wait as long again
        except ServiceError as exc:
            pending.pop((category, significant))
            status = {"pair": opaque_id, "ok": False, "text": f"Not saved: {exc}"}
            continue
        pending.pop((category, significant))
        saved_at = result.saved_at
    if status is None and saved_at is not None:
        status = {"pair": opaque_id, "ok": True, "text": f"Saved {_clock(saved_at)}"}
        _note_activity(actor, opaque_id)
    if status is not None:
        st.session_state[STATUS_KEY] = status


def _save_cell(actor: Actor, opaque_id: str, category: int, significant: bool) -> None:
    """Widget callback: store the changed cell (and any earlier unsaved one of the pair)."""
    value = st.session_state.get(cell_key(opaque_id, category, significant))
    _unsaved(opaque_id)[(category, significant)] = int(value or 0)
    _save_pending(actor, opaque_id)


def _first_open_pair(actor: Actor, study_name: str | None) -> str | None:
    """Where to start: the first pair not done of the requested (or first unfinished) study."""
    studies = state.call(rating.rater_studies, state.get_db(), actor)
    if not studies:
        return None
    chosen = [s for s in studies if s.name == study_name]
    unfinished = [s for s in studies if s.resume_opaque_id is not None]
    study = (chosen or unfinished or studies)[0]
    if study.resume_opaque_id is not None:
        return study.resume_opaque_id
    queue = state.call(rating.rater_queue, state.get_db(), actor, study_name=study.name)
    return queue[0].opaque_id


def _complete(actor: Actor, view: rating.RaterPairView, *, confirm_zero: bool) -> None:
    status = state.call(rating.complete_pair, state.get_db(), actor, opaque_id=view.opaque_id,
                        confirm_zero=confirm_zero)
    st.session_state.pop(CONFIRM_KEY, None)
    if status.next_open_opaque_id is None:
        st.session_state[FLASH_KEY] = "Pair marked done. Every pair of this study is done."
        return
    st.session_state[FLASH_KEY] = f"Pair {view.index} of {view.total} marked done."
    _go_to(status.next_open_opaque_id)


actor = state.require_actor()
db = state.get_db()

opaque_id = st.query_params.get(PAIR_PARAM)
if not opaque_id:
    opaque_id = _first_open_pair(actor, st.query_params.get(STUDY_PARAM))
    if opaque_id is None:
        st.info("No pairs are assigned to you yet. Your study lead will let you know.")
        st.stop()
    st.query_params[PAIR_PARAM] = opaque_id

view = state.call(rating.get_pair, db, actor, opaque_id=opaque_id)
# Each run of this page is an interaction (a click, a change, a page view): it feeds the
# time-on-task measure.
_note_activity(actor, view.opaque_id)

with st.sidebar:
    st.caption("Shortcuts: **N** next pair · **P** previous pair · **Ctrl+Enter** mark done")

# Header: where the rater is, and the way back and forth.
n_done = next((s.completed for s in state.call(rating.rater_studies, db, actor)
               if s.name == view.study_name), 0)
# "Mark done" sits in the header beside Previous/Next so it is on screen whatever the
# length of the reports and the height of the window.
head = st.columns([3.4, 1, 1, 1.25], vertical_alignment="center")
with head[0]:
    st.markdown(f"#### {view.study_name} · Pair {view.index} of {view.total}")
    st.progress(n_done / view.total if view.total else 0.0,
                text=f"{n_done} of {view.total} done")
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
    all_zero = not any(view.counts.values())
    if st.button("Mark done", type="primary", icon=":material/done:",
                 shortcut="Ctrl+Enter", width="stretch", key="done",
                 help="Save this pair as finished and open the next open pair."):
        if _unsaved(view.opaque_id):
            # Counts still waiting for a busy database are written first; a pair is never
            # marked done without them.
            _save_pending(actor, view.opaque_id)
            if _unsaved(view.opaque_id):
                st.rerun()
            view = state.call(rating.get_pair, db, actor, opaque_id=view.opaque_id)
            all_zero = not any(view.counts.values())
        if all_zero:
            st.session_state[CONFIRM_KEY] = view.opaque_id
        else:
            _complete(actor, view, confirm_zero=False)
            st.rerun()

if st.session_state.get(CONFIRM_KEY) == view.opaque_id:
    with st.container(border=True):
        ask, yes, no = st.columns([3, 1.2, 1.2], vertical_alignment="center")
        ask.warning("All twelve counts are zero: this says the candidate report has no "
                    "errors at all. Is that right?")
        if yes.button("Yes, no errors: mark done", key="confirm_zero_yes", type="primary",
                      width="stretch"):
            _complete(actor, view, confirm_zero=True)
            st.rerun()
        if no.button("No, go back to the counts", key="confirm_zero_no", width="stretch"):
            st.session_state.pop(CONFIRM_KEY, None)
            st.rerun()

flash = st.session_state.pop(FLASH_KEY, None)
if flash:
    st.toast(flash, icon=":material/check_circle:")


def _images() -> None:
    viewer_panel(db, actor, view.images, pair_key=view.opaque_id)


def _grid_and_status() -> None:
    unsaved = dict(_unsaved(view.opaque_id))
    count_grid(view.opaque_id, view.counts,
               on_change=lambda oid, cat, sig: _save_cell(actor, oid, cat, sig),
               unsaved=unsaved)
    status = st.session_state.get(STATUS_KEY)
    if unsaved:
        st.error(status["text"] if status and not status["ok"]
                 and status["pair"] == view.opaque_id else rating.BUSY_MESSAGE,
                 icon=":material/sync_problem:")
        st.button("Retry saving", key=f"retry-{view.opaque_id}", icon=":material/sync:",
                  on_click=_save_pending, args=(actor, view.opaque_id))
    elif status and status["pair"] == view.opaque_id:
        if status["ok"]:
            st.success(status["text"], icon=":material/cloud_done:")
        else:
            st.error(status["text"])
    elif view.completed_at is not None:
        st.success(f"Marked done at {_clock(view.completed_at)}", icon=":material/task_alt:")
    else:
        st.caption("Each change is saved as soon as you make it. **Mark done** (top right, "
                   "or Ctrl+Enter) when the pair is finished.")


if view.images:
    left, right = st.columns([1, 1.25], gap="medium")
    with left:
        _images()
    with right:
        report_pair(view.reference_text, view.candidate_text)
        _grid_and_status()
else:
    # No image: the reports get the left half (and more height), the grid sits beside them.
    st.caption(":material/hide_image: No images for this case. The counts are on the report "
               "texts alone.")
    left, right = st.columns([1, 1], gap="medium")
    with left:
        report_pair(view.reference_text, view.candidate_text, tall=True)
    with right:
        _grid_and_status()
