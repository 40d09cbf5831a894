"""The general job queue and worker, on SQLite and PostgreSQL.

Enqueue validation, claim, heartbeat, stale takeover, the attempts limit, cancel (queued and
running), device and kind routing, several workers (threads and processes) never running
one job twice, the roll of workers, the admin services and the ``jobs``/``worker`` commands.
"""

from __future__ import annotations

import argparse
import datetime as dt
import threading
import time

import pytest
from sqlalchemy import update

from radconcord.backend import clock, jobs
from radconcord.backend.errors import InvalidInput, NotFound, PermissionDenied
from radconcord.backend.jobs import queue, registry
from radconcord.backend.runner.worker import Worker
from radconcord.backend.types import Actor
from radconcord.db.models import Job, Study, WorkerProcess
from radconcord.db.session import Database
from tests.jobs_helpers import load

jh = load()
ADMIN = Actor.system()
RATER = Actor(user_id=5, username="r", role="rater")
STEPS = jh.STEPS_KIND


@pytest.fixture(autouse=True)
def _test_kind(monkeypatch):
    jh.install_test_kind(monkeypatch.setitem)


def _study(db, name: str = "s") -> int:
    with db.begin() as s:
        study = Study(name=name)
        s.add(study)
        s.flush()
        return study.id


def _go_silent(db, job_id: int, seconds: float = 600) -> None:
    """Age the job's heartbeat as if its worker had died ``seconds`` ago."""
    with db.begin() as s:
        s.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(heartbeat_at=clock.utcnow() - dt.timedelta(seconds=seconds))
        )


def _other(db) -> Database:
    """A second connection pool on the same database (as another process would have)."""
    return Database(jh.db_url(db), migrate=False)


# -- enqueue, get, list ---------------------------------------------------------------------


def test_enqueue_get_and_list(any_db):
    sid = _study(any_db, "alpha")
    a = jobs.enqueue(any_db, STEPS, {"steps": 2}, study_id=sid, created_by="boss")
    b = jobs.enqueue(any_db, "score", {"metrics": ["bleu"], "options": {}}, device="cuda")
    info = jobs.get(any_db, a)
    assert (info.kind, info.status, info.study_id, info.study_name) == (STEPS, "queued", sid,
                                                                         "alpha")
    assert info.params == {"steps": 2} and info.created_by == "boss" and info.device is None
    assert info.attempts == 0 and info.fraction == 0.0 and not info.finished
    assert info.created_at is not None and info.created_at.tzinfo is not None
    assert [j.id for j in jobs.list_jobs(any_db)] == [b, a]
    assert [j.id for j in jobs.list_jobs(any_db, kind="score")] == [b]
    assert [j.id for j in jobs.list_jobs(any_db, study_id=sid)] == [a]
    assert jobs.get(any_db, b).metrics == ("bleu",)
    assert jobs.get(any_db, 9999) is None


@pytest.mark.parametrize(
    ("kind", "params", "kwargs", "message"),
    [
        ("nope", {}, {}, "unknown job kind 'nope' (known: score, "),
        (STEPS, ["not", "a", "dict"], {}, "params: expected a JSON object, got list"),
        (STEPS, {"x": float("nan")}, {}, "not JSON-serialisable"),
        (STEPS, {"x": {1, 2}}, {}, "not JSON-serialisable"),
        (STEPS, {}, {"device": "gpu0"}, "device: expected cpu, cuda or cuda:N, got 'gpu0'"),
    ],
)
def test_enqueue_refuses_bad_input_and_writes_nothing(any_db, kind, params, kwargs, message):
    with pytest.raises(InvalidInput, match=None) as err:
        jobs.enqueue(any_db, kind, params, **kwargs)
    assert message in str(err.value)
    assert jobs.list_jobs(any_db) == []


def test_enqueue_for_a_missing_study(any_db):
    with pytest.raises(NotFound, match="no study with id 77"):
        jobs.enqueue(any_db, STEPS, {}, study_id=77)
    assert jobs.list_jobs(any_db) == []


