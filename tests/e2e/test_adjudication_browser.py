"""In a real browser: an adjudicator opens the queue, records consensus counts with a note,
and a reload shows the stored consensus (issue 14)."""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import expect

from radconcord.backend.services.accounts import auth
from radconcord.backend.services.accounts.seed import DEMO_STUDY
from radconcord.backend.services.annotation import rating
from radconcord.backend.services.quality import adjudication
from radconcord.backend.types import Actor
from radconcord.db.session import Database
from tests.e2e.conftest import (
    RATER,
    RATER_PASSWORD,
    drop_constructed_ratings,
    log_in,
    wait_for_cookie,
)

pytestmark = pytest.mark.browser

RATER2, RATER2_PASSWORD = "rater2", "radconcord-rater2"
JUDGE, JUDGE_PASSWORD = "judge", "judge-password-1"


def _db(data) -> Database:
    return Database(f"sqlite:///{data / 'e2e.db'}", migrate=False)


def _wait_for_demo(data, timeout_s: float = 60) -> None:
    """The app seeds the demo study on its first page load; wait until it is there."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            db = _db(data)
            try:
                if DEMO_STUDY in adjudication.adjudicated_studies(db, Actor.system()):
                    return
            finally:
                db.dispose()
        except Exception:  # noqa: BLE001 - the file or its tables may not exist yet
            pass
        if time.monotonic() > deadline:
            pytest.fail("the demo study was not seeded")
        time.sleep(0.5)


def _dispute_first_pair(data) -> str:
    """rater1 counts 2 significant false findings on their first pair, rater2 none; a judge.

    The demo's constructed raters disagree on pairs of their own: they go, so the queue is
    exactly this one dispute."""
    drop_constructed_ratings(data)
    db = _db(data)
    try:
        r1 = auth.authenticate(db, username=RATER, password=RATER_PASSWORD)
        r2 = auth.authenticate(db, username=RATER2, password=RATER2_PASSWORD)
        pair = rating.rater_queue(db, r1, study_name=DEMO_STUDY)[0].opaque_id
        saved = rating.set_counts(db, r1, opaque_id=pair, cells={(1, True): 2},
                                  expected_version=None)
        rating.complete_pair(db, r1, opaque_id=pair, expected_version=saved.version)
        rating.complete_pair(db, r2, opaque_id=pair, confirm_zero=True)
        auth.create_user(db, Actor.system(), username=JUDGE, password=JUDGE_PASSWORD,
                         role="rater")
        adjudication.set_adjudicator(db, Actor.system(), study_name=DEMO_STUDY,
                                     username=JUDGE)
        return pair
    finally:
        db.dispose()


def _stored(data, pair: str) -> adjudication.Consensus | None:
    db = _db(data)
    try:
        return adjudication.get_item(db, Actor.system(), study_name=DEMO_STUDY,
                                     opaque_id=pair).consensus
    finally:
        db.dispose()


def test_an_adjudicator_records_consensus_and_a_reload_shows_it(server, browser):
    url, data = server
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(url)
    page.get_by_label("Username", exact=True).wait_for()
    _wait_for_demo(data)
    pair = _dispute_first_pair(data)

    log_in(page, JUDGE, JUDGE_PASSWORD)
    wait_for_cookie(page)
    # The judge rates nothing: the Adjudicate page is their start page.
    expect(page.get_by_role("heading", name="Adjudicate")).to_be_visible()
    expect(page.get_by_text("1 pair(s) in the queue, 0 adjudicated.")).to_be_visible()
    # The raters' table is a canvas grid; its accessible header names the anonymised raters.
    expect(page.get_by_role("columnheader", name="Rater B", include_hidden=True)
           ).to_have_count(1)
    page.wait_for_function(
        f"() => new URL(location.href).searchParams.get('pair') === '{pair}'")
    # All twelve cells of the raters' table are drawn at once (no scrolling inside a
    # ten-row grid that hides category 6): header + 12 rows of 35 px.
    table = page.get_by_test_id("stDataFrame").nth(1)  # the queue, then the raters
    table.scroll_into_view_if_needed()
    box = table.bounding_box()
    assert box is not None and box["height"] >= 13 * 35, box

    significant_1 = page.get_by_label("1 significant", exact=True)
    expect(significant_1).to_have_value("1")  # the rounded mean of 2 and 0
    significant_1.fill("2")
    page.get_by_label("Note (required when the consensus is none of the raters' counts)"
                      ).fill("both false findings are real")
    page.get_by_role("button", name="Save consensus").click()
    expect(page.get_by_text("Consensus saved (version 1).")).to_be_visible()

    stored = _stored(data, pair)
    assert stored is not None and stored.version == 1
    assert stored.counts[(1, True)] == 2 and stored.note == "both false findings are real"
    assert stored.adjudicator == JUDGE

    page.reload()
    expect(page.get_by_text("1 pair(s) in the queue, 1 adjudicated.")).to_be_visible()
    expect(page.get_by_label("1 significant", exact=True)).to_have_value("2")
    expect(page.get_by_label(
        "Note (required when the consensus is none of the raters' counts)")).to_have_value(
        "both false findings are real")
    expect(page.get_by_text(f"Stored consensus by {JUDGE}, version 1")).to_be_visible()
    context.close()
