"""In a real browser: a rater of a per-error records study marks two error spans (one with the
keyboard only, one with the mouse) and an omission; the grid shows the derived counts after
each save and after a reload, the database holds the records with the candidate's own text,
and deleting a record (Delete on the word) derives the counts again."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from radconcord.backend.services.accounts import auth
from radconcord.backend.services.accounts.seed import DEMO_STUDY
from radconcord.backend.services.annotation import error_records, rating
from radconcord.backend.services.study_admin import study_settings
from radconcord.backend.types import Actor
from radconcord.db.session import Database
from tests.e2e.conftest import RATER, RATER_PASSWORD, cell, log_in, wait_for_cookie

pytestmark = pytest.mark.browser

FALSE_PRED = "False prediction of finding (clinically significant)"
SEVERITY = "Incorrect severity of finding (clinically insignificant)"
OMISSION = "Omission of finding (clinically insignificant)"
SAVED = re.compile(r"^Saved \d\d:\d\d:\d\d$")


def _db(data) -> Database:
    return Database(f"sqlite:///{data / 'e2e.db'}", migrate=False)


def _stored(data, pair: str) -> error_records.PairRecords:
    db = _db(data)
    try:
        actor = auth.authenticate(db, username=RATER, password=RATER_PASSWORD)
        return error_records.list_records(db, actor, opaque_id=pair)
    finally:
        db.dispose()


def _candidate(data, pair: str) -> str:
    db = _db(data)
    try:
        actor = auth.authenticate(db, username=RATER, password=RATER_PASSWORD)
        return rating.get_pair(db, actor, opaque_id=pair).candidate_text
    finally:
        db.dispose()


def test_marking_errors_derives_the_counts_shown_by_the_grid(server, browser):
    url, data = server
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(url)
    page.get_by_label("Username", exact=True).wait_for()  # the app has seeded the demo
    db = _db(data)
    try:
        study_settings.update_study_settings(db, Actor.system(), study_name=DEMO_STUDY,
                                             annotation_mode="error_records")
    finally:
        db.dispose()
    log_in(page, RATER, RATER_PASSWORD)
    wait_for_cookie(page)
    panel = page.locator(".rc-er")
    expect(panel).to_be_visible()
    page.wait_for_function("() => new URL(location.href).searchParams.get('pair')")
    pair = page.evaluate("() => new URL(location.href).searchParams.get('pair')")
    candidate = _candidate(data, pair)
    words = panel.locator(".rc-er-word")
    texts = words.all_inner_texts()
    assert texts, "the candidate's words are selectable"
    # The panel and the grid fit beside the film at 1280x800.
    box = panel.bounding_box()
    assert box is not None and box["x"] + box["width"] <= 1280

    # 1) Keyboard only: focus the words, select the first two, category 1, significant, Enter.
    panel.locator(".rc-er-box").focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("Shift+ArrowRight")
    page.keyboard.press("1")
    page.keyboard.press("s")
    page.keyboard.press("Enter")
    expect(panel.locator(".rc-er-state")).to_have_text(SAVED)
    expect(panel.locator(".rc-er-item")).to_have_count(1)
    # The page reran: the grid shows the derived count.
    expect(cell(page, FALSE_PRED)).to_have_value("1")

    # 2) Mouse: press on the fourth word, Shift+click the fifth, category 4, a note, Save.
    words.nth(3).click()
    words.nth(4).click(modifiers=["Shift"])
    panel.get_by_role("button", name=re.compile(r"^Category 4")).click()
    panel.get_by_label("Note").fill("overstated")
    panel.get_by_role("button", name="Save error").click()
    expect(panel.locator(".rc-er-item")).to_have_count(2)
    expect(cell(page, SEVERITY)).to_have_value("1")

    # 3) An omission against a sentence of the reference, by keyboard. The words box kept
    # the focus through the save and the page's rerun: no click needed.
    page.keyboard.press("o")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("2")
    page.keyboard.press("Enter")
    expect(panel.locator(".rc-er-item")).to_have_count(3)
    expect(cell(page, OMISSION)).to_have_value("1")

    stored = _stored(data, pair)
    spans = [r for r in stored.records if r.kind == "span"]
    assert [(r.category, r.significant) for r in spans] == [(1, True), (4, False)]
    first, second = spans
    assert first.candidate_text == candidate[first.candidate_start:first.candidate_end]
    # The arrows step from word to word (past punctuation): the first two words.
    words_only = [w for w in texts if any(ch.isalnum() for ch in w)]
    assert first.candidate_text.startswith(words_only[0])
    assert first.candidate_text.endswith(words_only[1])
    assert second.candidate_text.startswith(texts[3]) and second.note == "overstated"
    assert stored.counts[(1, True)] == stored.counts[(4, False)] == stored.counts[(2, False)] == 1

    # After a reload the grid shows the derived counts and the panel the records.
    page.reload()
    expect(panel.locator(".rc-er-item")).to_have_count(3)
    expect(cell(page, OMISSION)).to_have_value("1")
    expect(cell(page, SEVERITY)).to_have_value("1")
    expect(cell(page, FALSE_PRED)).to_have_value("1")

    # Delete on a marked word removes its record; the grid follows.
    panel.locator(".rc-er-box").focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("Delete")
    expect(panel.locator(".rc-er-item")).to_have_count(2)
    expect(cell(page, FALSE_PRED)).to_have_value("0")
    assert _stored(data, pair).counts[(1, True)] == 0
    context.close()
