"""Honest scoring jobs: a job scores every family it can, records a status per family
(done / unavailable: reason / failed: error) and says a partial success plainly; the worker
status says whether a worker is alive; ``score`` prints the status per family."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import func, select, update

from radconcord.backend import cli, jobs
from radconcord.backend.errors import PermissionDenied
from radconcord.backend.jobs import queue
from radconcord.backend.runner.worker import Worker
from radconcord.backend.services import jobs as job_services
from radconcord.backend.services.scores import scoring
from radconcord.backend.services.transfer import imports
from radconcord.backend.types import Actor, CandidateInput, CaseInput
from radconcord.db.models import MetricScore, Report, WorkerProcess

ADMIN = Actor.system()
RADGRAPH_OFFLINE = ("RadGraph weights (StanfordAIMI/RRG_scorers/radgraph.tar.gz) not local and "
                    "HF_HUB_OFFLINE is set")


@pytest.fixture
def offline_radgraph(tmp_path, monkeypatch):
    """RadGraph's weights are nowhere here, and the hub may not be asked."""
    empty = tmp_path / "no-models"
    empty.mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("RADCONCORD_MODEL_DIR", str(empty))
    monkeypatch.setenv("HF_HOME", str(empty))


def _study(db, name: str = "S", n: int = 3) -> None:
    cases = [CaseInput(f"c{i}", f"No pleural effusion {i}.",
                       [CandidateInput(f"Small pleural effusion {i}.", "gen-A")])
             for i in range(n)]
    imports.import_cases(db, ADMIN, study_name=name, cases=cases)


def _scores(db, family: str) -> int:
    with db.read() as s:
        return s.scalar(select(func.count()).select_from(MetricScore)
                        .where(MetricScore.family == family))


def test_a_job_with_an_unavailable_family_scores_the_others_and_says_why(db,
                                                                       offline_radgraph):
    """Before: the whole job failed and bleu was not scored when radgraph was unavailable."""
    _study(db)
    job = scoring.enqueue_scoring(db, ADMIN, "S", ["bleu", "radgraph"])
    done = Worker(db, worker_id="w").run_once()
    assert done.id == job.id and done.status == "done", done.error
    families = done.result["families"]
    assert families["bleu"]["status"] == "done" and families["bleu"]["computed"] == 3
    assert families["radgraph"]["status"] == "unavailable"
    assert families["radgraph"]["reason"].startswith(RADGRAPH_OFFLINE)
    assert _scores(db, "bleu") == 3 * 4 and _scores(db, "radgraph") == 0
    assert done.message.startswith(
        f"done with 1 family unavailable: radgraph ({RADGRAPH_OFFLINE}")
    assert "; bleu: 3 computed, 0 cached" in done.message
    assert job_services.partial(done)
    assert [(f.family, f.status, f.computed) for f in job_services.score_families(done)] == [
        ("bleu", "done", 3), ("radgraph", "unavailable", 0)]


def test_a_failing_family_does_not_stop_the_others(d, db):
    _study(db, n=2)
    with db.begin() as s:
        s.execute(update(Report).where(Report.text == "Small pleural effusion 0.")
                  .values(text="BOOM"))
    job = scoring.enqueue_scoring(db, ADMIN, "S", ["fail_double", "count_double"])
    done = Worker(db, worker_id="w").run_once()
    assert done.id == job.id and done.status == "done", done.error
    fam = done.result["families"]
    assert fam["count_double"]["status"] == "done" and fam["count_double"]["computed"] == 2
    assert fam["fail_double"]["status"] == "failed"
    assert "tokenizer exploded" in fam["fail_double"]["error"]
    assert done.message.startswith("done with 1 family failed: fail_double (metric "
                                   "'fail_double' failed on pairs")
    assert _scores(db, "count_double") == 4


def test_a_job_where_no_family_can_run_fails_naming_each(d, db, offline_radgraph):
    _study(db, n=1)
    scoring.enqueue_scoring(db, ADMIN, "S", ["gone_double", "radgraph"])
    done = Worker(db, worker_id="w").run_once()
    assert done.status == "failed"
    assert done.error.startswith("no metric could run on this worker: gone_double: "
                                 "unavailable: weights not found in /nowhere (set "
                                 "RADCONCORD_MODEL_DIR); radgraph: "
                                 f"unavailable: {RADGRAPH_OFFLINE}")


def test_worker_status_says_whether_a_worker_is_alive(db):
    now = dt.datetime.now(dt.UTC)
    status = job_services.worker_status(db, ADMIN)
    assert not status.any_alive and status.last_heartbeat is None
    assert status.message == ("No worker is alive (none has sent a heartbeat in the last 60 s; "
                              "no worker has ever run here): start one with "
                              "`python -m backend worker`")
    job = jobs.enqueue(db, "score", {"metrics": ["bleu"], "options": {}})
    assert [j.id for j in job_services.worker_status(db, ADMIN).waiting] == [job]
    queue.register_worker(db, "h:1:aa", host="h", pid=1, device="cpu", kinds=[])
    alive = job_services.worker_status(db, ADMIN)
    assert alive.any_alive and alive.message == "1 worker alive (cpu)" and not alive.waiting
    with db.begin() as s:
        s.execute(update(WorkerProcess).values(heartbeat_at=now - dt.timedelta(minutes=5)))
    gone = job_services.worker_status(db, ADMIN, now=now)
    assert not gone.any_alive and "the last heartbeat was 5 min ago" in gone.message
    with pytest.raises(PermissionDenied):
        job_services.worker_status(db, Actor(user_id=9, username="r", role="rater"))


def test_score_cli_prints_the_status_of_each_family(db, offline_radgraph, capsys):
    _study(db)
    code = cli.main(["score", "--study", "S", "--metrics", "bleu,radgraph",
                     "--skip-unavailable"])
    captured = capsys.readouterr()
    assert code == 0
    assert "status bleu: done" in captured.out.splitlines()
    assert f"status radgraph: unavailable: {RADGRAPH_OFFLINE}" in captured.out
    assert "bleu: 3 computed, 0 from cache" in captured.out
    # Progress is drawn on stderr (plain lines off a terminal).
    assert "score: 3/3 scores" in captured.err
    assert _scores(db, "bleu") == 12