def test_registry_is_lazy_and_loud():
    assert "score" in registry.kind_names() and "import" in registry.kind_names()
    with pytest.raises(registry.UnknownJobKind, match="unknown job kind 'zzz'"):
        registry.load_kind("zzz")
    assert registry.load_kind("score").__module__ == "radconcord.backend.runner.kinds.score"


def test_importing_the_job_package_loads_no_model_code():
    import subprocess
    import sys

    code = ("import sys, radconcord.backend.jobs, radconcord.backend.services.jobs,"
            " radconcord.backend.runner.worker\n"
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=jh.REPO, capture_output=True,
                         text=True, check=True, env={**__import__("os").environ,
                                                     "PYTHONPATH": str(jh.REPO)})
    assert out.stdout.strip() == "[]"


# -- claim, heartbeat, takeover, attempts ---------------------------------------------------


def test_claim_is_exclusive_oldest_first_and_stale_jobs_are_taken_over(any_db):
    first = jobs.enqueue(any_db, STEPS, {})
    second = jobs.enqueue(any_db, STEPS, {})
    a = queue.claim(any_db, worker_id="a", stale_after=60)
    assert (a.id, a.status, a.worker_id, a.attempts) == (first, "running", "a", 1)
    assert a.heartbeat_at is not None and a.started_at is not None
    b = queue.claim(any_db, worker_id="b", stale_after=60)
    assert b.id == second
    assert queue.claim(any_db, worker_id="c", stale_after=60) is None
    # The owner's writes go through and say "carry on".
    assert queue.report_progress(any_db, first, "a", 1, 4, "one") is None
    assert jobs.get(any_db, first).progress_done == 1
    # Worker a goes silent: once its heartbeat is older than stale_after, c takes over.
    _go_silent(any_db, first, 120)
    taken = queue.claim(any_db, worker_id="c", stale_after=60)
    assert (taken.id, taken.worker_id, taken.attempts) == (first, "c", 2)
    # The old owner can no longer write progress, finish or fail the job.
    assert queue.report_progress(any_db, first, "a", 3, 4, "late") == "lost"
    assert queue.heartbeat(any_db, first, "a") == "lost"
    assert not queue.finish(any_db, first, "a", {"x": 1}, "done by a")
    assert not queue.fail(any_db, first, "a", "boom")
    info = jobs.get(any_db, first)
    assert (info.worker_id, info.status, info.progress_done) == ("c", "running", 1)


def test_a_job_whose_workers_keep_dying_fails_after_the_attempt_limit(any_db):
    """Each claim counts; a polite release does not; a stale job at the limit is failed with
    a reason instead of killing one more worker."""
    job = jobs.enqueue(any_db, STEPS, {})
    assert queue.claim(any_db, worker_id="w1", stale_after=60, max_attempts=2).attempts == 1
    assert queue.release(any_db, job, "w1", "shutting down")
    assert jobs.get(any_db, job).attempts == 0 and jobs.get(any_db, job).status == "queued"
    assert queue.claim(any_db, worker_id="w2", stale_after=60, max_attempts=2).attempts == 1
    _go_silent(any_db, job)
    assert queue.claim(any_db, worker_id="w3", stale_after=60, max_attempts=2).attempts == 2
    _go_silent(any_db, job)
    assert queue.claim(any_db, worker_id="w4", stale_after=60, max_attempts=2) is None
    failed = jobs.get(any_db, job)
    assert failed.status == "failed" and "stopped responding 2 times" in failed.error
    assert failed.finished_at is not None


def test_default_attempt_limit_is_three(any_db):
    job = jobs.enqueue(any_db, STEPS, {})
    for n in range(1, jobs.MAX_ATTEMPTS + 1):
        assert queue.claim(any_db, worker_id=f"w{n}", stale_after=60).attempts == n
        _go_silent(any_db, job)
    assert queue.claim(any_db, worker_id="last", stale_after=60) is None
    assert jobs.get(any_db, job).status == "failed"


# -- cancel ---------------------------------------------------------------------------------


