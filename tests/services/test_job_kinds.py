"""The long tasks as job kinds: probes, build_oracle, import, train_er2score, refit_radcliq.

For each kind: the service checks the request without a model and queues a job; a
:class:`~backend.runner.worker.Worker` runs it and the job's JSON result is what the page needs
(the same numbers as running the service directly); a job retried after it had already
finished its work reports that work instead of doing it twice.

The kill -9 tests run a real worker subprocess (``tests/jobs_helpers.py``) whose
``JobContext.progress`` is wrapped by the test (``SETUP_BLOCK_AT``: every call is written,
and the call named by the test blocks) so the kill lands at a chosen point of the job; a
second worker takes the stale job over and finishes it. Nothing partial is visible after the
kill, and after the retry everything exists exactly once.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import random

import numpy as np
import pytest
from sqlalchemy import func, select, update

from radconcord.backend import jobs
from radconcord.backend.analysis.refit import RADCLIQ_INPUTS
from radconcord.backend.errors import InvalidInput, NotFound, PermissionDenied
from radconcord.backend.jobs import context
from radconcord.backend.metrics import er2score, registry
from radconcord.backend.runner.worker import Worker
from radconcord.backend.services import job_inputs
from radconcord.backend.services.evaluation import er2train, refit
from radconcord.backend.services.evaluation.correlation import correlate_study
from radconcord.backend.services.scores import probes
from radconcord.backend.services.study_admin import build_study, studies
from radconcord.backend.services.transfer import imports
from radconcord.backend.types import Actor, CandidateInput, CaseInput
from radconcord.db.models import (
    STUDY_STAGING,
    Case,
    Job,
    MetricScore,
    Pair,
    Rating,
    Report,
    Study,
    User,
)
from tests.helpers_llm import build_tiny_llama
from tests.jobs_helpers import load as load_jobs_helpers

ADMIN = Actor.system()
RATER = Actor(user_id=77, username="rita", role="rater")
REFS = [
    "PA and lateral views of the chest. There is a small left pleural effusion. Heart size is"
    " normal. Osseous structures are unremarkable.",
    "Mild cardiomegaly. No pneumothorax. The lungs are clear.",
    "Comparison is made to the prior study. Large right upper lobe opacity is seen. No pleural"
    " effusion.",
    "No acute cardiopulmonary process.",
    "Severe bilateral pleural effusions. Moderate pulmonary edema. Heart size is enlarged.",
    "Right lower lobe consolidation, compatible with pneumonia. No pneumothorax.",
]
CANDS = ["No acute disease.", "Small effusion on the left.", "Cardiomegaly.",
         "Right upper lobe pneumonia.", "Normal chest.", "Bilateral effusions and edema."]
TESTS = [
    {"id": "T1", "text": "Heart size is normal. No focal consolidation. No pleural effusion."},
    {"id": "T2", "text": "Small left pleural effusion with adjacent atelectasis."},
    {"id": "T3", "text": "Stable right upper lobe nodule. Lungs otherwise clear."},
]
CORPUS = [
    {"id": "C1", "text": "Heart size normal. No consolidation or effusion."},
    {"id": "C2", "text": "The heart is normal in size. There is no focal consolidation."},
    {"id": "C3", "text": "Small left pleural effusion. No pneumothorax."},
    {"id": "C4", "text": "Left pleural effusion with atelectasis at the base."},
    {"id": "C5", "text": "Right upper lobe nodule, stable. Lungs are clear."},
    {"id": "C6", "text": "No acute cardiopulmonary process."},
]

# Worker subprocess setup: every progress call is written (it waits out the write throttle),
# and the first call of worker w1 that matches BLOCK_WHEN blocks until the test kills it.
SETUP_BLOCK_AT = (
    "import time\n"
    "from radconcord.backend.jobs import context as _ctx\n"
    "_orig = _ctx.JobContext.progress\n"
    "def _progress(self, done, total, message=''):\n"
    "    time.sleep(_ctx.PROGRESS_EVERY + 0.05)\n"
    "    _orig(self, done, total, message)\n"
    "    if self.worker_id == 'w1' and ({cond}):\n"
    "        time.sleep(600)\n"
    "_ctx.JobContext.progress = _progress\n"
)


def _study(db, name: str = "probe study", n_cases: int = len(REFS)) -> str:
    cases = [
        CaseInput(case_id=f"c{i}", reference=REFS[i % len(REFS)] + " " * (i // len(REFS)),
                  candidates=[CandidateInput(text=CANDS[i % len(CANDS)], source="gen-a"),
                              CandidateInput(text=CANDS[(i + 1) % len(CANDS)], source="gen-b")])
        for i in range(n_cases)
    ]
    imports.import_cases(db, ADMIN, study_name=name, cases=cases)
    return name


def _jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def _count(db, model, *where) -> int:
    with db.read() as s:
        return s.scalar(select(func.count()).select_from(model).where(*where))


def _run_again(db, job_id: int):
    """Put a finished job back as if its worker had died just before recording the result,
    and let a new worker take it over (the retry after a kill -9 at the worst moment)."""
    old = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    with db.begin() as s:
        s.execute(update(Job).where(Job.id == job_id).values(
            status="running", worker_id="dead", heartbeat_at=old, result=None,
            finished_at=None, message=""))
    return Worker(db, stale_after=5).run_once()


def _visible_studies(db) -> list[str]:
    return sorted(s.name for s in studies.list_studies(db, ADMIN))


# --------------------------------------------------------------------------- probes


def test_probes_job_result_matches_a_direct_run(db):
    _study(db)
    job = probes.enqueue_probes(db, ADMIN, study_name="probe study",
                                metrics=["bleu4", "rougeL"], seed=3, max_reports=4)
    assert job.kind == "probes" and job.status == "queued" and job.study_name == "probe study"
    assert _count(db, MetricScore) == 0  # queued, nothing scored
    worker = Worker(db)
    done = worker.run_once()
    assert done.status == "done", done.error
    assert worker.pool.created == 2  # the worker's warm pool scored them
    got = probes.result_from_json(done.result)
    direct = probes.run_probes(db, ADMIN, study_name="probe study",
                               metrics=["bleu4", "rougeL"], seed=3, max_reports=4)
    assert got == direct
    assert got.n_reports == 4 and [r.key for r in got.rows] == ["bleu4", "rougeL"]
    assert "perturbed reports" in done.message


def test_enqueue_probes_refuses_bad_requests_without_queueing(db):
    _study(db)
    with pytest.raises(PermissionDenied):
        probes.enqueue_probes(db, RATER, study_name="probe study", metrics=["rougeL"])
    with pytest.raises(NotFound):
        probes.enqueue_probes(db, ADMIN, study_name="nope", metrics=["rougeL"])
    with pytest.raises(InvalidInput, match="nonexistent"):
        probes.enqueue_probes(db, ADMIN, study_name="probe study", metrics=["nonexistent"])
    with pytest.raises(InvalidInput, match="at least one metric"):
        probes.enqueue_probes(db, ADMIN, study_name="probe study", metrics=[" "])
    with pytest.raises(InvalidInput, match="max_reports"):
        probes.enqueue_probes(db, ADMIN, study_name="probe study", metrics=["rougeL"],
                              max_reports=0)
    assert jobs.list_jobs(db) == []


def test_probes_job_cancelled_mid_run_stops_between_batches(db):
    _study(db)
    job = probes.enqueue_probes(db, ADMIN, study_name="probe study", metrics=["rougeL"])
    worker = Worker(db, batch_size=2)
    calls = []
    original = context.JobContext.progress

    def cancel_then_progress(self, done, total, message=""):
        calls.append(done)
        if len(calls) == 2:
            jobs.cancel(db, job.id)
            self._last_write = 0.0  # the next write reads the cancel at once
        original(self, done, total, message)

    context.JobContext.progress = cancel_then_progress
    try:
        final = worker.run_once()
    finally:
        context.JobContext.progress = original
    assert final.status == "cancelled" and final.result is None


# --------------------------------------------------------------------------- build_oracle


def test_build_job_creates_the_study_and_a_retry_reuses_it(db, tmp_path):
    tests, corpus = _jsonl(tmp_path / "t.jsonl", TESTS), _jsonl(tmp_path / "c.jsonl", CORPUS)
    with db.begin() as s:
        s.add_all([User(username=u, role="rater", password_hash="x") for u in ("ann", "bob")])
    job = build_study.enqueue_build(db, ADMIN, study_name="Oracle", tests=tests, corpus=corpus,
                                    metrics=["bleu4", "rougeL"], top_k=3, raters=["ann", "bob"],
                                    raters_per_pair=2)
    assert job.params["tests"] == str(tmp_path / "t.jsonl") and job.study_id is None
    assert "Oracle" not in _visible_studies(db)
    worker = Worker(db)
    done = worker.run_once()
    assert done.status == "done", done.error
    assert worker.pool.created == 2  # bleu and rouge, kept warm in the worker's pool
    summary = build_study.summary_from_json(done.result)
    assert summary.study_name == "Oracle" and summary.n_tests == 3
    assert summary.n_assigned == 2 * summary.n_pairs
    assert summary.n_pairs == _count(db, Pair, Pair.study_id == _id(db, "Oracle")) > 0
    # The job is run again (a kill -9 after the study appeared, before the job was marked
    # done): the same study is reported, nothing is created twice.
    again = _run_again(db, done.id)
    assert again.status == "done" and again.attempts == 2
    # The same summary; times come back from the manifest, rounded to the millisecond.
    assert dataclasses.replace(build_study.summary_from_json(again.result), seconds=0,
                               timings={}) == dataclasses.replace(summary, seconds=0,
                                                                  timings={})
    assert _visible_studies(db).count("Oracle") == 1
    assert _count(db, Pair, Pair.study_id == _id(db, "Oracle")) == summary.n_pairs
    with db.read() as s:
        assert s.scalar(select(Study.provenance).where(Study.name == "Oracle"))["job_id"] \
            == done.id


def _id(db, name: str) -> int:
    with db.read() as s:
        return s.scalar(select(Study.id).where(Study.name == name))


def test_enqueue_build_checks_everything_before_queueing(db, tmp_path):
    _study(db, "taken")
    tests, corpus = _jsonl(tmp_path / "t.jsonl", TESTS), _jsonl(tmp_path / "c.jsonl", CORPUS)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "T1", "text": "Normal."}\n{"id": "T2"}\n', encoding="utf-8")
    ok = {"tests": tests, "corpus": corpus, "metrics": ["bleu4"]}
    cases = [
        ({"study_name": "taken"}, "already exists"),
        ({"study_name": " "}, "study name is empty"),
        ({"study_name": "n", "metrics": ["nonexistent"]}, "nonexistent"),
        ({"study_name": "n", "per_metric": 3, "top_k": 2}, "at least per-metric"),
        ({"study_name": "n", "engine": "spark"}, "unknown engine"),
        ({"study_name": "n", "raters": ["ghost"]}, "'ghost' is not an active rater"),
        ({"study_name": "n", "tests": str(bad)}, "bad.jsonl: line 2: missing field 'text'"),
        ({"study_name": "n", "corpus": str(tmp_path / "missing.jsonl")}, "missing.jsonl"),
    ]
    for change, message in cases:
        with pytest.raises(InvalidInput, match=message):
            build_study.enqueue_build(db, ADMIN, **{**ok, **change})
    with pytest.raises(PermissionDenied):
        build_study.enqueue_build(db, RATER, study_name="n", **ok)
    assert jobs.list_jobs(db) == []
    # A name a queued build will create is refused for a second build or an import.
    first = build_study.enqueue_build(db, ADMIN, study_name="pending", **ok)
    with pytest.raises(InvalidInput, match=f"being created by job {first.id}"):
        build_study.enqueue_build(db, ADMIN, study_name="pending", **ok)
    upload = job_inputs.new_upload_dir()
    cases_file = upload / "cases.csv"
    cases_file.write_text("case_id,reference,candidate\nx,Ref.,Cand.\n", encoding="utf-8")
    with pytest.raises(InvalidInput, match=f"being created by job {first.id}"):
        imports.enqueue_import(db, ADMIN, fmt="cases", study_name="pending", upload_dir=upload,
                               cases_file=cases_file)


def test_build_job_removes_its_uploads_when_it_ends(db, tmp_path):
    folder = job_inputs.new_upload_dir()
    tests = folder / "tests.jsonl"
    _jsonl(tests, TESTS)
    job = build_study.enqueue_build(db, ADMIN, study_name="From uploads", tests=tests,
                                    corpus=_jsonl(tmp_path / "c.jsonl", CORPUS),
                                    metrics=["bleu4"], top_k=2, upload_dir=folder)
    assert job.params["upload_dir"] == folder.relative_to(tmp_path).as_posix()
    assert Worker(db).run_once().status == "done"
    assert not folder.exists()


# --------------------------------------------------------------------------- import


def _cases_csv(path, n_cases: int, per_case: int = 2) -> None:
    lines = ["case_id,reference,candidate,source"]
    for i in range(n_cases):
        for j in range(per_case):
            lines.append(f"case{i},Reference report {i}.,Candidate {j} for case {i}.,gen{j}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_import_job_imports_the_saved_file_and_removes_the_upload(db):
    folder = job_inputs.new_upload_dir()
    _cases_csv(folder / "cases.csv", 30)
    job = imports.enqueue_import(db, ADMIN, fmt="cases", study_name="Big import",
                                 upload_dir=folder, cases_file=folder / "cases.csv",
                                 provenance={"file": "cases.csv"})
    rel = folder.relative_to(job_inputs.uploads_root().parent).as_posix()
    assert job.params["cases_file"] == f"{rel}/cases.csv" and job.params["images_dir"] == rel
    done = Worker(db).run_once()
    assert done.status == "done", done.error
    assert done.result["n_pairs"] == 60 and done.result["n_cases"] == 30
    assert done.result["resumed"] is False
    assert not folder.exists()
    with db.read() as s:
        prov = s.scalar(select(Study.provenance).where(Study.name == "Big import"))
    assert prov["job_id"] == done.id and prov["file"] == "cases.csv"
    # Run again (killed after the study appeared): reported, not imported twice.
    again = _run_again(db, done.id).result
    assert again["resumed"] is True and again["n_pairs"] == 60
    assert _visible_studies(db).count("Big import") == 1
    assert _count(db, Case) == 30


def test_import_job_params_never_leave_the_data_folder(db, tmp_path):
    folder = job_inputs.new_upload_dir()
    _cases_csv(folder / "cases.csv", 2)
    outside = tmp_path.parent / "elsewhere"
    outside.mkdir(exist_ok=True)
    with pytest.raises(InvalidInput, match="only inside the data folder"):
        imports.enqueue_import(db, ADMIN, fmt="cases", study_name="x", upload_dir=folder,
                               cases_file=folder / "cases.csv", images_dir=outside)
    with pytest.raises(InvalidInput, match="lies outside the data folder"):
        job_inputs.data_relative(outside)
    # A job row written by hand with an escaping path fails with the path named.
    job_id = jobs.enqueue(db, "import", {"format": "cases", "study_name": "x",
                                         "cases_file": "../../etc/passwd", "images_dir": "."})
    final = Worker(db).run_once()
    assert final.id == job_id and final.status == "failed"
    assert "cases file: '../../etc/passwd' lies outside the data folder" in final.error
    with pytest.raises(InvalidInput, match="must be relative"):
        job_inputs.resolve_data_path("/etc/passwd", "cases file")


def test_enqueue_import_refuses_bad_files_naming_them(db):
    folder = job_inputs.new_upload_dir()
    (folder / "cases.csv").write_text("case_id,reference,candidate\nn1,,Normal.\n",
                                      encoding="utf-8")
    with pytest.raises(InvalidInput, match="cases.csv.*reference"):
        imports.enqueue_import(db, ADMIN, fmt="cases", study_name="x", upload_dir=folder,
                               cases_file=folder / "cases.csv")
    with pytest.raises(InvalidInput, match="both the pairs file and the ratings file"):
        imports.enqueue_import(db, ADMIN, fmt="rexval", study_name="x", upload_dir=folder)
    with pytest.raises(InvalidInput, match="import format"):
        imports.enqueue_import(db, ADMIN, fmt="xml", study_name="x", upload_dir=folder)
    with pytest.raises(PermissionDenied):
        imports.enqueue_import(db, RATER, fmt="cases", study_name="x", upload_dir=folder,
                               cases_file=folder / "cases.csv")
    assert jobs.list_jobs(db) == []


def test_worker_threshold():
    assert not imports.needs_worker(imports.WORKER_MIN_PAIRS)
    assert imports.needs_worker(imports.WORKER_MIN_PAIRS + 1)
    assert imports.needs_worker(10, imports.WORKER_MIN_IMAGES + 1)
    assert not imports.needs_worker(10, imports.WORKER_MIN_IMAGES)


def test_imports_use_the_one_input_hash():
    from radconcord.backend.scoring import hashing

    assert imports.input_hash is hashing.input_hash


# --------------------------------------------------------------------------- refit


def _rated_scored_study(db, name: str = "refit study", n_cases: int = 8) -> np.ndarray:
    """A study of n_cases x 2 pairs, two raters' imported ratings, the four RadCliQ inputs
    cached with made-up signatures. Returns the mean error per pair (position order)."""
    _study(db, name, n_cases)
    rng = random.Random(5)
    with db.begin() as s:
        users = [User(username=f"{name}-r{i}", role="rater", password_hash="x") for i in (1, 2)]
        s.add_all(users)
        s.flush()
        pairs = s.scalars(select(Pair).where(Pair.study_id == _id(db, name))
                          .order_by(Pair.position)).all()
        means = []
        for i, pair in enumerate(pairs):
            counts = [rng.randint(0, 4) for _ in users]
            means.append(sum(counts) / 2)
            for user, c in zip(users, counts, strict=True):
                s.add(Rating(rater_id=user.id, pair_id=pair.id, category=1, significant=True,
                             count=c))
            for k, key in enumerate(RADCLIQ_INPUTS):
                s.add(MetricScore(input_hash=pair.input_hash, family=key, key=key,
                                  signature_hash=f"sig-{key}", signature=f"{key}|test",
                                  value=-means[-1] + 0.3 * math.sin(i * (k + 1))))
    return np.asarray(means)


def test_refit_job_result_is_the_correlate_refit(db):
    _rated_scored_study(db)
    job = refit.enqueue_refit(db, ADMIN, study_name="refit study", seed=4, score_missing=False)
    assert job.kind == "refit_radcliq" and job.study_name == "refit study"
    done = Worker(db).run_once()
    assert done.status == "done", done.error
    fit = done.result["refit"]
    expected = correlate_study(db, study_name="refit study", bootstrap=0, seed=4)
    assert fit == json.loads(json.dumps(expected["radcliq_refit"]))
    assert fit["available"] is True and fit["n"] == 16 and fit["cv_kendall_tau_b"] > 0.5
    assert set(done.result["inputs"]) == set(RADCLIQ_INPUTS)
    assert "cross-validated Kendall tau-b" in done.message


def test_enqueue_refit_needs_enough_rated_pairs(db):
    _study(db, "unrated")
    with pytest.raises(InvalidInput, match="0 rated pair"):
        refit.enqueue_refit(db, ADMIN, study_name="unrated")
    with pytest.raises(NotFound):
        refit.enqueue_refit(db, ADMIN, study_name="nope")
    with pytest.raises(PermissionDenied):
        refit.enqueue_refit(db, RATER, study_name="unrated")
    assert jobs.list_jobs(db) == []


# --------------------------------------------------------------------------- train


def _training_study(db, name: str, n_cases: int) -> None:
    """Cases whose candidate k adds k spurious sentences; ann counts them (as in
    test_er2train), so the training set has preference pairs."""
    refs = ("no acute cardiopulmonary process.", "lungs are clear. heart size is normal.",
            "mild cardiomegaly. small left pleural effusion.", "left lobe atelectasis.")
    cases = [CaseInput(case_id=f"t{c}", reference=refs[c % 4] + (" mild edema." * (c // 4)),
                       candidates=[CandidateInput(text=refs[c % 4] + (" mild edema." * (c // 4))
                                                  + " spurious nodule seen." * k,
                                                  source=f"gen{k}") for k in range(3)])
             for c in range(n_cases)]
    imports.import_cases(db, ADMIN, study_name=name, cases=cases)
    with db.begin() as s:
        ann = User(username=f"ann-{name}", role="rater", password_hash="x")
        s.add(ann)
        s.flush()
        for pair in s.scalars(select(Pair).where(Pair.study_id == _id(db, name))):
            k = int(pair.source[3:])
            if k:
                s.add(Rating(rater_id=ann.id, pair_id=pair.id, category=1, significant=True,
                             count=k))
            else:
                s.add(Rating(rater_id=ann.id, pair_id=pair.id, category=2, significant=True,
                             count=0))


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return build_tiny_llama(tmp_path_factory.mktemp("llama"))


def test_training_job_writes_the_adapter_once(db, tmp_path, tiny_llama):
    _training_study(db, "train", 8)
    job = er2train.enqueue_training(db, ADMIN, study="train", base=str(tiny_llama),
                                    output="models/er2-train", epochs=1, lr=1e-3,
                                    heldout=0.25)
    assert job.kind == "train_er2score" and job.study_name == "train"
    done = Worker(db).run_once()
    assert done.status == "done", done.error
    out = tmp_path / "models" / "er2-train"
    for name in ("adapter_config.json", "adapter_model.safetensors", er2score.HEAD_FILE,
                 er2score.META_FILE, er2train.SUMMARY_FILE):
        assert (out / name).is_file(), name
    assert done.result["output"] == "models/er2-train" and done.result["steps"] > 0
    record = json.loads((out / er2train.SUMMARY_FILE).read_text())
    assert record["job_id"] == done.id and record["steps"] == done.result["steps"]
    assert [p.name for p in out.parent.iterdir()] == ["er2-train"]  # no staging left
    # Run again (killed after the rename): the finished adapter is reported, not retrained.
    before = (out / "adapter_model.safetensors").stat().st_mtime_ns
    again = er2train.train_from_study(db, ADMIN, study="train", base=str(tiny_llama),
                                      output=out, epochs=1, lr=1e-3, heldout=0.25,
                                      job_id=done.id)
    assert again.steps == done.result["steps"]
    assert (out / "adapter_model.safetensors").stat().st_mtime_ns == before


def test_enqueue_training_refuses_bad_requests(db, tmp_path, tiny_llama):
    _training_study(db, "train", 4)
    ok = {"study": "train", "base": str(tiny_llama), "output": "models/a"}
    for change, message in [
        ({"epochs": 0}, "epochs"),
        ({"lr": 0.0}, "lr"),
        ({"heldout": 1.0}, "heldout"),
        ({"output": "../outside"}, "lies outside the data folder"),
        ({"output": "/abs/path"}, "must be relative"),
        ({"base": str(tmp_path / "nope")}, "does not exist"),
    ]:
        with pytest.raises(InvalidInput, match=message):
            er2train.enqueue_training(db, ADMIN, **{**ok, **change})
    with pytest.raises(NotFound):
        er2train.enqueue_training(db, ADMIN, **{**ok, "study": "missing"})
    with pytest.raises(PermissionDenied):
        er2train.enqueue_training(db, RATER, **ok)
    assert jobs.list_jobs(db) == []
    first = er2train.enqueue_training(db, ADMIN, **ok)
    with pytest.raises(InvalidInput, match=f"being written by job {first.id}"):
        er2train.enqueue_training(db, ADMIN, **ok)


# --------------------------------------------------------------------------- kill -9


@pytest.fixture
def jh():
    return load_jobs_helpers()


def _kill_and_resume_when(jh, db, job_id: int, tmp_path, predicate, *, setup: str,
                          after_kill=None, what: str = "the kill point"):
    """``jh.kill_and_resume``, killing worker w1 once ``predicate(job)`` holds (not at a
    progress count): the same round of start, wait, kill -9, stale, second worker."""
    from radconcord.backend.jobs import queue

    log1, log2 = tmp_path / "w1.log", tmp_path / "w2.log"
    proc = jh.start_worker(jh.db_url(db), worker_id="w1", log_path=log1, setup=setup)
    try:
        jh.wait_for(db, job_id, predicate, proc=proc, log_path=log1, what=what)
    finally:
        if proc.poll() is None:
            jh.kill_9(proc)
    killed = queue.get(db, job_id)
    assert killed.status == "running" and killed.worker_id == "w1"
    if after_kill is not None:
        after_kill(killed)
    jh.wait_until_stale(db, job_id, 1.5)
    proc2 = jh.start_worker(jh.db_url(db), worker_id="w2", log_path=log2, setup=setup)
    assert proc2.wait(120) == 0, log2.read_text()[-3000:]
    return killed, queue.get(db, job_id)


def _no_staging(db) -> None:
    with db.read() as s:
        assert s.scalar(select(func.count()).select_from(Study)
                        .where(Study.status == STUDY_STAGING)) == 0


def test_kill_9_probes(db, tmp_path, jh):
    _study(db, "probe study", 12)
    job = probes.enqueue_probes(db, ADMIN, study_name="probe study", metrics=["rougeL"])
    partial = {}

    def after_kill(killed):
        partial["scores"] = _count(db, MetricScore)

    killed, final = jh.kill_and_resume(
        jh.db_url(db), db, job.id, tmp_path=tmp_path, at_least=4, after_kill=after_kill,
        setup=SETUP_BLOCK_AT.format(cond="done >= 4"), args=["--batch-size", "4"])
    assert killed.progress_done >= 4 and killed.result is None
    assert final.status == "done" and final.attempts == 2, final.error
    # The killed run's batches stayed in the cache; the retry added only the rest.
    n_perturbed = len(probes.result_from_json(final.result).examples)
    n_keys = len(registry.ENTRIES["rouge"].keys)  # rougeL's family stores all its keys
    assert 0 < partial["scores"] < n_perturbed * n_keys
    with db.read() as s:
        hashes = s.execute(select(MetricScore.input_hash, MetricScore.key)).all()
    assert len(hashes) == len(set(hashes)) <= n_perturbed * n_keys
    direct = probes.run_probes(db, ADMIN, study_name="probe study", metrics=["rougeL"])
    assert probes.result_from_json(final.result) == direct


def test_kill_9_build_oracle_mid_import(any_db, tmp_path, jh):
    db = any_db
    tests, corpus = _jsonl(tmp_path / "t.jsonl", TESTS), _jsonl(tmp_path / "c.jsonl", CORPUS)
    job = build_study.enqueue_build(db, ADMIN, study_name="Oracle", tests=tests, corpus=corpus,
                                    metrics=["bleu4", "rougeL"], top_k=3)

    def after_kill(killed):
        # Killed after the import wrote its rows, before the study appeared.
        with db.read() as s:
            assert s.scalar(select(Study.status).where(Study.name == "Oracle")) == STUDY_STAGING
        assert "Oracle" not in _visible_studies(db)

    killed, final = _kill_and_resume_when(
        jh, db, job.id, tmp_path, lambda j: j.message.startswith("imported"),
        after_kill=after_kill, setup=SETUP_BLOCK_AT.format(cond="message.startswith('imported')"))
    assert killed.message.startswith("imported")
    assert final.status == "done" and final.attempts == 2, final.error
    summary = build_study.summary_from_json(final.result)
    assert _visible_studies(db).count("Oracle") == 1
    _no_staging(db)
    sid = _id(db, "Oracle")
    assert _count(db, Pair, Pair.study_id == sid) == summary.n_pairs
    assert _count(db, Case, Case.study_id == sid) == summary.n_cases == 3
    # The killed run's rows are gone: every case and report belongs to the one study.
    assert _count(db, Case) == 3 and _count(db, Report) == 3 + summary.n_pairs


def test_kill_9_import_mid_batches(any_db, tmp_path, jh):
    db = any_db
    folder = job_inputs.new_upload_dir()
    _cases_csv(folder / "cases.csv", 300)  # 600 pairs: three batches of 250
    job = imports.enqueue_import(db, ADMIN, fmt="cases", study_name="Killed import",
                                 upload_dir=folder, cases_file=folder / "cases.csv")

    def after_kill(killed):
        assert "Killed import" not in _visible_studies(db)
        assert 0 < _count(db, Pair) < 600  # a staging study holds the first batch only
        assert folder.exists()  # the retry needs the file

    killed, final = jh.kill_and_resume(
        jh.db_url(db), db, job.id, tmp_path=tmp_path, at_least=250, after_kill=after_kill,
        setup=SETUP_BLOCK_AT.format(cond="done >= 250 and done < total"))
    assert killed.progress_done == 250 and killed.progress_total == 600
    assert final.status == "done" and final.attempts == 2, final.error
    assert final.result["n_pairs"] == 600 and final.result["resumed"] is False
    _no_staging(db)
    assert _visible_studies(db).count("Killed import") == 1
    assert _count(db, Pair) == 600 and _count(db, Case) == 300
    assert not folder.exists()


def test_kill_9_refit(db, tmp_path, jh):
    _rated_scored_study(db)
    job = refit.enqueue_refit(db, ADMIN, study_name="refit study", score_missing=False)
    killed, final = _kill_and_resume_when(
        jh, db, job.id, tmp_path, lambda j: j.message == "refitting",
        setup=SETUP_BLOCK_AT.format(cond="message == 'refitting'"))
    assert killed.message == "refitting" and killed.result is None
    assert final.status == "done" and final.attempts == 2, final.error
    expected = correlate_study(db, study_name="refit study", bootstrap=0)
    assert final.result["refit"] == json.loads(json.dumps(expected["radcliq_refit"]))
    assert _count(db, MetricScore) == 16 * len(RADCLIQ_INPUTS)


def test_kill_9_training(db, tmp_path, jh, tiny_llama):
    _training_study(db, "train", 8)
    job = er2train.enqueue_training(db, ADMIN, study="train", base=str(tiny_llama),
                                    output="models/killed", epochs=2, lr=1e-3, heldout=0.25,
                                    batch_size=2)
    out = tmp_path / "models" / "killed"

    def after_kill(killed):
        assert not out.exists()  # no adapter under the output name mid-training

    killed, final = jh.kill_and_resume(
        jh.db_url(db), db, job.id, tmp_path=tmp_path, at_least=2, after_kill=after_kill,
        setup=SETUP_BLOCK_AT.format(cond="done >= 2 and done < total"))
    assert killed.progress_done >= 2 and killed.progress_done < killed.progress_total
    assert final.status == "done" and final.attempts == 2, final.error
    assert final.result["steps"] == killed.progress_total
    assert json.loads((out / er2train.SUMMARY_FILE).read_text())["job_id"] == job.id
    assert sorted(p.name for p in out.parent.iterdir()) == ["killed"]
    assert er2score.ER2Score(adapter=str(out)).availability() is None


def test_a_cancelled_import_job_leaves_nothing(db):
    folder = job_inputs.new_upload_dir()
    _cases_csv(folder / "cases.csv", 300)
    job = imports.enqueue_import(db, ADMIN, fmt="cases", study_name="Cancelled",
                                 upload_dir=folder, cases_file=folder / "cases.csv")
    original = context.JobContext.progress

    def cancel_after_first_batch(self, done, total, message=""):
        if done >= 250:
            jobs.cancel(db, job.id)
            self._last_write = 0.0
        original(self, done, total, message)

    context.JobContext.progress = cancel_after_first_batch
    try:
        final = Worker(db).run_once()
    finally:
        context.JobContext.progress = original
    assert final.status == "cancelled"
    assert _count(db, Study, Study.name == "Cancelled") == 0 and _count(db, Pair) == 0
    assert not folder.exists()


def test_refit_job_scores_missing_inputs_and_says_which_could_not_run(db):
    """Ratings but no cached input: the worker scores the inputs it can run; the refit says
    which inputs are missing, and the families that cannot run here say why."""
    _study(db, "unscored", 8)
    with db.begin() as s:
        user = User(username="only-rater", role="rater", password_hash="x")
        s.add(user)
        s.flush()
        for i, pair in enumerate(s.scalars(select(Pair))):
            s.add(Rating(rater_id=user.id, pair_id=pair.id, category=1, significant=True,
                         count=i % 3))
    refit.enqueue_refit(db, ADMIN, study_name="unscored")
    done = Worker(db).run_once()
    assert done.status == "done", done.error
    result = done.result
    assert result["scored"]["bleu2_radcliq"] == {"computed": 16, "cached": 0}
    with db.read() as s:
        keys = set(s.scalars(select(MetricScore.key).distinct()))
    assert "bleu2_radcliq" in keys
    missing = [k for k in RADCLIQ_INPUTS if k not in keys]
    # Without their weights here, RadGraph and CheXbert cannot run: named with the reason.
    assert set(result["unavailable"]) == {registry.KEY_TO_FAMILY[k] for k in missing}
    assert {"radgraph_combined", "semb"} <= set(missing)
    assert all("weights" in reason for reason in result["unavailable"].values())
    assert result["refit"]["available"] is False
    assert result["refit"]["reason"] == f"not scored on this study: {', '.join(missing)}"
