"""Rating screen: one reference/candidate pair at a time beside its images.

The pair being rated is in the URL (``?pair=<opaque id>``) so a reload returns to it. The
count grid (``webapp/components/count_grid.py``) saves every change itself through a JSON
route, with the version of the pair it shows: a click is stored even when the Streamlit
session behind the page has gone, a change that could not be stored is shown "Not saved" at
once and kept in the browser until the rater logs in again, and a stale save (another tab) is
refused with the stored counts shown. **Mark done** (or Ctrl+Enter) waits until the grid has
stored every change, and carries the version it read. The end of the study shows an end
screen. The rater never sees the candidate's source, metric scores or other raters' answers:
the service returns none of them.

Over an hour: the header says how many pairs are left and about how long they should take at
the rater's own median pace (``backend/services/annotation/pace.py``), a **Definitions** button (or
``?``) opens the six error categories with an example each, the **Flag** button flags the
pair for the study lead with an optional note (``backend/services/annotation/flags.py``; counts and
done-state are untouched), and after ``break_reminder_minutes`` of continuous rating a
polite reminder takes the progress line's place (dismissing it snoozes it for another
period; the line redraws itself every minute). None of it covers the grid or Mark done, or
adds a row above them.

A screen that does not move (issue 24): the count grid is the first thing of the right-hand
column, under a header of fixed height, so its top edge stays put from pair to pair whatever
the length of the reports (they follow under it) and whether the pair has a film. The
all-zero question takes the place of Mark done (the question in the progress line's place,
its two answers in the button's): nothing is pushed down the moment Ctrl+Enter is pressed.
The first grid cell has the focus when a pair opens (``grid/count_grid.js``), and V moves
between the film viewer and the grid: a pair takes its counts and Ctrl+Enter, no Tab.
The film is the dominant pane: more than half the window's width and the full height under
the header; the rater drags the split between film and reports (remembered in the browser,
per rater) and the viewer's full screen keeps the grid in a panel beside the film.
"""

from __future__ import annotations

import datetime as dt

import streamlit as st

from radconcord.backend import clock
from radconcord.backend.errors import ServiceError
from radconcord.backend.services.accounts import sessions
from radconcord.backend.services.annotation import assignment_writes, flags, pace, rating
from radconcord.backend.types import Actor
from radconcord.webapp import state
from radconcord.webapp.components import reports
from radconcord.webapp.components.activity import activity_tracker
from radconcord.webapp.components.count_grid import count_grid
from radconcord.webapp.components.definitions import definitions_button
from radconcord.webapp.components.error_records import error_records_panel
from radconcord.webapp.components.image_viewer import viewer_panel
from radconcord.webapp.components.training_feedback import training_feedback

PAIR_PARAM = "pair"
STUDY_PARAM = "study"
CONFIRM_KEY = "rate_confirm_zero"  # opaque id awaiting the all-zero confirmation
FLASH_KEY = "rate_flash"  # {"text", "ok"}: one-off message after Mark done
END_KEY = "rate_study_done"  # name of the study whose last pair was just marked done
MY_STUDIES_PAGE = "views/my_studies.py"
BREAK_KEY = "rc_break"  # the break reminder's container (styled compact)
PROGRESS_REFRESH_S = 60  # the progress line (time left, break reminder) redraws itself
SNOOZE_KEY = "rate_break_snooze"  # (stretch start, minutes) when the reminder was dismissed
ZERO_KEY = "rc_zero_question"  # the all-zero question, in the progress line's place
PROGRESS_LINE_PX = 35  # the height of the progress line (text and bar) under the title
SPLIT_KEY = "rc_split"  # the film | reports columns (viewer.js moves their split)
FILM_SPLIT = [1.2, 1]  # film : reports and grid, until the rater drags the split


def state_tag(actor: Actor) -> str:
    """An opaque per-rater name for what the browser remembers (the split): no user name."""
    return sessions.account_tag(actor, "film-split")


