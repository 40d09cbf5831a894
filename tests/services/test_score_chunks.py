"""A score job split into chunk jobs (issue 26, without Ray): ``chunks: K`` on a score job.

On SQLite and PostgreSQL: the parent queues K ``score_chunk`` jobs over contiguous ranges of
the sorted pair ids, plus one job over every pair for a corpus-dependent family (CIDEr);
two workers take different chunks at once; the cache then holds the same rows, bit for bit,
as an unsplit job's; a parent killed -9 after queuing its chunks queues none again on retry;
a chunk killed -9 after committing part of its pairs is taken over and computes only the
rest, with no duplicate rows; the group's progress and status combine the chunks'; and
cancelling the parent cancels its chunks.
"""

from __future__ import annotations

import argparse
import datetime as dt
import threading

import pytest
from sqlalchemy import delete, func, select, update

from radconcord.backend import clock, jobs
from radconcord.backend.errors import InvalidInput
from radconcord.backend.jobs import queue
from radconcord.backend.jobs.context import JobCancelled, JobContext
from radconcord.backend.runner.kinds import score as score_kind
from radconcord.backend.runner.worker import Worker
from radconcord.backend.scoring.jobs import study_pairs
from radconcord.backend.scoring.runner import MetricPool, score
from radconcord.backend.services import jobs as job_service
from radconcord.backend.services.accounts import seed
from radconcord.backend.services.scores.scoring import enqueue_scoring
from radconcord.backend.types import Actor
from radconcord.db.models import Job, MetricScore, Study

ADMIN = Actor.system()


@pytest.fixture
def demo_db(any_db, fast_password_hashing):
    seed.seed_demo(any_db)
    return any_db


def _sid(db) -> int:
    with db.read() as s:
        return s.scalar(select(Study.id).where(Study.name == seed.DEMO_STUDY))


def _go_silent(db, job_id: int, seconds: float = 600) -> None:
    """Age the job's heartbeat as if its worker had been killed -9 ``seconds`` ago."""
    with db.begin() as s:
        s.execute(update(Job).where(Job.id == job_id)
                  .values(heartbeat_at=clock.utcnow() - dt.timedelta(seconds=seconds)))


def _ctx(db, job: jobs.JobInfo) -> JobContext:
    return JobContext(db=db, job_id=job.id, worker_id=job.worker_id, device="cpu",
                      pool=MetricPool(), study_id=job.study_id, created_by=job.created_by)


def _chunk_jobs(db) -> list[jobs.JobInfo]:
    return sorted(jobs.list_jobs(db, kind=queue.CHUNK_KIND), key=lambda j: j.id)


def _rows(db) -> list[tuple]:
    with db.read() as s:
        return sorted(s.execute(select(MetricScore.input_hash, MetricScore.key,
                                       MetricScore.signature_hash, MetricScore.value)).all())


def _split(db, metrics: list[str], chunks: int) -> jobs.JobInfo:
    """Queue a split score job and let one worker run the parent (it queues the chunks)."""
    parent = enqueue_scoring(db, ADMIN, seed.DEMO_STUDY, metrics, chunks=chunks)
    done = Worker(db, worker_id="parent", kinds=["score"]).run_once()
    assert done is not None and done.id == parent.id and done.status == "done", done
    return done


