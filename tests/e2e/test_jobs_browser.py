"""End to end: the Metrics page follows a real worker process live, and Cancel stops its job.

``streamlit run`` + chromium (see test_browser.py) and ``python -m backend worker`` as a
subprocess on the same SQLite file. The page's jobs panel is a fragment polling every 3 s:
everything below happens without a reload.
"""

from __future__ import annotations

import signal

import pytest
from playwright.sync_api import expect

from radconcord.backend import jobs
from radconcord.db.session import Database
from tests.e2e.conftest import log_in
from tests.jobs_helpers import load

pytestmark = pytest.mark.browser

NO_WORKER = "No worker is running: start one with"
NO_WORKER_CAPTION = "No worker is running. Start one with"


def test_metrics_page_shows_the_worker_live_and_cancels_its_job(server, browser, tmp_path,
                                                                monkeypatch):
    jh = load()
    jh.install_test_kind(monkeypatch.setitem)  # in this process, to queue it
    url, data = server
    db_url = f"sqlite:///{data / 'e2e.db'}"
    db = Database(db_url)
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    page.set_default_timeout(60_000)
    worker = None
    try:
        page.goto(url)
        log_in(page, "admin", "radconcord-admin")
        page.get_by_text("Studies & progress").first.wait_for()
        # The session cookie is set by a script after the login; a new page load needs it.
        page.wait_for_function("() => document.readyState === 'complete'")
        for _ in range(100):
            if any(c["name"] == "radconcord_session" for c in page.context.cookies()):
                break
            page.wait_for_timeout(100)
        else:
            pytest.fail("no session cookie after logging in")
        page.goto(f"{url}/metrics")
        page.get_by_text(NO_WORKER_CAPTION).wait_for()
        marker = page.evaluate("() => { window.__noReload = 1; return 1; }")
        assert marker == 1

        # A job arrives while nobody works: the page says how to start a worker.
        job = jobs.enqueue(db, jh.STEPS_KIND, {"steps": 600, "seconds": 0.1}, created_by="e2e")
        page.get_by_text(NO_WORKER).wait_for()
        cancel = page.get_by_role("button", name=f"Cancel job #{job}")
        cancel.wait_for()

        # A worker starts: the warning goes, the job runs.
        worker = jh.start_worker(db_url, worker_id="e2e-worker", log_path=tmp_path / "w.log",
                                 setup=jh.SETUP_TEST_KIND, once=False, stale_after=30,
                                 heartbeat=0.5)
        jh.wait_for_progress(db, job, at_least=3, proc=worker, log_path=tmp_path / "w.log")
        expect(page.get_by_text(NO_WORKER)).to_have_count(0, timeout=30_000)
        expect(page.get_by_text(NO_WORKER_CAPTION)).to_have_count(0, timeout=30_000)

        # Cancel in the browser: the worker stops the job at its next step.
        cancel.click()
        final = jh.wait_for(db, job, lambda j: j.finished, proc=worker,
                            log_path=tmp_path / "w.log", what="finished")
        assert final.status == "cancelled", final
        assert 3 <= final.progress_done < 600
        expect(page.get_by_role("button", name=f"Cancel job #{job}")).to_have_count(0)

        # The worker exits cleanly: the page shows nobody working again.
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0, (tmp_path / "w.log").read_text()
        page.get_by_text(NO_WORKER_CAPTION).wait_for(timeout=30_000)
        assert page.evaluate("() => window.__noReload") == 1  # all of it without a reload
    finally:
        if worker is not None and worker.poll() is None:
            jh.kill_9(worker)
        page.close()
        db.dispose()
