"""The rating screen on a 1280x800 laptop with ~120-word reports beside the film: both
reports whole without an inner scroll bar AND the whole count grid on screen with them, so a
rater reads, counts and marks done without scrolling the page (issue 16)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from tests.e2e.test_viewer_browser import LONG_REPORT, _open, _pairs, _rater_page, _texts

pytestmark = pytest.mark.browser

LAST_ROW = "Omission of comparison describing a change from a previous study"


def _set_demo_texts(data, external_id: str, text: str) -> None:
    from radconcord.db.models import Case, Report
    from radconcord.db.session import Database

    db = Database(f"sqlite:///{data / 'e2e.db'}", migrate=False)
    try:
        with db.begin() as s:
            case_id = s.scalar(select(Case.id).where(Case.external_id == external_id))
            for report in s.scalars(select(Report).where(Report.case_id == case_id)):
                report.text = text
    finally:
        db.dispose()


@pytest.mark.parametrize("formats", [["dicom"], []])
def test_long_reports_and_the_whole_grid_fit_a_laptop_screen(server, browser, formats):
    url, data = server
    context, page = _rater_page(browser, url, 1280, 800)  # the demo is seeded by now
    try:
        assert len(LONG_REPORT.split()) == 120
        # The demo's real PA film, and a case without an image.
        for external_id in ("demo-01-cr-pa", "demo-04-heart-failure"):
            _set_demo_texts(data, external_id, LONG_REPORT)
        found = [oid for oid, fmts, _ in _pairs(data)
                 if fmts == formats and _texts(data, oid) == (LONG_REPORT, LONG_REPORT)]
        assert found
        _open_pair(page, url, found[0], formats)
        for box in page.locator(".rc-report").all():
            assert box.inner_text().rstrip().endswith("referring team.")
            assert box.evaluate("e => e.scrollHeight <= e.clientHeight + 1")
            bound = box.bounding_box()
            assert bound["y"] + bound["height"] <= 800
        grid = page.locator(f'.rc-grid[data-pair="{found[0]}"]').bounding_box()
        assert grid["y"] + grid["height"] <= 800, grid
        for name in (f"Increase {LAST_ROW} (clinically significant)",
                     f"Increase {LAST_ROW} (clinically insignificant)"):
            plus = page.get_by_role("button", name=name, exact=True).bounding_box()
            assert plus["y"] + plus["height"] <= 800, (name, plus)
        done = page.get_by_role("button", name="Mark done").first.bounding_box()
        assert done["y"] >= 0 and done["y"] + done["height"] <= 800
    finally:
        context.close()


def _open_pair(page, url, oid, formats):
    if formats:
        _open(page, url, oid)
    else:
        page.goto(f"{url}/?pair={oid}")
    page.locator(f'.rc-grid[data-pair="{oid}"]').wait_for()


def test_the_done_message_leaves_the_grid_on_a_laptop_screen(server, browser):
    """After Mark done, the next pair (~120-word reports beside a film) still shows its whole
    grid at 1280x800 together with the "marked done" message."""
    from radconcord.db.models import Report
    from radconcord.db.session import Database

    url, data = server
    context, page = _rater_page(browser, url, 1280, 800)
    try:
        db = Database(f"sqlite:///{data / 'e2e.db'}", migrate=False)
        try:
            with db.begin() as s:
                for report in s.scalars(select(Report)):
                    report.text = LONG_REPORT
        finally:
            db.dispose()
        pairs = _pairs(data)
        formats = {oid: fmts for oid, fmts, _ in pairs}
        oid, nxt = next((oid, nxt) for oid, _, nxt in pairs
                        if nxt is not None and formats[nxt])
        _open_pair(page, url, oid, formats[oid])
        page.get_by_role("button", name="Increase Omission of finding (clinically "
                         "significant)", exact=True).click()
        page.locator(".rc-state").get_by_text("Saved").wait_for()
        page.get_by_role("button", name="Mark done").first.click()
        page.locator(f'.rc-grid[data-pair="{nxt}"]').wait_for()
        page.get_by_text("marked done").first.wait_for()
        grid = page.locator(f'.rc-grid[data-pair="{nxt}"]').bounding_box()
        assert grid["y"] + grid["height"] <= 800, grid
        for box in page.locator(".rc-report").all():
            assert box.evaluate("e => e.scrollHeight <= e.clientHeight + 1")
    finally:
        context.close()


def test_the_frontal_and_lateral_toolbar_is_one_row_on_a_laptop(server, browser):
    url, data = server
    context, page = _rater_page(browser, url, 1280, 800)
    try:
        oid = next(oid for oid, fmts, _ in _pairs(data) if fmts == ["png", "png"])
        _open(page, url, oid)
        page.get_by_role("button", name="Sync W/L").wait_for()
        bar = page.locator(".rcv-toolbar").bounding_box()
        button = page.get_by_role("button", name="Full screen").bounding_box()
        # One row: the last button sits on the toolbar's first (and only) line.
        assert bar["height"] < 2 * button["height"], (bar, button)
        assert abs(button["y"] - bar["y"]) < button["height"] / 2
    finally:
        context.close()


def test_a_stale_write_says_so_on_screen_beside_long_reports(server, browser):
    """A refused "+" (the pair changed in another window) on a laptop, ~120-word reports
    beside the film: the words "changed in another window" are on screen (not only in the
    line under the grid, which is below the fold there)."""
    url, data = server
    context, page = _rater_page(browser, url, 1280, 800)
    try:
        for external_id in ("demo-01-cr-pa",):
            _set_demo_texts(data, external_id, LONG_REPORT)
        _highlight_differences(data)  # one more line under the reports: the tightest case
        oid = next(oid for oid, fmts, _ in _pairs(data) if fmts == ["dicom"]
                   and _texts(data, oid) == (LONG_REPORT, LONG_REPORT))
        label = "Incorrect severity of finding (clinically insignificant)"
        _open_pair(page, url, oid, ["dicom"])
        # Another window of the same rater stores a count meanwhile.
        _store_elsewhere(data, oid)
        page.get_by_role("button", name=f"Increase {label}", exact=True).click()
        page.locator(f'.rc-grid[data-pair="{oid}"][data-state="stale"]').wait_for()
        shown = [b for b in (e.bounding_box() for e in
                             page.get_by_text("changed in another window").all())
                 if b is not None and b["y"] >= 0 and b["y"] + b["height"] <= 800]
        assert shown, "no 'changed in another window' on the 1280x800 screen"
    finally:
        context.close()


def _store_elsewhere(data, opaque_id: str) -> None:
    from radconcord.backend.services.accounts import auth
    from radconcord.backend.services.annotation import rating
    from radconcord.db.session import Database
    from tests.e2e.conftest import RATER, RATER_PASSWORD

    db = Database(f"sqlite:///{data / 'e2e.db'}", migrate=False)
    try:
        actor = auth.authenticate(db, username=RATER, password=RATER_PASSWORD)
        rating.set_count(db, actor, opaque_id=opaque_id, category=1, significant=True, count=2)
    finally:
        db.dispose()


def _highlight_differences(data) -> None:
    from radconcord.backend.services.accounts import auth
    from radconcord.backend.services.annotation import rating
    from radconcord.backend.services.study_admin import study_settings
    from radconcord.db.session import Database
    from tests.e2e.conftest import RATER, RATER_PASSWORD

    db = Database(f"sqlite:///{data / 'e2e.db'}", migrate=False)
    try:
        rater = auth.authenticate(db, username=RATER, password=RATER_PASSWORD)
        study = rating.rater_studies(db, rater)[0].name
        admin = auth.authenticate(db, username="admin", password="radconcord-admin")
        study_settings.update_study_settings(db, admin, study_name=study,
                                             highlight_differences=True)
    finally:
        db.dispose()


def test_an_ended_session_says_log_in_again_on_screen_beside_long_reports(server, browser):
    """A click after the session ended, on a laptop with ~120-word reports and highlights:
    "Not saved" and what to do (log in again) are on screen at once."""
    from radconcord.backend.services.accounts import sessions
    from radconcord.db.session import Database
    from tests.e2e.conftest import wait_for_cookie

    url, data = server
    context, page = _rater_page(browser, url, 1280, 800)
    try:
        _set_demo_texts(data, "demo-01-cr-pa", LONG_REPORT)
        _highlight_differences(data)
        oid = next(oid for oid, fmts, _ in _pairs(data) if fmts == ["dicom"]
                   and _texts(data, oid) == (LONG_REPORT, LONG_REPORT))
        _open_pair(page, url, oid, ["dicom"])
        db = Database(f"sqlite:///{data / 'e2e.db'}", migrate=False)
        try:
            assert sessions.revoke_session(db, token=wait_for_cookie(page), reason="test")
        finally:
            db.dispose()
        label = "Incorrect location/position of finding (clinically significant)"
        page.get_by_role("button", name=f"Increase {label}", exact=True).click()
        page.locator(f'.rc-grid[data-pair="{oid}"][data-state="login"]').wait_for()
        shown = [b for b in (e.bounding_box() for e in page.get_by_text("log in again").all())
                 if b is not None and b["y"] >= 0 and b["y"] + b["height"] <= 800]
        assert shown, "no 'log in again' on the 1280x800 screen"
    finally:
        context.close()
