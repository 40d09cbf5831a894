"""The web process never runs a metric: the probes and build-study pages only queue jobs.

Each page is driven with AppTest in a SUBPROCESS (this pytest process has torch imported by
other tests, so its ``sys.modules`` proves nothing). The subprocess submits the forms, then
reports the job ids the pages kept in the URL and which of torch/transformers it imported.
The jobs then run on a :class:`~backend.runner.worker.Worker` in this process, and a second
subprocess opens both pages from their URLs (a reload) and reports what they drew: the
results of the finished jobs, still without torch or transformers in the web process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from sqlalchemy import func, select

from radconcord.backend import jobs
from radconcord.backend.runner.worker import Worker
from radconcord.db.models import MetricScore, Study

REPO = Path(__file__).resolve().parents[2]
VIEWS = REPO / "webapp" / "views"
HEAVY = ("torch", "transformers")

TESTS = [
    {"id": "T1", "text": "Heart size is normal. No focal consolidation. No pleural effusion."},
    {"id": "T2", "text": "Small left pleural effusion with adjacent atelectasis."},
]
CORPUS = [
    {"id": "C1", "text": "Heart size normal. No consolidation or effusion."},
    {"id": "C2", "text": "Small left pleural effusion. No pneumothorax."},
    {"id": "C3", "text": "Left pleural effusion with atelectasis at the base."},
]

# Runs in the subprocess: drives the pages, prints one JSON line with what it saw.
DRIVER = textwrap.dedent('''
    import json, sys
    from pathlib import Path
    from streamlit.testing.v1 import AppTest
    from radconcord.backend.types import Actor

    args = json.loads(sys.argv[1])
    actor = Actor(**args["actor"])
    views = Path(args["views"])

    def page(name, params=None):
        at = AppTest.from_file(str(views / name), default_timeout=120)
        at.session_state["actor"] = actor
        for key, value in (params or {}).items():
            at.query_params[key] = value
        return at.run()

    def submit(at, form):
        button = next(b for b in at.button if b.key.startswith(f"FormSubmitter:{form}-"))
        return button.click().run()

    def texts(at):
        out = []
        for group in (at.markdown, at.success, at.warning, at.error, at.subheader):
            out.extend(str(el.value) for el in group)
        return out

    out = {}
    if args["mode"] == "submit":
        at = page("probes.py")
        at.multiselect(key="probe_metrics").set_value(["bleu", "rouge"])
        at = submit(at, "probes")
        out["probe_errors"] = [str(e.value) for e in at.error] + [str(e) for e in at.exception]
        out["probe_job"] = at.query_params.get("probe_job")
        out["probe_tables"] = len(at.dataframe)
        at = page("build_study.py")
        at.text_input(key="build_name").set_value("Oracle in a subprocess")
        at.radio(key="build_tests_kind").set_value("server")
        at.text_input(key="build_tests_path").set_value(args["tests"])
        at.radio(key="build_corpus_kind").set_value("server")
        at.text_input(key="build_corpus_path").set_value(args["corpus"])
        at.number_input(key="build_top_k").set_value(2)
        at.number_input(key="build_limit").set_value(0)
        at = submit(at, "build_study")
        out["build_errors"] = [str(e.value) for e in at.error] + [str(e) for e in at.exception]
        out["build_job"] = at.query_params.get("build_job")
    else:
        at = page("probes.py", {"probe_job": args["probe_job"]})
        out["probe_errors"] = [str(e.value) for e in at.error] + [str(e) for e in at.exception]
        out["probe_metrics"] = list(at.dataframe[1].value["Metric"]) if len(at.dataframe) > 1 \\
            else []
        at = page("build_study.py", {"build_job": args["build_job"]})
        out["build_errors"] = [str(e.value) for e in at.error] + [str(e) for e in at.exception]
        out["build_text"] = texts(at)
    out["heavy"] = [m for m in args["heavy"] if m in sys.modules]
    print("RESULT " + json.dumps(out))
''')


def _drive(env, tmp_path: Path, **args) -> dict:
    script = tmp_path / "drive_pages.py"
    script.write_text(DRIVER, encoding="utf-8")
    payload = {"actor": {"user_id": env.admin.user_id, "username": env.admin.username,
                         "role": env.admin.role},
               "views": str(VIEWS), "heavy": list(HEAVY), **args}
    child_env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, str(script), json.dumps(payload)], cwd=REPO,
                          env=child_env, capture_output=True, text=True, timeout=300)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


def _scores(db) -> int:
    with db.read() as s:
        return s.scalar(select(func.count()).select_from(MetricScore))


def test_probes_and_build_pages_queue_jobs_and_load_no_model(study_env, tmp_path):
    tests = tmp_path / "tests.jsonl"
    corpus = tmp_path / "corpus.jsonl"
    tests.write_text("".join(json.dumps(r) + "\n" for r in TESTS), encoding="utf-8")
    corpus.write_text("".join(json.dumps(r) + "\n" for r in CORPUS), encoding="utf-8")

    seen = _drive(study_env, tmp_path, mode="submit", tests=str(tests), corpus=str(corpus))
    assert seen["probe_errors"] == [] and seen["build_errors"] == []
    assert seen["heavy"] == []
    # Both pages queued a job and computed nothing: no score, no table, no study.
    probe_job, build_job = int(seen["probe_job"]), int(seen["build_job"])
    assert seen["probe_tables"] == 0
    assert jobs.get(study_env.db, probe_job).status == "queued"
    assert jobs.get(study_env.db, probe_job).kind == "probes"
    assert jobs.get(study_env.db, build_job).kind == "build_oracle"
    assert _scores(study_env.db) == 0
    with study_env.db.read() as s:
        assert s.scalar(select(Study).where(Study.name == "Oracle in a subprocess")) is None

    worker = Worker(study_env.db)
    assert worker.run_once().status == "done"
    assert worker.run_once().status == "done"
    assert _scores(study_env.db) > 0  # the worker scored, into the shared cache

    shown = _drive(study_env, tmp_path, mode="show", probe_job=str(probe_job),
                   build_job=str(build_job))
    assert shown["probe_errors"] == [] and shown["build_errors"] == []
    assert shown["probe_metrics"] == ["bleu1", "bleu2", "bleu3", "bleu4", "rouge1", "rouge2",
                                       "rougeL"]
    assert any("Created study **Oracle in a subprocess**" in t for t in shown["build_text"])
    assert shown["heavy"] == []
