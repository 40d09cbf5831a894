"""End to end in a real browser: ``streamlit run`` + Debian chromium driven by Playwright.

Needs ``/usr/bin/chromium`` (``apt-get install -y chromium``); without it the test FAILS with
that instruction rather than skipping, so a CI without the browser cannot pass silently.
The server runs on a free local port with a fresh data folder seeded with the demo study
(``RADCONCORD_SEED_DEMO=1``; demo accounts in ``backend/services/accounts/seed.py``) and the
dashboard refreshing every second (``RADCONCORD_DASHBOARD_REFRESH_S=1``).
"""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import (
    RATER,
    RATER_PASSWORD,
    log_in,
    log_out,
    wait_for_cookie,
    wait_for_idle,
)
from tests.e2e.conftest import (
    cell as _cell,
)
from tests.e2e.conftest import (
    metric_value as _metric_value,
)
from tests.e2e.conftest import (
    wait_for_metric as _wait_for_metric,
)

pytestmark = pytest.mark.browser

def test_counts_survive_a_reload_and_admin_pages_stay_closed(server, browser, tmp_path):
    url, data = server
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    page.set_default_timeout(60_000)
    page.goto(url)
    log_in(page, RATER, RATER_PASSWORD)
    page.get_by_text("Candidate report").wait_for()
    page.wait_for_function("() => new URL(location.href).searchParams.get('pair')")
    pair = page.evaluate("() => new URL(location.href).searchParams.get('pair')")

    omission = _cell(page, "Omission of finding (clinically significant)")
    severity = _cell(page, "Incorrect severity of finding (clinically insignificant)")
    omission.fill("2")
    omission.press("Enter")
    page.get_by_text("Saved ").wait_for()
    severity.fill("1")
    severity.press("Tab")

    # What the database holds, through the rater's own service view (the second save
    # lands when the input loses focus; give it a few seconds).
    from radconcord.backend.services.accounts import auth
    from radconcord.backend.services.annotation import rating
    from radconcord.db.session import Database

    db = Database(f"sqlite:///{data / 'e2e.db'}", migrate=False)
    try:
        actor = auth.authenticate(db, username=RATER, password=RATER_PASSWORD)
        deadline = time.monotonic() + 30
        while True:
            counts = rating.get_pair(db, actor, opaque_id=pair).counts
            if counts[(4, False)] == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.25)
    finally:
        db.dispose()
    assert counts[(2, True)] == 2 and counts[(4, False)] == 1
    assert sum(counts.values()) == 3
    page.get_by_text("Saved ").wait_for()

    # A reload starts a new Streamlit session; the browser's session cookie logs the rater
    # back in: same pair, counts intact, no login form. (The cookie is set by the server
    # once the browser has exchanged the login ticket: wait for it, as a user would.)
    deadline = time.monotonic() + 30
    while not any(c["name"] == "radconcord_session" for c in page.context.cookies()):
        assert time.monotonic() < deadline, "the server never set the session cookie"
        time.sleep(0.2)
    page.reload()
    page.get_by_text("Candidate report").wait_for()
    assert page.get_by_label("Password", exact=True).count() == 0
    assert page.evaluate("() => new URL(location.href).searchParams.get('pair')") == pair
    # The grid draws just after the texts: wait (bounded) for the stored values.
    expect(_cell(page, "Omission of finding (clinically significant)")).to_have_value("2")
    expect(_cell(page, "Incorrect severity of finding (clinically insignificant)")
           ).to_have_value("1")
    expect(_cell(page, "False prediction of finding (clinically significant)")
           ).to_have_value("0")
    # The token is in a cookie, never in the URL.
    cookies = {c["name"]: c for c in page.context.cookies()}
    token = cookies["radconcord_session"]["value"]
    assert len(token) >= 40 and token not in page.url
    assert cookies["radconcord_session"]["sameSite"] == "Strict"

    # The admin page's URL path shows no admin content to a rater.
    for path in ("studies", "metrics", "export"):
        page.goto(f"{url}/{path}")
        # Not registered for a rater: Streamlit says so and shows the rater's default page.
        page.get_by_text("Page not found").wait_for()
        page.keyboard.press("Escape")
        page.get_by_text("Candidate report").wait_for()
        body = page.inner_text("body")
        assert "Studies & progress" not in body
        assert "Metric families" not in body and "Export" not in body
        assert "Assign raters" not in body

    # Logging out forgets the browser too: a reload shows the login page.
    log_out(page)
    page.get_by_label("Password", exact=True).wait_for()
    assert "radconcord_session" not in {c["name"] for c in page.context.cookies()}
    page.reload()
    page.get_by_label("Password", exact=True).wait_for()
    assert page.get_by_text("Candidate report").count() == 0
    page.close()


