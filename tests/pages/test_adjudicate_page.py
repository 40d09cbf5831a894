"""The Adjudicate page (AppTest): queue with reasons, anonymised counts, consensus save."""

from __future__ import annotations

from pathlib import Path

import pytest

from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import rating
from radconcord.backend.services.quality import adjudication
from radconcord.backend.services.study_admin.study_settings import study_settings
from radconcord.backend.types import Actor

PAGE = Path(__file__).resolve().parents[2] / "webapp" / "views" / "adjudicate.py"


def _rate(db, actor, opaque_id, cells):
    saved = rating.set_counts(db, actor, opaque_id=opaque_id, cells=cells, expected_version=0)
    rating.complete_pair(db, actor, opaque_id=opaque_id, confirm_zero=not cells,
                         expected_version=saved.version)


@pytest.fixture
def disputed(study_env):
    """Pair 1 disputed (rita 2 significant cat-1 errors, ravi none); ada adjudicates."""
    env = study_env
    ids = [q.opaque_id for q in rating.rater_queue(env.db, env.rater, study_name=env.study)]
    by_number = sorted(ids, key=lambda oid: adjudication.get_item(
        env.db, env.admin, study_name=env.study, opaque_id=oid).pair_number)
    first = by_number[0]
    _rate(env.db, env.rater, first, {(1, True): 2})
    _rate(env.db, env.other_rater, first, {})
    info = auth.create_user(env.db, Actor.system(), username="ada",
                            password="ada-password-1", role="rater")
    adjudication.set_adjudicator(env.db, env.admin, study_name=env.study, username="ada")
    ada = Actor(user_id=info.user_id, username="ada", role="rater")
    return env, ada, first


def test_adjudicator_sees_queue_anonymised_counts_and_saves(disputed, make_app, all_text):
    env, ada, first = disputed
    at = make_app(ada, script=PAGE)
    assert not at.exception
    text = all_text(at)
    assert "1 pair(s) in the queue, 0 adjudicated." in text
    queue = at.dataframe[0].value
    assert list(queue["Pair"]) == [1]
    assert "significant errors range 0-2 (>= 2)" in queue["Reason"][0]
    raters = at.dataframe[1].value
    assert [c for c in raters.columns if c.startswith("Rater")] == ["Rater A", "Rater B"]
    differs = raters[raters["Differs"] != ""]
    assert list(differs["Category"]) == ["1. False prediction of finding"]
    # Blinding: no rater name or source on the page.
    assert "rita" not in text and "ravi" not in text and env.secret_source not in text
    assert "rita" not in raters.to_string() and "ravi" not in raters.to_string()
    # The admin-only rule panel is not drawn for an adjudicator.
    assert "adj_rule_range" not in [n.key for n in at.number_input]

    # Prefill: the rounded mean (2 and 0 -> 1); the consensus differs from both raters,
    # so saving without a note is refused and nothing is stored.
    key = f"adj_{first}_0"
    assert at.number_input(key=f"{key}_1_1").value == 1
    at.button(key="FormSubmitter:" + f"{key}_form-Save consensus").click().run()
    assert "note: required" in all_text(at)
    # Said above the form; the page stays, with the way on through the queue.
    assert any("Not saved: note: required" in w.value for w in at.warning)
    assert not at.error
    assert adjudication.get_item(env.db, env.admin, study_name=env.study,
                                 opaque_id=first).consensus is None

    at.text_area(key=f"{key}_note").input("one real false finding")
    at.button(key="FormSubmitter:" + f"{key}_form-Save consensus").click().run()
    assert not at.exception
    assert "Consensus saved (version 1)." in all_text(at)
    stored = adjudication.get_item(env.db, env.admin, study_name=env.study, opaque_id=first)
    assert stored.consensus.counts[(1, True)] == 1
    assert stored.consensus.note == "one real false finding"
    # The inputs now show the stored consensus under the new version.
    assert at.number_input(key=f"adj_{first}_1_1_1").value == 1
    assert at.text_area(key=f"adj_{first}_1_note").value == "one real false finding"
    assert "1 pair(s) in the queue, 1 adjudicated." in all_text(at)


def test_admin_sees_and_changes_the_rule(disputed, make_app, all_text):
    env, _, _ = disputed
    at = make_app(env.admin, script=PAGE)
    assert not at.exception
    at.number_input(key="adj_rule_range").set_value(3)
    at.checkbox(key="adj_rule_cat12").uncheck()
    at.button(key="FormSubmitter:adjudicate_rule-Save rule").click().run()
    assert not at.exception
    values = study_settings(env.db, env.admin, env.study).values
    assert values["adjudicate_significant_range"] == 3
    assert values["adjudicate_category_12"] is False
    assert "No pair needs adjudication under the current rule." in all_text(at)


def test_plain_rater_is_told_they_adjudicate_nothing(study_env, make_app, all_text):
    at = make_app(study_env.rater, script=PAGE)
    assert not at.exception
    assert "You are not an adjudicator of any study." in all_text(at)


def test_the_adjudicator_may_see_the_film_of_the_studys_cases(disputed):
    """The viewer fetches pixels through the images service: an adjudicator who rates none
    of the study's pairs must pass its access check, and one removed from the role not."""
    from radconcord.backend.errors import PermissionDenied
    from radconcord.backend.services.annotation import images

    env, ada, _ = disputed
    refs = [ref for number in (1, 2, 3) for ref in adjudication.get_item(
        env.db, ada, study_name=env.study, pair_number=number).images]
    assert len(refs) == 1
    pixels = images.viewer_pixels(env.db, ada, image_id=refs[0].image_id)
    assert pixels is not None
    adjudication.set_adjudicator(env.db, env.admin, study_name=env.study, username="ada",
                                 on=False)
    with pytest.raises(PermissionDenied):
        images.viewer_pixels(env.db, ada, image_id=refs[0].image_id)
