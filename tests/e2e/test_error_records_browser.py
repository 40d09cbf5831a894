"""In a real browser: a rater of a per-error records study marks two error spans (one with the
keyboard only, one with the mouse) and an omission; the grid shows the derived counts after
each save and after a reload, the database holds the records with the candidate's own text,
and deleting a record (Delete on the word) derives the counts again.

Significance (issue 24): it is a visible state with no default, set by S or I (or its
buttons), cleared by every save, stored or refused; a refused save says why in the panel.
The demo study's constructed ratings lock it to counts: ``demo_in_error_records`` removes
them and switches it to per-error records."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import error_records, rating
from radconcord.db.session import Database
from tests.e2e.conftest import (
    RATER,
    RATER_PASSWORD,
    cell,
    demo_in_error_records,
    log_in,
    wait_for_cookie,
)

pytestmark = pytest.mark.browser

FALSE_PRED = "False prediction of finding (clinically significant)"
SEVERITY = "Incorrect severity of finding (clinically insignificant)"
OMISSION = "Omission of finding (clinically insignificant)"
SAVED = re.compile(r"^Saved \d\d:\d\d:\d\d$")
RATER2, RATER2_PASSWORD = "rater2", "radconcord-rater2"
SHOTS = os.environ.get("RADCONCORD_SHOTS")  # a folder: screenshots to look at by eye


def _db(data) -> Database:
    return Database(f"sqlite:///{data / 'e2e.db'}", migrate=False)


def _stored(data, pair: str, user: str = RATER,
            password: str = RATER_PASSWORD) -> error_records.PairRecords:
    db = _db(data)
    try:
        actor = auth.authenticate(db, username=user, password=password)
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
    demo_in_error_records(data)
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
    # Saved: the next error starts with no significance chosen.
    expect(panel.locator(".rc-er-sigs")).to_have_attribute("data-state", "unset")
    expect(panel.locator(".rc-er-item")).to_have_count(1)
    # The page reran: the grid shows the derived count.
    expect(cell(page, FALSE_PRED)).to_have_value("1")

    # 2) Mouse: press on the fourth word, Shift+click the fifth, category 4, a note, Save.
    words.nth(3).click()
    words.nth(4).click(modifiers=["Shift"])
    panel.get_by_role("button", name=re.compile(r"^Category 4")).click()
    panel.get_by_role("button", name="Insignificant (I)").click()
    panel.get_by_label("Note").fill("overstated")
    panel.get_by_role("button", name="Save error").click()
    expect(panel.locator(".rc-er-item")).to_have_count(2)
    expect(cell(page, SEVERITY)).to_have_value("1")

    # 3) An omission against a sentence of the reference, by keyboard. The words box kept
    # the focus through the save and the page's rerun: no click needed.
    page.keyboard.press("o")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("2")
    page.keyboard.press("i")
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


def test_a_refused_save_says_why_and_leaves_no_significance_for_the_next_error(server, browser):
    """Issue 24: S pressed for a save that was refused (category 2 on words of the candidate)
    stayed on, so the S of the next error toggled it off and that error was stored as
    insignificant. Now the refusal says why, the significance is shown cleared, and the next
    error marked S is stored significant."""
    url, data = server
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(url)
    page.get_by_label("Username", exact=True).wait_for()
    demo_in_error_records(data)  # once is enough; again changes nothing
    log_in(page, RATER2, RATER2_PASSWORD)
    wait_for_cookie(page)
    panel = page.locator(".rc-er")
    expect(panel).to_be_visible()
    page.wait_for_function("() => new URL(location.href).searchParams.get('pair')")
    pair = page.evaluate("() => new URL(location.href).searchParams.get('pair')")
    before = len(_stored(data, pair, RATER2, RATER2_PASSWORD).records)
    significance = panel.locator(".rc-er-sigs")
    yes = panel.get_by_role("button", name="Significant (S)")
    no = panel.get_by_role("button", name="Insignificant (I)")
    why = panel.locator(".rc-er-why")
    # A new error: no significance chosen, and that is shown.
    expect(yes).to_be_visible()
    expect(no).to_be_visible()
    expect(significance).to_have_attribute("data-state", "unset")
    expect(yes).to_have_attribute("aria-pressed", "false")
    expect(no).to_have_attribute("aria-pressed", "false")
    expect(why).to_be_hidden()

    # Words of the candidate, category 2 (an omission), S, Enter: refused, with the reason.
    panel.locator(".rc-er-box").focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("2")
    page.keyboard.press("s")
    expect(yes).to_have_attribute("aria-pressed", "true")
    expect(significance).to_have_attribute("data-state", "significant")
    expect(panel.locator(".rc-er-summary")).to_contain_text("clinically significant")
    page.keyboard.press("Enter")
    expect(why).to_be_visible()
    expect(why).to_contain_text("Not saved: category 2 is an omission: press O on a reference "
                                "sentence")
    expect(panel.locator(".rc-er-state")).to_have_text("Not saved")
    # The refused save took its significance with it: shown cleared.
    expect(significance).to_have_attribute("data-state", "unset")
    expect(yes).to_have_attribute("aria-pressed", "false")
    expect(panel.locator(".rc-er-summary")).to_contain_text("significance not chosen")
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / "error_records_refused_1280x800.png"))
    assert len(_stored(data, pair, RATER2, RATER2_PASSWORD).records) == before

    # Enter with no significance chosen is refused too, and says so.
    page.keyboard.press("1")
    expect(why).to_be_hidden()  # a new choice answers the refusal
    page.keyboard.press("Enter")
    expect(why).to_contain_text("choose the significance: S clinically significant, "
                                "I insignificant")
    assert len(_stored(data, pair, RATER2, RATER2_PASSWORD).records) == before

    # The next error, marked significant, is stored significant.
    page.keyboard.press("s")
    expect(significance).to_have_attribute("data-state", "significant")
    page.keyboard.press("Enter")
    expect(panel.locator(".rc-er-state")).to_have_text(SAVED)
    expect(why).to_be_hidden()
    expect(significance).to_have_attribute("data-state", "unset")
    stored = _stored(data, pair, RATER2, RATER2_PASSWORD)
    assert len(stored.records) == before + 1
    new = stored.records[-1]
    assert (new.kind, new.category, new.significant) == ("span", 1, True)
    assert stored.counts[(1, True)] >= 1
    expect(cell(page, FALSE_PRED)).to_have_value(str(stored.counts[(1, True)]))
    context.close()
