"""The ``score`` job kind in the worker: scoring, failures, warm models, stop, cancel, and a
worker killed with SIGKILL mid-job whose job another worker finishes with no duplicate rows.

The queue's own semantics (claim, takeover, attempts, routing) are in ``test_jobs.py``.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from radconcord.backend import jobs
from radconcord.backend.runner.worker import Worker
from radconcord.backend.scoring.hashing import input_hash
from radconcord.backend.scoring.runner import MetricPool
from radconcord.db.models import Case, MetricScore, Pair, Report, Study
from tests.jobs_helpers import load

jh = load()
HERE = Path(__file__).resolve().parent


def enqueue_score(db, study_id: int, metrics: list[str], options: dict | None = None) -> int:
    """Queue a ``score`` job the way the services and ``score --enqueue`` do."""
    return jobs.enqueue(
        db, "score", {"metrics": metrics, "options": options or {}}, study_id=study_id
    )


def make_study(db, name: str, n: int) -> int:
    """A study of ``n`` pairs with distinct candidates ``cand <name> <i> ...``."""
    with db.begin() as s:
        study = Study(name=name)
        s.add(study)
        s.flush()
        for i in range(n):
            case = Case(external_id=f"{name}-case-{i}")
            s.add(case)
            s.flush()
            ref = Report(case_id=case.id, role="reference", text=f"reference {i} no effusion")
            cand = Report(
                case_id=case.id, role="candidate", source="gen", text=f"cand {name} {i} effusion"
            )
            s.add_all([ref, cand])
            s.flush()
            s.add(
                Pair(
                    study_id=study.id,
                    case_id=case.id,
                    reference_id=ref.id,
                    candidate_id=cand.id,
                    source="gen",
                    opaque_id=f"{name}-{i}",
                    position=i,
                    input_hash=input_hash(ref.text, cand.text),
                )
            )
        return study.id


def _count_rows(db) -> tuple[int, int]:
    with db.begin() as s:
        total = s.scalar(select(func.count()).select_from(MetricScore))
        distinct = s.scalar(
            select(func.count()).select_from(
                select(MetricScore.input_hash, MetricScore.key, MetricScore.signature_hash)
                .distinct()
                .subquery()
            )
        )
    return total, distinct


def test_enqueue_then_worker_scores_the_study(d, db):
    sid = make_study(db, "s1", 5)
    job = enqueue_score(db, sid, ["count_double"])
    queued = jobs.get(db, job)
    assert queued.status == "queued" and queued.study_name == "s1"
    assert queued.metrics == ("count_double",)
    worker = Worker(db, worker_id="w", batch_size=2)
    final = worker.run_once()
    assert final is not None and final.id == job
    assert final.status == "done", final.error
    assert final.progress_done == final.progress_total == 5
    assert "count_double: 5 computed, 0 cached" in final.message
    assert final.result["families"]["count_double"]["computed"] == 5
    assert final.result["pairs"] == 5 and final.result["empty"] == 0
    assert final.finished_at is not None and final.worker_id == "w"
    assert _count_rows(db) == (10, 10)
    assert [len(c) for _, c in d.CALLS] == [2, 2, 1]
    assert worker.run_once() is None  # queue empty


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"metrics": ["nope"]}, "unknown metric 'nope'"),
        ({"metrics": "count_double"}, "metrics: expected a list of metric names"),
        ({"metrics": []}, "no metrics requested"),
        ({"metrics": ["count_double"], "options": {"count_double": 3}},
         "options: expected {metric: {option: value}}"),
        ({"metrics": ["count_double"], "options": {"dbl_ratio": {}}},
         "options given for metric(s) not requested: dbl_ratio"),
    ],
)
def test_a_score_job_with_bad_params_fails_with_the_reason(d, db, params, message):
    """Params are JSON from anywhere (the CLI, an old row): the kind checks them again."""
    sid = make_study(db, "bad", 1)
    job = jobs.enqueue(db, "score", params, study_id=sid)
    final = Worker(db, worker_id="w").run_once()
    assert final.id == job and final.status == "failed"
    assert message in final.error
    assert _count_rows(db) == (0, 0)


def test_failures_are_recorded_and_the_worker_goes_on(d, db):
    sid = make_study(db, "s4", 2)
    gone = enqueue_score(db, sid, ["gone_double"])
    with db.begin() as s:
        s.get(Report, 2).text = "BOOM"  # candidate of the first pair
    boom = enqueue_score(db, sid, ["fail_double"])
    ok = enqueue_score(db, sid, ["count_double"])
    worker = Worker(db, worker_id="w")
    assert worker.run_forever(once=True) == 3
    gone_f, boom_f, ok_f = (jobs.get(db, j) for j in (gone, boom, ok))
    assert gone_f.status == "failed" and "weights not found in /nowhere" in gone_f.error
    assert boom_f.status == "failed" and "tokenizer exploded" in boom_f.error
    assert ok_f.status == "done"


def test_metrics_stay_warm_across_jobs(d, db):
    a = make_study(db, "s5", 2)
    b = make_study(db, "s6", 3)
    enqueue_score(db, a, ["count_double"])
    enqueue_score(db, b, ["dbl_ratio"])
    pool = MetricPool()
    worker = Worker(db, worker_id="w", pool=pool)
    assert worker.run_forever(once=True) == 2
    assert pool.created == 1
    assert len(d.LOADS) == 1  # loaded once per process, not per job


def test_stop_requeues_the_job_between_batches(d, db, monkeypatch):
    monkeypatch.setenv("SLOW_DOUBLE_SECONDS", "0.2")
    sid = make_study(db, "s7", 6)
    job = enqueue_score(db, sid, ["slow_double"])
    worker = Worker(db, worker_id="w", batch_size=1)
    t = threading.Thread(target=worker.run_once)
    t.start()
    deadline = time.monotonic() + 30
    while jobs.get(db, job).progress_done < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    worker.stop_event.set()
    t.join(30)
    after = jobs.get(db, job)
    assert after.status == "queued" and after.worker_id is None
    assert 1 <= _count_rows(db)[0] // 2 < 6


def test_cancel_a_running_score_job_keeps_the_batches_already_stored(d, db, monkeypatch):
    """Cancelled between batches: the committed rows are valid cached values; the next
    job on the same study computes only the rest."""
    monkeypatch.setenv("SLOW_DOUBLE_SECONDS", "0.2")
    sid = make_study(db, "s8", 8)
    job = enqueue_score(db, sid, ["slow_double"])
    worker = Worker(db, worker_id="w", batch_size=1, heartbeat_every=0.1, stale_after=5)
    t = threading.Thread(target=worker.run_once)
    t.start()
    jh.wait_for(db, job, lambda j: j.progress_done >= 2, what="two batches")
    jobs.cancel(db, job)
    t.join(30)
    final = jobs.get(db, job)
    assert final.status == "cancelled" and final.result is None
    stored = _count_rows(db)[0] // 2
    assert 2 <= stored < 8
    again = enqueue_score(db, sid, ["slow_double"])
    done = worker.run_once()
    assert done.id == again and done.status == "done"
    assert f"slow_double: {8 - stored} computed, {stored} cached" in done.message
    assert _count_rows(db) == (16, 16)


def _logged(log: Path) -> list[str]:
    if not log.exists():
        return []
    return [line.split("\t", 1)[1] for line in log.read_text().splitlines()]


def test_kill_9_mid_job_then_restart_resumes_without_duplicates(d, any_db, tmp_path):
    """A worker killed with SIGKILL mid-job leaves committed batches only; a restarted worker
    takes the job over after the stale threshold and computes exactly the missing pairs
    (SQLite and PostgreSQL)."""
    db = any_db
    url = jh.db_url(db)
    n = 12
    sid = make_study(db, "kill", n)
    with db.begin() as s:
        cand_of = {
            p.input_hash: text
            for p, text in s.execute(
                select(Pair, Report.text).join(Report, Report.id == Pair.candidate_id)
            )
        }
    job = enqueue_score(db, sid, ["slow_double"])
    # The doubles append what they score to <worker id>-scored.log, even in a killed worker.
    setup = jh.SETUP_SCORING_DOUBLES + (
        "import os, sys\n"
        "os.environ['SCORING_DOUBLES_LOG'] = os.path.join(os.environ['SCORED_LOG_DIR'],"
        " sys.argv[sys.argv.index('--worker-id') + 1] + '-scored.log')\n"
    )
    env = {"SCORED_LOG_DIR": str(tmp_path), "SLOW_DOUBLE_SECONDS": "0.3"}
    log1, log2 = tmp_path / "w1-scored.log", tmp_path / "w2-scored.log"
    stored: set[str] = set()

    def after_kill(killed) -> None:
        total, distinct = _count_rows(db)
        assert total == distinct and total % 2 == 0  # whole pairs (2 keys each), no partial
        with db.begin() as s:
            stored.update(
                cand_of[h] for h in s.scalars(select(MetricScore.input_hash).distinct())
            )
        assert 4 <= len(stored) < n
        assert stored <= set(_logged(log1))

    killed, final = jh.kill_and_resume(
        url, db, job, tmp_path=tmp_path, at_least=4, setup=setup, env=env,
        args=["--batch-size", "2"], after_kill=after_kill,
    )
    assert killed.status == "running" and killed.worker_id == "w1" and stored
    assert final.status == "done", final.error
    assert final.worker_id == "w2" and final.attempts == 2
    assert final.progress_done == final.progress_total == n
    assert _count_rows(db) == (2 * n, 2 * n)
    second = _logged(log2)
    assert len(second) == len(set(second))
    assert set(second) == set(cand_of.values()) - stored  # only what was missing


def test_scoring_services_for_the_ui(d, db):
    from radconcord.backend.errors import InvalidInput, NotFound, PermissionDenied
    from radconcord.backend.services import jobs as job_svc
    from radconcord.backend.services.scores import scoring as svc
    from radconcord.backend.types import Actor

    admin, rater = Actor.system(), Actor(user_id=5, username="r", role="rater")
    make_study(db, "ui", 3)
    with pytest.raises(PermissionDenied):
        svc.enqueue_scoring(db, rater, "ui", ["count_double"])
    with pytest.raises(PermissionDenied):
        svc.study_scores(db, rater, "ui")
    with pytest.raises(NotFound):
        svc.enqueue_scoring(db, admin, "nope", ["count_double"])
    with pytest.raises(InvalidInput, match="unknown option"):
        svc.enqueue_scoring(db, admin, "ui", ["count_double"], {"count_double": {"sclae": 2}})
    with pytest.raises(InvalidInput, match="unknown metric"):
        svc.enqueue_scoring(db, admin, "ui", ["nope"])
    assert job_svc.list_jobs(db, admin) == []  # nothing queued by the refused requests

    first = svc.enqueue_scoring(db, admin, "ui", ["dbl_ratio"])
    assert first.kind == "score" and first.metrics == ("dbl_ratio",)
    assert first.params == {"metrics": ["dbl_ratio"], "options": {}}
    assert job_svc.job_status(db, admin, job_id=first.id).status == "queued"
    Worker(db, worker_id="w").run_forever(once=True)
    done = job_svc.job_status(db, admin, job_id=first.id)
    assert done.status == "done" and done.fraction == 1.0
    before = svc.study_scores(db, admin, "ui")
    assert before.keys == ("dbl_ratio", "dbl_jaccard")  # the family stores all its keys
    assert before.directions == {"dbl_ratio": True, "dbl_jaccard": True}
    assert [r["position"] for r in before.rows] == [0, 1, 2]
    assert all(r["source"] == "gen" for r in before.rows)

    # Rescoring with another option: the dashboard switches to the newest signature.
    svc.enqueue_scoring(db, admin, "ui", ["dbl_ratio"], {"count_double": {"scale": 10}})
    Worker(db, worker_id="w").run_forever(once=True)
    after = svc.study_scores(db, admin, "ui")
    for old, new in zip(before.rows, after.rows, strict=True):
        assert new["dbl_ratio"] == pytest.approx(10 * old["dbl_ratio"], rel=1e-12)
    assert "scale:10.0" in after.signatures["dbl_ratio"]
    scored = job_svc.list_jobs(db, admin, kind="score", study_name="ui")
    assert [j.id for j in scored][-1] == first.id
    with pytest.raises(NotFound):
        job_svc.job_status(db, admin, job_id=9999)

    catalog = {m.family: m for m in svc.metric_catalog()}
    assert catalog["count_double"].available and catalog["count_double"].signature
    assert not catalog["gone_double"].available
    assert "weights not found" in catalog["gone_double"].reason


def test_three_worker_processes_share_a_split_job_one_killed_mid_chunk(d, any_db, tmp_path):
    """Issue 26, on SQLite and PostgreSQL: three real worker processes polling one queue; a
    score job split into 3 chunk jobs. Whichever worker takes the parent queues the chunks
    and each worker runs one at once; the worker of one chunk is killed with SIGKILL after a
    batch is committed, another worker takes that chunk over once it is stale and computes
    only the pairs the killed one had not stored. Every pair ends in the cache once, and the
    group reads done."""
    from radconcord.backend.jobs import queue

    db = any_db
    url = jh.db_url(db)
    n = 18  # 3 chunks of 6 pairs, batches of 2, 1 s per batch: 3 s per chunk
    sid = make_study(db, "three", n)
    with db.begin() as s:
        cand_of = {p.input_hash: text for p, text in s.execute(
            select(Pair, Report.text).join(Report, Report.id == Pair.candidate_id))}
    parent = jobs.enqueue(db, "score", {"metrics": ["slow_double"], "options": {}, "chunks": 3},
                          study_id=sid)
    setup = jh.SETUP_SCORING_DOUBLES + (
        "import os, sys\n"
        "os.environ['SCORING_DOUBLES_LOG'] = os.path.join(os.environ['SCORED_LOG_DIR'],"
        " sys.argv[sys.argv.index('--worker-id') + 1] + '-scored.log')\n"
    )
    env = {"SCORED_LOG_DIR": str(tmp_path), "SLOW_DOUBLE_SECONDS": "1.0"}
    names = ("w1", "w2", "w3")
    # Not --once: idle workers keep polling, so the two that do not take the parent are
    # waiting when its chunks are queued, and each worker gets one.
    procs = {w: jh.start_worker(url, worker_id=w, log_path=tmp_path / f"{w}.log", setup=setup,
                                env=env, once=False, args=["--batch-size", "2"])
             for w in names}
    try:
        deadline = time.monotonic() + 120
        while True:  # poll the queue until all three chunks run, one per worker
            chunks = sorted(queue.list_jobs(db, kind=queue.CHUNK_KIND), key=lambda j: j.id)
            running = {j.worker_id: j for j in chunks if j.status == "running"}
            if len(chunks) == 3 and set(running) == set(names) and any(
                    0 < j.progress_done < j.progress_total for j in running.values()):
                break
            dead = [w for w, p in procs.items() if p.poll() is not None]
            assert not dead and time.monotonic() < deadline, (
                f"chunks {[(j.id, j.status, j.worker_id) for j in chunks]}; exited: {dead}")
            time.sleep(0.05)
        victim = next(j for j in running.values() if 0 < j.progress_done < j.progress_total)
        jh.kill_9(procs[victim.worker_id])
        with db.begin() as s:
            stored = {cand_of[h] for h in s.scalars(select(MetricScore.input_hash).distinct())}
        jh.wait_until_stale(db, victim.id, 1.5)
        jh.wait_for(db, victim.id, lambda j: j.status == "done", timeout=120,
                    what="the killed chunk taken over and done")
        final = {j.id: j for j in queue.list_jobs(db, kind=queue.CHUNK_KIND)}
        assert all(j.status == "done" for j in final.values()), final
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.terminate()  # SIGTERM: the worker stops between jobs
                p.wait(60)
    taken_over = final[victim.id]
    assert taken_over.attempts == 2 and taken_over.worker_id != victim.worker_id
    assert {j.attempts for i, j in final.items() if i != victim.id} == {1}
    assert queue.group(db, parent).status == "done"
    assert _count_rows(db) == (2 * n, 2 * n)  # every pair once, both keys
    # The worker that took the chunk over computed exactly the pairs of that chunk the killed
    # one had not stored (besides its own chunk, before).
    first, last = victim.params["pair_ids"]
    with db.begin() as s:
        chunk = {text for (text,) in s.execute(
            select(Report.text).join(Pair, Pair.candidate_id == Report.id)
            .where(Pair.study_id == sid, Pair.id >= first, Pair.id <= last))}
    logs = {w: _logged(tmp_path / f"{w}-scored.log") for w in names}
    assert set().union(*logs.values()) == set(cand_of.values())
    redone = [c for c in logs[taken_over.worker_id] if c in chunk]
    assert 0 < len(redone) < len(chunk) and len(redone) == len(set(redone))
    assert set(redone) == chunk - stored
