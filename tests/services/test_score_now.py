"""backend.services.scores.score_now: the offline metrics, "Score now" and the first start's job.

On SQLite and PostgreSQL: the first start queues one score job of the demo study's offline
metrics and never a second (the job row is the record, whatever became of it); "Score now"
queues the offline metrics, hands back a job still pending instead of a second one, and is
refused to a rater; a worker's run turns the state into "scored".
"""

from __future__ import annotations

import pytest

from radconcord.backend import jobs as queue
from radconcord.backend.errors import InvalidInput, NotFound, PermissionDenied
from radconcord.backend.metrics import registry
from radconcord.backend.runner.worker import Worker
from radconcord.backend.services.accounts import seed
from radconcord.backend.services.scores import score_now
from radconcord.backend.services.scores.scoring import describe_family
from radconcord.backend.types import Actor

RATER = Actor(user_id=99, username="someone", role="rater")


@pytest.fixture
def demo_db(any_db, fast_password_hashing):
    seed.seed_demo(any_db)
    return any_db


def test_offline_families_load_no_model_and_can_run_here():
    families = score_now.offline_families()
    assert {"bleu", "rouge", "cider"} <= set(families)
    for family in families:
        info = describe_family(family)
        assert info.available and not info.needs_model and not info.needs_image
    # Families that load weights are never queued from a page: BERTScore is one of them.
    assert "bertscore" not in families and "green" not in families
    assert families == [f for f in registry.ENTRIES if f in families]  # registry order


def test_first_start_queues_the_offline_metrics_once(demo_db):
    job = score_now.queue_first_scoring(demo_db, seed.DEMO_STUDY)
    assert job is not None
    assert job.kind == "score" and job.status == "queued"
    assert job.study_name == seed.DEMO_STUDY
    assert job.created_by == score_now.FIRST_START
    assert list(job.metrics) == score_now.offline_families()
    # A second start, and one after the job was cancelled: nothing more is queued.
    assert score_now.queue_first_scoring(demo_db, seed.DEMO_STUDY) is None
    queue.cancel(demo_db, job.id)
    assert score_now.queue_first_scoring(demo_db, seed.DEMO_STUDY) is None
    assert [j.id for j in queue.list_jobs(demo_db, kind="score")] == [job.id]


def test_first_start_skips_a_missing_or_already_scored_study(demo_db):
    assert score_now.queue_first_scoring(demo_db, "No such study") is None
    admin = Actor.system()
    bleu_only = [describe_family("bleu")]
    job = score_now.score_now(demo_db, admin, seed.DEMO_STUDY, catalog=bleu_only)
    assert Worker(demo_db).run_once().id == job.id
    # Scored by hand before the first start's check: no job of its own.
    with demo_db.begin() as s:
        from radconcord.db.models import Job

        s.query(Job).delete()
    assert score_now.queue_first_scoring(demo_db, seed.DEMO_STUDY) is None
    assert queue.list_jobs(demo_db) == []


def test_score_now_queues_once_and_the_worker_scores(demo_db):
    admin = Actor.system()
    bleu_only = [describe_family("bleu")]
    before = score_now.score_state(demo_db, admin, seed.DEMO_STUDY, catalog=bleu_only)
    assert not before.scored and before.n_pairs == 24
    assert before.pending is None and before.last is None
    assert before.offline == ("bleu",)
    assert not before.worker.any_alive

    job = score_now.score_now(demo_db, admin, seed.DEMO_STUDY, catalog=bleu_only)
    assert job.metrics == ("bleu",)
    # A second click while it waits hands back the same job.
    again = score_now.score_now(demo_db, admin, seed.DEMO_STUDY, catalog=bleu_only)
    assert again.id == job.id
    waiting = score_now.score_state(demo_db, admin, seed.DEMO_STUDY, catalog=bleu_only)
    assert waiting.pending is not None and waiting.pending.id == job.id
    assert waiting.pending_unserved  # no worker alive

    done = Worker(demo_db).run_once()
    assert done.id == job.id and done.status == "done"
    after = score_now.score_state(demo_db, admin, seed.DEMO_STUDY, catalog=bleu_only)
    assert after.scored and after.n_scored_pairs == 24
    assert after.pending is None and after.last is not None and after.last.id == job.id


def test_two_clicks_at_once_queue_one_job(demo_db, monkeypatch):
    """Both clicks pass the quick look for a pending job before either has queued (as two
    admins at once do): the check made with the insert still hands back one job."""
    admin = Actor.system()
    bleu_only = [describe_family("bleu")]
    monkeypatch.setattr(score_now.queue, "list_jobs", lambda *args, **kwargs: [])
    first = score_now.score_now(demo_db, admin, seed.DEMO_STUDY, catalog=bleu_only)
    second = score_now.score_now(demo_db, admin, seed.DEMO_STUDY, catalog=bleu_only)
    assert second.id == first.id
    monkeypatch.undo()
    assert [j.id for j in queue.list_jobs(demo_db, kind="score")] == [first.id]
    # Once it has run, the next click queues a new one.
    assert Worker(demo_db).run_once().id == first.id
    third = score_now.score_now(demo_db, admin, seed.DEMO_STUDY, catalog=bleu_only)
    assert third.id != first.id and third.status == "queued"


def test_score_now_refuses_a_rater_an_unknown_study_and_no_runnable_metric(demo_db):
    with pytest.raises(PermissionDenied):
        score_now.score_now(demo_db, RATER, seed.DEMO_STUDY)
    with pytest.raises(PermissionDenied):
        score_now.score_state(demo_db, RATER, seed.DEMO_STUDY)
    with pytest.raises(NotFound):
        score_now.score_now(demo_db, Actor.system(), "No such study")
    unavailable = [describe_family("green")]
    with pytest.raises(InvalidInput, match="no metric family can run on this machine"):
        score_now.score_now(demo_db, Actor.system(), seed.DEMO_STUDY, catalog=unavailable)
    assert queue.list_jobs(demo_db) == []
