"""AppTest: a login is a database session, re-checked on every run and before every action.

The cookie itself is set by the server routes of ``webapp/server.py`` (chromium tests in
``tests/e2e/test_accounts_browser.py``); here the app runs without them, as AppTest does.
"""

from __future__ import annotations

import hashlib

import pytest
from sqlalchemy import select, update

from radconcord.backend.services.accounts import auth, sessions
from radconcord.backend.types import Actor
from radconcord.db.models import AuthSession, User
from radconcord.webapp.state import ACTOR_KEY, SESSION_ENDED, SESSION_ID_KEY


def _scripts(at) -> list[str]:
    """The page's script elements (style-only html elements are layout, not requests)."""
    return [el.proto.body for el in at.get("html") if "<script" in el.proto.body]


def _log_in(at, username: str, password: str):
    at.text_input(key="login_username").input(username)
    at.text_input(key="login_password").input(password)
    return at.button[0].click().run()


def _sessions(db, user_id: int) -> list[AuthSession]:
    with db.read() as s:
        rows = s.scalars(select(AuthSession).where(AuthSession.user_id == user_id)).all()
        for row in rows:
            s.expunge(row)
        return list(rows)


def test_a_login_starts_a_database_session_whose_ticket_is_stored_hashed(study_env, make_app):
    at = _log_in(make_app(), "rita", study_env.passwords["rita"])
    assert not at.exception and not at.error
    [row] = _sessions(study_env.db, study_env.rater.user_id)
    assert at.session_state[SESSION_ID_KEY] == row.id
    assert row.revoked_at is None and row.ticket_sha256 and row.token_sha256 is None
    # The page hands the ticket to the browser (a script posting it to the cookie route);
    # the database holds only its hash.
    scripts = _scripts(at)
    assert len(scripts) == 1 and "/_rc/session" in scripts[0]
    ticket = scripts[0].split("body: \"", 1)[1].split("\"", 1)[0]
    assert hashlib.sha256(ticket.encode()).hexdigest() == row.ticket_sha256
    assert "document.cookie" not in scripts[0]
    issued = sessions.exchange_ticket(study_env.db, ticket)
    assert issued is not None and sessions.resolve_token(study_env.db, issued.token) is not None


def test_logout_revokes_the_database_session(study_env, make_app):
    at = _log_in(make_app(), "rita", study_env.passwords["rita"])
    session_id = at.session_state[SESSION_ID_KEY]
    at.button(key="logout").click().run()
    assert ACTOR_KEY not in at.session_state
    [row] = _sessions(study_env.db, study_env.rater.user_id)
    assert row.id == session_id and row.revoked_at is not None
    assert row.revoked_reason == "logout"
    scripts = _scripts(at)
    assert len(scripts) == 1 and "/_rc/logout" in scripts[0]


def test_a_deactivated_account_loses_its_open_tab_on_the_next_action(study_env, make_app,
                                                                     all_text):
    at = _log_in(make_app(), "boss", study_env.passwords["boss"])
    assert at.title[0].value == "Studies & progress"
    # Another admin deactivates boss while boss's tab is open.
    other = auth.create_user(study_env.db, study_env.admin, username="boss2",
                             password="boss2-password-9", role="admin")
    auth.set_active(study_env.db, Actor(other.user_id, other.username, other.role),
                    username="boss", active=False)
    at.run()  # the next action
    assert not at.exception
    assert ACTOR_KEY not in at.session_state
    assert at.title[0].value == "RadConcord"
    assert SESSION_ENDED in all_text(at)
    assert "Studies & progress" not in all_text(at)
    # The notice stays on the login page until the next login (a rerun keeps it).
    at.run()
    assert SESSION_ENDED in all_text(at)
    _log_in(at, "boss2", "boss2-password-9")
    assert SESSION_ENDED not in all_text(at)


def test_a_session_revoked_elsewhere_ends_the_tab_even_if_the_account_is_fine(study_env,
                                                                             make_app):
    at = _log_in(make_app(), "rita", study_env.passwords["rita"])
    assert sessions.revoke_session(study_env.db, at.session_state[SESSION_ID_KEY])
    at.run()
    assert ACTOR_KEY not in at.session_state
    assert at.text_input(key="login_username") is not None


