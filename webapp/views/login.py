"""Login page: ``backend.services.accounts.sessions.login`` (password, throttling, known
passwords)."""

from __future__ import annotations

import streamlit as st

from radconcord.backend.services.accounts import sessions
from radconcord.webapp import state

# A reload starts a new browser session on the login page; keep the URL's query parameters
# (e.g. the pair being rated) so that logging in returns to where the user was.
if state.RETURN_PARAMS_KEY not in st.session_state:
    st.session_state[state.RETURN_PARAMS_KEY] = st.query_params.to_dict()

db = state.get_db()

_, middle, _ = st.columns([1, 1.2, 1])
with middle:
    st.title("RadConcord")
    st.caption("Rate radiology report pairs. Please log in with the account you were given.")
    # Kept until the next login (state.login drops it): a rerun of this page keeps it.
    notice = st.session_state.get(state.NOTICE_KEY)
    if notice:
        st.info(notice, icon=":material/logout:")
    if not sessions.any_account(db):
        st.warning(
            "This server has no account yet. On the server, create the first admin with\n\n"
            "`python -m backend create-user --role admin --username NAME`\n\n"
            "which prints a one-time password to replace at the first login here. The demo "
            "accounts are only created for a server that listens on 127.0.0.1 alone "
            "(scripts/run-app.sh).",
            icon=":material/person_add:")
    with st.form("login", border=True):
        username = st.text_input("Username", key="login_username", autocomplete="username")
        password = st.text_input("Password", type="password", key="login_password",
                                 autocomplete="current-password")
        submitted = st.form_submit_button("Log in", type="primary", width="stretch")

    if submitted:
        client = state.current_client()
        try:
            actor = sessions.login(db, username=username, password=password, client=client)
        except sessions.LoginLocked as exc:
            st.error(str(exc), icon=":material/lock_clock:")
        except sessions.LoginRefused as exc:
            st.error(str(exc))
        else:
            params = st.session_state.pop(state.RETURN_PARAMS_KEY, {}) or {}
            state.login(actor, client)
            st.query_params.from_dict(params)
            st.rerun()
