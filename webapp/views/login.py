"""Login page: username and password checked by ``backend.services.auth.authenticate``."""

from __future__ import annotations

import streamlit as st

from backend.services import auth
from webapp import state

# A reload starts a new browser session on the login page; keep the URL's query parameters
# (e.g. the pair being rated) so that logging in returns to where the user was.
if state.RETURN_PARAMS_KEY not in st.session_state:
    st.session_state[state.RETURN_PARAMS_KEY] = st.query_params.to_dict()

_, middle, _ = st.columns([1, 1.2, 1])
with middle:
    st.title("RadConcord")
    st.caption("Rate radiology report pairs. Please log in with the account you were given.")
    with st.form("login", border=True):
        username = st.text_input("Username", key="login_username", autocomplete="username")
        password = st.text_input("Password", type="password", key="login_password",
                                 autocomplete="current-password")
        submitted = st.form_submit_button("Log in", type="primary", width="stretch")

    if submitted:
        actor = auth.authenticate(state.get_db(), username=username.strip(), password=password)
        if actor is None:
            st.error("Unknown username or wrong password.")
        else:
            params = st.session_state.pop(state.RETURN_PARAMS_KEY, {}) or {}
            state.login(actor)
            st.query_params.from_dict(params)
            st.rerun()
