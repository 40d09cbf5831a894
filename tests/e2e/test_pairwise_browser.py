"""In a real browser at 1280x800: a rater of a pairwise study records a preference and both
1-5 ratings with the keyboard only (B, 4, Shift+2), marks the comparison done (Ctrl+Enter),
and a reload shows what was stored."""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import expect

from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import pairwise
from radconcord.backend.services.study_admin import study_settings
from radconcord.backend.services.transfer import imports
from radconcord.backend.types import Actor, CandidateInput, CaseInput
from radconcord.db.session import Database
from tests.e2e.conftest import log_in, start_server, wait_for_idle

pytestmark = pytest.mark.browser

STUDY = "Pairwise browser study"
RATER, PASSWORD = "pia", "pia-password-e2e"
SECRETS = ("sys-hidden-one", "sys-hidden-two")


def _db(data) -> Database:
    return Database(f"sqlite:///{data / 'e2e.db'}", migrate=False)


def _set_up(data) -> None:
    db = _db(data)
    system = Actor.system()
    try:
        imports.import_cases(db, system, study_name=STUDY, cases=[
            CaseInput(case_id=f"pw-{i}", reference=f"Reference {i}: small left effusion.",
                      candidates=[CandidateInput(text=f"Left effusion, case {i}.",
                                                 source=SECRETS[0]),
                                  CandidateInput(text=f"No effusion, case {i}.",
                                                 source=SECRETS[1])])
            for i in range(2)])
        study_settings.update_study_settings(db, system, study_name=STUDY,
                                             annotation_mode="pairwise")
        pairwise.make_comparisons(db, system, STUDY, seed=0)
        auth.create_user(db, system, username=RATER, password=PASSWORD, role="rater")
        pairwise.assign_judgements(db, system, STUDY, [RATER], 1, 0)
    finally:
        db.dispose()


def _stored(data, opaque_id):
    db = _db(data)
    try:
        actor = auth.authenticate(db, username=RATER, password=PASSWORD)
        return pairwise.get_comparison(db, actor, opaque_id)
    finally:
        db.dispose()


def _shown(page, text: str) -> None:
    expect(page.get_by_text(text)).to_be_visible(timeout=30_000)


def _wait_for(data, opaque_id, check, timeout_s=30):
    deadline = time.monotonic() + timeout_s
    while True:
        view = _stored(data, opaque_id)
        if check(view) or time.monotonic() > deadline:
            return view
        time.sleep(0.2)


def _open_compare(browser, url):
    """Log the rater in at 1280x800; (context, page, opaque id of the comparison shown)."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(url)
    log_in(page, RATER, PASSWORD)
    page.get_by_text("Candidate A", exact=True).wait_for()
    page.wait_for_function("() => new URL(location.href).searchParams.get('comparison')")
    first = page.evaluate("() => new URL(location.href).searchParams.get('comparison')")
    return context, page, first


def _seconds_on(data, opaque_id) -> float:
    from sqlalchemy import select

    from radconcord.db.models import Comparison, Judgement

    db = _db(data)
    try:
        with db.read() as s:
            return float(s.scalar(select(Judgement.active_seconds).join(Comparison)
                                  .where(Comparison.opaque_id == opaque_id)) or 0.0)
    finally:
        db.dispose()


def test_keyboard_preference_and_ratings_are_stored_and_shown_after_reload(browser,
                                                                          tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    # Spans sent every second: the rater's time on this comparison reaches the judgement.
    with start_server(data, {"RADCONCORD_ACTIVITY_FLUSH_S": "1"}) as (url, _):
        _set_up(data)
        context, page, first = _open_compare(browser, url)
        body = page.locator("body").inner_text()
        assert not any(secret in body for secret in SECRETS)
        # Nothing is under the top navigation bar: the title and the buttons beside it
        # start below it.
        bar = page.get_by_test_id("stHeader").bounding_box()
        for item in (page.get_by_role("heading", name="Comparison 1 of 2"),
                     page.get_by_role("button", name="Mark done")):
            box = item.first.bounding_box()
            assert box is not None and box["y"] >= bar["y"] + bar["height"], (box, bar)
        # Everything the rater needs is on one 1280x800 screen.
        for name in ("B is better", "Mark done"):
            box = page.get_by_role("button", name=name).first.bounding_box()
            assert box is not None and box["y"] + box["height"] <= 800, (name, box)

        page.get_by_text("Reference report").click()  # focus on no button or field
        wait_for_idle(page)  # the buttons' key handlers are bound
        page.keyboard.press("b")
        view = _wait_for(data, first, lambda v: v.preference == "B")
        assert view.preference == "B"
        _shown(page, "Which candidate is better overall? B is better")
        page.keyboard.press("4")
        assert _wait_for(data, first, lambda v: v.rating_a == 4).rating_a == 4
        _shown(page, "Overall rating of A (1 poor - 5 excellent): 4")
        page.keyboard.press("Shift+2")
        assert _wait_for(data, first, lambda v: v.rating_b == 2).rating_b == 2
        _shown(page, "Overall rating of B (1 poor - 5 excellent): 2")
        # Time on task of the Compare screen: the keys above were activity on this one.
        deadline = time.monotonic() + 30
        while _seconds_on(data, first) <= 0 and time.monotonic() < deadline:
            time.sleep(0.25)
        assert 0 < _seconds_on(data, first) < 120

        page.reload()
        _shown(page, "Which candidate is better overall? B is better")
        _shown(page, "Overall rating of A (1 poor - 5 excellent): 4")
        _shown(page, "Overall rating of B (1 poor - 5 excellent): 2")
        assert page.evaluate(
            "() => new URL(location.href).searchParams.get('comparison')") == first

        page.get_by_text("Reference report").click()  # focus on no button or field
        wait_for_idle(page)  # the buttons' key handlers are bound
        page.keyboard.press("Control+Enter")
        done = _wait_for(data, first, lambda v: v.completed_at is not None)
        assert (done.preference, done.rating_a, done.rating_b) == ("B", 4, 2)
        assert done.completed_at is not None
        _shown(page, "Comparison 1 of 2 marked done.")
        context.close()


def test_fast_typing_keeps_every_key_and_b_ratings_show_their_digit(browser, tmp_path):
    """A rater who types the whole answer in one go (a fifth of a second between keys, faster
    than the page redraws) loses no key and is not told that "another window" changed the
    comparison: their own saves are not stale, and keys that reach one run are all handled."""
    data = tmp_path / "data"
    data.mkdir()
    with start_server(data) as (url, _):
        _set_up(data)
        context, page, first = _open_compare(browser, url)
        # The digit of every B rating button is on screen beside its Shift+N hint.
        for value in range(1, 6):
            digit = page.locator(f".st-key-rate_b_{value} [data-testid='stMarkdownContainer']")
            box = digit.bounding_box()
            assert box is not None and box["width"] >= 4, (value, box)
            assert digit.inner_text().strip() == str(value)

        page.get_by_text("Reference report").click()  # focus on no button or field
        wait_for_idle(page)  # the buttons' key handlers are bound
        for key in ("b", "4", "Shift+2", "Control+Enter"):
            page.keyboard.press(key)
            time.sleep(0.2)
        done = _wait_for(data, first, lambda v: v.completed_at is not None)
        assert (done.preference, done.rating_a, done.rating_b) == ("B", 4, 2)
        _shown(page, "Comparison 1 of 2 marked done.")
        assert "another window" not in page.locator("body").inner_text()
        context.close()
