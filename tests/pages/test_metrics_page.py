"""AppTest: the Metrics page (catalogue, queue scoring, every job, Cancel, workers alive) and
the reusable job panel (webapp/components/job_panel.py)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from sqlalchemy import update

from radconcord.backend import clock, jobs
from radconcord.backend.jobs import queue
from radconcord.backend.services import jobs as job_services
from radconcord.backend.services.scores import scoring
from radconcord.db.models import WorkerProcess

NO_WORKER = "No worker is running: start one with `python -m backend worker`."


def _submit(at, form: str, timeout: float = 60):
    button = next(b for b in at.button if b.key.startswith(f"FormSubmitter:{form}-"))
    return button.click().run(timeout=timeout)


def _metrics(make_app, actor):
    at = make_app(actor)
    return at.switch_page("views/metrics.py").run(timeout=120)


def _table(at, columns: set[str]):
    """The page's dataframe with exactly ``columns`` (catalogue, workers and jobs differ)."""
    found = [df.value for df in at.dataframe if set(df.value.columns) == columns]
    assert len(found) == 1, [list(df.value.columns) for df in at.dataframe]
    return found[0]


JOB_COLUMNS = {"Job", "Kind", "Study", "What", "Status", "Progress", "Done", "Message", "Worker",
               "Queued"}
WORKER_COLUMNS = {"Worker", "Device", "Kinds", "Current job", "Last heartbeat", "Started"}


def test_metrics_page_lists_every_family_with_availability(study_env, make_app):
    at = _metrics(make_app, study_env.admin)
    assert not at.exception
    catalog = at.dataframe[0].value
    expected = scoring.metric_catalog()
    assert list(catalog["Family"]) == [m.family for m in expected]
    assert list(catalog["Available"]) == [m.available for m in expected]
    unavailable = catalog[~catalog["Available"]]
    assert (unavailable["Why not"].str.len() > 0).all()


def test_metrics_page_queues_a_scoring_job_and_says_no_worker_runs(study_env, make_app,
                                                                  all_text):
    at = _metrics(make_app, study_env.admin)
    assert NO_WORKER not in all_text(at)  # nothing waits yet
    # ...but the page says no worker is alive, before anything is queued.
    assert [w.value for w in at.warning] == [
        "No worker is alive (none has sent a heartbeat in the last 60 s; no worker has ever "
        "run here): start one with `python -m backend worker`."]
    at.multiselect(key="score_families").set_value(["bleu"])
    _submit(at, "enqueue", timeout=120)
    assert not at.exception and not at.error
    assert at.success[0].value.startswith("Queued job #")
    queued = job_services.list_jobs(study_env.db, study_env.admin)
    assert [(j.kind, j.metrics, j.status) for j in queued] == [("score", ("bleu",), "queued")]
    assert queued[0].created_by == "boss"
    table = _table(at, JOB_COLUMNS)
    assert list(table["Status"]) == ["queued"] and list(table["What"]) == ["bleu"]
    assert list(table["Study"]) == [study_env.study]
    assert f"Job #{queued[0].id} is waiting. {NO_WORKER}" in [w.value for w in at.warning]


