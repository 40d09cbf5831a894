"""Invisible time-on-task tracker of the rating page (a Streamlit v2 component, no iframe).

``activity_tracker(pair_key)`` mounts ``activity/activity.js`` once per page load; it watches
the rater's own events on ``document`` in the capture phase (keys, pointer presses and moves,
wheel, input; window focus and blur; tab visibility) and sends the active spans of the pair
on screen to
``POST _rc/api/activity`` (``webapp/api/activity.py``), which stores them through
``backend.services.annotation.activity``. The rules (idle cut ``RADCONCORD_IDLE_CUT_S``, default 30
s;
nothing while the tab is hidden or the window blurred; time to the pair on screen) are
documented there. The element takes no room on the page; draw it on every run of the rating
page with the pair's opaque id (the id the rater sees, never a database id).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import streamlit as st

from radconcord.backend.services.annotation import activity
from radconcord.backend.types import Actor
from radconcord.webapp import api, state

JS_FILE = Path(__file__).with_name("activity") / "activity.js"
NAME = "radconcord_activity"
CONTAINER = "rc_activity"  # CSS class st-key-rc_activity: hidden

_component = st.components.v2.component(NAME, js=JS_FILE.read_text(encoding="utf-8"))


def tracker_data(pair_key: str | None, actor: Actor | None = None) -> dict[str, Any]:
    """What the browser side gets: the pair on screen, the account it is measured for, the
    route, the clock and the rules."""
    if actor is None:
        found = st.session_state.get(state.ACTOR_KEY)
        actor = found if isinstance(found, Actor) else None
    return {
        "pair": pair_key or None,
        # Spans are tagged with it: kept through a logout, they are never sent for the next
        # account that logs in at the same browser.
        "account": activity.account_tag(actor) if actor is not None else None,
        "url": api.url(str(st.get_option("server.baseUrlPath") or ""), "activity"),
        "idle_ms": round(activity.idle_cut_seconds() * 1000),
        "flush_ms": round(activity.flush_seconds() * 1000),
        # The page's clock is set to the server's, so spans of two tabs line up and are
        # checked against the server's time.
        "server_now_ms": round(time.time() * 1000),
    }


def activity_tracker(pair_key: str | None, actor: Actor | None = None) -> None:
    """Attribute the rater's active time to ``pair_key`` (``None``: no pair on screen).

    Draw it on every run of the rating page (not inside a fragment that a change of pair
    does not rerun), with the same call site, so the element stays mounted between pairs.

    Args:
        pair_key: The opaque id of the pair on screen.
        actor: The logged-in rater (default: the one of this browser session).
    """
    st.html(f"<style>.st-key-{CONTAINER} {{display: none;}}</style>")
    with st.container(key=CONTAINER):
        _component(key="rc_activity_tracker", data=tracker_data(pair_key, actor))
