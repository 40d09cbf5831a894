"""Shared fixtures of the browser tests: a running app and Debian's chromium.

``server`` starts ``streamlit run webapp/server.py`` on a free port with a fresh data folder
seeded with the demo study; ``start_server`` starts another one with extra environment
variables (or on the same data folder again, as a restart). Helpers
``log_in``/``log_out`` drive the login page. A missing chromium FAILS with the fix in the
message rather than skipping, so a CI without the browser cannot pass silently.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
RATER, RATER_PASSWORD = "rater1", "radconcord-rater1"
START_TIMEOUT_S = 90


def free_port() -> int:
    """A local TCP port nobody listens on now."""
    return _free_port()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# The real entry point: the app plus its cookie routes and error boundary.
APP_SCRIPT = "webapp/server.py"


@contextmanager
def start_server(data: Path, extra_env: dict[str, str] | None = None, *,
                 port: int | None = None) -> Iterator[tuple[str, Path]]:
    """Run the app on a free port (or ``port``: a restart where the open pages expect it)
    with its data in ``data``; yields (base URL, data folder)."""
    port = port or _free_port()
    env = {
        **os.environ,
        "RADCONCORD_DATA_DIR": str(data),
        "DATABASE_URL": f"sqlite:///{data / 'e2e.db'}",
        "RADCONCORD_SEED_DEMO": "1",
        "RADCONCORD_DASHBOARD_REFRESH_S": "1",
        **(extra_env or {}),
    }
    log_path = data / "streamlit.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", APP_SCRIPT,
             "--server.headless", "true", "--server.port", str(port),
             "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
        )
    # Tests that watch the server process (its memory, say) find it here.
    (data / "streamlit.pid").write_text(str(proc.pid))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"streamlit exited with {proc.returncode}:\n{log_path.read_text()}")
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
                    if resp.read() == b"ok":
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"streamlit did not start in {START_TIMEOUT_S}s:\n"
                            f"{log_path.read_text()}")
            time.sleep(0.5)
        yield url, data
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A running app on a free port; yields (base URL, data folder)."""
    with start_server(tmp_path_factory.mktemp("e2e-data")) as running:
        yield running


@pytest.fixture(scope="module")
def browser():
    """Debian's chromium, headless; a missing binary is a failure with the fix in it."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} not found: install the browser with "
                    "`apt-get install -y chromium chromium-driver` (see .ci)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        instance = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield instance
        instance.close()


def log_in(page, username: str, password: str) -> None:
    page.get_by_label("Username", exact=True).fill(username)
    page.get_by_label("Password", exact=True).fill(password)
    page.get_by_role("button", name="Log in").click()


def log_out(page) -> None:
    """Open the sidebar if it is collapsed (raters) and click Log out."""
    expand = page.get_by_test_id("stExpandSidebarButton")
    if expand.count() and expand.is_visible():
        expand.click()
    page.get_by_role("button", name="Log out").click()


def wait_for_idle(page) -> None:
    """Wait until the app's run has ended and the browser has run what it drew.

    Streamlit binds a button's keyboard shortcut in an effect that React runs after the
    button is painted: a key pressed the moment a button shows as enabled can come before
    its handler (seen under load in CI). The app's root says when no run is going on; two
    animation frames and a task later, the effects of that paint have run.
    """
    page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').wait_for()
    page.evaluate("() => new Promise((done) => requestAnimationFrame("
                  "() => requestAnimationFrame(() => setTimeout(done, 50))))")


def metric_value(metric) -> int:
    return int(metric.get_by_test_id("stMetricValue").inner_text().strip())


def wait_for_metric(metric, expected: int, timeout_s: float = 30) -> int:
    """Poll a metric's shown value until it equals ``expected`` (or time runs out)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = metric_value(metric)
        if value == expected or time.monotonic() > deadline:
            return value
        time.sleep(0.25)


def live_grid(page):
    """The count grid of the pair in the address bar (any grid if none is named there).

    While a rerun draws the next pair, Streamlit keeps the previous pair's grid on screen
    (stale) beside the new one, so a bare cell label could match two cells; the address
    names the new pair as soon as the rerun starts.
    """
    pair = page.evaluate("() => new URL(location.href).searchParams.get('pair')")
    return page.locator(f'.rc-grid[data-pair="{pair}"]' if pair else ".rc-grid")


def cell(page, label: str):
    """The count grid's cell named ``label``, e.g. "Omission of finding (clinically
    significant)": a text input (``fill`` types a count, ``to_have_value`` reads it)."""
    return live_grid(page).get_by_label(label, exact=True)


def step_up(page, label: str) -> None:
    """Click the "+" of the grid cell ``label``."""
    live_grid(page).get_by_role("button", name=f"Increase {label}", exact=True).click()


def step_down(page, label: str) -> None:
    """Click the "-" of the grid cell ``label``."""
    live_grid(page).get_by_role("button", name=f"Decrease {label}", exact=True).click()


def grid_of(page, pair: str):
    """The count grid of ``pair``: wait for it before a click after moving to another pair
    (until the rerun has drawn the new pair, the previous pair's grid is still on screen)."""
    return page.locator(f'.rc-grid[data-pair="{pair}"]')


def grid_state(page):
    """The grid's short state, above its labels ("Saved hh:mm:ss", "Saving…", "Not saved")."""
    return page.locator(".rc-state")


def grid_status(page):
    """The grid's message under the cells ("Not saved: ...", "... reloaded"), empty if none."""
    return page.locator(".rc-status-text")


def wait_for_cookie(page, timeout_s: float = 30) -> str:
    """The server-set session cookie's value, once the login ticket has been exchanged."""
    deadline = time.monotonic() + timeout_s
    while True:
        for c in page.context.cookies():
            if c["name"] == "radconcord_session":
                return c["value"]
        if time.monotonic() > deadline:
            pytest.fail("the server never set the session cookie")
        time.sleep(0.2)


def drop_constructed_ratings(data: Path) -> None:
    """Remove the demo's constructed ratings from the running app's database (in ``data``).

    The demo ships with constructed ratings (``backend/services/study_admin/demo_ratings.py``,
    the inactive accounts ``constructed_a/b/c``). A test that needs the demo raters alone
    (a queue of exactly their disagreements, a study still free to change its annotation
    mode) deletes those accounts; their assignments and ratings go with them (``ON DELETE
    CASCADE``) and the demo raters' own open pairs stay. Call it once the app has seeded the
    demo (its login page is drawn); calling it again changes nothing.
    """
    from sqlalchemy import delete

    from radconcord.db.models import User
    from radconcord.db.session import Database

    db = Database(f"sqlite:///{data / 'e2e.db'}", migrate=False)
    try:
        with db.begin() as s:
            s.execute(delete(User).where(User.username.like("constructed_%")))
    finally:
        db.dispose()


def demo_in_error_records(data: Path) -> None:
    """Switch the running app's demo study (in ``data``) to per-error records.

    The constructed ratings are answers in counts mode, which lock the study's annotation
    mode: they go first (:func:`drop_constructed_ratings`). Calling it again changes nothing.
    """
    from radconcord.backend.services.accounts.seed import DEMO_STUDY
    from radconcord.backend.services.study_admin import study_settings
    from radconcord.backend.types import Actor
    from radconcord.db.session import Database

    drop_constructed_ratings(data)
    db = Database(f"sqlite:///{data / 'e2e.db'}", migrate=False)
    try:
        study_settings.update_study_settings(db, Actor.system(), study_name=DEMO_STUDY,
                                             annotation_mode="error_records")
    finally:
        db.dispose()