def test_a_stolen_cookie_is_dead_after_logout(server, browser):
    """The token is checked server-side: replaying it after logout opens nothing."""
    url, _ = server
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(url)
    log_in(page, "rater2", "radconcord-rater2")
    page.get_by_text("Candidate report").wait_for()
    # HttpOnly: the cookie is invisible to document.cookie; ask the browser context.
    deadline = time.monotonic() + 30
    while not any(c["name"] == "radconcord_session" for c in context.cookies()):
        assert time.monotonic() < deadline, "the server never set the session cookie"
        time.sleep(0.2)
    stolen = [c for c in context.cookies() if c["name"] == "radconcord_session"]
    log_out(page)
    page.get_by_label("Password", exact=True).wait_for()
    context.add_cookies(stolen)
    page.goto(url)
    page.get_by_label("Password", exact=True).wait_for()
    assert page.get_by_text("Candidate report").count() == 0
    context.close()


def test_the_dashboard_follows_a_rating_without_a_reload(server, browser):
    """Issue 5: an admin watching the live dashboard sees a rater's saved, completed pair."""
    url, _ = server
    admin_ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
    rater_ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
    try:
        admin = admin_ctx.new_page()
        admin.set_default_timeout(60_000)
        admin.goto(url)
        log_in(admin, "admin", "radconcord-admin")
        admin.get_by_text("Studies & progress").first.wait_for()
        wait_for_cookie(admin)  # navigating before the cookie is set logs the admin out
        admin.goto(f"{url}/dashboard")
        ratings_metric = admin.get_by_test_id("stMetric").filter(has_text="Ratings")
        rated_metric = admin.get_by_test_id("stMetric").filter(has_text="Rated pairs")
        ratings_metric.wait_for()
        before_ratings = _metric_value(ratings_metric)
        before_rated = _metric_value(rated_metric)
        before_charts = admin.get_by_test_id("stPlotlyChart").count()
        marker = admin.evaluate("() => { window.__noReload = 1; return 1; }")
        assert marker == 1

        rater = rater_ctx.new_page()
        rater.set_default_timeout(60_000)
        rater.goto(url)
        # rater1 (rater2's first pair must stay open for the shortcut test).
        log_in(rater, RATER, RATER_PASSWORD)
        rater.get_by_text("Candidate report").wait_for()
        # The first open pair: add one omission and mark it done.
        cell = _cell(rater, "Omission of finding (clinically significant)")
        expect(cell).to_be_enabled()
        value = int(cell.input_value() or 0)
        cell.fill(str(value + 1))
        cell.press("Enter")
        rater.get_by_text("Saved ").wait_for()
        rater.get_by_role("button", name="Mark done").click()
        rater.get_by_text("marked done").first.wait_for()

        # The admin's page follows on its own (live fragment, 1 s here): one more rater's
        # rating of a pair. (Rated pairs stays put: the demo's constructed raters have rated
        # every pair already.)
        assert _wait_for_metric(ratings_metric, before_ratings + 1) == before_ratings + 1
        assert _metric_value(rated_metric) == before_rated
        # Completing a pair also stores its zero cells: the count of rating rows grows (the
        # metrics of one run arrive one by one, so this one may land a moment later).
        expect(ratings_metric.get_by_test_id("stMetricValue")).not_to_have_text(
            str(before_ratings))
        assert _metric_value(ratings_metric) > before_ratings
        if before_rated == 0:
            # The first completed pair draws the errors-per-source plot.
            expect(admin.get_by_test_id("stPlotlyChart")).to_have_count(before_charts + 1)
        # Same document all along: no reload happened.
        assert admin.evaluate("() => window.__noReload") == 1
        admin.screenshot(path="/tmp/dashboard-live.png")
    finally:
        admin_ctx.close()
        rater_ctx.close()


def test_next_shortcut_moves_to_the_next_pair(server, browser):
    url, _ = server
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    page.set_default_timeout(60_000)
    page.goto(url)
    log_in(page, "rater2", "radconcord-rater2")
    page.get_by_text("Pair 1 of").wait_for()
    # N and P work from the grid's focused first cell too (the grid passes them to the
    # buttons), once the buttons are drawn and their handlers bound (``wait_for_idle``).
    expect(page.get_by_role("button", name="Next")).to_be_enabled()
    wait_for_idle(page)
    page.keyboard.press("n")
    page.get_by_text("Pair 2 of").wait_for()
    # Previous (disabled on pair 1) takes its shortcut once it is enabled again.
    expect(page.get_by_role("button", name=re.compile(r"^Previous"))).to_be_enabled()
    wait_for_idle(page)
    page.keyboard.press("p")
    page.get_by_text("Pair 1 of").wait_for()
    page.close()
