"""AppTest: a split score job on the Metrics page (issue 26): the form queues it with
``chunks``; the page shows one progress bar for the group ("K chunks on N workers") with a
line per chunk in an expander and the failed chunk named; the jobs table reads the parent as
its chunks combined; Cancel on the parent cancels its chunks."""

from __future__ import annotations

from radconcord.backend import jobs
from radconcord.backend.jobs import queue
from radconcord.backend.runner.worker import Worker
from radconcord.backend.services.scores import scoring

JOB_COLUMNS = {"Job", "Kind", "Study", "What", "Status", "Progress", "Done", "Message", "Worker",
               "Queued"}


def _metrics(make_app, actor):
    return make_app(actor).switch_page("views/metrics.py").run(timeout=120)


def _jobs_table(at):
    (table,) = [df.value for df in at.dataframe if set(df.value.columns) == JOB_COLUMNS]
    return table


def test_the_form_queues_a_split_score_job(study_env, make_app):
    at = _metrics(make_app, study_env.admin)
    at.multiselect(key="score_families").set_value(["bleu"])
    at.number_input(key="score_chunks").set_value(3)
    button = next(b for b in at.button if b.key.startswith("FormSubmitter:enqueue-"))
    at = button.click().run(timeout=120)
    assert not at.exception and not at.error
    [job] = jobs.list_jobs(study_env.db)
    assert job.kind == "score" and job.params["chunks"] == 3
    assert at.success[0].value.endswith("split into 3 chunks.")


def test_the_form_queues_a_score_job_on_ray_and_the_table_says_so(study_env, make_app):
    at = _metrics(make_app, study_env.admin)
    at.multiselect(key="score_families").set_value(["bleu"])
    at.radio(key="score_engine").set_value("Ray")
    at.text_input(key="score_ray_address").set_value("head:6379")
    at.number_input(key="score_ray_workers").set_value(4)
    button = next(b for b in at.button if b.key.startswith("FormSubmitter:enqueue-"))
    at = button.click().run(timeout=120)
    assert not at.exception and not at.error
    [job] = jobs.list_jobs(study_env.db)
    assert job.params["engine"] == {"name": "ray", "address": "head:6379", "workers": 4}
    assert at.success[0].value.endswith("computed on Ray (head:6379, 4 actors).")
    assert list(_jobs_table(at)["What"]) == ["bleu · on Ray (head:6379, 4 actors)"]
    # Ray and chunk jobs together are refused, with the reason, and nothing is queued.
    at.radio(key="score_engine").set_value("Ray")
    at.number_input(key="score_chunks").set_value(2)
    button = next(b for b in at.button if b.key.startswith("FormSubmitter:enqueue-"))
    at = button.click().run(timeout=120)
    assert any("not split into chunk jobs" in e.value for e in at.error)
    assert len(jobs.list_jobs(study_env.db)) == 1


def test_a_split_job_shows_one_bar_its_chunks_and_cancels_them(study_env, make_app,
                                                                all_text):
    db = study_env.db
    parent = scoring.enqueue_scoring(db, study_env.admin, study_env.study, ["bleu"],
                                     chunks=3)
    assert Worker(db, worker_id="parent", kinds=["score"]).run_once().status == "done"
    first, second, third = jobs.get(db, parent.id).child_ids
    assert Worker(db, worker_id="gpu0").run_once().id == first
    failing = queue.claim(db, worker_id="gpu1")
    assert failing.id == second
    assert queue.fail(db, second, "gpu1", "CUDA out of memory")

    at = _metrics(make_app, study_env.admin)
    assert not at.exception
    (bar,) = [p for p in at.get("progress") if f"Job #{parent.id}" in p.proto.text]
    assert "running" in bar.proto.text and "3 chunks on 2 workers" in bar.proto.text
    group = jobs.group(db, parent.id)
    assert bar.proto.value == int(round(group.fraction * 100))
    # The only error drawn names the failed chunk and why.
    assert [e.value for e in at.error] == [f"chunk 2/3 (#{second}) failed: CUDA out of memory"]
    (box,) = [e for e in at.expander if e.label == f"Chunks of job #{parent.id}"]
    text = all_text(at)
    assert f"chunk 1/3 (#{first}): done on gpu0" in text
    assert f"chunk 3/3 (#{third}): queued" in text
    table = _jobs_table(at)
    assert list(table["Job"]) == [parent.id]  # the chunks are in the expander, not rows
    status = dict(zip(table["Job"], table["Status"], strict=True))
    assert status[parent.id] == "running (1 chunk not done)"
    done = dict(zip(table["Job"], table["Done"], strict=True))
    assert done[parent.id] == f"{group.progress_done} / {group.progress_total}"

    # The parent is done (it only queued its chunks), yet Cancel stops what is left.
    at.button(key=f"cancel_job_{parent.id}").click().run(timeout=60)
    assert not at.exception
    assert jobs.get(db, third).status == "cancelled"
    assert jobs.group(db, parent.id).status == "partial"
    assert not [b for b in at.button if b.key == f"cancel_job_{parent.id}"]
