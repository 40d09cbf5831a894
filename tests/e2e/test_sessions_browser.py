"""End to end in chromium: the session cookie, the per-action re-check, login throttling,
the loopback rule for published passwords and the error boundary of a live fragment.

Each test starts its own server (``start_server``) on its own data folder, seeded with the
demo study (the server listens on 127.0.0.1), because they lock accounts, deactivate them
or break the database on purpose.
"""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from playwright.sync_api import expect
from sqlalchemy import select

from radconcord.backend.services.accounts import auth, sessions
from radconcord.backend.types import Actor
from radconcord.db.models import AuthSession, LoginThrottle
from radconcord.db.session import Database
from radconcord.webapp.state import REFRESH_ROUTE
from tests.e2e.conftest import RATER, RATER_PASSWORD, REPO, log_in, log_out, start_server

pytestmark = pytest.mark.browser

COOKIE = "radconcord_session"
REFRESH = REFRESH_ROUTE
ADMIN, ADMIN_PASSWORD = "admin", "radconcord-admin"
REFERENCE = re.compile(r"Something went wrong \(reference ([0-9A-F]{8})\)")


def _db(data: Path) -> Database:
    return Database(f"sqlite:///{data / 'e2e.db'}", migrate=False)


def _cookie(context, *, present: bool = True, timeout_s: float = 20) -> dict | None:
    """The session cookie once the server has set (or cleared) it."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = next((c for c in context.cookies() if c["name"] == COOKIE), None)
        if (found is not None) == present or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def _new_page(browser, **options):
    context = browser.new_context(viewport={"width": 1600, "height": 1000}, **options)
    page = context.new_page()
    page.set_default_timeout(60_000)
    return context, page


def _login_form(page) -> None:
    page.get_by_label("Password", exact=True).wait_for()


def test_the_cookie_is_httponly_survives_reload_and_restart_and_logout_clears_it(browser,
                                                                                 tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    context, page = _new_page(browser)
    try:
        with start_server(data) as (url, _):
            page.goto(url)
            log_in(page, RATER, RATER_PASSWORD)
            page.get_by_text("Candidate report").wait_for()
            cookie = _cookie(context)
            assert cookie is not None, "the server never set the session cookie"
            assert cookie["httpOnly"] is True
            assert cookie["sameSite"] == "Strict" and cookie["path"] == "/"
            assert cookie["secure"] is False  # plain http here; Secure behind TLS
            lifetime = cookie["expires"] - time.time()
            assert abs(lifetime - sessions.SESSION_TTL.total_seconds()) < 120
            # No script can read it.
            assert COOKIE not in page.evaluate("() => document.cookie")
            token = cookie["value"]
            assert len(token) >= 40 and token not in page.url
            # Only its hash is in the database.
            db = _db(data)
            try:
                with db.read() as s:
                    hashes = set(s.scalars(select(AuthSession.token_sha256)))
                live = sessions.resolve_token(db, token)
            finally:
                db.dispose()
            assert sessions._sha256(token) in hashes and token not in hashes
            assert live is not None and live.actor.username == RATER
            # A reload is a new Streamlit session: the cookie logs the rater back in.
            page.reload()
            page.get_by_text("Candidate report").wait_for()
            assert page.get_by_label("Password", exact=True).count() == 0

        # The server stops and starts again on the same data: still logged in.
        with start_server(data) as (url, _):
            page.goto(url)
            page.get_by_text("Candidate report").wait_for()
            assert page.get_by_label("Password", exact=True).count() == 0

            log_out(page)
            _login_form(page)
            assert _cookie(context, present=False) is None
            db = _db(data)
            try:
                assert sessions.resolve_token(db, token) is None  # revoked in the database
            finally:
                db.dispose()
            page.reload()
            _login_form(page)
            assert page.get_by_text("Candidate report").count() == 0
            # Replaying the old cookie opens nothing either.
            context.add_cookies([{**cookie, "value": token}])
            page.goto(url)
            _login_form(page)
            assert page.get_by_text("Candidate report").count() == 0
    finally:
        context.close()


def test_a_deactivated_admin_loses_the_open_dashboard_on_the_next_action(browser, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    with start_server(data) as (url, _):
        db = _db(data)
        context, page = _new_page(browser)
        live_ctx, live_page = _new_page(browser)
        try:
            # Tab 1: admin on the dashboard, live updates off, so only a click acts.
            page.goto(url)
            log_in(page, ADMIN, ADMIN_PASSWORD)
            page.get_by_text("Studies & progress").first.wait_for()
            # (Created after the first page seeded the demo into the empty database.)
            auth.create_user(db, Actor.system(), username="lead2", password="lead2-password-7",
                             role="admin")
            # One admin stays active (the last active admin cannot be deactivated).
            auth.create_user(db, Actor.system(), username="lead3", password="lead3-password-7",
                             role="admin")
            assert _cookie(context) is not None
            # A new page restores the session from the cookie and sets the cookie again;
            # wait for that, or a refresh landing after the deactivation clears the cookie
            # (and the login page could not say why).
            with page.expect_response(lambda r: REFRESH in r.url):
                page.goto(f"{url}/dashboard")
            page.get_by_test_id("stMetric").filter(has_text="Ratings").wait_for()
            page.get_by_text("Live", exact=True).click()  # the toggle: off
            expect(page.get_by_role("switch", name="Live")).not_to_be_checked()
            # Tab 2: lead2 on the dashboard with its live fragment (refresh every second).
            live_page.goto(url)
            log_in(live_page, "lead2", "lead2-password-7")
            live_page.get_by_text("Studies & progress").first.wait_for()
            assert _cookie(live_ctx) is not None
            with live_page.expect_response(lambda r: REFRESH in r.url):
                live_page.goto(f"{url}/dashboard")
            live_page.get_by_test_id("stMetric").filter(has_text="Ratings").wait_for()

            auth.set_active(db, Actor.system(), username=ADMIN, active=False)
            auth.set_active(db, Actor.system(), username="lead2", active=False)

            # The live fragment's next refresh is lead2's next action: the login page.
            _login_form(live_page)
            expect(live_page.get_by_text("Your session has ended")).to_be_visible()
            assert live_page.get_by_text("Agreement dashboard").count() == 0

            # The admin's next action ends the tab too: a click (changing the study target),
            # or the poll of the demo's first-start scoring job (its panel is a fragment that
            # re-checks the session every second while the job waits for a worker).
            target = page.get_by_text("Significant errors only")
            try:
                target.click(timeout=5_000)
            except PlaywrightTimeoutError:
                assert page.get_by_role("button", name="Log in").count() == 1
            _login_form(page)
            body = page.inner_text("body")
            assert "Agreement dashboard" not in body and "Studies & progress" not in body
            # Nothing comes back with a reload or a direct URL.
            for path in ("", "/export", "/accounts"):
                page.goto(f"{url}{path}")
                _login_form(page)
                assert page.get_by_text("Export").count() == 0
        finally:
            context.close()
            live_ctx.close()
            db.dispose()


def test_a_forwarded_client_cannot_use_a_demo_password_and_failures_lock(browser, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    with start_server(data) as (url, _):
        # Behind a reverse proxy every peer is 127.0.0.1; the proxy names the real client.
        context, page = _new_page(browser,
                                  extra_http_headers={"X-Forwarded-For": "203.0.113.50"})
        db = _db(data)
        try:
            page.goto(url)
            log_in(page, ADMIN, ADMIN_PASSWORD)
            expect(page.get_by_text("published with RadConcord's demo")).to_be_visible()
            assert page.get_by_text("Studies & progress").count() == 0

            def failures(key: str) -> int:
                with db.read() as s:
                    row = s.get(LoginThrottle, key)
                    return row.failures if row is not None else 0

            for attempt in range(1, 6):
                log_in(page, "rater2", f"wrong-password-{attempt}")
                deadline = time.monotonic() + 20
                while failures("user:rater2") < attempt and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert failures("user:rater2") == attempt
            # The throttle counted the forwarded client, not the proxy's 127.0.0.1.
            assert failures("client:203.0.113.50") == 5
            lock = page.get_by_text(re.compile(r"locked until \d\d:\d\d:\d\d UTC"))
            expect(lock).to_be_visible()
            end = re.search(r"\d\d:\d\d:\d\d UTC", lock.inner_text()).group(0)
            # The sixth attempt is refused unchecked, with the same end; so is the right
            # password while the lock lasts.
            log = data / "streamlit.log"
            for n, password in enumerate(("wrong-password-6", "radconcord-rater2"), start=1):
                log_in(page, "rater2", password)
                expect(page.get_by_text(re.compile(
                    f"^Too many failed logins: locked until {end}"))).to_be_visible()
                deadline = time.monotonic() + 20
                while (log.read_text().count("login refused (locked until") < n
                       and time.monotonic() < deadline):
                    time.sleep(0.1)
                assert log.read_text().count("login refused (locked until") == n
                assert failures("user:rater2") == 5
            assert page.get_by_text("Candidate report").count() == 0
            text = log.read_text()
            assert "locked until" in text and "'rater2'" in text and "203.0.113.50" in text
        finally:
            context.close()
            db.dispose()
        # The same demo login from this machine, unproxied, works.
        context, page = _new_page(browser)
        try:
            page.goto(url)
            log_in(page, ADMIN, ADMIN_PASSWORD)
            page.get_by_text("Studies & progress").first.wait_for()
        finally:
            context.close()


def test_a_failing_live_fragment_shows_a_reference_never_a_traceback(browser, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    with start_server(data) as (url, _):
        context, page = _new_page(browser)
        try:
            page.goto(url)
            log_in(page, ADMIN, ADMIN_PASSWORD)
            page.get_by_text("Studies & progress").first.wait_for()
            # The browser exchanges the login ticket for the cookie after the page is drawn;
            # navigating before that would open the new page logged out.
            assert _cookie(context) is not None
            page.goto(f"{url}/dashboard")
            page.get_by_test_id("stMetric").filter(has_text="Ratings").wait_for()
            # The live panels read the score table every second; take it away.
            with sqlite3.connect(data / "e2e.db", timeout=30) as conn:
                conn.execute("ALTER TABLE metric_scores RENAME TO metric_scores_gone")
            message = page.get_by_text(REFERENCE)
            message.first.wait_for(timeout=30_000)
            reference = REFERENCE.search(message.first.inner_text()).group(1)
            body = page.inner_text("body")
            for leak in ("Traceback", "OperationalError", "metric_scores", str(REPO),
                         "site-packages", ".py"):
                assert leak not in body, leak
            assert page.get_by_test_id("stException").count() == 0
            log = (data / "streamlit.log").read_text()
            assert f"reference {reference}" in log and "metric_scores" in log
        finally:
            context.close()


def _post(url: str, body: str = "", headers: dict[str, str] | None = None
          ) -> tuple[int, list[str]]:
    """POST without a browser; (status, Set-Cookie headers)."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=body.encode(), method="POST",
                                     headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, resp.headers.get_all("set-cookie") or []
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get_all("set-cookie") or []


