"""In a real browser: a rater's save while the database is locked longer than the retry window.

Another client holds SQLite's write lock (``BEGIN IMMEDIATE`` on a raw connection, as a long
import did) while the rater clicks "+" in the grid. The page must say "Not saved", keep the
count in its cell, show no traceback or server path, and write the kept count once the lock
is gone (the grid sends it again with backoff, and with the next change).
"""

from __future__ import annotations

import re
import sqlite3
import time

import pytest
from playwright.sync_api import expect

from radconcord.backend.services import transactions
from radconcord.backend.services.annotation import rating
from tests.e2e.conftest import RATER, RATER_PASSWORD, cell, grid_status, log_in, step_up

pytestmark = pytest.mark.browser

OMISSION = "Omission of finding (clinically significant)"
LOCATION = "Incorrect location/position of finding (clinically insignificant)"


def _step_up(page, label: str) -> None:
    """Click the "+" of the grid cell labelled ``label``."""
    step_up(page, label)


def _stored(data, pair: str) -> dict:
    from radconcord.backend.services.accounts import auth
    from radconcord.db.session import Database

    db = Database(f"sqlite:///{data / 'e2e.db'}", migrate=False)
    try:
        actor = auth.authenticate(db, username=RATER, password=RATER_PASSWORD)
        return rating.get_pair(db, actor, opaque_id=pair).counts
    finally:
        db.dispose()


def test_a_save_during_a_long_lock_says_not_saved_and_keeps_the_count(server, browser):
    url, data = server
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    page.set_default_timeout(60_000)
    page.goto(url)
    log_in(page, RATER, RATER_PASSWORD)
    page.get_by_text("Candidate report").wait_for()
    page.wait_for_function("() => new URL(location.href).searchParams.get('pair')")
    pair = page.evaluate("() => new URL(location.href).searchParams.get('pair')")
    before = _stored(data, pair)
    expect(cell(page, OMISSION)).to_have_value(str(before[(2, True)]))

    raw = sqlite3.connect(data / "e2e.db", isolation_level=None)
    raw.execute("BEGIN IMMEDIATE")
    try:
        t0 = time.monotonic()
        _step_up(page, OMISSION)
        page.get_by_text("Not saved", exact=False).first.wait_for()
        waited = time.monotonic() - t0
        # The grid draws in its own shadow root: its text is not in body's innerText.
        status = grid_status(page).inner_text()
        assert "the database is busy; your count is kept, try again" in status
        body = page.inner_text("body") + status
        assert "Traceback" not in body and 'File "/' not in body
        assert "OperationalError" not in body and "sqlite" not in body.lower()
        # The click is kept on screen, not reset to the stored value.
        expect(cell(page, OMISSION)).to_have_value(str(before[(2, True)] + 1))
        assert _stored(data, pair)[(2, True)] == before[(2, True)]
        # The lock outlasted the whole retry window before the page gave up.
        assert waited >= transactions.SAVE_RETRY_SECONDS
    finally:
        raw.rollback()
        raw.close()

    # The next save of the pair writes the kept count too.
    _step_up(page, LOCATION)
    page.get_by_text(re.compile(r"^Saved \d")).wait_for()
    deadline = time.monotonic() + 30
    while True:
        counts = _stored(data, pair)
        if counts[(3, False)] == before[(3, False)] + 1 or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    assert counts[(2, True)] == before[(2, True)] + 1
    assert counts[(3, False)] == before[(3, False)] + 1
    assert page.get_by_text("Not saved").count() == 0
    expect(cell(page, OMISSION)).to_have_value(str(before[(2, True)] + 1))
    page.close()
