"""AppTest: the admin's "Accounts" page and every user's "My account" page.

The page scripts run directly (``AppTest.from_file``) with a real database session
(``auth_sessions`` row) in the browser session, as the router leaves them after a login; the
session's revocation by a reset, a deactivation or a password change is read back from the
database.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy import select
from streamlit.testing.v1 import AppTest

from radconcord.backend.errors import PermissionDenied
from radconcord.backend.services.accounts import auth, sessions
from radconcord.backend.types import Actor
from radconcord.db.models import AuthSession
from radconcord.webapp import state

VIEWS = Path(__file__).resolve().parents[2] / "webapp" / "views"
ACCOUNTS = VIEWS / "accounts.py"
ACCOUNT = VIEWS / "account.py"
OTP = re.compile(r"^[a-z2-9]{4}(-[a-z2-9]{4}){3}$")


@pytest.fixture(autouse=True)
def _cheap_hashing(fast_password_hashing):
    """These tests hash several passwords; cheap argon2id parameters keep them quick."""


def _login(db, actor: Actor) -> int:
    """A live database session for ``actor`` (what a login creates); its id."""
    return sessions.create_session(db, actor, client="127.0.0.1").session_id


def _page(script: Path, actor: Actor, session_id: int) -> AppTest:
    at = AppTest.from_file(str(script), default_timeout=60)
    at.session_state[state.ACTOR_KEY] = actor
    at.session_state[state.SESSION_ID_KEY] = session_id
    return at.run()


def _submit(at: AppTest, form: str) -> AppTest:
    button = next(b for b in at.button if b.key.startswith(f"FormSubmitter:{form}-"))
    return button.click().run()


def _revoked(db, session_id: int) -> str | None:
    """The revocation reason of a session (None while it is live)."""
    with db.begin() as s:
        row = s.get(AuthSession, session_id)
        return row.revoked_reason if row.revoked_at is not None else None


def _manage(at: AppTest, username: str, action: str) -> AppTest:
    at.selectbox(key="accounts_target").set_value(username)
    at.radio(key="accounts_action").set_value(action)
    return _submit(at, "manage_account")


def _table(at: AppTest) -> dict[str, dict]:
    frame = at.dataframe[0].value
    return {row["Username"]: row for row in frame.to_dict("records")}


def test_accounts_page_lists_every_account(study_env):
    at = _page(ACCOUNTS, study_env.admin, _login(study_env.db, study_env.admin))
    assert not at.exception and not at.error
    assert at.title[0].value == "Accounts"
    table = _table(at)
    assert list(table) == ["boss", "ravi", "rita"]
    assert {k: (v["Role"], v["Active"], v["Must change password"]) for k, v in table.items()} == {
        "boss": ("admin", True, False), "ravi": ("rater", True, False),
        "rita": ("rater", True, False)}
    # The admin's own account is not offered for resets or deactivation.
    assert at.selectbox(key="accounts_target").options == ["ravi", "rita"]


def test_create_a_rater_with_a_one_time_password_shown_once(study_env):
    at = _page(ACCOUNTS, study_env.admin, _login(study_env.db, study_env.admin))
    at.text_input(key="accounts_new_username").input("rosa")
    at.text_input(key="accounts_new_display").input("Dr Rosa")
    _submit(at, "create_account")
    assert not at.exception and not at.error
    assert at.success[0].value == "Created rater **rosa**."
    [code] = at.code
    password = code.value
    assert OTP.match(password)
    assert "shown only this once" in at.caption[-1].value
    table = _table(at)
    assert table["rosa"]["Display name"] == "Dr Rosa"
    assert table["rosa"]["Must change password"] is True
    rosa = auth.authenticate(study_env.db, username="rosa", password=password)
    assert rosa is not None and rosa.role == "rater"
    assert auth.session_user(study_env.db, user_id=rosa.user_id).must_change_password

    at.run()  # the next run (any click) no longer shows it
    assert not at.code and not at.success
    assert password not in repr(at.session_state)  # nothing keeps it


def test_create_refuses_a_taken_username_with_one_error(study_env):
    at = _page(ACCOUNTS, study_env.admin, _login(study_env.db, study_env.admin))
    at.text_input(key="accounts_new_username").input("RITA")
    _submit(at, "create_account")
    assert not at.exception
    assert [e.value for e in at.error] == ["username: 'RITA' is already taken"]
    assert not at.code
    assert len(auth.list_users(study_env.db, study_env.admin)) == 3


def test_reset_password_logs_the_rater_out_and_shows_a_one_time_password(study_env):
    rita_session = _login(study_env.db, study_env.rater)
    at = _page(ACCOUNTS, study_env.admin, _login(study_env.db, study_env.admin))
    _manage(at, "rita", "reset")
    assert not at.exception and not at.error
    assert at.success[0].value.startswith("Reset the password of **rita**")
    password = at.code[0].value
    assert _revoked(study_env.db, rita_session) == "password_reset"
    assert auth.authenticate(study_env.db, username="rita",
                             password=study_env.passwords["rita"]) is None
    assert auth.authenticate(study_env.db, username="rita", password=password) is not None
    assert _table(at)["rita"]["Must change password"] is True


def test_deactivate_and_reactivate(study_env):
    rita_session = _login(study_env.db, study_env.rater)
    at = _page(ACCOUNTS, study_env.admin, _login(study_env.db, study_env.admin))
    _manage(at, "rita", "deactivate")
    assert not at.exception and not at.error
    assert at.success[0].value.startswith("Deactivated **rita**")
    assert _table(at)["rita"]["Active"] is False
    assert _revoked(study_env.db, rita_session) == "account_deactivated"
    # The rater's open tab loses access on its next action.
    rater_tab = _page(ACCOUNT, study_env.rater, rita_session)
    assert [e.value for e in rater_tab.error] == ["Please log in first."]
    assert not rater_tab.title

    _manage(at, "rita", "reactivate")
    assert at.success[0].value.startswith("Reactivated **rita**")
    assert _table(at)["rita"]["Active"] is True
    assert _revoked(study_env.db, rita_session) == "account_deactivated"
    assert auth.authenticate(study_env.db, username="rita",
                             password=study_env.passwords["rita"]) is not None


def test_a_deactivated_admin_loses_the_accounts_page_on_the_next_action(study_env):
    auth.create_user(study_env.db, study_env.admin, username="lead2",
                     password="lead2-password", role="admin")
    lead2 = auth.authenticate(study_env.db, username="lead2", password="lead2-password")
    lead2_tab = _page(ACCOUNTS, lead2, _login(study_env.db, lead2))
    assert _table(lead2_tab)
    boss_tab = _page(ACCOUNTS, study_env.admin, _login(study_env.db, study_env.admin))
    _manage(boss_tab, "lead2", "deactivate")
    # lead2 clicks something in the open tab: no table, no form, no account names.
    _manage(lead2_tab, "rita", "reset")
    assert not lead2_tab.exception
    assert [e.value for e in lead2_tab.error] == ["Please log in first."]
    assert not lead2_tab.dataframe and not lead2_tab.code
    assert auth.authenticate(study_env.db, username="rita",
                             password=study_env.passwords["rita"]) is not None


def test_role_change_and_the_last_admin_guard(study_env):
    at = _page(ACCOUNTS, study_env.admin, _login(study_env.db, study_env.admin))
    _manage(at, "ravi", "make_admin")
    assert at.success[0].value == "**ravi** is now an admin."
    assert _table(at)["ravi"]["Role"] == "admin"
    _manage(at, "ravi", "make_rater")
    assert _table(at)["ravi"]["Role"] == "rater"
    # boss is the last active admin: the command line cannot remove it either.
    with pytest.raises(PermissionDenied, match="last active admin"):
        auth.set_active(study_env.db, Actor.system(), username="boss", active=False)


def test_a_rater_cannot_use_the_accounts_page(study_env, all_text):
    at = _page(ACCOUNTS, study_env.rater, _login(study_env.db, study_env.rater))
    assert not at.exception
    assert [e.value for e in at.error] == ["this action needs an admin account"]
    assert not at.dataframe and not at.title and not at.button
    assert "ravi" not in all_text(at)


def test_my_account_after_a_reset_requires_and_accepts_a_new_password(study_env):
    reset = auth.reset_password(study_env.db, study_env.admin, username="rita")
    rita = auth.authenticate(study_env.db, username="rita", password=reset.password)
    mine = _login(study_env.db, rita)
    elsewhere = _login(study_env.db, rita)
    at = _page(ACCOUNT, rita, mine)
    assert not at.exception and not at.error
    assert at.title[0].value == "My account"
    assert "Choose your own password before continuing" in at.warning[0].value

    at.text_input(key="account_current").input(reset.password)
    at.text_input(key="account_new").input("rita-own-choice")
    at.text_input(key="account_repeat").input("rita-own-choice")
    _submit(at, "change_password")
    assert not at.exception and not at.error
    assert at.success[0].value.startswith("Password changed.")
    assert "You can now use the other pages." in at.success[0].value
    assert not at.warning
    assert at.session_state[state.MUST_CHANGE_KEY] is False
    # This tab stays logged in; the other browser is logged out.
    assert _revoked(study_env.db, mine) is None
    assert sessions.check_session(study_env.db, mine, actor=rita) is not None
    assert _revoked(study_env.db, elsewhere) == "password_changed"
    assert auth.authenticate(study_env.db, username="rita", password="rita-own-choice") == rita
    assert not auth.session_user(study_env.db, user_id=rita.user_id).must_change_password


@pytest.mark.parametrize(
    ("current", "new", "repeat", "message"),
    [
        ("wrong-password", "rita-new-pass", "rita-new-pass", "current password: wrong password"),
        ("", "rita-new-pass", "rita-new-pass", "current password: please enter it"),
        (None, "rita-new-pass", "rita-new-typo", "new password: the two entries differ"),
        (None, "short", "short", "new password: must be at least 8 characters"),
        (None, "radconcord-rater1", "radconcord-rater1", "new password: this is a published"),
        (None, None, None, "new password: must differ from the current password"),
    ],
)
def test_my_account_refusals_change_nothing(study_env, current, new, repeat, message):
    password = study_env.passwords["rita"]
    mine = _login(study_env.db, study_env.rater)
    elsewhere = _login(study_env.db, study_env.rater)
    at = _page(ACCOUNT, study_env.rater, mine)
    assert not at.warning  # no change required for this account
    at.text_input(key="account_current").input(password if current is None else current)
    at.text_input(key="account_new").input(password if new is None else new)
    at.text_input(key="account_repeat").input(password if repeat is None else repeat)
    _submit(at, "change_password")
    assert not at.exception and not at.success
    assert len(at.error) == 1 and at.error[0].value.startswith(message)
    assert auth.authenticate(study_env.db, username="rita", password=password) is not None
    assert _revoked(study_env.db, mine) is None and _revoked(study_env.db, elsewhere) is None


def test_my_account_needs_a_login(study_env):
    at = AppTest.from_file(str(ACCOUNT), default_timeout=60).run()
    assert [e.value for e in at.error] == ["Please log in first."]
    assert not at.text_input
    with study_env.db.begin() as s:
        assert s.scalars(select(AuthSession.id)).all() == []


def test_the_first_account_created_is_the_one_offered_for_management(tmp_path, monkeypatch):
    """On a server with only the admin the account list starts empty; the account created
    next is selected (not the empty selection the form remembered)."""
    from radconcord.db.session import Database

    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'fresh.db'}")
    monkeypatch.setenv("RADCONCORD_SEED_DEMO", "0")
    db = Database()
    try:
        auth.create_user(db, Actor.system(), username="lead", password="lead-password",
                         role="admin")
        lead = auth.authenticate(db, username="lead", password="lead-password")
        at = _page(ACCOUNTS, lead, _login(db, lead))
        assert at.selectbox(key="accounts_target").options == []
        at.text_input(key="accounts_new_username").input("rosa")
        _submit(at, "create_account")
        assert at.selectbox(key="accounts_target").value == "rosa"
        _manage(at, "rosa", "deactivate")
        assert not at.error and at.success[0].value.startswith("Deactivated **rosa**")
        assert [(u.username, u.active) for u in auth.list_users(db, lead)] == [
            ("lead", True), ("rosa", False)]
    finally:
        db.dispose()
