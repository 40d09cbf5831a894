"""AppTest: the Compare screen of a pairwise study (both candidates beside the reference,
preference and 1-5 ratings stored on click, Mark done needs all three, stale refusal, the
end screen). Its keyboard in a browser: tests/e2e/test_pairwise_browser.py."""

from __future__ import annotations

import html

import pytest

from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import pairwise
from radconcord.backend.services.study_admin import study_settings
from radconcord.backend.services.transfer import imports
from radconcord.backend.types import Actor, CandidateInput, CaseInput

PW_STUDY = "Pairwise page study"
SECRETS = ("sys-secret-left", "sys-secret-right")
CASES = [
    ("pw-a", "Heart size is normal. No pleural effusion.",
     "Mild cardiomegaly. No effusion.", "Heart normal. Small right effusion."),
    ("pw-b", "Small left pleural effusion.", "Left effusion, small.", "No effusion."),
]


@pytest.fixture
def pw(study_env):
    """A pairwise study of two comparisons given to a rater who has nothing else."""
    db, admin = study_env.db, study_env.admin
    imports.import_cases(db, admin, study_name=PW_STUDY, cases=[
        CaseInput(case_id=cid, reference=ref,
                  candidates=[CandidateInput(text=a, source=SECRETS[0]),
                              CandidateInput(text=b, source=SECRETS[1])])
        for cid, ref, a, b in CASES])
    study_settings.update_study_settings(db, admin, study_name=PW_STUDY,
                                         annotation_mode="pairwise")
    pairwise.make_comparisons(db, admin, PW_STUDY, seed=0)
    info = auth.create_user(db, Actor.system(), username="pia", password="pia-password-1",
                            role="rater")
    pia = Actor(user_id=info.user_id, username="pia", role="rater")
    pairwise.assign_judgements(db, admin, PW_STUDY, ["pia"], 1, 0)
    return study_env, pia


def _button(at, key):
    return next(b for b in at.button if b.key == key)


def test_compare_page_shows_reference_and_both_candidates_blinded(pw, make_app, all_text):
    env, pia = pw
    first = pairwise.rater_comparisons(env.db, pia, PW_STUDY)[0].opaque_id
    at = make_app(pia)
    assert not at.exception
    assert at.query_params["comparison"] == first
    view = pairwise.get_comparison(env.db, pia, first)
    text = all_text(at)
    for label in ("Reference report", "Candidate A", "Candidate B"):
        assert label in text
    for body in (view.reference_text, view.candidate_a_text, view.candidate_b_text):
        assert html.escape(body) in text
    assert f"Comparison 1 of {view.total}" in text
    assert not any(secret in text for secret in SECRETS)
    assert {b.key for b in at.button} >= {"pref_A", "pref_tie", "pref_B", "rate_a_1",
                                          "rate_b_5", "done", "prev", "next"}


def test_time_on_task_goes_to_the_comparison_on_screen(pw, make_app):
    """The rating page's tracker is on the Compare screen too, keyed by the comparison's
    opaque id (the id the route resolves to the rater's judgement), and follows Next."""
    import json

    env, pia = pw
    first, second = (c.opaque_id for c in pairwise.rater_comparisons(env.db, pia, PW_STUDY))
    at = make_app(pia)

    def tracked() -> str:
        (element,) = [e for e in at.get("bidi_component")
                      if e.proto.component_name == "radconcord_activity"]
        return json.loads(element.proto.json)["pair"]

    assert tracked() == first
    _button(at, "next").click().run()
    assert tracked() == second


def test_clicks_store_each_field_and_mark_done_needs_all(pw, make_app, all_text):
    env, pia = pw
    first, second = (c.opaque_id for c in pairwise.rater_comparisons(env.db, pia, PW_STUDY))
    at = make_app(pia)
    _button(at, "pref_B").click().run()
    assert pairwise.get_comparison(env.db, pia, first).preference == "B"
    assert _button(at, "pref_B").proto.type == "primary"
    # Mark done with a rating missing: refused, named, nothing done.
    _button(at, "done").click().run()
    assert not at.exception
    assert "give the rating of A and the rating of B" in all_text(at)
    assert pairwise.get_comparison(env.db, pia, first).completed_at is None
    _button(at, "rate_a_4").click().run()
    _button(at, "rate_b_2").click().run()
    view = pairwise.get_comparison(env.db, pia, first)
    assert (view.preference, view.rating_a, view.rating_b) == ("B", 4, 2)
    _button(at, "done").click().run()
    assert pairwise.get_comparison(env.db, pia, first).completed_at is not None
    assert at.query_params["comparison"] == second
    assert "Comparison 1 of 2 marked done." in all_text(at)


