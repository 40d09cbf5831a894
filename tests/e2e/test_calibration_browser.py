"""In a real browser: a rater completes a training item, sees the expert's counts beside
theirs (differences highlighted, with the pass against the qualification rule), then reaches
the study pairs once qualified (issue 14)."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from radconcord.backend.errors import PermissionDenied
from radconcord.backend.services.accounts import auth, seed
from radconcord.backend.services.accounts.seed import DEMO_STUDY
from radconcord.backend.services.annotation import rating
from radconcord.backend.services.quality import calibration
from radconcord.backend.services.study_admin import study_settings
from radconcord.backend.types import Actor
from radconcord.db.models import Pair
from radconcord.db.session import Database
from tests.e2e.conftest import (
    RATER,
    RATER_PASSWORD,
    cell,
    grid_of,
    log_in,
    start_server,
    step_up,
    wait_for_cookie,
)

pytestmark = pytest.mark.browser

OMISSION = "Omission of finding (clinically significant)"
# The expert: one significant false finding and two significant omissions (total 3).
EXPERT_CSV = ("pair_number,error_category,clinically_significant,num_errors\n"
              "1,1,true,1\n1,2,true,2\n")


def _prepare(data) -> tuple[str, str]:
    """Seed the demo, make pair 1 a training item and require 1 item within 3 to qualify.

    Returns the training item's opaque id and a study pair of rater1's.
    """
    db = Database(f"sqlite:///{data / 'e2e.db'}")
    try:
        seed.seed_demo(db)
        system = Actor.system()
        calibration.mark_from_csv(db, system, study_name=DEMO_STUDY, text=EXPERT_CSV)
        study_settings.update_study_settings(db, system, study_name=DEMO_STUDY,
                                             qualification_items=1, qualification_max_error=3)
        r1 = auth.authenticate(db, username=RATER, password=RATER_PASSWORD)
        [item] = rating.rater_queue(db, r1, study_name=DEMO_STUDY)
        with db.read() as s:
            study_pair = s.scalar(select(Pair.opaque_id).where(Pair.kind == "study")
                                  .order_by(Pair.position).limit(1))
        with pytest.raises(PermissionDenied, match=r"first \(0 of 1 passed\)"):
            rating.get_pair(db, r1, opaque_id=study_pair)
        return item.opaque_id, study_pair
    finally:
        db.dispose()


def _stored_kind(data, opaque_id: str) -> str:
    db = Database(f"sqlite:///{data / 'e2e.db'}", migrate=False)
    try:
        with db.read() as s:
            return s.scalar(select(Pair.kind).where(Pair.opaque_id == opaque_id))
    finally:
        db.dispose()


def _pair_of(page) -> str:
    return page.evaluate("() => new URL(location.href).searchParams.get('pair')")


def test_a_rater_sees_the_expert_counts_after_a_training_item_then_the_study(tmp_path,
                                                                            browser):
    data = tmp_path / "data"
    data.mkdir()
    item, _ = _prepare(data)
    with start_server(data) as (url, _):
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        page.set_default_timeout(60_000)
        page.goto(url)
        log_in(page, RATER, RATER_PASSWORD)
        page.get_by_text("Candidate report").wait_for()
        wait_for_cookie(page)
        # The gate: the rater starts on the training item, the only pair they can reach.
        expect(grid_of(page, item)).to_be_visible()
        assert _pair_of(page) == item
        expect(page.get_by_text("Training item: your counts")).to_have_count(0)

        step_up(page, OMISSION)
        expect(page.locator(".rc-state")).to_have_text(re.compile(r"^Saved "))
        page.get_by_role("button", name="Mark done").click()

        feedback = page.locator(".rc-feedback")
        expect(feedback).to_be_visible()
        expect(page.get_by_text("Training item: your counts / the expert's")).to_be_visible()
        omission = feedback.locator('td[data-cell="2:1"]')
        expect(omission).to_have_text("1 / 2")
        expect(omission).to_have_class(re.compile(r"\bdiffers\b"))
        false_finding = feedback.locator('td[data-cell="1:1"]')
        expect(false_finding).to_have_text("0 / 1")
        expect(feedback.locator('td[data-cell="3:1"]')).not_to_have_class(
            re.compile(r"\bdiffers\b"))
        expect(feedback.get_by_text("leaves out a finding that the reference reports")
               ).to_be_visible()
        expect(page.get_by_text("Passed: your total (1) is within 3 of the expert's (3)."
                                )).to_be_visible()
        # Done is final: the rater's cell can no longer change. (While the rerun draws the
        # read-only grid, the editable one may still be on the page for a moment.)
        expect(cell(page, OMISSION)).to_have_count(1)
        expect(cell(page, OMISSION)).not_to_be_editable()

        # Qualified: Next leads to the study pairs.
        page.get_by_role("button", name="Next").click()
        deadline = time.monotonic() + 30
        while _pair_of(page) == item and time.monotonic() < deadline:
            time.sleep(0.2)
        nxt = _pair_of(page)
        assert nxt != item and _stored_kind(data, nxt) == "study"
        expect(grid_of(page, nxt)).to_be_visible()
        expect(cell(page, OMISSION)).to_be_editable()
        expect(page.locator(".rc-feedback")).to_have_count(0)
        context.close()
