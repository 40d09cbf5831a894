"""AppTest (issue 24, the study lead's first ten minutes): the seeded demo study comes with
"demo ratings (constructed)", and the admin's landing page has a getting-started panel.

The demo is seeded as a fresh start seeds it (``seed.seed_demo``) and bleu4/rougeL are scored
offline (as the first start's worker does); no one rates. The dashboard then shows
correlations over all 24 pairs, the QC page a table of the three constructed raters, the HTML
report and the export manifest the label; rater1 and rater2 still have 24 open pairs each.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from sqlalchemy import select

from radconcord.backend import jobs
from radconcord.backend.datasets.demo import (
    CONSTRUCTED_LABEL,
    NoiseModel,
    constructed_counts,
    constructed_errors,
)
from radconcord.backend.scoring.runner import ScorePair, score
from radconcord.backend.services.accounts import auth, seed
from radconcord.backend.services.annotation import rating
from radconcord.backend.services.evaluation import correlation, reports
from radconcord.backend.services.quality import qc
from radconcord.backend.services.scores import score_now as score_service
from radconcord.backend.services.study_admin import (
    demo_ratings,
    getting_started,
    progress,
    studies,
)
from radconcord.backend.services.transfer import exports
from radconcord.backend.types import Actor
from radconcord.db.models import Case, Pair, Rating, Report, User
from radconcord.db.session import Database

REPO = Path(__file__).resolve().parents[2]
VIEWS = REPO / "webapp" / "views"
APP = REPO / "webapp" / "app.py"
STUDY = seed.DEMO_STUDY
CONSTRUCTED = [u for u, _ in demo_ratings.CONSTRUCTED_RATERS]


def _score(db: Database) -> None:
    with db.read() as s:
        rows = s.execute(select(Pair.id, Pair.input_hash, Pair.reference_id,
                                Pair.candidate_id)).all()
        text = {r.id: r.text for r in s.scalars(select(Report))}
    score([ScorePair(id=str(r.id), reference=text[r.reference_id],
                     candidate=text[r.candidate_id], stored_hash=r.input_hash) for r in rows],
          ["bleu4", "rougeL"], db=db, device="cpu")


@pytest.fixture(scope="session")
def _demo_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("demo-template") / "data"
    mp = pytest.MonkeyPatch()
    mp.setenv("RADCONCORD_DATA_DIR", str(data))
    try:
        db = Database(f"sqlite:///{data / 'demo.db'}")
        seed.seed_demo(db)
        _score(db)
        db.dispose()
    finally:
        mp.undo()
    return data


@pytest.fixture
def demo(tmp_path, monkeypatch, _demo_template):
    data = tmp_path / "data"
    shutil.copytree(_demo_template, data)
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(data))
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{data / 'demo.db'}")
    monkeypatch.setenv("RADCONCORD_SEED_DEMO", "0")
    db = Database()
    (info,) = [u for u in auth.list_users(db, Actor.system()) if u.username == "admin"]
    admin = Actor(user_id=info.user_id, username="admin", role="admin")
    yield db, admin
    db.dispose()


def _user(db: Database, name: str) -> Actor:
    (info,) = [u for u in auth.list_users(db, Actor.system()) if u.username == name]
    return Actor(user_id=info.user_id, username=info.username, role=info.role)


# -- the seeded numbers ---------------------------------------------------------------------


def test_the_seeded_demo_has_three_constructed_raters_and_open_pairs_for_the_demo_raters(demo):
    db, admin = demo
    prog = progress.study_progress(db, admin, study_name=STUDY)
    by_rater = {r.username: (r.completed, r.total) for r in prog.raters}
    assert by_rater == {**{u: (24, 24) for u in CONSTRUCTED},
                        "rater1": (0, 24), "rater2": (0, 24)}
    # The rater screens are not empty: both demo raters start on an open pair.
    for name in ("rater1", "rater2"):
        (study,) = rating.rater_studies(db, _user(db, name))
        assert study.completed == 0 and study.total == 24
        assert study.resume_opaque_id is not None
    # Nobody logs in as a constructed rater or assigns them work.
    users = {u.username: u for u in auth.list_users(db, Actor.system())}
    assert all(not users[u].active for u in CONSTRUCTED)


def test_constructed_counts_are_the_written_errors_plus_the_documented_noise(demo):
    db, _ = demo
    errors = constructed_errors()
    assert len(errors) == 24 and all(errors.values())
    with db.read() as s:
        rows = s.execute(
            select(User.username, Case.external_id, Pair.source, Rating.category,
                   Rating.significant, Rating.count)
            .join(Rating, Rating.rater_id == User.id).join(Pair, Pair.id == Rating.pair_id)
            .join(Case, Case.id == Pair.case_id).where(User.username.in_(CONSTRUCTED))).all()
    stored: dict = {}
    for r in rows:
        stored.setdefault((r.username, r.external_id, r.source), {})[
            (r.category, r.significant)] = r.count
    assert len(stored) == 3 * 24
    for (rater, case_id, source), cells in stored.items():
        assert cells == constructed_counts(errors[(case_id, source)], rater=rater,
                                           case_id=case_id, source=source)
    # The noise changes something, but the raters agree far more than chance.
    totals = {key: sum(c.values()) for key, c in stored.items()}
    written = {k: len(v) for k, v in errors.items()}
    differ = sum(totals[(r, c, s)] != written[(c, s)] for (r, c, s) in totals)
    assert 0 < differ < 72 // 2
    # The study says what they are and how they were made.
    (summary,) = studies.list_studies(db, Actor.system())
    assert CONSTRUCTED_LABEL in summary.description
    recorded = summary.provenance["constructed_ratings"]
    assert recorded["label"] == CONSTRUCTED_LABEL and recorded["raters"] == CONSTRUCTED
    assert recorded["noise_model"] == NoiseModel().as_dict()
    # Seeding again adds nothing.
    again = seed.seed_demo(db)
    assert again.constructed_assignments == 0 and again.assignments_created == 0


def test_the_dashboard_shows_the_demo_correlations_labelled(demo, make_app, all_text):
    db, admin = demo
    at = make_app(admin, script=VIEWS / "dashboard.py")
    at.toggle(key="dash_live").set_value(False)
    at = at.run()
    assert not at.exception and not at.error
    assert CONSTRUCTED_LABEL in "\n".join(w.value for w in at.warning)
    expected = correlation.study_correlation(db, admin, study_name=STUDY, resamples=1000,
                                             seed=0)
    table = next(t.value for t in at.dataframe if "Kendall tau-b" in t.value.columns)
    shown = dict(zip(table["Metric"], table["Kendall tau-b"], strict=True))
    for m in expected.metrics:
        assert m.n == 24
        assert float(shown[m.key]) == pytest.approx(m.kendall_tau_b, abs=1e-3)
    assert {"bleu4", "rougeL"} <= set(shown)
    assert "No correlations yet" not in all_text(at)


def test_the_qc_page_shows_the_table_and_the_label(demo, make_app):
    db, admin = demo
    at = make_app(admin, script=VIEWS / "qc.py")
    assert not at.exception and not at.error
    assert CONSTRUCTED_LABEL in "\n".join(w.value for w in at.warning)
    frame = at.dataframe[0].value
    assert sorted(frame["Rater"]) == sorted([*CONSTRUCTED, "rater1", "rater2"])
    done = dict(zip(frame["Rater"], frame["Done"], strict=True))
    assert done["constructed_a"] == "24 / 24" and done["rater1"] == "0 / 24"


def test_the_html_report_and_the_export_manifest_carry_the_label(demo, tmp_path):
    db, admin = demo
    bundle = reports.render_report(db, admin, study_name=STUDY, resamples=50, seed=0)
    assert CONSTRUCTED_LABEL in bundle.html
    for name in CONSTRUCTED:
        assert name in bundle.html
    exports.export_study(db, admin, study_name=STUDY, fmt="jsonl", out_dir=tmp_path / "out")
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert CONSTRUCTED_LABEL in manifest["ratings_note"]
    assert manifest["study"]["provenance"]["constructed_ratings"]["raters"] == CONSTRUCTED


# -- the getting-started panel --------------------------------------------------------------


def _links(at) -> list:
    """The panel's step links ("1. Import a study", ...), not other links of the page."""
    return [link for link in at.get("page_link") if link.proto.label[:1].isdigit()]


