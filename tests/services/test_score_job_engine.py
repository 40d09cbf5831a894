"""A study's score job on Ray, and how split and Ray jobs are asked for (issue 26).

The engine is a job parameter: the worker that takes the job drives it (cache lookup and
writes, progress, cancel) and Ray actors compute the pairs; the cache then holds the rows an
ordinary job writes. ``score --study ... --enqueue`` takes ``--engine ray`` and ``--chunks K``;
the Metrics page's form asks for the same; a worker taking ``score`` takes the chunks of a split
score job too.
"""

from __future__ import annotations

import pytest
from sqlalchemy import delete, select

from radconcord.backend import cli
from radconcord.backend.errors import InvalidInput
from radconcord.backend.jobs import queue
from radconcord.backend.runner.worker import Worker
from radconcord.backend.services.accounts import seed
from radconcord.backend.services.scores.scoring import enqueue_scoring
from radconcord.backend.types import Actor
from radconcord.db.models import Job, MetricScore

ADMIN = Actor.system()
METRICS = ["bleu", "rouge", "cider"]


@pytest.fixture
def demo_db(db, fast_password_hashing):
    seed.seed_demo(db)
    return db


def _rows(db) -> list[tuple]:
    with db.read() as s:
        return sorted(s.execute(select(MetricScore.input_hash, MetricScore.key,
                                       MetricScore.signature_hash, MetricScore.value)).all())


def test_the_engine_is_a_checked_job_parameter(demo_db):
    job = enqueue_scoring(demo_db, ADMIN, seed.DEMO_STUDY, ["bleu"], engine="ray",
                          ray_address="head:6379", workers=3)
    assert job.params["engine"] == {"name": "ray", "address": "head:6379", "workers": 3}
    # The default leaves the params as they always were.
    assert "engine" not in enqueue_scoring(demo_db, ADMIN, seed.DEMO_STUDY, ["rouge"]).params
    for kwargs, words in (
        ({"engine": "spark"}, "engine: expected one of local, ray"),
        ({"ray_address": "head:6379"}, "needs engine='ray'"),
        ({"engine": "ray", "workers": 0}, "workers: expected a whole number of at least 1"),
        ({"engine": "ray", "chunks": 2}, "not split into chunk jobs"),
    ):
        with pytest.raises(InvalidInput, match=words):
            enqueue_scoring(demo_db, ADMIN, seed.DEMO_STUDY, ["bleu"], **kwargs)


def test_a_score_job_on_ray_writes_the_rows_a_local_job_writes(demo_db):
    job = enqueue_scoring(demo_db, ADMIN, seed.DEMO_STUDY, METRICS, engine="ray", workers=2)
    done = Worker(demo_db, worker_id="driver", kinds=["score"]).run_once()
    assert done is not None and done.id == job.id and done.status == "done", done
    assert done.result["engine"] == "ray (a local Ray instance, 2 actors)"
    assert done.result["summary"].endswith("on ray (a local Ray instance, 2 actors)")
    assert {f["status"] for f in done.result["families"].values()} == {"done"}
    on_ray = _rows(demo_db)
    assert on_ray  # every pair and key, once (the cache's unique key would refuse twice)
    # The same study scored by an ordinary job, in the same database: the same rows, bit for
    # bit (CIDEr's document frequencies were computed once, over every pair).
    with demo_db.begin() as s:
        s.execute(delete(MetricScore))
    local = enqueue_scoring(demo_db, ADMIN, seed.DEMO_STUDY, METRICS)
    done = Worker(demo_db, worker_id="local", kinds=["score"]).run_once()
    assert done is not None and done.id == local.id and "engine" not in done.result
    assert _rows(demo_db) == on_ray


def test_score_enqueue_takes_the_engine_and_chunks(demo_db, capsys):
    def run(*argv: str) -> tuple[int, str, str]:
        code = cli.main(["score", "--study", seed.DEMO_STUDY, "--metrics", "bleu", *argv])
        out = capsys.readouterr()
        return code, out.out, out.err

    code, out, _ = run("--enqueue", "--engine", "ray", "--workers", "2")
    assert code == 0 and "computed on ray (a local Ray instance, 2 actors)" in out
    code, out, _ = run("--enqueue", "--chunks", "3")
    assert code == 0 and "split into 3 chunk jobs" in out
    with demo_db.read() as s:
        params = [p for (p,) in s.execute(select(Job.params).order_by(Job.id))]
    assert params[-2]["engine"] == {"name": "ray", "address": None, "workers": 2}
    assert params[-1]["chunks"] == 3 and "engine" not in params[-1]
    for argv, words in ((["--chunks", "2"], "--chunks works with --study ... --enqueue"),
                        (["--enqueue", "--chunks", "2", "--engine", "ray"], "choose one"),
                        (["--enqueue", "--chunks", "0"], "--chunks must be at least 1"),
                        (["--enqueue", "--workers", "2"], "--workers works with --engine ray")):
        code, _, err = run(*argv)
        assert code != 0 and words in err, (argv, err)


def test_a_worker_taking_score_takes_the_chunks_of_a_split_job(db):
    assert queue.CHUNK_KIND in Worker(db, worker_id="w", kinds=["score"]).kinds
    assert Worker(db, worker_id="w", kinds=["import"]).kinds == ("import",)