def test_cancel_a_queued_job_finishes_it_at_once_and_no_worker_runs_it(any_db, tmp_path):
    log = tmp_path / "steps.log"
    job = jobs.enqueue(any_db, STEPS, {"log": str(log)})
    info = jobs.cancel(any_db, job)
    assert info.status == "cancelled" and info.finished_at is not None
    assert Worker(any_db, worker_id="w").run_once() is None
    assert not log.exists()
    assert jobs.cancel(any_db, job).status == "cancelled"  # idempotent
    with pytest.raises(NotFound, match="no job 4242"):
        jobs.cancel(any_db, 4242)


def test_cancel_a_running_job_stops_it_at_its_next_step(any_db, tmp_path):
    log = tmp_path / "steps.log"
    job = jobs.enqueue(any_db, STEPS, {"steps": 200, "seconds": 0.05, "log": str(log)})
    worker = Worker(any_db, worker_id="w", heartbeat_every=0.1, stale_after=5)
    t = threading.Thread(target=worker.run_once)
    t.start()
    jh.wait_for(any_db, job, lambda j: j.progress_done >= 2, what="two steps")
    requested = jobs.cancel(any_db, job)
    assert requested.status == "running" and requested.cancel_requested
    t.join(30)
    assert not t.is_alive()
    final = jobs.get(any_db, job)
    assert final.status == "cancelled" and final.finished_at is not None
    assert final.error is None and final.result is None
    steps = len(jh.step_log(log))
    assert 2 <= steps < 200
    # A cancelled job is never claimed again.
    assert Worker(any_db, worker_id="w2").run_once() is None
    worker.close()


def test_a_stale_job_whose_cancel_was_requested_is_cancelled_not_taken_over(any_db):
    job = jobs.enqueue(any_db, STEPS, {})
    queue.claim(any_db, worker_id="dead", stale_after=60)
    jobs.cancel(any_db, job)
    _go_silent(any_db, job)
    assert queue.claim(any_db, worker_id="next", stale_after=60) is None
    info = jobs.get(any_db, job)
    assert info.status == "cancelled" and info.worker_id == "dead"


def test_cancel_of_a_finished_job_changes_nothing(any_db):
    job = jobs.enqueue(any_db, STEPS, {"steps": 1})
    assert Worker(any_db, worker_id="w").run_once().status == "done"
    info = jobs.cancel(any_db, job)
    assert info.status == "done" and not info.cancel_requested


# -- routing --------------------------------------------------------------------------------


def test_device_routing(any_db):
    gpu_any = jobs.enqueue(any_db, STEPS, {}, device="cuda")
    gpu1 = jobs.enqueue(any_db, STEPS, {}, device="cuda:1")
    cpu_only = jobs.enqueue(any_db, STEPS, {}, device="cpu")
    anywhere = jobs.enqueue(any_db, STEPS, {})

    def ids(worker: str, device: str) -> list[int]:
        out = []
        while (j := queue.claim(any_db, worker_id=worker, device=device)) is not None:
            out.append(j.id)
        return out

    assert ids("cpu-worker", "cpu") == [cpu_only, anywhere]
    assert ids("gpu0", "cuda:0") == [gpu_any]  # not the job pinned to the second GPU
    assert ids("gpu1", "cuda:1") == [gpu1]


def test_kind_routing(any_db):
    steps = jobs.enqueue(any_db, STEPS, {"steps": 1})
    score = jobs.enqueue(any_db, "score", {"metrics": ["bleu"]})
    only_steps = Worker(any_db, worker_id="w", kinds=[STEPS])
    assert only_steps.run_once().id == steps
    assert only_steps.run_once() is None
    assert jobs.get(any_db, score).status == "queued"
    with pytest.raises(InvalidInput, match="unknown job kind 'nope'"):
        Worker(any_db, kinds=["nope"])
    with pytest.raises(InvalidInput, match="expected cpu, cuda or cuda:N"):
        Worker(any_db, device="tpu")
    assert Worker(any_db, device="cuda").device == "cuda:0"


# -- several workers ------------------------------------------------------------------------


