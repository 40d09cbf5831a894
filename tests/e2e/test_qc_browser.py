"""End to end: the lead opens Quality control (``streamlit run`` + chromium, 1280x800).

The data folder holds the reviewer study of ``tests/reviewer_study.py`` (3 raters, every pair
done), times on task per pair, hidden repeats for rita (one answered differently) and a flag
with a note. The lead sees the monitoring table with the flagged rater's row highlighted and
the flag in words, both plots, the intra-rater table and the flagged pair.
"""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import select, update

from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import flags
from radconcord.backend.types import Actor
from radconcord.db.models import PAIR_REPEAT, Assignment, Pair, Rating, Study, User
from radconcord.db.session import Database
from tests.e2e.conftest import log_in, start_server, wait_for_cookie
from tests.reviewer_study import STUDY, build_reviewer_study

pytestmark = pytest.mark.browser

LEAD, LEAD_PASSWORD = "lead", "lead-password-1"
RATERS = {"rita": "rita-password-1", "ravi": "ravi-password-1", "rosa": "rosa-password-1"}


def _build(data, monkeypatch) -> None:
    data.mkdir()
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(data))
    db = Database(f"sqlite:///{data / 'e2e.db'}")
    try:
        info = auth.create_user(db, Actor.system(), username=LEAD, password=LEAD_PASSWORD,
                                role="admin")
        lead = Actor(user_id=info.user_id, username=info.username, role=info.role)
        built = build_reviewer_study(db, lead, raters=RATERS)
        rita = next(a for a in built.raters if a.username == "rita")
        with db.begin() as s:
            study = s.scalar(select(Study).where(Study.name == STUDY))
            users = dict(s.execute(select(User.username, User.id)).all())
            pairs = list(s.scalars(select(Pair).where(Pair.study_id == study.id)
                                   .order_by(Pair.position)))
            # Steady readers at ~60 s a pair; rosa at 2-3 s a pair (an outlier).
            for name, base in (("rita", 55.0), ("ravi", 60.0), ("rosa", 2.0)):
                for i, p in enumerate(pairs):
                    s.execute(update(Assignment).where(
                        Assignment.pair_id == p.id, Assignment.rater_id == users[name])
                        .values(active_seconds=base + (i % 4) * (0.3 if name == "rosa" else 5)))
            for n, src in enumerate(pairs[:3]):
                rep = Pair(study_id=study.id, case_id=src.case_id,
                           reference_id=src.reference_id, candidate_id=src.candidate_id,
                           source=src.source, opaque_id=f"e2erepeat{n}",
                           position=len(pairs) + n, input_hash=src.input_hash,
                           kind=PAIR_REPEAT, repeat_of_id=src.id)
                s.add(rep)
                s.flush()
                s.add(Assignment(study_id=study.id, rater_id=users["rita"], pair_id=rep.id,
                                 order_index=100 + n, active_seconds=40.0,
                                 completed_at=dt.datetime.now(dt.UTC)))
                for cell in s.scalars(select(Rating).where(Rating.pair_id == src.id,
                                                           Rating.rater_id == users["rita"])):
                    s.add(Rating(rater_id=cell.rater_id, pair_id=rep.id, category=cell.category,
                                 significant=cell.significant,
                                 count=cell.count + (1 if n == 2 and cell.category == 1 else 0)))
            flagged = pairs[4].opaque_id
        flags.flag_pair(db, rita, opaque_id=flagged, note="Lateral view missing?")
    finally:
        db.dispose()


def test_the_lead_sees_monitoring_repeats_and_flags(browser, tmp_path, monkeypatch):
    data = tmp_path / "data"
    _build(data, monkeypatch)
    with start_server(data, {"RADCONCORD_SEED_DEMO": "0"}) as (url, _):
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        page.set_default_timeout(60_000)
        try:
            page.goto(url)
            log_in(page, LEAD, LEAD_PASSWORD)
            page.get_by_text("Studies & progress").first.wait_for()
            wait_for_cookie(page)
            page.goto(f"{url}/qc")
            page.get_by_role("heading", name="Rater monitoring").wait_for()
            # rosa's median time per pair is far below the others': flagged, in words.
            page.get_by_text("rosa", exact=False).first.wait_for()
            page.get_by_text("median time per pair 2.", exact=False).first.wait_for()
            page.get_by_text("is far below the other raters'", exact=False).first.wait_for()
            # Both plots drew (plotly's SVG), the intra-rater table and the flag are there.
            page.locator(".js-plotly-plot").nth(1).wait_for()
            page.get_by_role("heading", name="Intra-rater agreement").wait_for()
            # rosa's pairs under 3 s, listed by number in the outlier expander.
            page.get_by_text("Outlier pairs (pair numbers)").click()
            page.get_by_test_id("stExpander").get_by_test_id("stDataFrame").wait_for()
            # The grid draws on a canvas; its header cells are kept (hidden) for screen readers.
            page.locator("th", has_text="Slow limit (Q3 + 3 IQR)").first.wait_for(
                state="attached")
            page.get_by_role("heading", name="Flagged pairs").scroll_into_view_if_needed()
            page.locator("td", has_text="Lateral view missing?").first.wait_for(
                state="attached")
            assert page.locator("[data-testid='stDataFrame']").count() >= 3
            page.get_by_text("No training items in this study.").wait_for()
            assert page.get_by_text("Traceback").count() == 0
        finally:
            context.close()