def test_a_service_call_rechecks_the_session_before_it_runs(study_env, make_app, monkeypatch):
    """``state.call`` refuses to run the service once the session is gone (fragments and
    callbacks use it too, without the router's check)."""
    from radconcord.webapp import state

    at = _log_in(make_app(), "rita", study_env.passwords["rita"])
    session_id = at.session_state[SESSION_ID_KEY]
    seen, ran = [], []
    real_call = state.call

    def spy(fn, *args, **kwargs):
        # The session dies after the router's check, just before the page's first call.
        if not seen:
            sessions.revoke_session(study_env.db, session_id)
        seen.append(fn)

        def service(*a, **k):
            ran.append(fn)
            return fn(*a, **k)

        return real_call(service, *args, **kwargs)

    monkeypatch.setattr(state, "call", spy)
    at.run()
    assert seen, "the rating page calls services through state.call"
    assert ran == []
    assert ACTOR_KEY not in at.session_state
    assert at.text_input(key="login_username") is not None


@pytest.fixture
def must_change(study_env):
    with study_env.db.begin() as s:
        s.execute(update(User).where(User.username == "rita").values(must_change_password=True))
    return study_env


def test_must_change_password_offers_only_my_account(must_change, make_app):
    at = _log_in(make_app(), "rita", must_change.passwords["rita"])
    assert not at.exception
    assert at.title[0].value == "My account"
    for page in ("views/rate.py", "views/my_studies.py"):
        with pytest.raises(ValueError, match="Could not find a navigation page"):
            at.switch_page(page)
    # Changing it opens the rater's pages.
    at.text_input(key="account_current").input(must_change.passwords["rita"])
    at.text_input(key="account_new").input("rita-own-password-2")
    at.text_input(key="account_repeat").input("rita-own-password-2")
    next(b for b in at.button if b.label == "Change password").click().run()
    assert not at.exception and not at.error
    at.switch_page("views/rate.py").run()
    assert not at.exception
    assert any("Candidate report" in m.value for m in at.markdown)


def test_every_role_has_my_account_and_admins_have_accounts(study_env, make_app):
    rater = make_app(study_env.rater)
    rater.switch_page("views/account.py").run()
    assert rater.title[0].value == "My account"
    with pytest.raises(ValueError, match="Could not find a navigation page"):
        rater.switch_page("views/accounts.py")
    admin = make_app(study_env.admin)
    admin.switch_page("views/accounts.py").run()
    assert not admin.exception and admin.title[0].value == "Accounts"
    admin.switch_page("views/account.py").run()
    assert admin.title[0].value == "My account"


def test_the_cookie_script_follows_the_base_url_path(study_env, make_app):
    from streamlit import config as st_config

    before = st_config.get_option("server.baseUrlPath")
    st_config.set_option("server.baseUrlPath", "/radconcord/")
    try:
        at = _log_in(make_app(), "rita", study_env.passwords["rita"])
    finally:
        st_config.set_option("server.baseUrlPath", before)
    [script] = _scripts(at)
    assert 'fetch("/radconcord/_rc/session"' in script
    assert "credentials: 'same-origin'" in script and '"X-RadConcord": \'1\'' in script


def test_a_fragment_run_that_finds_the_session_gone_reloads_the_page(study_env, make_app,
                                                                     monkeypatch):
    """In a fragment run a dead session reloads the page to the app's root instead of
    rerunning the app: Streamlit can blank the login page that a full rerun draws when
    another fragment's timer fires meanwhile (seen in chromium under load)."""
    from radconcord.webapp import state

    at = _log_in(make_app(), "rita", study_env.passwords["rita"])
    session_id = at.session_state[SESSION_ID_KEY]
    real_call = state.call
    calls = []

    def call(fn, *args, **kwargs):
        # The session dies after the router's check, before the page's first service call
        # (in a fragment run the router does not run at all).
        if not calls:
            sessions.revoke_session(study_env.db, session_id)
        calls.append(fn)
        return real_call(fn, *args, **kwargs)

    monkeypatch.setattr(state, "call", call)
    monkeypatch.setattr(state, "in_fragment_run", lambda: True)
    at.run()
    assert not at.exception
    assert ACTOR_KEY not in at.session_state
    assert len(calls) == 1
    reload = [s for s in _scripts(at) if "location.replace" in s]
    assert reload == ['<script>window.location.replace("/" + window.location.search);</script>']
    # The run stopped there: no login form in this session; the reload brings it.
    assert not any(w.key == "login_username" for w in at.text_input)