def _steps(at) -> list[str]:
    return [link.proto.label for link in _links(at)]


def test_the_admin_lands_on_a_getting_started_panel(demo, make_app, all_text):
    db, admin = demo
    at = make_app(admin)  # the router: the admin's landing page
    assert not at.exception
    assert "Getting started: Demo study" in [h.value for h in at.subheader]
    assert _steps(at) == ["1. Import a study", "2. Assign raters", "3. Raters rate",
                          "4. Score metrics", "5. Read the dashboard",
                          "6. Report and export"]
    targets = {link.proto.label: link.proto.page for link in _links(at)}
    assert targets["2. Assign raters"] == "assign"
    assert targets["5. Read the dashboard"] == "dashboard"
    assert targets["6. Report and export"] == "export"
    text = all_text(at)
    assert "**done**: Demo study: 24 pairs." in text
    assert "**in progress**: 72 of 120 assignments done" in text
    assert "**done**: Correlations over 24 rated pairs." in text

    # Hidden, it stays hidden; the sidebar's Help menu brings it back.
    at = at.button(key="getting_started_hide").click().run()
    assert not at.exception
    assert not [h for h in at.subheader if h.value.startswith("Getting started")]
    at = at.sidebar.button(key="help_getting_started").click().run()
    assert not at.exception
    assert "Getting started: Demo study" in [h.value for h in at.subheader]


