"""In a real browser, the rater's hour on the rating screen at 1280x800: "?" opens the
category definitions from a grid cell and Esc closes them with the focus back in the cell,
the pair unchanged; "?" typed in a text field is a character; the Definitions button opens
the same panel; a flag with a note survives a reload and is stored as the rater's own; the
new header controls sit above the grid; the break reminder shows after 50 min of rating in
the header without moving the grid down, and Dismiss hides it."""

from __future__ import annotations

import datetime as dt

import pytest
from playwright.sync_api import expect

from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import flags
from radconcord.backend.services.annotation.activity import SpanInput, record_spans
from radconcord.db.session import Database
from tests.e2e.conftest import RATER, RATER_PASSWORD, cell, grid_of, log_in, wait_for_cookie

pytestmark = pytest.mark.browser

OMISSION = "Omission of finding (clinically significant)"
PANEL = "Error categories (ReXVal)"
NOTE = "Unsure: is the effusion size a category 4 error?"


def _pair_of(page) -> str:
    page.wait_for_function("() => new URL(location.href).searchParams.get('pair')")
    return page.evaluate("() => new URL(location.href).searchParams.get('pair')")


def _rater_page(browser, url):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(url)
    log_in(page, RATER, RATER_PASSWORD)
    page.get_by_text("Candidate report").wait_for()
    wait_for_cookie(page)
    pair = _pair_of(page)
    grid_of(page, pair).wait_for()
    return context, page, pair


def _flag_of(data, pair):
    db = Database(f"sqlite:///{data / 'e2e.db'}", migrate=False)
    try:
        actor = auth.authenticate(db, username=RATER, password=RATER_PASSWORD)
        return flags.pair_flag(db, actor, opaque_id=pair)
    finally:
        db.dispose()


def test_question_mark_opens_the_definitions_and_esc_closes_them(server, browser):
    url, _ = server
    context, page, pair = _rater_page(browser, url)
    try:
        panel = page.get_by_role("dialog", name=PANEL)
        expect(panel).to_be_hidden()
        target = cell(page, OMISSION)
        target.click()
        expect(target).to_be_focused()
        page.keyboard.press("?")
        expect(panel).to_be_visible()
        expect(panel).to_contain_text("False prediction of finding")
        expect(panel).to_contain_text("Omission of comparison describing a change")
        expect(panel).to_contain_text("Example:")
        expect(panel).to_contain_text("Clinically significant")
        # The grid cell took no "?" and nothing reran: same pair, same value.
        expect(target).to_have_value("0")
        page.keyboard.press("Escape")
        expect(panel).to_be_hidden()
        expect(target).to_be_focused()
        assert _pair_of(page) == pair
        # The header button opens the same panel; its close button closes it.
        page.get_by_role("button", name="Definitions").click()
        expect(panel).to_be_visible()
        page.get_by_role("button", name="Close the definitions (Esc)").click()
        expect(panel).to_be_hidden()
        # The new header controls sit above the grid (the grid is not pushed down).
        grid_top = grid_of(page, pair).bounding_box()["y"]
        for name in ("Definitions", "Flag"):
            box = page.get_by_role("button", name=name).first.bounding_box()
            assert box["y"] + box["height"] <= grid_top, (name, box, grid_top)
    finally:
        context.close()


def test_a_flag_with_a_note_survives_a_reload(server, browser):
    url, data = server
    context, page, pair = _rater_page(browser, url)
    try:
        assert not _flag_of(data, pair).flagged
        page.get_by_role("button", name="Flag", exact=True).click()
        note = page.get_by_label("Note (optional)")
        note.fill(NOTE)
        # "?" while typing is a character, not the definitions.
        note.press("?")
        expect(page.get_by_role("dialog", name=PANEL)).to_be_hidden()
        expect(note).to_have_value(NOTE + "?")
        note.press("Backspace")
        page.get_by_role("button", name="Flag this pair").click()
        expect(page.get_by_role("button", name="Flagged")).to_be_visible()
        page.reload()
        grid_of(page, pair).wait_for()
        flagged = page.get_by_role("button", name="Flagged")
        expect(flagged).to_be_visible()
        flagged.click()
        expect(page.get_by_label("Note (optional)")).to_have_value(NOTE)
        stored = _flag_of(data, pair)
        assert stored.flagged and stored.note == NOTE
    finally:
        context.close()


def test_the_break_reminder_keeps_the_grid_in_place_and_is_dismissed(server, browser):
    # Last in the module: the spans it stores make the reminder due for rater1.
    url, data = server
    context, page, pair = _rater_page(browser, url)
    try:
        page.reload()
        grid_of(page, pair).wait_for()
        expect(page.get_by_role("progressbar")).to_be_visible()
        before = grid_of(page, pair).bounding_box()["y"]
        db = Database(f"sqlite:///{data / 'e2e.db'}", migrate=False)
        try:
            actor = auth.authenticate(db, username=RATER, password=RATER_PASSWORD)
            now = dt.datetime.now(dt.UTC)
            start = now - dt.timedelta(minutes=58)
            spans = [SpanInput(pair, start + dt.timedelta(minutes=5 * i),
                               start + dt.timedelta(minutes=5 * i + 5), 4) for i in range(11)]
            assert not record_spans(db, actor, client_id="break-test-1", spans=spans,
                                    now=now).refused
        finally:
            db.dispose()
        page.reload()
        reminder = page.get_by_text("A short break helps accuracy.")
        expect(reminder).to_be_visible()
        expect(reminder).to_contain_text("You've been rating for 5")
        grid_of(page, pair).wait_for()
        box = grid_of(page, pair).bounding_box()
        assert box["y"] <= before + 2, (box, before)  # in the progress line's place
        page.get_by_role("button", name="Dismiss").click()
        expect(reminder).to_have_count(0)
        expect(page.get_by_role("progressbar")).to_be_visible()
    finally:
        context.close()