def _clock(moment: dt.datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.astimezone().strftime("%H:%M:%S")


def _duration(seconds: float) -> str:
    """``1 h 05 min``, ``12 min 30 s`` or ``45 s``."""
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


def _go_to(opaque_id: str) -> None:
    st.query_params[PAIR_PARAM] = opaque_id
    st.session_state.pop(CONFIRM_KEY, None)


def _first_open_pair(actor: Actor, study_name: str | None) -> str | None:
    """Where to start: the first pair not done of the requested (or first unfinished) study."""
    study = state.study_to_open(state.call(rating.rater_studies, state.get_db(), actor),
                                study_name)
    if study is None:
        return None
    if study.resume_opaque_id is not None:
        return study.resume_opaque_id
    queue = state.call(rating.rater_queue, state.get_db(), actor, study_name=study.name)
    return queue[0].opaque_id


def _complete(actor: Actor, view: rating.RaterPairView, *, confirm_zero: bool) -> None:
    """Mark the pair done as the rater saw it; a stale version (another tab) is refused."""
    state.require_live_session()
    try:
        status = rating.complete_pair(state.get_db(), actor, opaque_id=view.opaque_id,
                                      confirm_zero=confirm_zero, expected_version=view.version)
    except assignment_writes.StaleWrite:
        st.session_state.pop(CONFIRM_KEY, None)
        st.session_state[FLASH_KEY] = {
            "ok": False,
            "text": "Not marked done: the counts changed in another window and are reloaded. "
                    "Check them and mark the pair done again."}
        return
    except ServiceError as exc:
        state.stop_with_error(exc)
    st.session_state.pop(CONFIRM_KEY, None)
    if view.training:
        # Stay on a training item: its feedback (the expert's counts) shows once it is done.
        st.session_state[FLASH_KEY] = {"ok": True, "text": "Training item done: compare "
                                       "your counts with the expert's below."}
        return
    if status.next_open_opaque_id is None:
        st.session_state[END_KEY] = view.study_name
        return
    st.session_state[FLASH_KEY] = {"ok": True,
                                   "text": f"Pair {view.index} of {view.total} marked done."}
    _go_to(status.next_open_opaque_id)


def _end_screen(actor: Actor, view: rating.RaterPairView) -> None:
    """Every pair of the study is done: say so, with the time spent, and thank the rater."""
    mine = next((s for s in state.call(rating.rater_studies, state.get_db(), actor)
                 if s.name == view.study_name), None)
    total = mine.total if mine else view.total
    with st.container(border=True, key="rate_end_screen"):
        st.subheader(f":material/task_alt: Study complete: {view.study_name}", anchor=False)
        st.markdown(f"You have marked **all {total} pairs** of this study done.")
        if mine is not None and mine.active_seconds > 0:
            st.markdown(f"Time spent rating: **{_duration(mine.active_seconds)}** "
                        "(your active time on the rating screen).")
        st.markdown(f"Finished at {_clock(clock.utcnow())}.")
        st.markdown("**Thank you** for your ratings. Your study lead has been able to see "
                    "your progress all along; nothing else is needed from you.")
        review, studies = st.columns(2)
        if review.button("Review my ratings", key="end_review", icon=":material/visibility:",
                         width="stretch"):
            st.session_state.pop(END_KEY, None)
            st.rerun()
        if studies.button("My studies", key="end_my_studies", icon=":material/list:",
                          width="stretch"):
            st.session_state.pop(END_KEY, None)
            state.switch_page(MY_STUDIES_PAGE)


def _report_pair(view: rating.RaterPairView, *, tall: bool = False) -> None:
    # Difference marks only where the study lead chose them (off by default: they may bias).
    reports.report_pair(view.reference_text, view.candidate_text, tall=tall,
                        highlight=view.highlight_differences)


def _flag_control(actor: Actor, view: rating.RaterPairView) -> None:
    """The rater's own flag on the pair: a small popover with an optional note."""
    mine = state.call(flags.pair_flag, state.get_db(), actor, opaque_id=view.opaque_id)
    # The label tells the rater their flag state at a glance (the note is inside).
    label = "Flagged" if mine.flagged else "Flag"
    with st.popover(label, icon=":material/flag:", width="stretch",
                    type="primary" if mine.flagged else "secondary",
                    disabled=view.read_only,
                    help="I'm unsure about this pair: flag it for the study lead, with a "
                         "note if you like. Your counts are not changed."):
        if mine.flagged:
            st.caption(f"Flagged at {_clock(mine.flagged_at)}. Your study lead sees the flag "
                       "and the note; your counts and done-state are unchanged.")
        else:
            st.caption("Unsure about this pair? Flag it for your study lead. Your counts and "
                       "done-state are unchanged.")
        note = st.text_area("Note (optional)", value=mine.note, max_chars=flags.MAX_NOTE_CHARS,
                            key=f"flag_note_{view.opaque_id}", height=90,
                            placeholder="What makes you unsure?")
        save, remove = st.columns(2)
        if save.button("Update note" if mine.flagged else "Flag this pair", type="primary",
                       key="flag_save", width="stretch"):
            _save_flag(actor, view, note)
        if mine.flagged and remove.button("Remove flag", key="flag_remove", width="stretch"):
            _save_flag(actor, view, None)


def _save_flag(actor: Actor, view: rating.RaterPairView, note: str | None) -> None:
    """Flag (note given) or unflag (``None``); a refusal is shown in place, nothing lost."""
    state.require_live_session()
    try:
        if note is None:
            flags.unflag_pair(state.get_db(), actor, opaque_id=view.opaque_id)
        else:
            flags.flag_pair(state.get_db(), actor, opaque_id=view.opaque_id, note=note)
    except ServiceError as exc:
        st.error(f"Flag not saved: {exc}")
        return
    st.rerun()


def _snooze(stretch: pace.Stretch) -> None:
    """Dismiss the break reminder for another period of the same stretch of work."""
    st.session_state[SNOOZE_KEY] = (stretch.started_at, stretch.minutes)


@st.fragment(run_every=PROGRESS_REFRESH_S)
def _progress_line(actor: Actor, view: rating.RaterPairView, flash: dict | None) -> None:
    """Under the title: the break reminder when due, else "marked done" or the progress bar.

    One line whatever it shows: a row of its own would push the grid below the fold at
    1280x800 (and a toast would cover Mark done, top right). A fragment that refreshes
    itself, so the reminder comes while the rater is still on a long pair; it redraws only
    this line (the grid and its focus are left alone).
    """
    mine = state.call(pace.rater_pace, state.get_db(), actor, study_name=view.study_name)
    n_done = mine.done
    left = pace.time_left_text(mine.estimate)
    snoozed = st.session_state.get(SNOOZE_KEY)
    if pace.reminder_due(mine.stretch, mine.break_minutes, snoozed=snoozed):
        # Small, tight type (the page's style, ``BREAK_KEY``): its two lines take the height
        # of the progress bar's text and bar, so the grid does not move down.
        with st.container(key=BREAK_KEY):
            text, dismiss = st.columns([3.2, 1], vertical_alignment="center", gap="small")
        text.markdown(f":orange-background[:material/local_cafe: "
                      f"{pace.reminder_text(mine.stretch)}]")
        # A callback: the snooze is set before the line redraws (without the reminder).
        dismiss.button("Dismiss", key="break_dismiss", type="tertiary",
                       help=f"Hide this reminder for another {mine.break_minutes} min of rating.",
                       on_click=_snooze, args=(mine.stretch,))
    elif flash and flash["ok"]:
        st.markdown(f":green-background[:green[:material/check_circle: {flash['text']}]]"
                    f" {n_done} of {view.total} done · {left}")
    else:
        st.progress(n_done / view.total if view.total else 0.0,
                    text=f"{n_done} of {view.total} done · {left}")


actor = state.require_actor()
db = state.get_db()
# Less blank space above the header than the other pages: at 1280x800 the film, both
# reports of ~120 words and the whole grid share one screen (a style only: no layout room).
st.html("<style>[data-testid='stMainBlockContainer'] {padding: 1rem 1rem 1rem 1rem;}"
        f".st-key-{BREAK_KEY} p {{font-size: 0.8rem; line-height: 1.25; margin: 0;}}"
        f".st-key-{BREAK_KEY} button {{min-height: 1.5rem; padding: 0 0.25rem;}}"
        # The question line as tall as the progress line it replaces (its text and bar).
        f".st-key-{ZERO_KEY} {{min-height: {PROGRESS_LINE_PX}px !important;"
        " justify-content: center;}}"
        f".st-key-{ZERO_KEY} p {{font-size: 0.85rem; line-height: 1.3; margin: 0;"
        " white-space: nowrap; overflow: hidden; text-overflow: ellipsis;}</style>")

opaque_id = st.query_params.get(PAIR_PARAM)
if not opaque_id:
    opaque_id = _first_open_pair(actor, st.query_params.get(STUDY_PARAM))
    if opaque_id is None:
        st.info("No pairs are assigned to you yet. Your study lead will let you know.")
        st.stop()
    st.query_params[PAIR_PARAM] = opaque_id

view = state.call(rating.get_pair, db, actor, opaque_id=opaque_id)

if st.session_state.get(END_KEY) == view.study_name:
    _end_screen(actor, view)
    st.stop()

# Time on task: the rater's own input and focus events, attributed to the pair on screen
# (every run, never in a fragment: a new pair must re-key the tracker at once).
activity_tracker(view.opaque_id, actor)

with st.sidebar:
    st.caption("Shortcuts: **N** next pair · **P** previous pair · **Ctrl+Enter** mark done "
               "(or confirm) · **?** category definitions (**Esc** closes) · in the grid: "
               "**arrows**/**Tab** move, **+**/**-** or digits set a count")

# Header: where the rater is, and the way back and forth.
confirming = st.session_state.get(CONFIRM_KEY) == view.opaque_id
flash = st.session_state.pop(FLASH_KEY, None)
# "Mark done" sits in the header beside Previous/Next so it is on screen whatever the
# length of the reports and the height of the window.
# While the all-zero question is open its two answers take Mark done's place, a little wider.
head = st.columns([2.0, 0.9, 0.75, 0.95, 0.95, 1.7] if confirming
                  else [2.3, 0.9, 0.75, 0.95, 0.95, 1.4], vertical_alignment="center")
with head[0]:
    # A training item says so (its expert counts are shown once it is done); a hidden
    # repeat never does.
    badge = " :blue-badge[:material/school: Training item]" if view.training else ""
    st.markdown(f"#### {view.study_name} · Pair {view.index} of {view.total}{badge}")
    if confirming:
        # The all-zero question in the progress line's place (one line: nothing moves).
        with st.container(key=ZERO_KEY):
            st.markdown(":orange-background[:material/help: All twelve counts are zero: "
                        "no errors at all?]")
    else:
        _progress_line(actor, view, flash)
with head[1]:
    definitions_button()
with head[2]:
    _flag_control(actor, view)
with head[3]:
    if st.button("Previous", icon=":material/arrow_back:", shortcut="P", width="stretch",
                 disabled=view.prev_opaque_id is None, key="prev"):
        _go_to(view.prev_opaque_id)
        st.rerun()
with head[4]:
    if st.button("Next", icon=":material/arrow_forward:", shortcut="N", width="stretch",
                 disabled=view.next_opaque_id is None, key="next"):
        _go_to(view.next_opaque_id)
        st.rerun()
with head[5]:
    # While the all-zero question is open, its answers take Mark done's place and
    # Ctrl+Enter answers yes (the grid sends the key to the confirmation button first).
    if confirming:
        yes, no = st.columns([3, 1], gap="small")
        if yes.button("Yes, no errors", key="confirm_zero_yes", type="primary",
                      shortcut="Ctrl+Enter", width="stretch",
                      help="All twelve counts are zero: mark the pair done as having no "
                           "errors at all."):
            _complete(actor, view, confirm_zero=True)
            st.rerun()
        if no.button(":material/undo:", key="confirm_zero_no", width="stretch",
                     help="No: back to the counts."):
            st.session_state.pop(CONFIRM_KEY, None)
            st.rerun()
    elif st.button("Mark done", type="primary", icon=":material/done:",
                   shortcut="Ctrl+Enter", width="stretch", key="done",
                   disabled=view.read_only,
                   help="Save this pair as finished and open the next open pair."):
        # The grid has stored every change before this click reached the server, and this
        # run read the pair after it: ``view`` is what the rater saw.
        if not any(view.counts.values()):
            st.session_state[CONFIRM_KEY] = view.opaque_id
            st.rerun()
        _complete(actor, view, confirm_zero=False)
        st.rerun()

# While the qualification gate holds the rater on the training items, say where they stand.
if view.training:
    gate = next((s.qualification for s in state.call(rating.rater_studies, db, actor)
                 if s.name == view.study_name), None)
    if gate:
        st.info(gate, icon=":material/school:")

# A refused Mark done: inline, under the header, where it cannot be missed.
if flash and not flash["ok"]:
    st.warning(flash["text"], icon=":material/sync_problem:")



def _grid() -> None:
    """The count grid: first in its column, so its top edge is the same on every pair."""
    # A short note in the grid's corner (no row of its own: at 1280x800 the grid shares
    # the column height with both reports).
    derived = view.annotation_mode == "error_records"
    if view.training and view.completed_at is not None:
        note = "Training item done: final"
    elif view.final_for_adjudicator:
        note = "Final: you adjudicate this study"
    elif view.read_only:
        note = "Study closed: read only"
    elif view.completed_at is not None:
        note = f"Done at {_clock(view.completed_at)}"
    elif derived:
        note = "Counts from your marked errors"
    else:
        note = "Each change is stored at once"
    # With per-error records the grid only shows the counts derived from them (the grid
    # route refuses direct edits in such a study as well).
    count_grid(actor, view.opaque_id, view.counts, version=view.version,
               read_only=view.read_only or derived, note=note)


def _under_grid() -> None:
    """Under the grid: the expert's counts of a done training item, the records panel."""
    if view.training and view.completed_at is not None:
        training_feedback(db, actor, view)
    if view.annotation_mode == "error_records":
        # The counts derive from the records: the grid above shows them, the panel edits.
        error_records_panel(db, actor, view)


if view.images:
    # The film is the dominant pane; the split is the rater's (viewer.js drags it and keeps
    # it in this browser for this rater).
    with st.container(key=SPLIT_KEY):
        left, right = st.columns(FILM_SPLIT, gap="small")
    with left:
        viewer_panel(db, actor, view.images, pair_key=view.opaque_id,
                     split_owner=state_tag(actor))
    with right:
        _grid()
        _under_grid()
        _report_pair(view)
else:
    # No image: the grid at the same place as beside a film, the reports get the left half
    # (and more height).
    with st.container(key=SPLIT_KEY):
        left, right = st.columns([1, 1], gap="small")
    with left:
        st.caption(":material/hide_image: No images for this case. The counts are on the "
                   "report texts alone.")
        _report_pair(view, tall=True)
    with right:
        _grid()
        _under_grid()
