"""AppTest: the rater's hour on the rating screen: the definitions panel's data and shortcut
hint, a flag with a note stored (and shown as the rater's own state, removable), the pairs and
time left in the header from the rater's own median, and the break reminder with its snooze.
The keyboard behaviour of the panel in a browser is in tests/e2e/test_rater_hour_browser.py."""

from __future__ import annotations

import datetime as dt
import json

from sqlalchemy import select, update

from radconcord.backend.services.annotation import flags, rating
from radconcord.backend.services.annotation.activity import SpanInput, record_spans
from radconcord.backend.services.annotation.definitions import DEFINITIONS
from radconcord.backend.services.study_admin import assignment, study_settings
from radconcord.backend.services.transfer import imports
from radconcord.backend.types import CATEGORIES, CandidateInput, CaseInput
from radconcord.db.models import Assignment, Pair


def _first(env):
    return rating.rater_queue(env.db, env.rater, study_name=env.study)[0].opaque_id


def _component(at, name):
    found = [e for e in at.get("bidi_component") if e.proto.component_name == name]
    return json.loads(found[0].proto.json) if found else None


def _progress_text(at):
    return [e.proto.text for e in at.get("progress")]


def test_definitions_are_one_keystroke_away(study_env, make_app, all_text):
    at = make_app(study_env.rater)
    assert not at.exception
    data = _component(at, "radconcord_definitions")
    assert [d["name"] for d in data["definitions"]] == [CATEGORIES[c] for c in range(1, 7)]
    assert all(d["definition"] and d["example"] for d in data["definitions"])
    assert data["definitions"][0]["example"] == DEFINITIONS[0].example
    assert "Clinically significant" in data["significance"]
    assert "**?** category definitions (**Esc** closes)" in all_text(at)
    # Blinding: nothing of the pair travels with the panel.
    assert study_env.secret_source not in json.dumps(data)


def test_flag_with_a_note_is_stored_and_shown_as_the_raters_own(study_env, make_app,
                                                               all_text):
    first = _first(study_env)
    at = make_app(study_env.rater)
    (pop,) = at.get("popover")
    assert pop.proto.popover.label == "Flag"
    at.text_area(key=f"flag_note_{first}").set_value("  Effusion size: category 4?  ")
    at.button(key="flag_save").click().run()
    assert not at.exception
    mine = flags.pair_flag(study_env.db, study_env.rater, opaque_id=first)
    assert mine.flagged and mine.note == "Effusion size: category 4?"
    (pop,) = at.get("popover")
    assert pop.proto.popover.label == "Flagged"
    assert "Your study lead sees the flag and the note" in all_text(at)
    # Counts, done-state and version untouched.
    view = rating.get_pair(study_env.db, study_env.rater, opaque_id=first)
    assert view.version == 0 and view.completed_at is None
    # The other rater of the same pair sees no flag.
    at_other = make_app(study_env.other_rater, params={"pair": first})
    assert at_other.get("popover")[0].proto.popover.label == "Flag"
    # The lead sees it.
    (listed,) = flags.study_flags(study_env.db, study_env.admin, study_env.study)
    assert (listed.opaque_id, listed.rater, listed.note) == (
        first, "rita", "Effusion size: category 4?")
    # Remove it.
    at.button(key="flag_remove").click().run()
    assert not flags.pair_flag(study_env.db, study_env.rater, opaque_id=first).flagged
    assert at.get("popover")[0].proto.popover.label == "Flag"


def _long_study(env, n=5):
    cases = [CaseInput(case_id=f"long-{i}", reference=f"Reference {i}: lungs are clear.",
                       candidates=[CandidateInput(text=f"Candidate {i}: clear lungs.",
                                                  source=env.secret_source)])
             for i in range(n)]
    imports.import_cases(env.db, env.admin, study_name="Long study", cases=cases)
    assignment.assign_raters(env.db, env.admin, study_name="Long study",
                             rater_usernames=["rita"], raters_per_pair=1, seed=1)
    return [q.opaque_id for q in rating.rater_queue(env.db, env.rater,
                                                    study_name="Long study")]


def test_pairs_and_time_left_in_the_header(study_env, make_app):
    queue = _long_study(study_env)
    at = make_app(study_env.rater, params={"pair": queue[0]})
    assert _progress_text(at) == ["0 of 5 done · 5 left · estimate after 3 pairs"]
    # Three pairs done in 60, 120 and 90 s: median 90 s, two left -> 3 min.
    with study_env.db.begin() as s:
        for oid, secs in zip(queue[:3], (60.0, 120.0, 90.0), strict=True):
            pair_id = s.scalar(select(Pair.id).where(Pair.opaque_id == oid))
            s.execute(update(Assignment).where(Assignment.pair_id == pair_id)
                      .values(active_seconds=secs))
    for oid in queue[:3]:
        rating.complete_pair(study_env.db, study_env.rater, opaque_id=oid, confirm_zero=True)
    at = make_app(study_env.rater, params={"pair": queue[3]})
    assert not at.exception
    assert _progress_text(at) == ["3 of 5 done · 2 left · about 3 min left"]


def test_break_reminder_after_the_period_and_dismissed(study_env, make_app, all_text):
    first = _first(study_env)
    now = dt.datetime.now(dt.UTC)
    start = now - dt.timedelta(minutes=53)
    batch = [SpanInput(first, start + dt.timedelta(minutes=5 * i),
                       start + dt.timedelta(minutes=5 * i + 5), 4) for i in range(10)]
    assert not record_spans(study_env.db, study_env.rater, client_id="hour-test-1",
                            spans=batch, now=now).refused
    at = make_app(study_env.rater)
    assert not at.exception
    assert "You've been rating for 50 min. A short break helps accuracy." in all_text(at)
    assert _progress_text(at) == []  # the reminder takes the progress line's place
    at.button(key="break_dismiss").click().run()
    assert "A short break helps accuracy" not in all_text(at)
    assert _progress_text(at) == ["0 of 3 done · 3 left · estimate after 3 pairs"]
    # Off in the study's settings: no reminder at all.
    study_settings.update_study_settings(study_env.db, study_env.admin,
                                         study_name=study_env.study,
                                         break_reminder_minutes=0)
    at = make_app(study_env.rater)
    assert "A short break helps accuracy" not in all_text(at)