def test_keys_that_reach_one_run_together_are_all_stored(pw, make_app, all_text):
    """Keys pressed faster than the page redraws arrive in one run (Streamlit folds the
    reruns, in no fixed order): every one is stored, none is refused as a change "from another
    window", and Mark done sees the fields typed before it."""
    env, pia = pw
    first, second = (c.opaque_id for c in pairwise.rater_comparisons(env.db, pia, PW_STUDY))
    at = make_app(pia)
    for key in ("pref_B", "rate_a_4", "rate_b_2", "done"):
        _button(at, key).click()
    at.run()
    assert not at.exception
    view = pairwise.get_comparison(env.db, pia, first)
    assert (view.preference, view.rating_a, view.rating_b) == ("B", 4, 2)
    assert view.completed_at is not None
    assert at.query_params["comparison"] == second
    text = all_text(at)
    assert "Comparison 1 of 2 marked done." in text
    assert "another window" not in text
    # Two fields at once on the next comparison, then a single click: all stored.
    _button(at, "pref_tie").click()
    _button(at, "rate_a_3").click()
    at.run()
    _button(at, "rate_b_5").click().run()
    view = pairwise.get_comparison(env.db, pia, second)
    assert (view.preference, view.rating_a, view.rating_b) == ("tie", 3, 5)
    assert "another window" not in all_text(at)


def test_a_change_from_another_window_is_not_overwritten(pw, make_app, all_text):
    env, pia = pw
    first = pairwise.rater_comparisons(env.db, pia, PW_STUDY)[0].opaque_id
    at = make_app(pia)
    # Another window stores A after this page drew the comparison (version 0).
    pairwise.save_judgement(env.db, pia, first, preference="A", expected_version=0)
    _button(at, "pref_tie").click().run()
    assert not at.exception
    assert "changed in another window" in all_text(at)
    view = pairwise.get_comparison(env.db, pia, first)
    assert (view.preference, view.version) == ("A", 1)
    assert _button(at, "pref_A").proto.type == "primary"  # the stored answer is shown
    # Mark done is refused the same way after another change elsewhere.
    pairwise.save_judgement(env.db, pia, first, rating_a=2, rating_b=3)
    _button(at, "done").click().run()
    assert "Not marked done" in all_text(at)
    assert pairwise.get_comparison(env.db, pia, first).completed_at is None
    # Now the screen shows the stored answer: a click goes through.
    _button(at, "pref_tie").click().run()
    assert pairwise.get_comparison(env.db, pia, first).preference == "tie"


def test_last_comparison_done_shows_the_end_screen(pw, make_app, all_text):
    env, pia = pw
    items = pairwise.rater_comparisons(env.db, pia, PW_STUDY)
    for item in items[:-1]:
        pairwise.save_judgement(env.db, pia, item.opaque_id, preference="A", rating_a=5,
                                rating_b=1)
        pairwise.complete(env.db, pia, item.opaque_id)
    at = make_app(pia)
    assert at.query_params["comparison"] == items[-1].opaque_id
    _button(at, "pref_tie").click().run()
    _button(at, "rate_a_3").click().run()
    _button(at, "rate_b_3").click().run()
    _button(at, "done").click().run()
    assert not at.exception
    assert "Study complete" in all_text(at)


def test_my_studies_lists_the_pairwise_study_and_resumes_on_compare(pw, make_app, all_text):
    """A judge with comparisons only finds the study on My studies, with its progress, and
    Resume opens the Compare screen at the first open comparison."""
    env, pia = pw
    items = pairwise.rater_comparisons(env.db, pia, PW_STUDY)
    at = make_app(pia)
    at.switch_page("views/my_studies.py").run()
    assert not at.exception
    text = all_text(at)
    assert PW_STUDY in text and "No pairs are assigned" not in text
    assert not any(secret in text for secret in SECRETS)
    progress = [el.proto.text for el in at.get("progress")]
    assert progress == [f"0 of {len(items)} comparisons done"]
    _button(at, f"compare-{PW_STUDY}").click().run()
    assert not at.exception
    assert at.query_params["comparison"] == items[0].opaque_id
    assert "Candidate A" in all_text(at)


def test_next_and_previous_move_through_the_raters_order(pw, make_app, all_text):
    env, pia = pw
    first, second = (c.opaque_id for c in pairwise.rater_comparisons(env.db, pia, PW_STUDY))
    at = make_app(pia)
    assert _button(at, "prev").disabled
    _button(at, "next").click().run()
    assert not at.exception
    assert at.query_params["comparison"] == second
    assert "Comparison 2 of 2" in all_text(at)
    assert _button(at, "next").disabled
    # A rating typed with the move lands on the comparison it was typed on (the moves run
    # after the saves of their run).
    _button(at, "rate_a_5").click()
    _button(at, "prev").click()
    at.run()
    assert at.query_params["comparison"] == first
    assert pairwise.get_comparison(env.db, pia, second).rating_a == 5
    assert pairwise.get_comparison(env.db, pia, first).rating_a is None
