"""AppTest: the Export page adds metric scores and timing to an export when asked."""

from __future__ import annotations

import json

from radconcord.backend.services.annotation import rating


def _submit(at, form: str, timeout: float = 60):
    button = next(b for b in at.button if b.key.startswith(f"FormSubmitter:{form}-"))
    return button.click().run(timeout=timeout)


def test_export_page_adds_scores_and_timing_when_asked(study_env, make_app):
    item = rating.rater_queue(study_env.db, study_env.rater, study_name=study_env.study)[0]
    rating.complete_pair(study_env.db, study_env.rater, opaque_id=item.opaque_id,
                         confirm_zero=True)
    at = make_app(study_env.admin)
    at.switch_page("views/export.py").run()
    at.radio(key="export_format").set_value("jsonl")
    at.checkbox(key="export_scores").check()
    at.checkbox(key="export_timing").check()
    at = _submit(at, "export")
    assert not at.exception and not at.error
    files = list(at.dataframe[0].value["File"])
    assert {"metric_scores.jsonl", "assignments.jsonl", "activity_spans.jsonl"} <= set(files)
    (out,) = list((study_env.data_dir / "exports").iterdir())
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["timing"]["files"] == ["assignments.jsonl", "activity_spans.jsonl"]
    rows = [json.loads(line) for line in (out / "assignments.jsonl").read_text().splitlines()]
    done = [r for r in rows if r["pair_id"] == item.opaque_id and r["completed_at"]]
    assert len(done) == 1 and done[0]["pair_number"] >= 1


def test_export_page_without_the_boxes_writes_the_plain_files(study_env, make_app):
    at = make_app(study_env.admin)
    at.switch_page("views/export.py").run()
    at = _submit(at, "export")
    assert not at.exception and not at.error
    files = set(at.dataframe[0].value["File"])
    assert not {"metric_scores.csv", "assignments.csv", "activity_spans.csv"} & files
