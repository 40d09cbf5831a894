"""AppTest: logging in and out, and what a logged-out visitor can reach."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import update

from radconcord.backend.services.accounts import auth
from radconcord.db.models import User
from radconcord.webapp.state import ACTOR_KEY


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
    from radconcord.backend.services.annotation import rating

    queue = rating.rater_queue(study_env.db, study_env.rater, study_name=study_env.study)
    target = queue[2].opaque_id
    at = make_app(params={"pair": target})
    at = _log_in(at, "rita", study_env.passwords["rita"])
    assert not at.exception
    assert at.query_params["pair"] == target
    assert any("Pair 3 of 3" in m.value for m in at.markdown)


def test_five_wrong_passwords_lock_the_account_and_show_when_the_lock_ends(study_env,
                                                                           make_app):
    at = make_app()
    for _ in range(4):
        at = _log_in(at, "rita", "not-her-password")
        assert [e.value for e in at.error] == ["Unknown username or wrong password."]
    at = _log_in(at, "rita", "not-her-password")
    [message] = [e.value for e in at.error]
    assert re.search(r"locked until \d\d:\d\d:\d\d UTC", message)
    # Locked: even the right password is refused, with the same end time.
    end = re.search(r"\d\d:\d\d:\d\d UTC", message).group(0)
    at = _log_in(at, "rita", study_env.passwords["rita"])
    assert ACTOR_KEY not in at.session_state
    [message] = [e.value for e in at.error]
    assert "Too many failed logins" in message and end in message
    # The five failures also locked this client: another account cannot log in from it.
    at = _log_in(at, "ravi", study_env.passwords["ravi"])
    assert ACTOR_KEY not in at.session_state and "locked until" in at.error[0].value


def test_a_demo_password_is_refused_from_a_client_that_is_not_this_machine(study_env,
                                                                           make_app):
    """AppTest has no browser connection: the client is unknown, so never loopback."""
    auth.create_user(study_env.db, study_env.admin, username="rater1",
                     password="rita-password-7", role="rater")
    # The demo password, as seed_demo sets it (auth refuses it for new accounts).
    with study_env.db.begin() as s:
        s.execute(update(User).where(User.username == "rater1").values(
            password_hash=auth._hasher.hash("radconcord-rater1")))
    at = _log_in(make_app(), "rater1", "radconcord-rater1")
    assert ACTOR_KEY not in at.session_state
    [message] = [e.value for e in at.error]
    assert "published" in message and "demo" in message and "My account" in message
