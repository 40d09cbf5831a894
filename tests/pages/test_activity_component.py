"""AppTest: the rating page's time-on-task tracker is mounted hidden, with the pair on screen,
the activity route and the idle cut of the server's settings (never a database id)."""

from __future__ import annotations

import json

from streamlit.testing.v1 import AppTest

SCRIPT = """
from radconcord.webapp.components.activity import activity_tracker
activity_tracker("pair-7f3a")
"""


def test_tracker_is_mounted_hidden_with_the_pair_and_the_rules(monkeypatch):
    monkeypatch.setenv("RADCONCORD_IDLE_CUT_S", "4")
    monkeypatch.setenv("RADCONCORD_ACTIVITY_FLUSH_S", "2.5")
    at = AppTest.from_string(SCRIPT).run()
    assert not at.exception
    (element,) = at.get("bidi_component")
    assert element.proto.component_name == "radconcord_activity"
    assert "export default function activityTracker" in element.proto.js_content
    data = json.loads(element.proto.json)
    assert {k: data[k] for k in ("pair", "url", "idle_ms", "flush_ms")} == {
        "pair": "pair-7f3a", "url": "/_rc/api/activity", "idle_ms": 4000, "flush_ms": 2500}
    assert isinstance(data["server_now_ms"], int)
    assert data["account"] is None  # nobody logged in: spans measured here go nowhere
    # The element sits in a container hidden by CSS: it takes no room on the page.
    styles = [h.proto.body for h in at.get("html")]
    assert any(".st-key-rc_activity {display: none;}" in body for body in styles)


def test_tracker_names_the_account_it_measures_for(monkeypatch):
    from radconcord.backend.services.annotation import activity
    from radconcord.backend.types import Actor
    from radconcord.webapp.components.activity import tracker_data

    rita = Actor(user_id=7, username="rita", role="rater")
    data = tracker_data("p1", rita)
    assert data["account"] == activity.account_tag(rita) != activity.account_tag(
        Actor(user_id=8, username="ravi", role="rater"))
