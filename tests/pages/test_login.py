"""AppTest: logging in and out, and what a logged-out visitor can reach."""

from __future__ import annotations

import pytest

from webapp.state import ACTOR_KEY


def _log_in(at, username: str, password: str):
    at.text_input(key="login_username").input(username)
    at.text_input(key="login_password").input(password)
    return at.button[0].click().run()


def test_logged_out_sees_only_the_login_page(study_env, make_app):
    at = make_app()
    assert not at.exception
    assert [t.value for t in at.title] == ["RadConcord"]
    assert at.text_input(key="login_username") is not None
    # Nothing else is registered with st.navigation while logged out.
    with pytest.raises(ValueError, match="Could not find a navigation page"):
        at.switch_page("views/rate.py")
    with pytest.raises(ValueError, match="Could not find a navigation page"):
        at.switch_page("views/studies.py")


def test_login_with_the_right_password_opens_the_rating_page(study_env, make_app):
    at = _log_in(make_app(), "rita", study_env.passwords["rita"])
    assert not at.exception
    assert not at.error
    assert at.session_state[ACTOR_KEY] == study_env.rater
    markdown = "\n".join(m.value for m in at.markdown)
    assert "Reference report" in markdown and "Candidate report" in markdown
    assert at.query_params.get("pair")


def test_login_with_a_wrong_password_is_refused(study_env, make_app):
    at = _log_in(make_app(), "rita", "not-her-password")
    assert not at.exception
    assert [e.value for e in at.error] == ["Unknown username or wrong password."]
    assert ACTOR_KEY not in at.session_state
    at = _log_in(at, "nobody", "whatever-password")
    assert [e.value for e in at.error] == ["Unknown username or wrong password."]
    assert ACTOR_KEY not in at.session_state


def test_admin_login_opens_the_study_pages_and_logout_forgets_the_user(study_env, make_app):
    at = _log_in(make_app(), "boss", study_env.passwords["boss"])
    assert not at.exception
    assert at.title[0].value == "Studies & progress"
    at.button(key="logout").click().run()
    assert ACTOR_KEY not in at.session_state
    assert at.title[0].value == "RadConcord"


def test_login_returns_to_the_pair_in_the_url(study_env, make_app):
    """A reload starts a new session on the login page; logging in goes back to the pair."""
    from backend.services import rating

    queue = rating.rater_queue(study_env.db, study_env.rater, study_name=study_env.study)
    target = queue[2].opaque_id
    at = make_app(params={"pair": target})
    at = _log_in(at, "rita", study_env.passwords["rita"])
    assert not at.exception
    assert at.query_params["pair"] == target
    assert any("Pair 3 of 3" in m.value for m in at.markdown)
