"""AppTest: errors about uploaded files name them as uploaded, never by a server temp path."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import select

from radconcord.backend.datasets import rexval
from radconcord.db.models import Study

TEMP_MARK = "radconcord-upload-"


def _submit(at, form: str, timeout: float = 60):
    button = next(b for b in at.button if b.key.startswith(f"FormSubmitter:{form}-"))
    return button.click().run(timeout=timeout)


def _studies(env) -> list[str]:
    with env.db.begin() as s:
        return list(s.scalars(select(Study.name)))


def _import_cases(env, make_app, name: str, data: bytes, images=()):
    at = make_app(env.admin)
    at.switch_page("views/import_data.py").run()
    at.text_input(key="import_study").input("Broken upload")
    at.file_uploader(key="import_cases_file").upload(name, data, "text/plain")
    for image_name, image_data in images:
        at.file_uploader(key="import_images").upload(image_name, image_data, "image/png")
    return _submit(at, "import_cases")


def test_deep_jsonl_upload_error_names_the_uploaded_file(study_env, make_app):
    before = _studies(study_env)
    line = '{"case_id": "c1", "reference": "R.", "candidate": "C.", "x": ' \
        + "[" * 5000 + "]" * 5000 + "}"
    at = _import_cases(study_env, make_app, "my cases.jsonl", line.encode() + b"\n")
    assert not at.exception
    assert [e.value for e in at.error] == [
        "my cases.jsonl: line 1: nesting deeper than 32 levels"]
    assert _studies(study_env) == before


def test_missing_image_upload_error_has_no_server_path(study_env, make_app):
    before = _studies(study_env)
    data = json.dumps({"case_id": "c1", "reference": "R.", "candidate": "C.",
                       "images": ["../../etc/passwd"]}).encode() + b"\n"
    at = _import_cases(study_env, make_app, "cases.jsonl", data)
    assert not at.exception
    (message,) = [e.value for e in at.error]
    assert message == ("cases.jsonl: line 1, field 'images': '../../etc/passwd' lies outside "
                       "the allowed folder the uploaded files")
    assert TEMP_MARK not in message and "/tmp" not in message
    assert _studies(study_env) == before


def test_rexval_upload_error_names_the_uploaded_file(study_env, make_app, tmp_path):
    before = _studies(study_env)
    at = make_app(study_env.admin)
    at.switch_page("views/import_data.py").run()
    at.text_input(key="rexval_study").input("Broken ReXVal")
    at.file_uploader(key="rexval_gt").upload("gt upload.csv",
                                             b"study_id,report,radgraph\ns1,R.,A.\n",
                                             "text/csv")
    at.file_uploader(key="rexval_ratings").upload(
        "ratings.csv", (",".join(rexval.RATINGS_COLUMNS) + "\n").encode(), "text/csv")
    _submit(at, "import_rexval")
    assert not at.exception
    assert [e.value for e in at.error] == ["gt upload.csv: header: missing column 'gt_report'"]
    assert _studies(study_env) == before


def test_build_study_upload_error_names_the_uploaded_file(study_env, make_app):
    """The build page saves uploads in its own temporary folder; errors name the upload."""
    page = Path(__file__).resolve().parents[2] / "webapp" / "views" / "build_study.py"
    before = _studies(study_env)
    at = make_app(study_env.admin, script=page)
    at.text_input(key="build_name").set_value("Built from uploads")
    at.radio(key="build_tests_kind").set_value("upload")
    at.file_uploader(key="build_tests_upload").upload(
        "my tests.jsonl", b'{"id": "T1", "text": "Normal."}\n{"id": "T2"}\n', "text/plain")
    at.radio(key="build_corpus_kind").set_value("upload")
    at.file_uploader(key="build_corpus_upload").upload(
        "corpus.jsonl", b'{"id": "C1", "text": "Normal heart."}\n', "text/plain")
    at.number_input(key="build_limit").set_value(0)
    button = next(b for b in at.button if b.key.startswith("FormSubmitter:build_study-"))
    at = button.click().run(timeout=120)
    assert not at.exception
    (message,) = [e.value for e in at.error]
    assert message == "my tests.jsonl: line 2: missing field 'text'"
    assert "radconcord-build-" not in message
    assert _studies(study_env) == before