def test_concurrent_claims_never_hand_one_job_to_two_workers(any_db):
    n_jobs, n_workers = 40, 6
    for _ in range(n_jobs):
        jobs.enqueue(any_db, STEPS, {})
    claimed: dict[str, list[int]] = {}
    start = threading.Barrier(n_workers)
    errors: list[BaseException] = []

    def claimer(name: str) -> None:
        own = _other(any_db)
        mine: list[int] = []
        try:
            start.wait()
            while (j := queue.claim(own, worker_id=name, stale_after=600)) is not None:
                mine.append(j.id)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            claimed[name] = mine
            own.dispose()

    threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(n_workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    every = [j for mine in claimed.values() for j in mine]
    assert sorted(every) == sorted(set(every)) and len(every) == n_jobs
    owners = {j.id: j.worker_id for j in jobs.list_jobs(any_db)}
    for name, mine in claimed.items():
        assert all(owners[j] == name for j in mine)
    assert all(j.attempts == 1 for j in jobs.list_jobs(any_db))


def test_worker_threads_run_every_job_exactly_once(any_db, tmp_path):
    log = tmp_path / "steps.log"
    ids = [jobs.enqueue(any_db, STEPS, {"steps": 2, "seconds": 0.01, "log": str(log)})
           for _ in range(12)]
    workers = [Worker(_other(any_db), worker_id=f"t{i}") for i in range(3)]
    threads = [threading.Thread(target=w.run_forever, kwargs={"once": True}) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for w in workers:
        w.db.dispose()
    runs = jh.step_log(log)
    per_job: dict[int, set[str]] = {}
    for job, worker, *_ in runs:
        per_job.setdefault(job, set()).add(worker)
    assert sorted(per_job) == ids and all(len(w) == 1 for w in per_job.values())
    assert len(runs) == 2 * len(ids)
    assert all(jobs.get(any_db, j).status == "done" for j in ids)


def test_worker_processes_share_the_queue_safely(any_db, tmp_path):
    """Three worker processes on one database (SQLite file or PostgreSQL): every job runs
    once, by one worker, and no two runs of one job overlap."""
    log = tmp_path / "steps.log"
    ids = [jobs.enqueue(any_db, STEPS, {"steps": 3, "seconds": 0.02, "log": str(log)})
           for _ in range(9)]
    url = jh.db_url(any_db)
    procs = [jh.start_worker(url, worker_id=f"p{i}", log_path=tmp_path / f"p{i}.log",
                             setup=jh.SETUP_TEST_KIND, stale_after=30, heartbeat=0.5)
             for i in range(3)]
    for i, p in enumerate(procs):
        assert p.wait(120) == 0, (tmp_path / f"p{i}.log").read_text()
    runs = jh.step_log(log)
    assert len(runs) == 3 * len(ids)
    for job in ids:
        mine = [r for r in runs if r[0] == job]
        assert len({r[1] for r in mine}) == 1
        assert sorted(r[2] for r in mine) == [0, 1, 2]
        info = jobs.get(any_db, job)
        assert info.status == "done" and info.attempts == 1
        assert info.result == {"summary": f"3 steps by {info.worker_id}", "steps": 3}
    gone = jobs.list_workers(any_db, include_gone=True)
    assert {w.id for w in gone} == {"p0", "p1", "p2"}
    assert all(w.stopped_at is not None and not w.alive for w in gone)


def test_kill_9_mid_job_then_another_worker_finishes_it_once(any_db, tmp_path):
    log = tmp_path / "steps.log"
    job = jobs.enqueue(any_db, STEPS, {"steps": 30, "seconds": 0.1, "log": str(log)})
    killed, final = jh.kill_and_resume(jh.db_url(any_db), any_db, job, tmp_path=tmp_path,
                                       at_least=3, setup=jh.SETUP_TEST_KIND)
    assert killed.attempts == 1
    assert final.status == "done" and final.worker_id == "w2" and final.attempts == 2
    runs = jh.step_log(log)
    first = [r for r in runs if r[1] == "w1"]
    second = [r for r in runs if r[1] == "w2"]
    assert len(first) >= 3 and len(second) == 30
    # Never run twice at once: w2 started after w1's last step.
    assert min(r[3] for r in second) > max(r[4] for r in first)
    # The killed worker's row stays "not alive", never "stopped".
    rows = {w.id: w for w in jobs.list_workers(any_db, include_gone=True)}
    assert rows["w1"].stopped_at is None
    assert rows["w2"].stopped_at is not None


# -- the worker: outcomes, stop, roll -------------------------------------------------------


def test_failures_are_recorded_and_the_worker_goes_on(any_db, monkeypatch):
    monkeypatch.setitem(registry.KINDS, "broken", "no_such_module_xyz:run")
    broken = jobs.enqueue(any_db, "broken", {})
    boom = jobs.enqueue(any_db, STEPS, {"steps": 3, "fail_at": 1})
    not_json = jobs.enqueue(any_db, STEPS, {"steps": 1, "result": "a string"})
    ok = jobs.enqueue(any_db, STEPS, {"steps": 2})
    worker = Worker(any_db, worker_id="w")
    assert worker.run_forever(once=True) == 4
    info = {j: jobs.get(any_db, j) for j in (broken, boom, not_json, ok)}
    assert info[broken].status == "failed"
    assert "ModuleNotFoundError" in info[broken].error
    assert "no_such_module_xyz" in info[broken].error
    assert info[boom].status == "failed" and info[boom].error == "RuntimeError: step 1 exploded"
    assert info[boom].progress_done == 1
    assert info[not_json].status == "failed"
    assert "job result: expected a JSON object, got str" in info[not_json].error
    assert info[ok].status == "done" and info[ok].message == "2 steps by w"
    assert info[ok].result == {"summary": "2 steps by w", "steps": 2}
    assert info[ok].progress_done == info[ok].progress_total == 2


def test_stop_requeues_the_running_job_without_counting_an_attempt(any_db):
    job = jobs.enqueue(any_db, STEPS, {"steps": 100, "seconds": 0.05})
    worker = Worker(any_db, worker_id="w", heartbeat_every=0.1, stale_after=5)
    t = threading.Thread(target=worker.run_once)
    t.start()
    jh.wait_for(any_db, job, lambda j: j.progress_done >= 1, what="a step")
    worker.stop_event.set()
    t.join(30)
    after = jobs.get(any_db, job)
    assert after.status == "queued" and after.worker_id is None and after.attempts == 0
    assert "re-queued" in after.message


def test_the_roll_of_workers(any_db):
    job = jobs.enqueue(any_db, STEPS, {"steps": 100, "seconds": 0.05})
    worker = Worker(any_db, device="cpu", kinds=[STEPS], heartbeat_every=0.1, stale_after=5)
    host, pid, rand = worker.worker_id.split(":")
    assert int(pid) > 0 and len(rand) == 6 and host
    t = threading.Thread(target=worker.run_forever, kwargs={"poll": 0.05})
    t.start()
    jh.wait_for(any_db, job, lambda j: j.progress_done >= 1, what="a step")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        alive = jobs.list_workers(any_db)
        if alive and alive[0].current_job_id == job:
            break
        time.sleep(0.05)
    assert [(w.id, w.device, w.kinds, w.current_job_id, w.alive) for w in alive] == [
        (worker.worker_id, "cpu", (STEPS,), job, True)]
    jobs.cancel(any_db, job)
    jh.wait_for(any_db, job, lambda j: j.status == "cancelled", what="cancelled")
    worker.stop_event.set()
    t.join(30)
    assert jobs.list_workers(any_db) == []
    gone = jobs.list_workers(any_db, include_gone=True)[0]
    assert gone.stopped_at is not None and gone.current_job_id is None and not gone.alive
    # A worker that died (no heartbeat for minutes, never stopped) is not alive either.
    with any_db.begin() as s:
        s.add(WorkerProcess(id="ghost", host="h", pid=1, device="cuda:0", kinds=[],
                            heartbeat_at=clock.utcnow() - dt.timedelta(minutes=5)))
    assert jobs.list_workers(any_db) == []
    ghost = next(w for w in jobs.list_workers(any_db, include_gone=True) if w.id == "ghost")
    assert not ghost.alive and ghost.stopped_at is None


def test_context_check_without_progress_sees_a_cancel(any_db, monkeypatch):
    from radconcord.backend.jobs.context import JobCancelled

    seen: list[str] = []

    def checking_kind(ctx, params):
        deadline = time.monotonic() + 20
        try:
            while time.monotonic() < deadline:
                ctx.check()
                time.sleep(0.01)
        except JobCancelled as exc:
            seen.append(exc.reason)
            raise
        return None

    jh_mod = jh
    monkeypatch.setattr(jh_mod, "checking_kind", checking_kind, raising=False)
    monkeypatch.setitem(registry.KINDS, "checking", f"{jh.MODULE_NAME}:checking_kind")
    job = jobs.enqueue(any_db, "checking", {})
    # heartbeat_every is long: the cancel must reach the kind through ctx.check itself.
    worker = Worker(any_db, worker_id="w", heartbeat_every=30, stale_after=120)
    t = threading.Thread(target=worker.run_once)
    t.start()
    jh.wait_for(any_db, job, lambda j: j.status == "running", what="running")
    jobs.cancel(any_db, job)
    t.join(30)
    assert seen == ["cancelled"]
    assert jobs.get(any_db, job).status == "cancelled"


# -- admin services -------------------------------------------------------------------------


def test_job_services_are_admin_only_and_name_studies(any_db):
    from radconcord.backend.services import jobs as svc

    _study(any_db, "named")
    for call in (
        lambda a: svc.enqueue_job(any_db, a, kind=STEPS, params={}),
        lambda a: svc.list_jobs(any_db, a),
        lambda a: svc.job_status(any_db, a, job_id=1),
        lambda a: svc.cancel_job(any_db, a, job_id=1),
        lambda a: svc.list_workers(any_db, a),
    ):
        with pytest.raises(PermissionDenied):
            call(RATER)
    view = svc.enqueue_job(any_db, ADMIN, kind=STEPS, params={"steps": 1}, study_name="named")
    assert view.study_name == "named" and view.created_by == "system"
    with pytest.raises(NotFound, match="nope"):
        svc.enqueue_job(any_db, ADMIN, kind=STEPS, params={}, study_name="nope")
    with pytest.raises(InvalidInput, match="unknown job kind"):
        svc.list_jobs(any_db, ADMIN, kind="zzz")
    assert [j.id for j in svc.list_jobs(any_db, ADMIN, study_name="named")] == [view.id]
    assert svc.job_status(any_db, ADMIN, job_id=view.id).status == "queued"
    with pytest.raises(NotFound, match="no job 999"):
        svc.job_status(any_db, ADMIN, job_id=999)
    # Waiting with no worker alive: unserved.
    waiting = svc.list_jobs(any_db, ADMIN)
    assert svc.unserved(waiting, svc.list_workers(any_db, ADMIN)) == waiting
    gpu = svc.enqueue_job(any_db, ADMIN, kind=STEPS, params={}, device="cuda")
    cpu_worker = Worker(any_db, worker_id="cpu-w")
    cpu_worker.register()
    left = svc.unserved(svc.list_jobs(any_db, ADMIN), svc.list_workers(any_db, ADMIN))
    assert [j.id for j in left] == [gpu.id]  # the CPU worker takes the other one
    assert svc.cancel_job(any_db, ADMIN, job_id=gpu.id).status == "cancelled"
    cpu_worker.close()


# -- the command line -----------------------------------------------------------------------


def _cli(argv: list[str]) -> int:
    from radconcord.backend.cli import jobs as cli_jobs

    parser = argparse.ArgumentParser()
    cli_jobs.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_jobs_commands(db, monkeypatch, capsys, tmp_path):
    from radconcord.backend.cli.common import UserError

    monkeypatch.setenv("DATABASE_URL", jh.db_url(db))
    sid = _study(db, "cli study")
    a = jobs.enqueue(db, STEPS, {"steps": 1}, study_id=sid)
    b = jobs.enqueue(db, STEPS, {"steps": 1})
    assert _cli(["jobs", "list", "--study", "cli study"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split("\t")[:4] == ["id", "kind", "status", "progress"]
    assert [line.split("\t")[:3] for line in out[1:]] == [[str(a), STEPS, "queued"]]
    assert _cli(["jobs", "cancel", str(b)]) == 0
    assert capsys.readouterr().out.strip() == f"job {b} ({STEPS}) cancelled"
    assert _cli(["jobs", "cancel", str(b)]) == 0
    assert "already cancelled: nothing to cancel" in capsys.readouterr().out
    with pytest.raises(UserError, match="no job 999"):
        _cli(["jobs", "cancel", "999"])
    with pytest.raises(UserError, match="no study named 'zz'"):
        _cli(["jobs", "list", "--study", "zz"])
    assert _cli(["jobs", "workers"]) == 0
    assert "no worker is running" in capsys.readouterr().out
    # worker --once runs what is due, then records its clean exit.
    assert _cli(["worker", "--once", "--worker-id", "cli-w", "--kinds", STEPS]) == 0
    assert jobs.get(db, a).status == "done" and jobs.get(db, a).worker_id == "cli-w"
    assert _cli(["jobs", "workers", "--all"]) == 0
    assert "cli-w\tcpu\t" in capsys.readouterr().out
    with pytest.raises(UserError, match="^--device: expected cpu, cuda or cuda:N, got 'gpu'$"):
        _cli(["worker", "--once", "--device", "gpu"])
    with pytest.raises(UserError, match=r"^--kinds: unknown job kind\(s\) zz \(known: score,"):
        _cli(["worker", "--once", "--kinds", f"{STEPS},zz"])
    # A GPU worker refuses to start where that GPU does not exist (it would fail every job).
    with pytest.raises(UserError, match=r"^--device cuda:7: (CUDA is not available here|"
                                        r"this machine has [0-7] GPU\(s\))$"):
        _cli(["worker", "--once", "--device", "cuda:7"])
    assert not jobs.list_workers(db, include_gone=True) or all(
        w.id == "cli-w" for w in jobs.list_workers(db, include_gone=True))
    with pytest.raises(UserError, match="--heartbeat must be positive"):
        _cli(["worker", "--once", "--heartbeat", "500"])


def test_an_idle_poll_does_not_take_the_sqlite_write_lock(db):
    """Workers poll every few seconds; with nothing due, a poll must not queue behind (or
    block) a writer such as a rater's save."""
    import sqlite3

    jobs.enqueue(db, STEPS, {})
    assert queue.claim(db, worker_id="w") is not None  # running, fresh heartbeat: not due
    other = sqlite3.connect(str(db.url).split("///", 1)[1], isolation_level=None, timeout=30)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        t0 = time.monotonic()
        assert queue.claim(db, worker_id="idle", stale_after=60) is None
        assert time.monotonic() - t0 < 1.0
    finally:
        other.execute("ROLLBACK")
        other.close()


def test_a_long_running_worker_survives_a_database_hiccup(db, monkeypatch):
    """A failing poll (database restarting) is logged and retried; the worker then goes on
    with the queue. With ``once`` the error surfaces instead."""
    from sqlalchemy.exc import OperationalError

    job = jobs.enqueue(db, STEPS, {"steps": 1})
    real_claim = queue.claim
    failures = []

    def flaky_claim(*args, **kwargs):
        if not failures:
            failures.append(1)
            raise OperationalError("SELECT 1", {}, Exception("server closed the connection"))
        return real_claim(*args, **kwargs)

    monkeypatch.setattr(queue, "claim", flaky_claim)
    with pytest.raises(OperationalError):
        Worker(db, worker_id="once").run_forever(once=True)
    failures.clear()
    worker = Worker(db, worker_id="w")
    monkeypatch.setattr(worker.stop_event, "wait", lambda timeout: worker.stop_event.is_set())
    t = threading.Thread(target=worker.run_forever, kwargs={"poll": 0.01})
    t.start()
    jh.wait_for(db, job, lambda j: j.status == "done", what="done after the hiccup")
    worker.stop_event.set()
    t.join(30)
    assert failures == [1] and not t.is_alive()
    assert jobs.list_workers(db, include_gone=True)[0].stopped_at is not None
