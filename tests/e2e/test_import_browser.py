"""End to end in chromium: the Import page's dry run previews an uploaded file without writing
anything, then the import creates the study; a misspelt column is refused by name.

The server starts empty but for one admin (no demo study).
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect
from sqlalchemy import func, select

from radconcord.backend.services.accounts import auth
from radconcord.backend.types import Actor
from radconcord.db.models import Pair, Study
from radconcord.db.session import Database
from tests.e2e.conftest import log_in, start_server, wait_for_cookie

pytestmark = pytest.mark.browser

ADMIN, ADMIN_PASSWORD = "lead", "lead-password-1"
CASES = (b"case_id,reference,candidate,source\n"
         b"n1,No acute disease.,Normal chest.,gen-a\n"
         b"n1,No acute disease.,Small effusion.,gen-b\n"
         b"n2,Mild cardiomegaly.,Normal heart size.,gen-a\n")


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
                    s.scalar(select(func.count()).select_from(Pair)))
    finally:
        db.dispose()


def test_dry_run_then_import_in_the_browser(running, browser, tmp_path):
    (url, _), data = running
    upload = tmp_path / "study cases.csv"
    upload.write_bytes(CASES)
    typo = tmp_path / "typo.csv"
    typo.write_bytes(CASES.replace(b"candidate", b"candidat", 1))
    page = browser.new_context(viewport={"width": 1600, "height": 1000}).new_page()
    page.set_default_timeout(60_000)
    page.goto(url)
    log_in(page, ADMIN, ADMIN_PASSWORD)
    page.get_by_role("heading", name="Studies & progress").wait_for()
    wait_for_cookie(page)
    page.get_by_test_id("stTopNavSection").filter(has_text="Study").click()
    page.get_by_role("menuitem", name="Import").click()
    page.get_by_role("heading", name="Import").wait_for()

    form = page.get_by_test_id("stForm").first
    form.get_by_label("New study name").fill("Browser import")
    form.locator("input[type=file]").first.set_input_files(str(typo))
    page.get_by_text("typo.csv").first.wait_for()
    form.get_by_role("button", name="Dry run (write nothing)").click()
    alert = page.get_by_test_id("stAlertContentError").first
    alert.wait_for()
    assert alert.inner_text().startswith("typo.csv: header: column 'source' belongs to the "
                                         "long layout")
    assert "'candidat' (did you mean 'candidate'?)" in alert.inner_text()
    assert _counts(data) == (0, 0)

    form.locator("input[type=file]").first.set_input_files(str(upload))
    page.get_by_text("study cases.csv").first.wait_for()
    form.get_by_role("button", name="Dry run (write nothing)").click()
    # The preview's box is drawn first and filled element by element as the run goes on.
    preview = page.locator(".st-key-import_preview")
    expect(preview).to_contain_text(
        "Dry run of study cases.csv for study Browser import: nothing was written.")
    expect(preview).to_contain_text("Layout: long (detected: it has a 'candidate' column)")
    preview.get_by_text("Ready to import.").wait_for()
    expect(preview.get_by_test_id("stMetric")).to_have_count(4)
    metrics = {m.get_by_test_id("stMetricLabel").inner_text().strip():
               m.get_by_test_id("stMetricValue").inner_text().strip()
               for m in preview.get_by_test_id("stMetric").all()}
    assert metrics == {"Cases": "2", "Pairs": "3", "Images found": "0", "Images missing": "0"}
    assert _counts(data) == (0, 0)

    form.get_by_role("button", name="Import", exact=True).click()
    page.get_by_text("Created study Browser import: 3 pairs from 2 cases").wait_for()
    assert _counts(data) == (1, 3)
