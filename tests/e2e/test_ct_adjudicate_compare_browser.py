"""Adjudicate and Compare show the CT viewer for a CT pair (issue 25), in chromium at 1280x800.

The app seeds both demo studies on its first page load. In "Demo study (CT)" rater1 and
rater2 disagree on a pair (rater1: one significant omission, rater2: none) and an adjudicator
opens it on the Adjudicate page: the volume pane is there, "Axial 21 / 40", and scrolls. A
pairwise study of the same synthetic phantom (imported through the import service into the
app's data folder) gives a judge a comparison: the Compare page shows the same CT viewer. A
study of the same case in error-records mode gives a rater the CT viewer beside the records
panel, where an error is marked by keyboard; and the study lead's disagreement explorer opens
a CT pair with the volume in it. Screenshots go to ``$RADCONCORD_SHOTS`` (default
/tmp/shots25).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from radconcord.backend.datasets import demo_ct
from radconcord.backend.scoring.runner import ScorePair, score
from radconcord.backend.services.accounts import auth
from radconcord.backend.services.accounts.seed import DEMO_CT_STUDY
from radconcord.backend.services.annotation import error_records, pairwise, rating
from radconcord.backend.services.quality import adjudication
from radconcord.backend.services.study_admin import study_settings
from radconcord.backend.services.study_admin.assignment import assign_raters
from radconcord.backend.services.transfer import imports
from radconcord.backend.types import Actor
from radconcord.db.models import Pair, Report, Study
from radconcord.db.session import Database
from tests.e2e.conftest import RATER, RATER_PASSWORD, log_in, wait_for_cookie

pytestmark = pytest.mark.browser

SHOTS = Path(os.environ.get("RADCONCORD_SHOTS", "/tmp/shots25"))
PANE = ".rcv-pane.rcv-volume"
RATER2, RATER2_PASSWORD = "rater2", "radconcord-rater2"
JUDGE, JUDGE_PASSWORD = "ctjudge", "ctjudge-password-1"
CMP_JUDGE, CMP_PASSWORD = "ctcompare", "ctcompare-password-1"
PAIRWISE_STUDY = "CT pairwise study"
RECORDS_STUDY = "CT records study"
REC_RATER, REC_PASSWORD = "ctrecords", "ctrecords-password-1"
LEAD, LEAD_PASSWORD = "ctlead", "ctlead-password-1"


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
def ct_setup(server, browser, tmp_path_factory) -> dict:
    """A disputed pair of the demo CT study with an adjudicator, a pairwise study of the
    phantom with a judge, an error-records study of it with a rater and a study lead; the
    disputed pair's opaque id (``pair``) and a scored pair's id (``explorer_pair``)."""
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

        imports.import_cases(db, system, study_name=RECORDS_STUDY,
                             cases=[demo_ct.ct_demo_case(tmp_path_factory.mktemp("ct-records"))])
        study_settings.update_study_settings(db, system, study_name=RECORDS_STUDY,
                                             annotation_mode="error_records")
        auth.create_user(db, system, username=REC_RATER, password=REC_PASSWORD, role="rater")
        assign_raters(db, system, study_name=RECORDS_STUDY, rater_usernames=[REC_RATER],
                      raters_per_pair=1, seed=0)

        # The explorer lists a study once it has scores: BLEU on the demo CT study's pairs.
        auth.create_user(db, system, username=LEAD, password=LEAD_PASSWORD, role="admin")
        with db.read() as s:
            rows = s.execute(
                select(Pair.id, Pair.input_hash, Report.text, Pair.candidate_id)
                .join(Study, Study.id == Pair.study_id)
                .join(Report, Report.id == Pair.reference_id)
                .where(Study.name == DEMO_CT_STUDY).order_by(Pair.position)).all()
            texts = {r.id: r.text for r in s.scalars(select(Report))}
        score([ScorePair(id=str(r.id), reference=r.text, candidate=texts[r.candidate_id],
                         stored_hash=r.input_hash) for r in rows], ["bleu4"], db=db,
              device="cpu")
        return {"pair": pair, "explorer_pair": rows[0].id}
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
        pair = ct_setup["pair"]
        page.goto(f"{url}/adjudicate?study={quote(DEMO_CT_STUDY)}&pair={pair}")
        page.locator(f".rcv-root[data-pair-key='{pair}'][data-ready='true'] {PANE}"
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


def test_error_records_are_marked_beside_the_ct_viewer(server, browser, ct_setup):
    url, data = server
    context, page = _log_in(browser, url, REC_RATER, REC_PASSWORD)
    try:
        panel = page.locator(".rc-er")
        expect(panel).to_be_visible()
        page.locator(f".rcv-root[data-ready='true'] {PANE}").wait_for()
        _check_scrolls(page)
        # The records panel sits beside the volume, within the window.
        box = panel.bounding_box()
        assert box is not None and box["x"] + box["width"] <= 1280
        # Keyboard only: the first two words of the candidate, category 1, significant.
        panel.locator(".rc-er-box").focus()
        for key in ("ArrowRight", "Shift+ArrowRight", "1", "s", "Enter"):
            page.keyboard.press(key)
        expect(panel.locator(".rc-er-item")).to_have_count(1)
        page.wait_for_function("() => new URL(location.href).searchParams.get('pair')")
        pair = page.evaluate("() => new URL(location.href).searchParams.get('pair')")
        # The arrow keys went to the words, not to the volume: still on the same slice.
        assert _volume_shown(page, demo_ct.SHAPE[0] // 2 + 1)["count"] == demo_ct.SHAPE[0]
        db = _db(data)
        try:
            actor = auth.authenticate(db, username=REC_RATER, password=REC_PASSWORD)
            assert pair in [q.opaque_id for q in
                            rating.rater_queue(db, actor, study_name=RECORDS_STUDY)]
            stored = error_records.list_records(db, actor, opaque_id=pair)
        finally:
            db.dispose()
        assert [(r.kind, r.category, r.significant) for r in stored.records] == [
            ("span", 1, True)]
        body = page.locator("body").inner_text()
        assert not [s for s in demo_ct.CANDIDATES if s in body]  # blinded
        _shot(page, "ct-error-records-1280x800")
    finally:
        context.close()


def test_the_explorer_shows_the_volume_of_a_ct_pair(server, browser, ct_setup):
    url, _ = server
    context, page = _log_in(browser, url, LEAD, LEAD_PASSWORD)
    try:
        page.goto(f"{url}/explorer?study={quote(DEMO_CT_STUDY)}"
                  f"&pair={ct_setup['explorer_pair']}")
        expect(page.get_by_role("heading", name="Disagreement explorer")).to_be_visible()
        expect(page.get_by_text("Pair 1: case", exact=False).first).to_be_visible()
        pane = page.locator(f".rcv-root[data-ready='true'] {PANE}")
        pane.wait_for()
        pane.scroll_into_view_if_needed()
        _check_scrolls(page)
        _shot(page, "ct-explorer-1280x800")
    finally:
        context.close()