def test_metrics_page_shows_jobs_of_every_kind_and_the_workers_alive(study_env, make_app,
                                                                     all_text):
    db = study_env.db
    probes = jobs.enqueue(db, "probes", {"study": "x", "families": ["bleu"]},
                          created_by="boss")
    score = jobs.enqueue(db, "score", {"metrics": ["bleu"], "options": {}})
    # A worker (registered as the real one does) runs the probes job, 3 of 8 done.
    queue.register_worker(db, "host:42:abc123", host="host", pid=42, device="cuda:1",
                          kinds=["probes"])
    claimed = queue.claim(db, worker_id="host:42:abc123", device="cuda:1", kinds=["probes"])
    assert claimed.id == probes
    queue.report_progress(db, probes, "host:42:abc123", 3, 8, "probe 3 of 8")
    queue.worker_heartbeat(db, "host:42:abc123", probes)
    # A worker that died long ago is not shown.
    queue.register_worker(db, "old:1:ffffff", host="old", pid=1, device="cpu", kinds=[])
    with db.begin() as s:
        s.execute(update(WorkerProcess).where(WorkerProcess.id == "old:1:ffffff")
                  .values(heartbeat_at=clock.utcnow() - dt.timedelta(hours=1)))

    at = _metrics(make_app, study_env.admin)
    assert not at.exception and not at.error
    table = _table(at, JOB_COLUMNS)
    assert list(table["Job"]) == [score, probes]
    assert list(table["Kind"]) == ["score", "probes"]
    assert list(table["Status"]) == ["queued", "running"]
    assert list(table["Done"]) == ["0 / 0", "3 / 8"]
    assert list(table["Progress"]) == [0.0, pytest.approx(3 / 8)]
    assert list(table["Message"])[1] == "probe 3 of 8"
    assert list(table["Worker"]) == ["", "host:42:abc123"]
    workers = _table(at, WORKER_COLUMNS)
    assert list(workers["Worker"]) == ["host:42:abc123"]
    assert list(workers["Device"]) == ["cuda:1"]
    assert list(workers["Kinds"]) == ["probes"]
    assert list(workers["Current job"]) == [f"#{probes}"]
    # A worker is alive, but it takes probes only: the score job says who could take it.
    text = all_text(at)
    assert NO_WORKER not in text
    assert f"Job #{score}: No running worker takes this job (kind score)" in text


def test_cancel_buttons_cancel_queued_and_running_jobs(study_env, make_app, all_text):
    db = study_env.db
    running = jobs.enqueue(db, "score", {"metrics": ["bleu"], "options": {}})
    waiting = jobs.enqueue(db, "score", {"metrics": ["rouge"], "options": {}})
    done = jobs.enqueue(db, "score", {"metrics": ["meteor"], "options": {}})
    assert queue.claim(db, worker_id="w").id == running
    # Finish the third one directly: a finished job has no Cancel button.
    with db.begin() as s:
        from radconcord.db.models import Job

        s.execute(update(Job).where(Job.id == done).values(status="done"))
    at = _metrics(make_app, study_env.admin)
    keys = sorted(b.key for b in at.button if b.key and b.key.startswith("cancel_job_"))
    assert keys == sorted([f"cancel_job_{running}", f"cancel_job_{waiting}"])

    at.button(key=f"cancel_job_{waiting}").click().run(timeout=60)
    assert not at.exception and not at.error
    assert jobs.get(db, waiting).status == "cancelled"
    at.button(key=f"cancel_job_{running}").click().run(timeout=60)
    info = jobs.get(db, running)
    assert info.status == "running" and info.cancel_requested
    table = _table(at, JOB_COLUMNS)
    status = dict(zip(table["Job"], table["Status"], strict=True))
    assert status == {running: "running (cancelling)", waiting: "cancelled", done: "done"}
    assert not [b for b in at.button if b.key and b.key.startswith("cancel_job_")]


# -- the job panel component ----------------------------------------------------------------

PANEL_SCRIPT = """
import streamlit as st
from radconcord.webapp.components.job_panel import job_panel

final = job_panel(int(st.query_params["job"]), key="p", run_every=0.5)
if final is not None:
    st.markdown(f"FINAL {final.status}")
"""


@pytest.fixture
def panel(tmp_path, make_app):
    script = tmp_path / "panel_page.py"
    script.write_text(PANEL_SCRIPT)

    def _open(actor, job_id: int):
        return make_app(actor, script=Path(script), params={"job": str(job_id)})

    return _open


def test_job_panel_queued_without_worker_then_cancelled(study_env, panel, all_text):
    job = jobs.enqueue(study_env.db, "probes", {"study": "x"})
    at = panel(study_env.admin, job)
    assert not at.exception and not at.error
    text = all_text(at)
    assert f"**Job #{job}** · `probes` · queued" in text
    assert NO_WORKER in [w.value for w in at.warning]
    assert "FINAL" not in text
    at.button(key="p-cancel").click().run(timeout=60)
    assert jobs.get(study_env.db, job).status == "cancelled"
    text = all_text(at)
    assert f"Job #{job} was cancelled." in text and "FINAL cancelled" in text
    assert not [b for b in at.button if b.key == "p-cancel"]


