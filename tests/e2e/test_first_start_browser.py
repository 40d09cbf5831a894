"""End to end: a new user's first start, with the README's command and no other.

``bash scripts/run-app.sh`` (the real script: bootstrap, already installed here, then the app
and one worker) on a fresh data folder and a free port. Opening the app seeds the demo study
and queues its offline metrics; the worker scores them. The two demo raters rate (through the
rating service, as their browsers would); the lead logs in, opens the dashboard and sees the
correlations appear without typing a command, and the page never tells them to run one.
Stopping the script stops the app and the worker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from radconcord.backend import jobs
from radconcord.backend.services.accounts import auth, seed
from radconcord.backend.services.annotation import rating
from radconcord.backend.services.scores import score_now
from radconcord.db.session import Database
from tests.e2e.conftest import free_port, log_in, wait_for_cookie
from tests.process_helpers import interruptible

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 120


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] \
            != "Z"
    except OSError:
        return False


def _wait(predicate, what: str, log: Path, timeout: float = START_TIMEOUT_S):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout:g} s:\n{log.read_text(errors='replace')}")
        time.sleep(0.3)


def _healthy(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
            return resp.read() == b"ok"
    except OSError:
        return False


def _demo_seeded(db: Database) -> bool:
    return any(u.username == "rater2" for u in auth.list_users(db, auth.Actor.system()))


def _raters_rate(db: Database) -> None:
    """rater1 and rater2 complete every demo pair, with counts that differ between pairs."""
    for username, offset in (("rater1", 0), ("rater2", 1)):
        (info,) = [u for u in auth.list_users(db, auth.Actor.system())
                   if u.username == username]
        rater = auth.Actor(user_id=info.user_id, username=info.username, role=info.role)
        for i, item in enumerate(rating.rater_queue(db, rater, study_name=seed.DEMO_STUDY)):
            rating.set_count(db, rater, opaque_id=item.opaque_id, category=2,
                             significant=True, count=(i * 7 + offset) % 4)
            rating.complete_pair(db, rater, opaque_id=item.opaque_id, confirm_zero=True)


def test_first_start_fills_the_demo_dashboard_without_a_command(browser, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    db_url = f"sqlite:///{data / 'radconcord.db'}"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "run-app.log"
    env = {**os.environ, "RADCONCORD_DATA_DIR": str(data), "DATABASE_URL": db_url,
           "RADCONCORD_SEED_DEMO": "1", "RADCONCORD_DASHBOARD_REFRESH_S": "1"}
    env.pop("RADCONCORD_HOST", None)
    env.pop("RADCONCORD_WORKER", None)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["bash", "scripts/run-app.sh", "--server.port", str(port), "--server.headless",
             "true", "--browser.gatherUsageStats", "false"],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=interruptible)
    started: list[int] = []
    db = None
    page = None
    try:
        _wait(lambda: _healthy(url) or proc.poll() is not None, "the app did not start", log)
        assert proc.poll() is None, log.read_text()
        started.extend(_children(proc.pid))
        db = Database(db_url, migrate=False)
        _wait(lambda: any(w.alive for w in jobs.list_workers(db)), "no worker is alive", log)

        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.set_default_timeout(60_000)
        page.goto(url)  # the first page opened seeds the demo and queues its scoring
        page.get_by_label("Username", exact=True).wait_for()
        _wait(lambda: _demo_seeded(db), "the demo was not seeded", log)
        (job,) = _wait(lambda: jobs.list_jobs(db, kind="score"), "no scoring job", log)
        assert job.created_by == score_now.FIRST_START and job.study_name == seed.DEMO_STUDY
        _raters_rate(db)

        log_in(page, "admin", "radconcord-admin")
        page.get_by_text("Studies & progress").first.wait_for()
        wait_for_cookie(page)
        page.goto(f"{url}/dashboard")
        page.get_by_text("Agreement dashboard").wait_for()
        # The worker scores the offline metrics; the live dashboard shows the correlations.
        page.get_by_text("Kendall tau-b and Spearman against the radiologists").wait_for(
            timeout=90_000)
        # The forest plot names the scored metrics (the table itself is drawn on a canvas).
        for key in ("bleu4", "rougeL", "meteor"):
            page.locator("svg text", has_text=key).first.wait_for()
        expect(page.get_by_text("python -m backend score", exact=False)).to_have_count(0)
        finished = jobs.get(db, job.id)
        assert finished is not None and finished.status == "done", finished
        page.screenshot(path=str(tmp_path / "first-start-dashboard.png"), full_page=True)

        # Ctrl+C on the script (SIGINT to its process group) stops the app and the worker.
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) == 130
        assert [p for p in started if _alive(p)] == []
        assert [w for w in jobs.list_workers(db) if w.alive] == []
    finally:
        if page is not None:
            page.close()
        if db is not None:
            db.dispose()
        for pid in started:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
