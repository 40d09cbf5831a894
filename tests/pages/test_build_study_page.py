"""AppTest: the admin page that builds a metric-oracle study (webapp/views/build_study.py)."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import select

from radconcord.backend import jobs
from radconcord.backend.runner.worker import Worker
from radconcord.backend.services.annotation import rating
from radconcord.db.models import Study

PAGE = Path(__file__).resolve().parents[2] / "webapp" / "views" / "build_study.py"

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


def _write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def _fill(at, tmp_path: Path, name: str):
    at.text_input(key="build_name").set_value(name)
    at.radio(key="build_tests_kind").set_value("server")
    at.text_input(key="build_tests_path").set_value(_write(tmp_path / "t.jsonl", TESTS))
    at.radio(key="build_corpus_kind").set_value("server")
    at.text_input(key="build_corpus_path").set_value(_write(tmp_path / "c.jsonl", CORPUS))
    at.number_input(key="build_top_k").set_value(4)
    at.number_input(key="build_limit").set_value(0)
    return at


def _submit(at):
    button = next(b for b in at.button if b.key.startswith("FormSubmitter:build_study-"))
    return button.click().run(timeout=120)


def test_admin_builds_and_assigns_a_study_from_the_page(study_env, make_app, all_text,
                                                        tmp_path):
    """The page queues a build_oracle job; a worker builds the study; the page shows it."""
    at = make_app(study_env.admin, script=PAGE)
    assert not at.exception and not at.error
    assert at.title[0].value == "Build a metric-oracle study"
    assert at.multiselect(key="build_metrics").value == ["bleu4", "rougeL"]
    _fill(at, tmp_path, "Oracle from page")
    at.multiselect(key="build_raters").set_value(["ravi", "rita"])
    at.number_input(key="build_k").set_value(2)
    at = _submit(at)
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    # Queued, not built: the page shows the job and that no worker runs yet.
    (job,) = jobs.list_jobs(study_env.db, kind="build_oracle")
    assert job.status == "queued" and job.params["study_name"] == "Oracle from page"
    assert at.query_params["build_job"] == str(job.id)
    text = all_text(at)
    assert f"**Job #{job.id}**" in text and "No worker is running" in text
    with study_env.db.begin() as s:
        assert s.scalar(select(Study).where(Study.name == "Oracle from page")) is None

    assert Worker(study_env.db).run_once().status == "done"
    at = at.run()
    assert not at.exception and not at.error
    text = all_text(at)
    assert "Created study **Oracle from page**" in text and "for 3 test reports" in text
    with study_env.db.begin() as s:
        study = s.scalar(select(Study).where(Study.name == "Oracle from page"))
        n_pairs = len(study.pairs)
        assert study.provenance["kind"] == "metric-oracle"
        assert study.provenance["job_id"] == job.id
        assert {p.source for p in study.pairs} <= {"oracle:bleu4", "oracle:rougeL",
                                                  "oracle:bleu4+rougeL"}
    table = at.dataframe[0].value
    assert int(table["Pairs"].sum()) == n_pairs
    queue = rating.rater_queue(study_env.db, study_env.rater, study_name="Oracle from page")
    assert len(queue) == n_pairs


def test_a_reload_finds_the_job_from_the_url(study_env, make_app, all_text, tmp_path):
    at = _submit(_fill(make_app(study_env.admin, script=PAGE), tmp_path, "Reloaded"))
    job_id = at.query_params["build_job"]
    Worker(study_env.db).run_once()
    # A new browser session: nothing in session_state, the job id comes from the URL.
    again = make_app(study_env.admin, script=PAGE, params={"build_job": job_id})
    assert not again.exception and not again.error
    assert "Created study **Reloaded**" in all_text(again)


def test_page_shows_service_errors_and_creates_nothing(study_env, make_app, tmp_path):
    at = _fill(make_app(study_env.admin, script=PAGE), tmp_path, study_env.study)
    at = _submit(at)
    assert not at.exception
    assert [e.value for e in at.error] == [
        f"study {study_env.study!r} already exists; choose another name"]
    at = _fill(make_app(study_env.admin, script=PAGE), tmp_path, "new one")
    at.radio(key="build_corpus_kind").set_value("server")
    at.text_input(key="build_corpus_path").set_value(str(tmp_path / "missing.jsonl"))
    at = _submit(at)
    assert len(at.error) == 1 and "missing.jsonl: cannot read" in at.error[0].value
    with study_env.db.begin() as s:
        assert s.scalar(select(Study).where(Study.name == "new one")) is None


def test_a_rater_running_the_page_directly_sees_only_the_access_error(study_env, make_app):
    at = make_app(study_env.rater, script=PAGE)
    assert not at.exception
    assert [e.value for e in at.error] == ["this action needs an admin account"]
    assert not at.title and not at.button
