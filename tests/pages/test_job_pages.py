"""AppTest: the import page sends large imports to the worker; the dashboard's RadCliQ refit.

A large import (over ``imports.WORKER_MIN_PAIRS`` pairs) is queued as an ``import`` job: the
page shows the job panel, the study appears only when a worker has run it, and the page then
draws the import's summary. A small import still runs inline and leaves no upload behind.
The dashboard queues a ``refit_radcliq`` job and draws its result once a worker ran it.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

from sqlalchemy import select

from radconcord.backend import jobs
from radconcord.backend.analysis.refit import RADCLIQ_INPUTS
from radconcord.backend.runner.worker import Worker
from radconcord.backend.services import job_inputs
from radconcord.backend.services.transfer import imports
from radconcord.backend.types import CandidateInput, CaseInput
from radconcord.db.models import MetricScore, Pair, Rating, Study, User

VIEWS = Path(__file__).resolve().parents[2] / "webapp" / "views"


def _submit(at, form: str):
    button = next(b for b in at.button if b.key.startswith(f"FormSubmitter:{form}-"))
    return button.click().run(timeout=120)


def _studies(env) -> list[str]:
    with env.db.read() as s:
        return list(s.scalars(select(Study.name)))


def _csv(n_cases: int) -> bytes:
    lines = ["case_id,reference,candidate,source"]
    for i in range(n_cases):
        lines += [f"c{i},Reference {i}.,First candidate {i}.,gen-a",
                  f"c{i},Reference {i}.,Second candidate {i}.,gen-b"]
    return ("\n".join(lines) + "\n").encode()


def _import(env, make_app, name: str, data: bytes):
    at = make_app(env.admin, script=VIEWS / "import_data.py")
    at.text_input(key="import_study").input(name)
    at.file_uploader(key="import_cases_file").upload("cases.csv", data, "text/csv")
    return _submit(at, "import_cases")


def test_a_large_import_runs_on_the_worker(study_env, make_app, all_text):
    n_cases = imports.WORKER_MIN_PAIRS // 2 + 1  # 2,002 pairs
    at = _import(study_env, make_app, "Large upload", _csv(n_cases))
    assert not at.exception and not at.error, [e.value for e in at.error]
    (job,) = jobs.list_jobs(study_env.db, kind="import")
    assert job.status == "queued" and at.query_params["import_job"] == str(job.id)
    assert "Large upload" not in _studies(study_env)
    upload = job_inputs.resolve_data_path(job.params["upload_dir"], "upload folder")
    assert (upload / "cases.csv").is_file()
    assert f"**Job #{job.id}**" in all_text(at)

    assert Worker(study_env.db).run_once().status == "done"
    at = at.run()
    assert not at.exception and not at.error
    assert f"Created study **Large upload**: {2 * n_cases} pairs" in all_text(at)
    assert "Large upload" in _studies(study_env)
    assert not upload.exists()


def test_a_small_import_stays_inline_and_leaves_no_upload(study_env, make_app, all_text):
    at = _import(study_env, make_app, "Small upload", _csv(3))
    assert not at.exception and not at.error
    assert "Created study **Small upload**: 6 pairs" in all_text(at)
    assert jobs.list_jobs(study_env.db) == []
    assert list(job_inputs.uploads_root().iterdir()) == []


def _refit_study(env, name: str = "Refit study") -> None:
    """8 cases x 2 pairs rated by two raters; the four RadCliQ inputs cached."""
    cases = [CaseInput(case_id=f"r{i}", reference=f"Reference report number {i}.",
                       candidates=[CandidateInput(text=f"Candidate a {i}.", source="a"),
                                   CandidateInput(text=f"Candidate b {i}.", source="b")])
             for i in range(8)]
    imports.import_cases(env.db, env.admin, study_name=name, cases=cases)
    rng = random.Random(3)
    with env.db.begin() as s:
        users = [User(username=f"imported-{i}", role="rater", password_hash="x")
                 for i in (1, 2)]
        s.add_all(users)
        s.flush()
        sid = s.scalar(select(Study.id).where(Study.name == name))
        for i, pair in enumerate(s.scalars(select(Pair).where(Pair.study_id == sid))):
            counts = [rng.randint(0, 4) for _ in users]
            for user, c in zip(users, counts, strict=True):
                s.add(Rating(rater_id=user.id, pair_id=pair.id, category=1, significant=True,
                             count=c))
            for k, key in enumerate(RADCLIQ_INPUTS):
                s.add(MetricScore(input_hash=pair.input_hash, family=key, key=key,
                                  signature_hash=f"sig-{key}", signature=f"{key}|test",
                                  value=-sum(counts) / 2 + 0.3 * math.sin(i * (k + 1))))


def test_dashboard_refit_runs_on_the_worker(study_env, make_app, all_text):
    _refit_study(study_env)
    at = make_app(study_env.admin, script=VIEWS / "dashboard.py")
    at.selectbox(key="dash_study").set_value("Refit study").run()
    at.toggle(key="dash_live").set_value(False).run()
    at.checkbox(key="refit_score").uncheck()
    at = _submit(at, "refit")
    assert not at.exception, at.exception
    (job,) = jobs.list_jobs(study_env.db, kind="refit_radcliq")
    assert job.params == {"study": "Refit study", "significant_only": False, "seed": 0,
                          "score_missing": False}
    assert at.query_params["refit_job"] == str(job.id)
    assert not any("Input" in d.value.columns for d in at.dataframe)

    assert Worker(study_env.db).run_once().status == "done"
    at = at.run()
    assert not at.exception
    (table,) = [d.value for d in at.dataframe if "Input" in d.value.columns]
    assert list(table["Input"]) == list(RADCLIQ_INPUTS)
    labels = {m.label: m.value for m in at.metric}  # the refit's "Pairs" comes last
    assert labels["Pairs"] == "16" and float(labels["CV Kendall tau-b"]) > 0.3
    assert "cross-validation (per fold tau-b:" in all_text(at)


def test_dashboard_refit_refuses_a_study_with_too_few_rated_pairs(study_env, make_app):
    at = make_app(study_env.admin, script=VIEWS / "dashboard.py")
    at.toggle(key="dash_live").set_value(False).run()
    at = _submit(at, "refit")
    assert not at.exception
    assert any("the refit needs at least 10" in e.value for e in at.error)
    assert jobs.list_jobs(study_env.db) == []