def test_split_into_k_ranges_plus_one_corpus_chunk_and_a_retried_parent_queues_none(demo_db):
    parent = enqueue_scoring(demo_db, ADMIN, seed.DEMO_STUDY, ["bleu", "cider"], chunks=3)
    assert parent.params["chunks"] == 3
    first = queue.claim(demo_db, worker_id="p1", kinds=["score"])
    ids = score_kind.run(_ctx(demo_db, first), dict(first.params))["chunks"]
    chunks = _chunk_jobs(demo_db)
    assert [c.id for c in chunks] == ids and len(ids) == 4
    pair_ids = sorted(int(p.id) for p in study_pairs(demo_db, _sid(demo_db)))
    ranges = [c.params["pair_ids"] for c in chunks[:3]]
    # Contiguous, disjoint ranges over the sorted ids, as even as possible (24 = 8+8+8).
    assert [r[0] for r in ranges] == [pair_ids[0], pair_ids[8], pair_ids[16]]
    assert [r[1] for r in ranges] == [pair_ids[7], pair_ids[15], pair_ids[23]]
    assert all(c.params["metrics"] == ["bleu"] for c in chunks[:3])
    # CIDEr's document frequencies are the whole set's: one chunk over every pair.
    assert chunks[3].params["metrics"] == ["cider"] and chunks[3].params["pair_ids"] is None
    assert [(c.params["chunk"], c.params["of"], c.params["parent"]) for c in chunks] == [
        (i, 4, parent.id) for i in range(4)]
    assert all(c.study_id == parent.study_id and c.status == "queued" for c in chunks)

    # Killed -9 after the chunks were committed, before the parent finished: the retry
    # finds them recorded and queues nothing more.
    assert jobs.get(demo_db, parent.id).status == "running"
    _go_silent(demo_db, parent.id)
    second = queue.claim(demo_db, worker_id="p2", kinds=["score"], stale_after=60)
    assert (second.id, second.attempts) == (parent.id, 2)
    assert score_kind.run(_ctx(demo_db, second), dict(second.params))["chunks"] == ids
    # The dead owner, were it to wake up, can queue nothing either.
    state, none = queue.enqueue_children(demo_db, parent.id, "p1", queue.CHUNK_KIND, [{}])
    assert (state, none) == (queue.CLAIM_LOST, [])
    assert [c.id for c in _chunk_jobs(demo_db)] == ids


def test_two_workers_take_different_chunks_and_the_cache_matches_an_unsplit_job(
        demo_db, monkeypatch):
    parent = _split(demo_db, ["bleu", "rouge", "cider"], chunks=2)
    chunk_ids = list(parent.result["chunks"])
    assert len(chunk_ids) == 3  # two ranges for bleu and rouge, one for cider

    # Each chunk waits at its start until the other worker holds a chunk too: both
    # workers run at once, whatever the thread scheduling.
    both = threading.Barrier(2, timeout=60)
    real = score_kind.run_chunk

    def meeting(ctx, params):
        if params["chunk"] < 2:
            both.wait()
        return real(ctx, params)

    monkeypatch.setattr(score_kind, "run_chunk", meeting)
    workers = [Worker(demo_db, worker_id=f"gpu{i}", kinds=[queue.CHUNK_KIND]) for i in (0, 1)]
    errors: list[BaseException] = []

    def drain(w: Worker) -> None:
        try:
            w.run_forever(once=True)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=drain, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    chunks = [jobs.get(demo_db, i) for i in chunk_ids]
    assert [c.status for c in chunks] == ["done"] * 3
    assert {chunks[0].worker_id, chunks[1].worker_id} == {"gpu0", "gpu1"}
    assert all(c.attempts == 1 for c in chunks)
    # CIDEr was scored once, over the whole set, by one chunk.
    cider = chunks[2].result["families"]["cider"]
    assert chunks[2].result["pairs"] == 24 and set(chunks[2].result["families"]) == {"cider"}
    assert not any("cider" in c.result["families"] for c in chunks[:2])
    assert cider["computed"] + cider["cached"] > 0

    # The same job unsplit, on an empty cache: the same rows, values compared with ==.
    split = _rows(demo_db)
    with demo_db.begin() as s:
        s.execute(delete(MetricScore))
    job = enqueue_scoring(demo_db, ADMIN, seed.DEMO_STUDY, ["bleu", "rouge", "cider"])
    assert Worker(demo_db).run_once().id == job.id
    assert jobs.get(demo_db, job.id).status == "done"
    assert split and _rows(demo_db) == split


