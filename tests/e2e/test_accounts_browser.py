"""End to end in chromium: an account with a one-time password, its first login, and the
deactivation that ends its open tab on the next action.

The server starts empty but for one admin created beforehand (no demo accounts), as on a
real deployment.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from radconcord.backend.services.accounts import auth
from radconcord.backend.types import Actor
from radconcord.db.session import Database
from tests.e2e.conftest import log_in, start_server

pytestmark = pytest.mark.browser

ADMIN, ADMIN_PASSWORD = "lead", "lead-password-1"
OTP = re.compile(r"[a-z2-9]{4}(?:-[a-z2-9]{4}){3}")


def _open(page, section: str | None, title: str) -> None:
    """Open a page from the top navigation (inside its section's menu when it has one)."""
    if section is None:
        page.get_by_role("link", name=title).click()
    else:
        page.get_by_test_id("stTopNavSection").filter(has_text=section).click()
        page.get_by_role("menuitem", name=title).click()
    page.get_by_role("heading", name=title).wait_for()


@pytest.fixture
def running(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(data))
    db = Database(f"sqlite:///{data / 'e2e.db'}")
    auth.create_user(db, Actor.system(), username=ADMIN, password=ADMIN_PASSWORD, role="admin")
    db.dispose()
    with start_server(data, {"RADCONCORD_SEED_DEMO": "0"}) as started:
        yield started


def test_one_time_password_first_login_then_deactivation_ends_the_open_tab(running, browser):
    url, _ = running
    admin = browser.new_context(viewport={"width": 1600, "height": 1000}).new_page()
    admin.set_default_timeout(60_000)
    admin.goto(url)
    log_in(admin, ADMIN, ADMIN_PASSWORD)
    admin.get_by_role("heading", name="Studies & progress").wait_for()
    _open(admin, "Study", "Accounts")

    admin.get_by_label("Username", exact=True).fill("rosa")
    admin.get_by_label("Display name", exact=True).fill("Dr Rosa")
    admin.get_by_role("button", name="Create with a one-time password").click()
    admin.get_by_text("Created rater rosa.").wait_for()
    # The password's code block is the next element of the run: it can land a moment later.
    expect(admin.get_by_test_id("stCode")).to_have_count(1)
    password = admin.get_by_test_id("stCode").inner_text().strip()
    assert OTP.fullmatch(password), password

    # The rater's first login offers only "My account" until the password is changed.
    rater = browser.new_context(viewport={"width": 1600, "height": 1000}).new_page()
    rater.set_default_timeout(60_000)
    rater.goto(url)
    log_in(rater, "rosa", password)
    rater.get_by_role("heading", name="My account").wait_for()
    rater.get_by_text("Choose your own password before continuing").wait_for()
    assert rater.get_by_role("link", name="Rate").count() == 0
    rater.get_by_label("Current password", exact=True).fill(password)
    rater.get_by_label("New password", exact=True).fill("rosa-own-password")
    rater.get_by_label("New password again", exact=True).fill("rosa-own-password")
    rater.get_by_role("button", name="Change password").click()
    rater.get_by_text("Password changed.").wait_for()
    expect(rater.get_by_role("link", name="Rate")).to_be_visible()
    _open(rater, None, "My studies")

    # The admin deactivates the account; the rater's open tab loses access on its next click.
    _open(admin, "Study", "Accounts")
    # rosa is the only account besides the admin's own, so the form has it selected.
    # (Opening the page it is on reruns it: the old select can linger until the run ends.)
    account = admin.get_by_role("combobox", name="Account")
    expect(account).to_have_count(1)
    expect(admin.locator('[data-stale="true"]')).to_have_count(0)
    expect(account).to_have_value("rosa")
    admin.get_by_text("Deactivate", exact=True).click()
    admin.get_by_role("button", name="Apply").click()
    admin.get_by_text("Deactivated rosa").wait_for()

    rater.get_by_role("link", name="My account").click()
    rater.get_by_label("Password", exact=True).wait_for()
    rater.get_by_text("Your session has ended").wait_for()
    body = rater.inner_text("body")
    assert "My studies" not in body and "Change password" not in body
    admin.context.close()
    rater.context.close()
