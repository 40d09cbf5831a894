"""AppTest: "Score now" on the dashboard and the explorer (webapp/components/score_now.py).

A study without scores shows its scoring state and a button instead of a command to type;
the click queues one score job (never runs a metric in the page), the panel follows the job
and says that no worker is alive and how to start one; once a worker has run the job the
page shows the correlations and the panel is gone. A rater is never shown the panel.

The offline families are narrowed to bleu and rouge here (monkeypatched in the service) so
the in-process worker finishes in a second.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from radconcord.backend import jobs
from radconcord.backend.runner.worker import Worker
from radconcord.backend.services.annotation import rating
from radconcord.backend.services.scores import score_now as service

VIEWS = Path(__file__).resolve().parents[2] / "webapp" / "views"


@pytest.fixture
def rated_unscored(study_env, monkeypatch):
    """Both raters complete every pair; nothing is scored; Score now queues bleu + rouge."""
    monkeypatch.setattr(service, "offline_families", lambda catalog=None: ["bleu", "rouge"])
    for rater, offset in ((study_env.rater, 0), (study_env.other_rater, 1)):
        for i, item in enumerate(rating.rater_queue(study_env.db, rater,
                                                    study_name=study_env.study)):
            rating.set_count(study_env.db, rater, opaque_id=item.opaque_id, category=1,
                             significant=True, count=(i + offset) % 3)
            rating.complete_pair(study_env.db, rater, opaque_id=item.opaque_id,
                                 confirm_zero=True)
    return study_env


def test_score_now_on_the_dashboard_queues_the_job_and_the_scores_arrive(
        rated_unscored, make_app, all_text):
    env = rated_unscored
    at = make_app(env.admin, script=VIEWS / "dashboard.py")
    assert not at.exception and not at.error
    assert f"**{env.study}** has no metric scores yet." in all_text(at)
    assert "No worker is alive" in all_text(at)  # and how to start one
    assert "bash scripts/run-app.sh" in all_text(at)
    assert "Score now queues: bleu, rouge." in all_text(at)
    assert jobs.list_jobs(env.db) == []

    at.button(key="dash_score_now_button").click().run()
    assert not at.exception and not at.error
    (job,) = jobs.list_jobs(env.db, kind="score")
    assert job.metrics == ("bleu", "rouge") and job.status == "queued"
    assert job.study_name == env.study and job.created_by == env.admin.username
    text = all_text(at)
    assert f"**Job #{job.id}** · `score` on {env.study} · queued" in text
    assert "No worker is running: start one with `python -m backend worker`." in text
    assert "The scoring job waits for a worker: restart the app with" in text
    # The page queued only: no score exists until a worker runs the job.
    assert "No correlations yet: the study has no metric scores" in text

    # A rerun (a second click is not possible: the button is gone while the job waits).
    at.run()
    assert [b for b in at.button if b.key == "dash_score_now_button"] == []
    assert len(jobs.list_jobs(env.db, kind="score")) == 1

    assert Worker(env.db).run_once().status == "done"
    at.run()
    assert not at.exception and not at.error
    assert "has no metric scores yet" not in all_text(at)
    assert [b for b in at.button if b.key == "dash_score_now_button"] == []
    table = at.dataframe[0].value
    assert {"bleu4", "rougeL"} <= set(table["Metric"])
    assert "Counts: raw, the mean of each pair's raters" in all_text(at)


def test_score_now_on_the_explorer(rated_unscored, make_app, all_text):
    env = rated_unscored
    at = make_app(env.admin, script=VIEWS / "explorer.py")
    assert not at.exception and not at.error
    assert f"**{env.study}** has no metric scores yet." in all_text(at)
    assert "backend score" not in all_text(at)
    at.button(key="exp_score_now_button").click().run()
    (job,) = jobs.list_jobs(env.db, kind="score")
    assert Worker(env.db).run_once().id == job.id
    at.run()
    assert not at.exception and not at.error
    assert "has no metric scores yet" not in all_text(at)
    assert {"bleu4", "rougeL"} <= set(at.selectbox(key="exp_key").options)


def _panel_for_rater() -> None:
    from radconcord.webapp import state
    from radconcord.webapp.components.score_now import score_now

    actor = state.require_actor()
    score_now(state.get_db(), actor, "Page test study")
    import streamlit as st

    st.caption("page end")


def test_a_rater_is_never_shown_the_panel(study_env, all_text):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_panel_for_rater, default_timeout=60)
    at.session_state["actor"] = study_env.rater
    at.run()
    assert not at.exception and not at.error
    assert all_text(at) == "page end"
    assert not at.button
    assert jobs.list_jobs(study_env.db) == []