def test_a_chunk_killed_mid_way_is_redone_computing_only_the_rest(demo_db):
    parent = _split(demo_db, ["bleu"], chunks=2)
    first = jobs.get(demo_db, parent.result["chunks"][0])
    lo, hi = first.params["pair_ids"]
    claimed = queue.claim(demo_db, worker_id="dead", kinds=[queue.CHUNK_KIND])
    assert claimed.id == first.id
    # The dead worker had committed its first batch of 3 pairs (a batch is one transaction).
    mine = [p for p in study_pairs(demo_db, _sid(demo_db)) if lo <= int(p.id) <= hi]
    score(mine[:3], ["bleu"], db=demo_db)
    _go_silent(demo_db, first.id)

    redone = Worker(demo_db, worker_id="next", stale_after=60).run_once()
    assert (redone.id, redone.status, redone.attempts) == (first.id, "done", 2)
    bleu = redone.result["families"]["bleu"]
    hashes = {p.input_hash for p in mine[:3]}
    assert bleu["cached"] >= len(hashes) and bleu["computed"] + bleu["cached"] == len(mine)
    while Worker(demo_db).run_once() is not None:
        pass
    with demo_db.read() as s:
        n_rows = s.scalar(select(func.count(MetricScore.id)))
        n_cells = s.scalar(select(func.count()).select_from(
            select(MetricScore.input_hash, MetricScore.key, MetricScore.signature_hash)
            .distinct().subquery()))
    assert n_rows == n_cells > 0  # no duplicate rows


def test_group_progress_and_status_combine_the_chunks(demo_db):
    parent = _split(demo_db, ["bleu"], chunks=2)
    [group] = job_service.job_groups(demo_db, ADMIN, job_service.list_jobs(demo_db, ADMIN))
    assert group.parent.id == parent.id and len(group.children) == 2
    # Nothing started: each chunk counts its planned steps (12 pairs x 1 family).
    assert (group.status, group.progress_done, group.progress_total) == ("queued", 0, 24)

    assert Worker(demo_db, worker_id="w0").run_once().status == "done"
    group = jobs.group(demo_db, parent.id)
    assert (group.status, group.progress_done, group.progress_total) == ("running", 12, 24)
    assert group.workers == ("w0",) and not group.finished

    second = queue.claim(demo_db, worker_id="w1")
    assert queue.fail(demo_db, second.id, "w1", "CUDA out of memory", progress=(5, 12))
    group = jobs.group(demo_db, parent.id)
    assert (group.status, group.progress_done, group.progress_total) == ("partial", 17, 24)
    assert group.workers == ("w0", "w1") and group.finished
    assert group.problems == (f"chunk 2/2 (#{second.id}) failed: CUDA out of memory",)
    assert jobs.group(demo_db, second.id) is None  # a chunk is no group


def test_cancelling_the_parent_cancels_its_chunks(demo_db):
    parent = _split(demo_db, ["bleu"], chunks=3)
    running = queue.claim(demo_db, worker_id="w0")
    job_service.cancel_job(demo_db, ADMIN, job_id=parent.id)
    chunks = [jobs.get(demo_db, i) for i in parent.result["chunks"]]
    assert chunks[0].id == running.id
    assert chunks[0].status == "running" and chunks[0].cancel_requested
    assert [c.status for c in chunks[1:]] == ["cancelled", "cancelled"]
    assert f"#{parent.id}" in chunks[1].message
    # The running chunk stops at its next step.
    assert queue.heartbeat(demo_db, running.id, "w0") == queue.CANCELLED_BY_USER
    assert queue.mark_cancelled(demo_db, running.id, "w0")
    assert jobs.group(demo_db, parent.id).status == "cancelled"


def test_a_parent_cancelled_before_it_splits_queues_nothing(demo_db):
    parent = enqueue_scoring(demo_db, ADMIN, seed.DEMO_STUDY, ["bleu"], chunks=2)
    claimed = queue.claim(demo_db, worker_id="p")
    jobs.cancel(demo_db, parent.id)
    with pytest.raises(JobCancelled):
        score_kind.run(_ctx(demo_db, claimed), dict(claimed.params))
    assert _chunk_jobs(demo_db) == []


