"""End to end: the issue-11 panels on the real dashboard (``streamlit run`` + chromium).

The data folder is built before the server starts: a lead account and the reviewer study of
``tests/reviewer_study.py`` (3 raters, 2 sources, bleu and rougeL really scored), the demo
seeding off. The lead opens the dashboard and sees the human ceiling, the paired matrix and
the system ranking; a simulation finished by a worker appears without a reload (the live
fragment, 1 s here), and "Download report (HTML)" serves the rendered report.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from radconcord.backend.runner.worker import Worker
from radconcord.backend.services.accounts import auth
from radconcord.backend.services.evaluation import simulation
from radconcord.backend.types import Actor
from radconcord.db.session import Database
from tests.e2e.conftest import log_in, start_server
from tests.reviewer_study import STUDY, build_reviewer_study

pytestmark = pytest.mark.browser

LEAD, LEAD_PASSWORD = "lead", "lead-password-1"
RATERS = {"rita": "rita-password-1", "ravi": "ravi-password-1", "rosa": "rosa-password-1"}


def _build(data, monkeypatch) -> tuple[str, Actor]:
    data.mkdir()
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(data))
    url = f"sqlite:///{data / 'e2e.db'}"
    db = Database(url)
    try:
        info = auth.create_user(db, Actor.system(), username=LEAD, password=LEAD_PASSWORD,
                                role="admin")
        lead = Actor(user_id=info.user_id, username=info.username, role=info.role)
        build_reviewer_study(db, lead, raters=RATERS)
    finally:
        db.dispose()
    return url, lead


def test_the_reviewer_panels_appear_live_and_the_report_downloads(browser, tmp_path,
                                                                  monkeypatch):
    data = tmp_path / "data"
    db_url, lead = _build(data, monkeypatch)
    with start_server(data, {"RADCONCORD_SEED_DEMO": "0"}) as (url, _):
        db = Database(db_url, migrate=False)
        context = browser.new_context(viewport={"width": 1600, "height": 1200},
                                      accept_downloads=True)
        page = context.new_page()
        page.set_default_timeout(60_000)
        try:
            page.goto(url)
            log_in(page, LEAD, LEAD_PASSWORD)
            page.get_by_text("Studies & progress").first.wait_for()
            page.wait_for_function("() => document.readyState === 'complete'")
            for _ in range(100):
                if any(c["name"] == "radconcord_session" for c in context.cookies()):
                    break
                page.wait_for_timeout(100)
            else:
                pytest.fail("no session cookie after logging in")
            page.goto(f"{url}/dashboard")

            # The ceiling: its caption and its band's legend entry on the forest plot.
            page.get_by_text("Human ceiling", exact=False).first.wait_for()
            expect(page.get_by_text("each of 3 raters'", exact=False)).to_have_count(1)
            page.locator("text.legendtext", has_text="human ceiling").first.wait_for()
            # The paired matrix (a heatmap) and the system ranking with its tests.
            page.get_by_text("Is metric A better than metric B?").wait_for()
            page.locator(".heatmaplayer").first.wait_for()
            page.get_by_text("Systems ranked by the metrics and by the radiologists").wait_for()
            page.get_by_text("Radiologists' order (fewest errors first): gen-near > gen-far"
                             ).wait_for()
            page.get_by_text("Paired approximate randomization tests").wait_for()
            page.get_by_text("No simulation yet").wait_for()
            page.screenshot(path="/tmp/dashboard-reviewer.png", full_page=True)
            marker = page.evaluate("() => { window.__noReload = 1; return 1; }")
            assert marker == 1

            # A simulation queued and finished behind the page's back shows up live.
            job = simulation.enqueue_simulation(db, lead, study_name=STUDY, seeds=2)
            page.get_by_text(f"Simulation job #{job.id} is queued.").wait_for()
            assert Worker(db).run_once().status == "done"
            page.get_by_text(f"Job #{job.id}: question", exact=False).wait_for()
            page.get_by_text("To get within", exact=False).first.wait_for()
            page.locator("text.legendtext", has_text="adaptive (mean of 2 seeds)"
                         ).first.wait_for()
            assert page.evaluate("() => window.__noReload") == 1

            # The report, rendered when the button is clicked.
            button = page.get_by_role("button", name="Download report (HTML)")
            expect(button).to_be_enabled()
            with page.expect_download(timeout=180_000) as info:
                button.click()
            download = info.value
            assert download.suggested_filename == f"{STUDY}-report.html"
            html = download.path().read_text(encoding="utf-8")
            assert html.lstrip().lower().startswith("<!doctype html")
            assert STUDY in html and "ceiling" in html.lower()
        finally:
            context.close()
            db.dispose()