def test_job_panel_running_then_done_returns_the_final_job(study_env, panel, all_text):
    db = study_env.db
    job = jobs.enqueue(db, "score", {"metrics": ["bleu"], "options": {}})
    queue.register_worker(db, "w:1:aaaaaa", host="w", pid=1, device="cpu", kinds=[])
    queue.claim(db, worker_id="w:1:aaaaaa")
    queue.report_progress(db, job, "w:1:aaaaaa", 2, 5, "batch 2")
    at = panel(study_env.admin, job)
    assert not at.exception and not at.error
    bar = at.get("progress")[0]
    assert bar.value == 40 and "2 / 5 · batch 2" in bar.proto.text
    assert not at.warning  # a worker is alive and runs it
    assert [b.key for b in at.button] == ["p-cancel"]
    assert "FINAL" not in all_text(at)
    assert queue.finish(db, job, "w:1:aaaaaa", {"summary": "bleu: 3 computed"},
                        "bleu: 3 computed")
    at.run(timeout=60)
    assert [s.value for s in at.success] == ["bleu: 3 computed"]
    assert "FINAL done" in all_text(at) and not at.button


def test_job_panel_shows_why_a_job_failed(study_env, panel, all_text):
    db = study_env.db
    job = jobs.enqueue(db, "build_oracle", {})
    queue.claim(db, worker_id="w")
    queue.fail(db, job, "w", "metric 'green' is unavailable: no GPU")
    at = panel(study_env.admin, job)
    assert [e.value for e in at.error] == [
        f"Job #{job} failed: metric 'green' is unavailable: no GPU"]
    assert "FINAL failed" in all_text(at)


def test_job_panel_for_a_rater_or_a_missing_job_shows_only_the_error(study_env, panel,
                                                                      all_text):
    job = jobs.enqueue(study_env.db, "score", {"metrics": ["bleu"], "options": {}})
    at = panel(study_env.rater, job)
    assert [e.value for e in at.error] == ["this action needs an admin account"]
    assert "Job #" not in all_text(at)
    at = panel(study_env.admin, 4242)
    assert [e.value for e in at.error] == ["no job 4242"]


def test_a_partly_done_score_job_says_which_family_could_not_run(study_env, make_app, panel,
                                                                  all_text):
    """A done job with an unavailable family reads as a partial success, with the reason."""
    db = study_env.db
    job = jobs.enqueue(db, "score", {"metrics": ["bleu", "radgraph"], "options": {}})
    queue.claim(db, worker_id="w")
    result = {
        "summary": "done with 1 family unavailable: radgraph (weights not local); "
                   "bleu: 6 computed, 0 cached",
        "families": {
            "bleu": {"status": "done", "computed": 6, "cached": 0},
            "radgraph": {"status": "unavailable", "reason": "weights not local",
                         "computed": 0, "cached": 0},
        },
    }
    assert queue.finish(db, job, "w", result, result["summary"])
    at = _metrics(make_app, study_env.admin)
    assert not at.exception
    table = _table(at, JOB_COLUMNS)
    assert list(table["Status"]) == ["done with 1 family unavailable"]
    families = _table(at, {"Job", "Study", "Family", "Status", "Reason or error", "Computed",
                           "Cached"})
    assert list(zip(families["Family"], families["Status"], families["Reason or error"],
                    strict=True)) == [("bleu", "done", ""),
                                      ("radgraph", "unavailable", "weights not local")]
    # The job panel shows it as a warning, with the same table.
    at = panel(study_env.admin, job)
    assert [w.value for w in at.warning] == [result["summary"]] and not at.success
    assert "FINAL done" in all_text(at)
    assert list(at.dataframe[0].value["Status"]) == ["done", "unavailable"]