def test_the_cookie_routes_need_the_app_header_and_a_live_ticket_or_token(server):
    url, data = server
    app_header = {"X-RadConcord": "1"}
    db = _db(data)
    try:
        info = auth.create_user(db, Actor.system(), username="routes", role="rater",
                                password="routes-password-3")
        actor = Actor(info.user_id, info.username, info.role)
        ticket = sessions.create_session(db, actor).ticket
        # A cross-site form cannot add the header: refused before the ticket is looked at.
        assert _post(f"{url}/_rc/session", ticket) == (403, [])
        assert _post(f"{url}/_rc/session", "made-up-ticket", app_header) == (400, [])
        # Behind a TLS proxy: Secure as well.
        status, cookies = _post(f"{url}/_rc/session", ticket,
                                {**app_header, "X-Forwarded-Proto": "https"})
        assert status == 204 and len(cookies) == 1
        attributes = {part.strip().split("=")[0].lower() for part in cookies[0].split(";")}
        assert {"httponly", "secure", "samesite", "path", "max-age"} <= attributes
        assert "SameSite=strict" in cookies[0] and "Path=/" in cookies[0]
        assert f"Max-Age={int(sessions.SESSION_TTL.total_seconds())}" in cookies[0]
        token = cookies[0].split(";")[0].split("=", 1)[1]
        assert sessions.resolve_token(db, token).actor == actor
        # A ticket works once.
        assert _post(f"{url}/_rc/session", ticket, app_header) == (400, [])
        # Refresh re-sets a live cookie with a full lifetime (plain http: not Secure) ...
        status, cookies = _post(f"{url}/_rc/refresh", "",
                                {**app_header, "Cookie": f"{COOKIE}={token}"})
        assert status == 204 and cookies[0].startswith(f"{COOKIE}={token};")
        assert "Secure" not in cookies[0] and "HttpOnly" in cookies[0]
        # ... logout revokes it in the database and clears it ...
        status, cookies = _post(f"{url}/_rc/logout", "",
                                {**app_header, "Cookie": f"{COOKIE}={token}"})
        assert status == 204 and "Max-Age=0" in cookies[0]
        assert sessions.resolve_token(db, token) is None
        # ... and a refresh of the dead cookie clears it instead of renewing it.
        status, cookies = _post(f"{url}/_rc/refresh", "",
                                {**app_header, "Cookie": f"{COOKIE}={token}"})
        assert status == 204 and not cookies[0].startswith(f"{COOKIE}={token};")
        assert "Max-Age=0" in cookies[0]
    finally:
        db.dispose()
