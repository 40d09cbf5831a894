"""Every logged-in user: "My account", where one changes one's own password.

An account created or reset with a one-time password sees only this page (the router offers
nothing else) until its owner has chosen a new password here.
"""

from __future__ import annotations

import streamlit as st

from radconcord.backend.services.accounts import auth
from radconcord.webapp import state

actor = state.require_actor()
db = state.get_db()

# One-off outcome of the change, drawn by the next run (the change reruns the whole app so
# that the router offers the pages a pending password change held back).
FLASH_KEY = "account_flash"

st.title("My account")
st.caption(f"Logged in as **{actor.username}** ({actor.role}).")

flash = st.session_state.pop(FLASH_KEY, None)
if flash:
    st.success(flash)

must_change = state.must_change_password()
if must_change:
    st.warning("Your password was set by the study lead (a one-time password). Choose your "
               "own password before continuing: the other pages open once it is changed.",
               icon=":material/lock_reset:")

with st.form("change_password", clear_on_submit=True):
    st.subheader("Change password")
    current = st.text_input("Current password", type="password", key="account_current",
                            autocomplete="current-password")
    new = st.text_input("New password", type="password", key="account_new",
                        autocomplete="new-password",
                        help=f"At least {auth.MIN_PASSWORD_LENGTH} characters; not your "
                             "username, not the current password, not a demo password.")
    repeat = st.text_input("New password again", type="password", key="account_repeat",
                           autocomplete="new-password")
    submitted = st.form_submit_button("Change password", type="primary")

if submitted:
    if not current:
        st.error("current password: please enter it")
        st.stop()
    if new != repeat:
        st.error("new password: the two entries differ; type it again")
        st.stop()
    state.call(auth.change_own_password, db, actor, current_password=current,
               new_password=new, keep_session_id=state.current_session_id())
    st.session_state[FLASH_KEY] = (
        "Password changed. Any other browser logged in to this account has been logged out."
        + (" You can now use the other pages." if must_change else ""))
    st.rerun()
