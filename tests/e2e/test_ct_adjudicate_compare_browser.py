"""Adjudicate and Compare show the CT viewer for a CT pair (issue 25), in chromium at 1280x800.

The app seeds both demo studies on its first page load. In "Demo study (CT)" rater1 and
rater2 disagree on a pair (rater1: one significant omission, rater2: none) and an adjudicator
opens it on the Adjudicate page: the volume pane is there, "Axial 21 / 40", and scrolls. A
pairwise study of the same synthetic phantom (imported through the import service into the
app's data folder) gives a judge a comparison: the Compare page shows the same CT viewer.
Screenshots go to ``$RADCONCORD_SHOTS`` (default /tmp/shots25).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from playwright.sync_api import expect

from radconcord.backend.datasets import demo_ct
from radconcord.backend.services.accounts import auth
from radconcord.backend.services.accounts.seed import DEMO_CT_STUDY
from radconcord.backend.services.annotation import pairwise, rating
from radconcord.backend.services.quality import adjudication
from radconcord.backend.services.study_admin import study_settings
from radconcord.backend.services.transfer import imports
from radconcord.backend.types import Actor
from radconcord.db.session import Database
from tests.e2e.conftest import RATER, RATER_PASSWORD, log_in, wait_for_cookie

pytestmark = pytest.mark.browser

SHOTS = Path(os.environ.get("RADCONCORD_SHOTS", "/tmp/shots25"))
PANE = ".rcv-pane.rcv-volume"
RATER2, RATER2_PASSWORD = "rater2", "radconcord-rater2"
JUDGE, JUDGE_PASSWORD = "ctjudge", "ctjudge-password-1"
CMP_JUDGE, CMP_PASSWORD = "ctcompare", "ctcompare-password-1"
PAIRWISE_STUDY = "CT pairwise study"


def _db(data: Path) -> Database:
    return Database(f"sqlite:///{data / 'e2e.db'}", migrate=False)


def _wait_for_ct_demo(data: Path, timeout_s: float = 90) -> None:
    """The first page load seeds the demo, the CT study last; wait until rater1 has it."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            db = _db(data)
            try:
                r1 = auth.authenticate(db, username=RATER, password=RATER_PASSWORD)
                if DEMO_CT_STUDY in [s.name for s in rating.rater_studies(db, r1)]:
                    return
            finally:
                db.dispose()
        except Exception:  # noqa: BLE001 - the file, its tables or the rows may not exist yet
            pass
        assert time.monotonic() < deadline, "the demo CT study was not seeded"
        time.sleep(0.3)


@pytest.fixture(scope="module")
def ct_setup(server, browser, tmp_path_factory) -> str:
    """A disputed pair of the demo CT study with an adjudicator, and a pairwise study of the
    phantom with a judge; the disputed pair's opaque id."""
    url, data = server
    context = browser.new_context()
    context.new_page().goto(url)  # the first page load seeds the demo
    _wait_for_ct_demo(data)
    context.close()
    previous = os.environ.get("RADCONCORD_DATA_DIR")
    os.environ["RADCONCORD_DATA_DIR"] = str(data)  # the app's data folder: the volume goes there
    db = _db(data)
    system = Actor.system()
    try:
        r1 = auth.authenticate(db, username=RATER, password=RATER_PASSWORD)
        r2 = auth.authenticate(db, username=RATER2, password=RATER2_PASSWORD)
        pair = rating.rater_queue(db, r1, study_name=DEMO_CT_STUDY)[0].opaque_id
        saved = rating.set_counts(db, r1, opaque_id=pair, cells={(2, True): 1},
                                  expected_version=None)
        rating.complete_pair(db, r1, opaque_id=pair, expected_version=saved.version)
        rating.complete_pair(db, r2, opaque_id=pair, confirm_zero=True)
        auth.create_user(db, system, username=JUDGE, password=JUDGE_PASSWORD, role="rater")
        adjudication.set_adjudicator(db, system, study_name=DEMO_CT_STUDY, username=JUDGE)

        src = tmp_path_factory.mktemp("ct-pairwise")
        imports.import_cases(db, system, study_name=PAIRWISE_STUDY,
                             cases=[demo_ct.ct_demo_case(src)])
        study_settings.update_study_settings(db, system, study_name=PAIRWISE_STUDY,
                                             annotation_mode="pairwise")
        pairwise.make_comparisons(db, system, PAIRWISE_STUDY, seed=0)
        auth.create_user(db, system, username=CMP_JUDGE, password=CMP_PASSWORD, role="rater")
        pairwise.assign_judgements(db, system, PAIRWISE_STUDY, [CMP_JUDGE], 1, 0)
        return pair
    finally:
        db.dispose()
        if previous is None:
            os.environ.pop("RADCONCORD_DATA_DIR", None)
        else:
            os.environ["RADCONCORD_DATA_DIR"] = previous