def test_the_panel_says_what_is_missing(study_env, make_app, all_text):
    """An imported, assigned, unrated, unscored study: rate and score are to do, and the
    admin's next step is Score (rating is the raters' work, not an action of the admin)."""
    at = make_app(study_env.admin)  # the router: the admin lands on Studies & progress
    assert not at.exception
    text = all_text(at)
    assert "Next: **Score metrics**" in text
    assert "Next: **Raters rate**" not in text
    assert "correlations need 2 rated pairs" in text
    assert "No metric values yet" in text
    assert "**waiting**: Waiting for metric values and 2 rated pairs." in text


def _complete_first_pair(env, rater: Actor) -> None:
    (item, *_) = rating.rater_queue(env.db, rater, study_name=env.study)
    rating.complete_pair(env.db, rater, opaque_id=item.opaque_id, confirm_zero=True)


def test_with_ratings_in_progress_and_no_scores_next_is_score(study_env, make_app, all_text):
    """Ratings in progress (one pair done by one rater), not scored: Next is Score, which
    the admin can do now, and not "Raters rate", which only the raters can move."""
    _complete_first_pair(study_env, study_env.rater)
    guide = getting_started.getting_started(study_env.db, study_env.admin)
    rate = {s.key: s for s in guide.steps}["rate"]
    assert rate.state != "done" and not rate.actionable
    assert rate.waiting_for == "raters: 0 of 3 pairs fully rated"  # 1 of 2 raters done
    assert guide.next_step is not None and guide.next_step.key == "score"
    assert guide.waiting is None

    at = make_app(study_env.admin)
    assert not at.exception
    text = all_text(at)
    assert "Next: **Score metrics**. No metric values yet" in text
    assert "**to do**: 1 of 6 assignments done" in text


def test_when_only_raters_can_move_the_panel_says_what_it_waits_for(study_env, make_app,
                                                                    all_text):
    """Scored, one pair fully rated (below the 2 a correlation needs): no step is the
    admin's to act on, so Next says what the study waits for instead of naming a step."""
    _score(study_env.db)
    _complete_first_pair(study_env, study_env.rater)
    first = rating.rater_queue(study_env.db, study_env.rater, study_name=study_env.study)[0]
    # The other rater completes the same pair (a pair's opaque id is the same for every
    # rater), so it is fully rated.
    rating.complete_pair(study_env.db, study_env.other_rater, opaque_id=first.opaque_id,
                         confirm_zero=True)
    guide = getting_started.getting_started(study_env.db, study_env.admin)
    assert guide.next_step is None
    assert guide.waiting == "Waiting for raters: 1 of 3 pairs fully rated."

    at = make_app(study_env.admin)
    assert not at.exception
    assert "Next: Waiting for raters: 1 of 3 pairs fully rated." in all_text(at)


def test_qc_does_not_call_the_constructed_raters_bots(demo):
    """Constructed ratings share one completion instant and carry no time on task; QC's
    absolute floors (a pace, a time per pair) must not read that as a script's pace."""
    db, admin = demo
    mon = qc.monitoring(db, admin, STUDY)
    constructed = [r for r in mon.raters if r.rater in CONSTRUCTED]
    assert len(constructed) == 3 and all(r.done == 24 for r in constructed)
    for r in constructed:
        assert not any("implausib" in f for f in r.flags), (r.rater, r.flags)


def test_the_panel_scores_an_unscored_study_from_its_score_step(study_env, make_app, all_text,
                                                                 monkeypatch):
    """The score step carries "Score now": a freshly imported study is scored from the panel."""
    monkeypatch.setattr(score_service, "offline_families",
                        lambda catalog=None: ["bleu", "rouge"])
    at = make_app(study_env.admin)
    assert not at.exception
    assert "Score now queues: bleu, rouge." in all_text(at)
    assert jobs.list_jobs(study_env.db) == []
    at.button(key="getting_started_score_now_button").click().run()
    assert not at.exception and not at.error
    (job,) = jobs.list_jobs(study_env.db, kind="score")
    assert job.metrics == ("bleu", "rouge")
