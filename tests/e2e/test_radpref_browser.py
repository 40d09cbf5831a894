"""End to end in chromium: the lead imports RadPref files on the Import page (a dry run
first, which writes nothing), then downloads them back from the Export page as a zip that
holds the same bytes.

The server starts empty but for one admin (no demo study).
"""

from __future__ import annotations

import io
import zipfile

import pytest
from playwright.sync_api import expect
from sqlalchemy import func, select

from radconcord.backend.services.accounts import auth
from radconcord.backend.types import Actor
from radconcord.db.models import Judgement, Study
from radconcord.db.session import Database
from tests.e2e.conftest import log_in, start_server, wait_for_cookie
from tests.helpers_radpref import USER_1, USER_2, preferences_bytes, user_bytes, write_set

pytestmark = pytest.mark.browser

ADMIN, ADMIN_PASSWORD = "lead", "lead-password-1"


@pytest.fixture
def running(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(data))
    db = Database(f"sqlite:///{data / 'e2e.db'}")
    auth.create_user(db, Actor.system(), username=ADMIN, password=ADMIN_PASSWORD, role="admin")
    db.dispose()
    with start_server(data, {"RADCONCORD_SEED_DEMO": "0"}) as started:
        yield started, data


def _counts(data) -> tuple[int, int]:
    db = Database(f"sqlite:///{data / 'e2e.db'}")
    try:
        with db.read() as s:
            return (s.scalar(select(func.count()).select_from(Study)),
                    s.scalar(select(func.count()).select_from(Judgement)))
    finally:
        db.dispose()


def _go(page, name: str) -> None:
    page.get_by_test_id("stTopNavSection").filter(has_text="Study").click()
    page.get_by_role("menuitem", name=name).click()
    page.get_by_role("heading", name=name).wait_for()


def test_import_radpref_then_download_it_back(running, browser, tmp_path):
    (url, _), data = running
    prefs, folder = write_set(tmp_path / "radpref")
    page = browser.new_context(viewport={"width": 1600, "height": 1000},
                               accept_downloads=True).new_page()
    page.set_default_timeout(60_000)
    page.goto(url)
    log_in(page, ADMIN, ADMIN_PASSWORD)
    page.get_by_role("heading", name="Studies & progress").wait_for()
    wait_for_cookie(page)
    _go(page, "Import")
    page.get_by_role("tab", name="RadPref files").click()
    form = page.locator(".st-key-radpref_study").locator("xpath=ancestor::*[@data-testid="
                                                          "'stForm'][1]")
    form.get_by_label("New study name").fill("RadPref in the browser")
    inputs = form.locator("input[type=file]")
    inputs.nth(0).set_input_files(str(prefs))
    page.get_by_text("preference_data.json").nth(1).wait_for()
    inputs.nth(1).set_input_files([str(folder / "user_1.json"), str(folder / "user_2.json")])
    form.get_by_text("user_2.json").wait_for()

    form.get_by_role("button", name="Dry run (write nothing)").click()
    # The result's box is drawn first and filled as the run goes on.
    result = page.locator(".st-key-radpref_result")
    expect(result).to_contain_text(
        "Dry run for study RadPref in the browser: nothing was written.")
    assert _counts(data) == (0, 0)

    form.get_by_role("button", name="Import RadPref").click()
    page.get_by_text("Created study RadPref in the browser (pairwise, 1-5 ratings)").wait_for()
    assert _counts(data) == (1, 5)

    _go(page, "Export")
    export_form = page.locator(".st-key-radpref_export_study").locator(
        "xpath=ancestor::*[@data-testid='stForm'][1]")
    export_form.get_by_role("button", name="Export as RadPref").click()
    page.get_by_text("as RadPref: 3 cases, 2 annotators, 5 judgements.").wait_for()
    with page.expect_download() as info:
        page.get_by_role("button", name="Download RadPref .zip").click()
    archive = zipfile.ZipFile(io.BytesIO(info.value.path().read_bytes()))
    assert archive.read("RadPref/preference_data.json") == preferences_bytes()
    assert archive.read("RadPref/radiologist_annotations/user_1.json") == user_bytes(USER_1)
    assert archive.read("RadPref/radiologist_annotations/user_2.json") == user_bytes(USER_2)