def test_unsplit_stays_the_default_and_bad_chunks_are_refused(demo_db):
    job = enqueue_scoring(demo_db, ADMIN, seed.DEMO_STUDY, ["bleu"])
    assert "chunks" not in job.params
    done = Worker(demo_db).run_once()
    assert done.status == "done" and "families" in done.result and not done.child_ids
    assert _chunk_jobs(demo_db) == []
    for bad in (0, -2, True, 1.5, "2"):
        with pytest.raises(InvalidInput, match="chunks"):
            enqueue_scoring(demo_db, ADMIN, seed.DEMO_STUDY, ["bleu"], chunks=bad)
    # A job row written by hand is refused by the worker with the same clear reason.
    bad = jobs.enqueue(demo_db, "score", {"metrics": ["bleu"], "chunks": 0},
                       study_id=_sid(demo_db))
    failed = Worker(demo_db).run_once()
    assert failed.id == bad and failed.status == "failed"
    assert "'chunks' must be at least 1" in failed.error


def _cli(argv: list[str]) -> int:
    from radconcord.backend.cli import jobs as cli_jobs

    parser = argparse.ArgumentParser()
    cli_jobs.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_jobs_cli_lists_a_split_job_as_its_chunks_combined_and_cancels_them(
        db, fast_password_hashing, monkeypatch, capsys):
    from tests.jobs_helpers import load

    seed.seed_demo(db)
    monkeypatch.setenv("DATABASE_URL", load().db_url(db))
    parent = _split(db, ["bleu"], chunks=2)
    assert Worker(db, worker_id="gpu0").run_once().status == "done"
    capsys.readouterr()
    assert _cli(["jobs", "list", "--kind", "score"]) == 0
    line = capsys.readouterr().out.splitlines()[1].split("\t")
    assert line[:4] == [str(parent.id), "score", "running (2 chunks on 1 worker)", "12/24"]

    assert _cli(["jobs", "cancel", str(parent.id)]) == 0
    assert "split into 2 chunk jobs: 1 queued cancelled, 0 running" in capsys.readouterr().out
    assert _cli(["jobs", "list", "--kind", "score"]) == 0
    line = capsys.readouterr().out.splitlines()[1].split("\t")
    assert line[2] == "partial (2 chunks on 1 worker)"
    assert line[6].startswith(f"chunk 2/2 (#{parent.result['chunks'][1]}) cancelled")


def test_a_split_job_is_pending_while_a_chunk_is_and_score_now_reuses_it(demo_db):
    from radconcord.backend.services.scores import score_now
    from radconcord.backend.services.scores.scoring import describe_family

    parent = _split(demo_db, ["bleu"], chunks=2)
    bleu_only = [describe_family("bleu")]
    state = score_now.score_state(demo_db, ADMIN, seed.DEMO_STUDY, catalog=bleu_only)
    # The parent row is done (it only queued its chunks); the study's scoring is not.
    assert state.pending is not None and state.pending.id == parent.id and state.last is None
    assert score_now.score_now(demo_db, ADMIN, seed.DEMO_STUDY, catalog=bleu_only).id == parent.id
    again = enqueue_scoring(demo_db, ADMIN, seed.DEMO_STUDY, ["bleu"], reuse_unfinished=True)
    assert again.id == parent.id
    while Worker(demo_db).run_once() is not None:
        pass
    state = score_now.score_state(demo_db, ADMIN, seed.DEMO_STUDY, catalog=bleu_only)
    assert state.pending is None and state.last.id == parent.id


def test_a_chunk_done_without_a_family_makes_the_group_partial(demo_db):
    parent = _split(demo_db, ["bleu"], chunks=2)
    first, second = parent.result["chunks"]
    assert Worker(demo_db, worker_id="gpu0").run_once().id == first
    short = queue.claim(demo_db, worker_id="gpu1")
    outcome = "done with 1 family unavailable: bleu (not on this worker)"
    assert queue.finish(demo_db, short.id, "gpu1", {"outcome": outcome}, outcome)
    group = jobs.group(demo_db, parent.id)
    assert group.status == "partial"
    assert group.problems == (f"chunk 2/2 (#{second}) {outcome}",)
