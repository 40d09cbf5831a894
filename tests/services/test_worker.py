"""The job queue and the worker: claim, heartbeat, progress, failure, kill -9 and resume."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from backend.scoring import jobs
from backend.scoring.hashing import input_hash
from backend.scoring.runner import MetricPool, ScoringError
from backend.scoring.worker import Worker
from db.models import Case, MetricScore, Pair, Report, ScoringJob, Study
from db.session import Database

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


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
    job = jobs.enqueue(db, study_id=sid, metrics=["count_double"], options={})
    assert job.status == "queued" and job.study_name == "s1"
    worker = Worker(db, worker_id="w", batch_size=2)
    final = worker.run_once()
    assert final is not None and final.id == job.id
    assert final.status == "done", final.error
    assert final.progress_done == final.progress_total == 5
    assert "count_double: 5 computed, 0 cached" in final.message
    assert final.finished_at is not None and final.worker_id == "w"
    assert _count_rows(db) == (10, 10)
    assert [len(c) for _, c in d.CALLS] == [2, 2, 1]
    assert worker.run_once() is None  # queue empty


def test_enqueue_validates_names_and_study(d, db):
    sid = make_study(db, "s2", 1)
    with pytest.raises(ScoringError, match="unknown metric 'nope'"):
        jobs.enqueue(db, study_id=sid, metrics=["nope"])
    with pytest.raises(ScoringError, match="no study"):
        jobs.enqueue(db, study_id=sid + 100, metrics=["count_double"])


def test_claim_is_exclusive_and_stale_jobs_are_taken_over(d, db):
    sid = make_study(db, "s3", 1)
    job = jobs.enqueue(db, study_id=sid, metrics=["count_double"])
    first = jobs.claim(db, worker_id="a", stale_after=60)
    assert first is not None and first.id == job.id and first.status == "running"
    assert jobs.claim(db, worker_id="b", stale_after=60) is None
    # Worker a goes silent: once its heartbeat is older than stale_after, b takes over.
    with db.begin() as s:
        s.execute(
            update(ScoringJob)
            .where(ScoringJob.id == job.id)
            .values(heartbeat_at=jobs.utcnow() - dt.timedelta(seconds=120))
        )
    taken = jobs.claim(db, worker_id="b", stale_after=60)
    assert taken is not None and taken.worker_id == "b"
    # The old owner can no longer write progress or finish the job.
    assert not jobs.report_progress(db, job.id, "a", 1, 1, "late")
    assert not jobs.finish(db, job.id, "a", "done by a")
    assert jobs.get(db, job.id).worker_id == "b"


def test_a_job_whose_workers_keep_dying_fails_after_the_attempt_limit(d, db):
    """Each claim counts; a polite release does not; a stale job at the limit is failed with
    a reason instead of killing one more worker."""
    sid = make_study(db, "s-limit", 1)
    job = jobs.enqueue(db, study_id=sid, metrics=["count_double"])

    def go_silent() -> None:
        with db.begin() as s:
            s.execute(
                update(ScoringJob)
                .where(ScoringJob.id == job.id)
                .values(heartbeat_at=jobs.utcnow() - dt.timedelta(seconds=600))
            )

    assert jobs.claim(db, worker_id="w1", stale_after=60, max_attempts=2).attempts == 1
    assert jobs.release(db, job.id, "w1", "shutting down")
    assert jobs.get(db, job.id).attempts == 0
    assert jobs.claim(db, worker_id="w2", stale_after=60, max_attempts=2).attempts == 1
    go_silent()
    assert jobs.claim(db, worker_id="w3", stale_after=60, max_attempts=2).attempts == 2
    go_silent()
    assert jobs.claim(db, worker_id="w4", stale_after=60, max_attempts=2) is None
    failed = jobs.get(db, job.id)
    assert failed.status == "failed" and "stopped responding 2 times" in failed.error
    assert failed.finished_at is not None


def test_failures_are_recorded_and_the_worker_goes_on(d, db):
    sid = make_study(db, "s4", 2)
    gone = jobs.enqueue(db, study_id=sid, metrics=["gone_double"])
    with db.begin() as s:
        s.get(Report, 2).text = "BOOM"  # candidate of the first pair
    boom = jobs.enqueue(db, study_id=sid, metrics=["fail_double"])
    ok = jobs.enqueue(db, study_id=sid, metrics=["count_double"])
    worker = Worker(db, worker_id="w")
    assert worker.run(once=True) == 3
    gone_f, boom_f, ok_f = (jobs.get(db, j.id) for j in (gone, boom, ok))
    assert gone_f.status == "failed" and "weights not found in /nowhere" in gone_f.error
    assert boom_f.status == "failed" and "tokenizer exploded" in boom_f.error
    assert ok_f.status == "done"


def test_metrics_stay_warm_across_jobs(d, db):
    a = make_study(db, "s5", 2)
    b = make_study(db, "s6", 3)
    jobs.enqueue(db, study_id=a, metrics=["count_double"])
    jobs.enqueue(db, study_id=b, metrics=["dbl_ratio"])
    pool = MetricPool()
    worker = Worker(db, worker_id="w", pool=pool)
    assert worker.run(once=True) == 2
    assert pool.created == 1
    assert len(d.LOADS) == 1  # loaded once per process, not per job


def test_stop_requeues_the_job_between_batches(d, db, monkeypatch):
    monkeypatch.setenv("SLOW_DOUBLE_SECONDS", "0.2")
    sid = make_study(db, "s7", 6)
    job = jobs.enqueue(db, study_id=sid, metrics=["slow_double"])
    worker = Worker(db, worker_id="w", batch_size=1)
    t = threading.Thread(target=worker.run_once)
    t.start()
    deadline = time.monotonic() + 30
    while jobs.get(db, job.id).progress_done < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    worker.stop_event.set()
    t.join(30)
    after = jobs.get(db, job.id)
    assert after.status == "queued" and after.worker_id is None
    assert 1 <= _count_rows(db)[0] // 2 < 6


def _spawn_worker(tmp_path: Path, url: str, worker_id: str, log: Path) -> subprocess.Popen:
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(HERE)!r})\n"
        "import scoring_doubles\n"
        "scoring_doubles.install()\n"
        "from backend.scoring.worker import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "SCORING_DOUBLES_LOG": str(log),
        "SLOW_DOUBLE_SECONDS": "0.3",
        "PYTHONPATH": str(REPO),
    }
    args = ["--once", "--poll", "0.1", "--stale-after", "1.5", "--heartbeat", "0.2"]
    args += ["--batch-size", "2", "--worker-id", worker_id]
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _logged(log: Path) -> list[str]:
    if not log.exists():
        return []
    return [line.split("\t", 1)[1] for line in log.read_text().splitlines()]


def test_kill_9_mid_job_then_restart_resumes_without_duplicates(d, tmp_path):
    """A worker killed with SIGKILL mid-job leaves committed batches only; a restarted worker
    takes the job over after the stale threshold and computes exactly the missing pairs."""
    url = f"sqlite:///{tmp_path}/w.db"
    db = Database(url)
    n = 12
    sid = make_study(db, "kill", n)
    with db.begin() as s:
        cand_of = {
            p.input_hash: text
            for p, text in s.execute(
                select(Pair, Report.text).join(Report, Report.id == Pair.candidate_id)
            )
        }
    job = jobs.enqueue(db, study_id=sid, metrics=["slow_double"])

    log1, log2 = tmp_path / "w1.log", tmp_path / "w2.log"
    proc = _spawn_worker(tmp_path, url, "w1", log1)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        info = jobs.get(db, job.id)
        if info.progress_done >= 4:
            break
        if proc.poll() is not None:
            pytest.fail(f"worker exited early: {proc.stdout.read()}")
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("worker made no progress")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    proc.stdout.close()

    killed = jobs.get(db, job.id)
    assert killed.status == "running" and killed.worker_id == "w1"
    total, distinct = _count_rows(db)
    assert total == distinct and total % 2 == 0  # whole pairs (2 keys each), no partial batch
    with db.begin() as s:
        stored = {cand_of[h] for h in s.scalars(select(MetricScore.input_hash).distinct())}
    assert 4 <= len(stored) < n
    assert stored <= set(_logged(log1))

    # The heartbeat is fresh: nobody may take the job yet.
    assert jobs.claim(db, worker_id="early", stale_after=1.5) is None
    time.sleep(1.8)

    proc2 = _spawn_worker(tmp_path, url, "w2", log2)
    out, _ = proc2.communicate(timeout=120)
    assert proc2.returncode == 0, out
    final = jobs.get(db, job.id)
    assert final.status == "done", final.error
    assert final.worker_id == "w2"
    assert final.progress_done == final.progress_total == n
    assert _count_rows(db) == (2 * n, 2 * n)
    second = _logged(log2)
    assert len(second) == len(set(second))
    assert set(second) == set(cand_of.values()) - stored  # only what was missing
    db.dispose()


def test_scoring_services_for_the_ui(d, db):
    from backend.services import scoring as svc
    from backend.services.errors import InvalidInput, NotFound, PermissionDenied
    from backend.services.types import Actor

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

    first = svc.enqueue_scoring(db, admin, "ui", ["dbl_ratio"])
    assert svc.job_status(db, admin, first.id).status == "queued"
    Worker(db, worker_id="w").run(once=True)
    done = svc.job_status(db, admin, first.id)
    assert done.status == "done" and done.fraction == 1.0
    before = svc.study_scores(db, admin, "ui")
    assert before.keys == ("dbl_ratio", "dbl_jaccard")  # the family stores all its keys
    assert before.directions == {"dbl_ratio": True, "dbl_jaccard": True}
    assert [r["position"] for r in before.rows] == [0, 1, 2]
    assert all(r["source"] == "gen" for r in before.rows)

    # Rescoring with another option: the dashboard switches to the newest signature.
    svc.enqueue_scoring(db, admin, "ui", ["dbl_ratio"], {"count_double": {"scale": 10}})
    Worker(db, worker_id="w").run(once=True)
    after = svc.study_scores(db, admin, "ui")
    for old, new in zip(before.rows, after.rows, strict=True):
        assert new["dbl_ratio"] == pytest.approx(10 * old["dbl_ratio"], rel=1e-12)
    assert "scale:10.0" in after.signatures["dbl_ratio"]
    assert [j.id for j in svc.list_jobs(db, admin, "ui")][-1] == first.id
    with pytest.raises(NotFound):
        svc.job_status(db, admin, 9999)

    catalog = {m.family: m for m in svc.metric_catalog()}
    assert catalog["count_double"].available and catalog["count_double"].signature
    assert not catalog["gone_double"].available
    assert "weights not found" in catalog["gone_double"].reason
