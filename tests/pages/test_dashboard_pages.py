"""AppTest: dashboard, disagreement explorer and probes pages (admin), and raters kept out.

The page scripts are run directly (as the other admin page tests do); the seeded study of
``conftest.py`` gets completed ratings from both raters and real bleu/rougeL scores from the
scoring runner, so the pages draw from the same services the tests compare against.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from backend import jobs
from backend.jobs.worker import Worker
from backend.scoring.runner import ScorePair, score
from backend.services import analysis, rating
from db.models import Pair, Report

VIEWS = Path(__file__).resolve().parents[2] / "webapp" / "views"
PAGES = ["dashboard.py", "explorer.py", "probes.py"]


def _rate_and_score(env) -> list[int]:
    """Both raters complete every pair with different counts; bleu and rouge are scored."""
    for rater, offset in ((env.rater, 0), (env.other_rater, 1)):
        for i, item in enumerate(rating.rater_queue(env.db, rater, study_name=env.study)):
            rating.set_count(env.db, rater, opaque_id=item.opaque_id, category=1,
                             significant=True, count=(i + offset) % 3)
            rating.set_count(env.db, rater, opaque_id=item.opaque_id, category=2,
                             significant=False, count=i)
            rating.complete_pair(env.db, rater, opaque_id=item.opaque_id, confirm_zero=True)
    with env.db.begin() as s:
        rows = s.execute(
            select(Pair.id, Pair.input_hash, Report.text, Pair.candidate_id)
            .join(Report, Report.id == Pair.reference_id).order_by(Pair.position)
        ).all()
        cands = {r.id: r.text for r in s.scalars(select(Report))}
    pairs = [ScorePair(id=str(r.id), reference=r.text, candidate=cands[r.candidate_id],
                       stored_hash=r.input_hash) for r in rows]
    score(pairs, ["bleu4", "rougeL"], db=env.db, device="cpu")
    return [r.id for r in rows]


@pytest.fixture
def rated_env(study_env):
    study_env.pair_ids = _rate_and_score(study_env)
    return study_env


@pytest.mark.parametrize("page", PAGES)
def test_a_rater_gets_only_the_access_error(rated_env, make_app, all_text, page):
    at = make_app(rated_env.rater, script=VIEWS / page)
    assert not at.exception
    assert [e.value for e in at.error] == ["this action needs an admin account"]
    assert not at.dataframe and not at.title and not at.get("plotly_chart")
    assert rated_env.study not in all_text(at)


def test_dashboard_shows_the_tau_table_and_plots(rated_env, make_app, all_text):
    at = make_app(rated_env.admin, script=VIEWS / "dashboard.py")
    assert not at.exception and not at.error
    assert at.title[0].value == "Agreement dashboard"
    expected = analysis.study_correlation(rated_env.db, rated_env.admin,
                                          study_name=rated_env.study, resamples=1000, seed=0)
    table = at.dataframe[0].value
    assert list(table["Metric"]) == [m.key for m in expected.metrics]
    assert list(table["Kendall tau-b"]) == pytest.approx(
        [m.kendall_tau_b for m in expected.metrics], nan_ok=True)
    assert set(table["n"]) == {3}
    assert set(table["Direction"]) == {"higher is better"}
    # Forest plot, scatter, per-source distribution and agreement bars.
    charts = at.get("plotly_chart")
    assert len(charts) == 4
    assert "Reproduction: ours next to the published values" in all_text(at)
    repro = at.dataframe[1].value
    bleu_row = repro[repro["Our key"] == "bleu4"].iloc[0]
    assert bleu_row["Published tau-b"] == pytest.approx(0.345)
    assert "bleu" in bleu_row["Our signature"]
    assert [m.value for m in at.metric][:2] == ["3", "3"]


def test_dashboard_significant_target_and_no_bootstrap(rated_env, make_app):
    at = make_app(rated_env.admin, script=VIEWS / "dashboard.py")
    at.radio(key="dash_target").set_value("Significant errors only")
    at.number_input(key="dash_resamples").set_value(0)
    at.run()
    assert not at.exception and not at.error
    expected = analysis.study_correlation(rated_env.db, rated_env.admin,
                                          study_name=rated_env.study, significant_only=True,
                                          resamples=0)
    table = at.dataframe[0].value
    assert list(table["Kendall tau-b"]) == pytest.approx(
        [m.kendall_tau_b for m in expected.metrics], nan_ok=True)
    assert set(table["tau 95% CI"]) == {""}
    assert any("switch the target" in w.value for w in at.warning)


def test_dashboard_without_scores_warns_and_still_draws(study_env, make_app):
    at = make_app(study_env.admin, script=VIEWS / "dashboard.py")
    assert not at.exception and not at.error
    assert any("No correlations yet" in w.value for w in at.warning)


def test_explorer_opens_the_pair_from_query_params(rated_env, make_app, all_text):
    pair_id = rated_env.pair_ids[1]
    at = make_app(rated_env.admin, script=VIEWS / "explorer.py",
                  params={"study": rated_env.study, "pair": str(pair_id)})
    assert not at.exception and not at.error
    ranking = at.dataframe[0].value
    assert len(ranking) == 3 and list(ranking["Rank"]) == [1, 2, 3]
    text = all_text(at)
    assert f"source {rated_env.secret_source}" in text  # admin view: sources are shown
    # Word diff: "Small left pleural effusion. Lungs otherwise clear." -> "Lungs are clear..."
    assert "line-through" in text and "otherwise" in text
    scores = at.dataframe[1].value
    assert list(scores["Metric"]) == ["bleu1", "bleu2", "bleu3", "bleu4", "rougeL"]
    assert at.subheader[0].value == f"Pair 1: case case-b, source {rated_env.secret_source}"
    raters = at.dataframe[2].value
    assert list(raters["Rater"]) == ["ravi", "rita"]


def test_explorer_without_params_opens_the_top_ranked_pair(rated_env, make_app):
    at = make_app(rated_env.admin, script=VIEWS / "explorer.py")
    assert not at.exception and not at.error
    top = at.dataframe[0].value.iloc[0]
    assert at.subheader[0].value.startswith(f"Pair {top['Pair']}: case {top['Case']}")


def test_probes_page_runs_lexical_probes(rated_env, make_app, all_text):
    at = make_app(rated_env.admin, script=VIEWS / "probes.py")
    assert not at.exception and not at.error
    at.multiselect(key="probe_metrics").set_value(["bleu", "rouge"])
    button = next(b for b in at.button if b.key.startswith("FormSubmitter:probes-"))
    at = button.click().run(timeout=120)
    assert not at.exception and not at.error
    # The page queued a probes job; nothing was scored in this run.
    assert not at.dataframe
    (job,) = jobs.list_jobs(rated_env.db, kind="probes")
    assert job.status == "queued" and job.params["metrics"] == ["bleu", "rouge"]
    assert Worker(rated_env.db).run_once().status == "done"
    at = at.run(timeout=120)
    assert not at.exception and not at.error
    kinds = at.dataframe[0].value
    assert list(kinds["Reports perturbed"] + kinds["Nothing to perturb"]) == [3] * 5
    table = at.dataframe[1].value
    assert list(table["Metric"]) == ["bleu1", "bleu2", "bleu3", "bleu4", "rougeL"]
    assert table["Delta"].notna().all()
    assert at.get("plotly_chart")


def test_explorer_shows_the_pairs_images_with_the_burned_in_flag(rated_env, make_app):
    """The study lead sees the case's images in the explorer, flagged when the DICOM header
    says text is burned in (raters never get this flag: tests/pages/test_image_viewer.py)."""
    from PIL import Image as PILImage

    from backend.services.images import BURNED_IN_NOTE
    from db.models import Image

    pair_id = rated_env.pair_ids[0]
    folder = rated_env.data_dir / "images"
    folder.mkdir(exist_ok=True)
    PILImage.new("L", (32, 40), 90).save(folder / "flagged.png")
    with rated_env.db.begin() as s:
        case_id = s.get(Pair, pair_id).case_id
        s.add(Image(case_id=case_id, path="images/flagged.png", format="png", view="PA",
                    sha256="f" * 64, width=32, height=40,
                    meta={"burned_in_annotation": "YES"}))
    at = make_app(rated_env.admin, script=VIEWS / "explorer.py",
                  params={"study": rated_env.study, "pair": str(pair_id)})
    assert not at.exception and not at.error
    assert [w.value for w in at.warning if w.value == BURNED_IN_NOTE] == [BURNED_IN_NOTE]
    # The case's own image (from the import) and the flagged one; only the latter is flagged.
    assert at.expander[0].label == "Images (2)"
