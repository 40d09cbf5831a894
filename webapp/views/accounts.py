"""Admin: the accounts of this study server; create, reset, deactivate and reactivate them.

A new account, or one whose password is reset, gets a generated one-time password that the
page shows once (nothing keeps it afterwards) and that its owner must replace at first login.
A reset or a deactivation logs the account out everywhere at once.
"""

from __future__ import annotations

import streamlit as st

from radconcord.backend.services.accounts import auth
from radconcord.webapp import state

actor = state.require_actor()
state.require_admin_page(actor)
db = state.get_db()

# One-off outcome of the last action, drawn (and forgotten) by the next run: the rerun after an
# action redraws the table with the change.
FLASH_KEY = "accounts_flash"
TARGET_KEY = "accounts_target"
ACTIONS = {
    "reset": "Reset password (new one-time password)",
    "deactivate": "Deactivate",
    "reactivate": "Reactivate",
    "make_admin": "Make admin",
    "make_rater": "Make rater",
}


def _finish(message: str, password: str | None = None, username: str = "") -> None:
    """Keep the outcome for the next run and rerun (the table then shows the change)."""
    st.session_state[FLASH_KEY] = (message, password, username)
    st.rerun()


st.title("Accounts")
st.caption("Raters and admins of this server. New accounts and password resets get a "
           "one-time password that their owner must replace at first login; a reset or a "
           "deactivation logs the account out everywhere at once.")

flash = st.session_state.pop(FLASH_KEY, None)
if flash is not None:
    message, password, username = flash
    st.success(message)
    if password:
        st.code(password, language=None)
        st.caption(f"Copy the one-time password now (copy button at the right of the box): it "
                   f"is shown only this once and is not stored. Give it to **{username}** "
                   f"privately; they choose their own password when they first log in.")

users = state.call(auth.list_users, db, actor)
st.dataframe(
    [
        {
            "Username": u.username,
            "Display name": u.display_name,
            "Role": u.role,
            "Active": u.active,
            "Must change password": u.must_change_password,
            "Password changed": u.password_changed_at,
            "Created": u.created_at,
        }
        for u in users
    ],
    hide_index=True,
    width="stretch",
    column_config={
        "Password changed": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm"),
        "Created": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm"),
    },
)

left, right = st.columns(2)
with left, st.form("create_account", clear_on_submit=True):
    st.subheader("New account")
    new_username = st.text_input("Username", key="accounts_new_username",
                                 help="Letters, digits, '_', '.' or '-'; used to log in.")
    new_display = st.text_input("Display name", key="accounts_new_display",
                                help="Shown in progress tables (defaults to the username).")
    new_role = st.radio("Role", ["rater", "admin"], horizontal=True, key="accounts_new_role")
    create = st.form_submit_button("Create with a one-time password", type="primary")

others = [u.username for u in users if u.user_id != actor.user_id]
# The selection survives reruns by its key; one made when the list was different (empty
# before the first account, or an account renamed meanwhile) would select nothing.
if others and st.session_state.get(TARGET_KEY) not in others:
    st.session_state[TARGET_KEY] = others[0]
with right, st.form("manage_account"):
    st.subheader("Manage an account")
    target = st.selectbox("Account", others, key=TARGET_KEY,
                          help="Your own account is managed on My account.")
    action = st.radio("Action", list(ACTIONS), format_func=ACTIONS.__getitem__,
                      key="accounts_action")
    apply = st.form_submit_button("Apply", disabled=not others)

if create:
    created = state.call(auth.create_user_with_one_time_password, db, actor,
                         username=new_username.strip(), role=new_role,
                         display_name=new_display.strip())
    _finish(f"Created {created.user.role} **{created.user.username}**.", created.password,
            created.user.username)

if apply and not target:
    st.error("account: choose the account to change")
elif apply:
    if action == "reset":
        reset = state.call(auth.reset_password, db, actor, username=target)
        _finish(f"Reset the password of **{reset.user.username}** and logged it out "
                f"everywhere.", reset.password, reset.user.username)
    elif action in ("deactivate", "reactivate"):
        info = state.call(auth.set_active, db, actor, username=target,
                          active=action == "reactivate")
        _finish(f"Deactivated **{info.username}** and logged it out everywhere."
                if not info.active else
                f"Reactivated **{info.username}**: it logs in again with its password.")
    else:
        info = state.call(auth.set_role, db, actor, username=target,
                          role="admin" if action == "make_admin" else "rater")
        _finish(f"**{info.username}** is now {'an admin' if info.role == 'admin' else 'a rater'}.")