def _log_in(browser, url: str, user: str, password: str):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(url)
    log_in(page, user, password)
    wait_for_cookie(page)
    return context, page


def _volume_shown(page, index: int) -> dict:
    page.wait_for_function(
        f"() => {{ const p = document.querySelector({PANE!r});"
        f" return p && p.dataset.shownSlice === 'axial:{index}'; }}")
    return page.evaluate(f"""() => {{
        const p = document.querySelector({PANE!r});
        return {{count: +p.dataset.sliceCount, text: p.querySelector('.rcv-ov-tr').textContent,
                 box: p.getBoundingClientRect().toJSON()}};
    }}""")


def _check_scrolls(page) -> None:
    """The pane is the CT viewer: slice k of N, and the wheel moves one slice."""
    slices = demo_ct.SHAPE[0]
    mid = slices // 2
    state = _volume_shown(page, mid)
    assert state["count"] == slices
    assert state["text"].startswith(f"Axial {mid + 1} / {slices} · ")
    box = state["box"]
    assert box["width"] > 300 and box["height"] > 300
    # The plane buttons are whole, even in a narrow pane (Compare): none clipped under the
    # slider or outside the pane.
    seg = page.evaluate(f"""() => {{
        const p = document.querySelector({PANE!r});
        const r = (el) => el.getBoundingClientRect().toJSON();
        return {{buttons: [...p.querySelectorAll('.rcv-volbar .rcv-seg .rcv-btn')].map(r),
                 seg: r(p.querySelector('.rcv-volbar .rcv-seg')),
                 slider: r(p.querySelector('.rcv-slider'))}};
    }}""")
    assert len(seg["buttons"]) == 3
    assert seg["buttons"][-1]["right"] <= seg["seg"]["right"] + 0.5 <= seg["slider"]["left"]
    assert seg["slider"]["right"] <= box["right"]
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.wheel(0, 100)
    assert _volume_shown(page, mid + 1)["text"].startswith(f"Axial {mid + 2} / {slices} · ")


def _shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def test_adjudicate_shows_the_ct_viewer_for_a_disputed_ct_pair(server, browser, ct_setup):
    url, _ = server
    context, page = _log_in(browser, url, JUDGE, JUDGE_PASSWORD)
    try:
        expect(page.get_by_role("heading", name="Adjudicate")).to_be_visible()
        page.goto(f"{url}/adjudicate?study={quote(DEMO_CT_STUDY)}&pair={ct_setup}")
        page.locator(f".rcv-root[data-pair-key='{ct_setup}'][data-ready='true'] {PANE}"
                     ).wait_for()
        _check_scrolls(page)
        # The raters' disagreement is on the page beside the volume.
        expect(page.get_by_text("Reference report").first).to_be_visible()
        _shot(page, "ct-adjudicate-1280x800")
    finally:
        context.close()


def test_compare_shows_the_ct_viewer_for_a_ct_comparison(server, browser, ct_setup):
    url, _ = server
    context, page = _log_in(browser, url, CMP_JUDGE, CMP_PASSWORD)
    try:
        page.get_by_text("Candidate A", exact=True).wait_for()
        page.locator(f".rcv-root[data-ready='true'] {PANE}").wait_for()
        _check_scrolls(page)
        body = page.locator("body").inner_text()
        assert not [s for s in demo_ct.CANDIDATES if s in body]  # blinded
        _shot(page, "ct-compare-1280x800")
    finally:
        context.close()
