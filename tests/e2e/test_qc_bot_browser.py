"""A scripted rater is flagged by QC through the live app (issue 24, "Quality control that
catches a bot"), in chromium at 1280x800.

``tests/services/test_qc_bot.py`` drives a bot through the route handlers; here the bot is a
browser on the real ``streamlit run`` server: it logs in as the demo's rater1, and on each of
its first 10 pairs presses one count key (the first grid cell has the focus on every pair)
and Ctrl+Enter, as fast as the app lets it. The grid's autosave, the time-on-task tracker
and Mark done are the app's own. After every pair the QC service reads the server's
database; the rater must be flagged by an absolute floor (time per pair or pairs per hour)
within those 10 pairs. The first-flag pair and seconds per pair are printed (``pytest -s``).
"""

from __future__ import annotations

import time

import pytest

from radconcord.backend.services.accounts.seed import DEMO_STUDY
from radconcord.backend.services.quality import qc
from radconcord.backend.types import Actor
from tests.e2e.conftest import RATER, RATER_PASSWORD, log_in, wait_for_cookie
from tests.e2e.test_adjudication_browser import _db
from tests.e2e.test_radiologist_screen_browser import (
    FIRST_CELL,
    FOCUSED_CELL,
    _grid,
    _pair_in_url,
    _shot,
    _wait_pair_change,
)

pytestmark = pytest.mark.browser

PAIRS = 10
SIZE = (1280, 800)


#: The absolute floors' flags (time per pair, pairs per hour): they flag a rater alone, where
#: the relative flags (robust z against the demo's constructed raters) prove nothing about a bot.
FLOOR_FLAGS = ("implausible pace", "implausibly fast")


def _flags(data) -> tuple[str, ...]:
    """rater1's QC flags now, from the server's database."""
    db = _db(data)
    try:
        rows = qc.monitoring(db, Actor.system(), DEMO_STUDY).raters
    finally:
        db.dispose()
    return next(r.flags for r in rows if r.rater == RATER)


def test_a_bot_rating_through_the_browser_is_flagged_within_ten_pairs(server, browser):
    url, data = server
    context = browser.new_context(viewport={"width": SIZE[0], "height": SIZE[1]})
    page = context.new_page()
    page.set_default_timeout(60_000)
    try:
        page.goto(url)
        log_in(page, RATER, RATER_PASSWORD)
        wait_for_cookie(page)
        page.locator(".rc-grid").first.wait_for()
        # Before the bot starts, QC has nothing against rater1 (no pair done yet).
        assert _flags(data) == ()
        flags: tuple[str, ...] = ()
        pair = _pair_in_url(page)
        flagged_at, seconds = None, []
        for done in range(1, PAIRS + 1):
            started = time.monotonic()
            # No Tab, no click: the bot relies on the first cell having the focus.
            page.wait_for_function(FOCUSED_CELL, arg=pair)
            assert page.evaluate(FOCUSED_CELL, pair) == FIRST_CELL
            page.keyboard.press("1")
            _grid(page, pair).locator(".rc-state").get_by_text("Saved").wait_for()
            page.keyboard.press("Control+Enter")
            pair = _wait_pair_change(page, pair)
            seconds.append(time.monotonic() - started)
            flags = _flags(data)
            if any(f.startswith(FLOOR_FLAGS) for f in flags):
                flagged_at = done
                _shot(page, "qc_bot_flagged_1280x800")
                print(f"\nflagged after pair {done}: {flags}")
                break  # flagged: the bot need not go on (keeps the test short)
        print(f"bot: {len(seconds)} pairs at {sum(seconds) / len(seconds):.2f} s a pair; "
              f"first flagged at pair {flagged_at}")
        assert flagged_at is not None and flagged_at <= PAIRS, flags
    finally:
        context.close()
