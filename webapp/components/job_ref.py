"""Which job a page is showing, kept in the session and in the URL.

A page that queues a job remembers its id under a key in ``st.session_state`` and in the
query parameters (``?<key>=<id>``), so a reload (a new browser session) or a shared link
finds the job again and shows its progress or result.
"""

from __future__ import annotations

import re

import streamlit as st

from radconcord.backend.util import is_db_id


def remember(key: str, job_id: int) -> None:
    """Make ``job_id`` the job this page shows under ``key``."""
    st.session_state[key] = int(job_id)
    st.query_params[key] = str(int(job_id))


def forget(key: str) -> None:
    """Stop showing a job under ``key``."""
    st.session_state.pop(key, None)
    if key in st.query_params:
        del st.query_params[key]


def current(key: str) -> int | None:
    """The job shown under ``key``: from the session, else from the URL (a reload)."""
    value = st.session_state.get(key)
    if value is None:
        raw = st.query_params.get(key)
        if raw is None or not re.fullmatch(r"[0-9]+", str(raw)) or not is_db_id(int(raw)):
            return None
        value = int(raw)
        st.session_state[key] = value
    return int(value)
