"""AppTest: the Import page's "Scores file" tab imports values computed elsewhere, shows the
service's errors with the file named as uploaded, and lists the study's imports; the
dashboard and the explorer mark an imported key."""

from __future__ import annotations

import hashlib
from pathlib import Path

from sqlalchemy import func, select

from radconcord.backend.services.annotation import rating
from radconcord.backend.services.evaluation.study_data import load_metric_columns, load_ratings
from radconcord.backend.services.scores.score_imports import import_scores
from radconcord.db.models import MetricScore, Pair, ScoreImport


def _submit(at, timeout: float = 60):
    button = next(b for b in at.button if b.key.startswith("FormSubmitter:import_scores-"))
    return button.click().run(timeout=timeout)


def _fill(env, make_app, name: str, data: bytes, **fields):
    at = make_app(env.admin)
    at.switch_page("views/import_data.py").run()
    assert at.selectbox(key="scores_study").value == env.study
    at.file_uploader(key="scores_file").upload(name, data, "text/csv")
    for key, value in fields.items():
        if isinstance(value, bool):
            at.checkbox(key=key).set_value(value)
        else:
            at.text_input(key=key).input(value)
    return _submit(at)


def _counts(env) -> tuple[int, int]:
    with env.db.read() as s:
        return (s.scalar(select(func.count(MetricScore.id))),
                s.scalar(select(func.count(ScoreImport.id))))


def test_scores_upload_imports_and_lists_the_import(study_env, make_app):
    data = b"pair_number,value\n1,0.25\n2,0.5\n3,\n"
    at = _fill(study_env, make_app, "judge scores.csv", data, scores_metric="llm_judge",
               scores_lower=True, scores_description="LLM judge",
               scores_source="https://example.org/judge", scores_allow_missing=True)
    assert not at.exception
    assert not at.error
    digest = hashlib.sha256(data).hexdigest()
    assert [s.value for s in at.success] == [
        f"Imported 1 metric key(s) from judge scores.csv into study **{study_env.study}**. "
        "They show on the **Dashboard**, the explorer, the report and the export with "
        "scores, marked as imported."]
    assert (f"- imported 'llm_judge' (lower is better) for 2 of 3 pairs of study "
            f"'{study_env.study}'; 1 missing (pair 3); signature "
            f"external:llm_judge|sha256:{digest}") in [m.value for m in at.markdown]
    (history,) = [d.value for d in at.dataframe if "Signature" in d.value.columns]
    assert list(history["Key"]) == ["llm_judge"]
    assert list(history["File"]) == ["judge scores.csv"]
    assert list(history["Direction"]) == ["lower is better"]
    col = load_metric_columns(study_env.db, load_ratings(study_env.db, study_env.study))
    assert col["llm_judge"].imported.description == "LLM judge"


def test_scores_upload_error_names_the_uploaded_file(study_env, make_app):
    at = _fill(study_env, make_app, "judge scores.csv", b"pair_number,value\n1,0.25\n2,x\n",
               scores_metric="llm_judge")
    assert not at.exception
    assert [e.value for e in at.error] == [
        "judge scores.csv: row 2 (line 3), field 'value': not a number: 'x'"]
    assert _counts(study_env) == (0, 0)

    at = _fill(study_env, make_app, "judge scores.csv", b"pair_number,value\n1,0.25\n",
               scores_metric="llm_judge")
    assert [e.value for e in at.error] == [
        f"judge scores.csv: 2 of the 3 pairs of study '{study_env.study}' have no row: "
        "pairs 2, 3; missing values are refused unless allowed (--allow-missing)"]
    assert _counts(study_env) == (0, 0)


def test_scores_upload_refuses_a_registered_key(study_env, make_app):
    at = _fill(study_env, make_app, "s.csv", b"pair_number,value\n1,1\n2,2\n3,3\n",
               scores_metric="rougeL")
    assert [e.value for e in at.error] == [
        "metric key 'rougeL' is a registered metric key (family 'rouge'): imported scores "
        "need a key of their own, such as 'rougeL_ext'"]
    assert _counts(study_env) == (0, 0)


VIEWS = Path(__file__).resolve().parents[2] / "webapp" / "views"


def _rate(env) -> None:
    """Both raters complete every pair (pair i gets i and i + 1 errors)."""
    for rater, offset in ((env.rater, 0), (env.other_rater, 1)):
        for item in rating.rater_queue(env.db, rater, study_name=env.study):
            number = next(p for p in _pair_numbers(env) if p[1] == item.opaque_id)[0]
            rating.set_count(env.db, rater, opaque_id=item.opaque_id, category=1,
                             significant=True, count=number + offset)
            rating.complete_pair(env.db, rater, opaque_id=item.opaque_id, confirm_zero=True)


def _pair_numbers(env) -> list[tuple[int, str]]:
    with env.db.read() as s:
        return [(pos + 1, oid) for pos, oid in s.execute(
            select(Pair.position, Pair.opaque_id).order_by(Pair.position))]


def test_dashboard_and_explorer_mark_the_imported_key(study_env, make_app, tmp_path):
    _rate(study_env)
    path = tmp_path / "pred.csv"
    path.write_text("pair_number,value\n1,0.5\n2,1.5\n3,2.5\n", encoding="utf-8")
    import_scores(study_env.db, study_env.admin, study_name=study_env.study, path=path,
                  metric="err_pred", lower_is_better=True, description="error predictor")

    at = make_app(study_env.admin, script=VIEWS / "dashboard.py")
    assert not at.exception and not at.error
    table = at.dataframe[0].value
    row = table[table["Metric"] == "err_pred"].iloc[0]
    # 3 rated pairs: below the dashboard's minimum n (issue 24), the tau reads as such.
    assert (row["Origin"], row["Direction"], row["Kendall tau-b"]) == (
        "imported", "lower is better", "n too small")
    assert any("Imported (computed elsewhere, from a file): **err_pred** from pred.csv "
               "(error predictor)." == c.value for c in at.caption)

    at = make_app(study_env.admin, script=VIEWS / "explorer.py")
    assert not at.exception and not at.error
    scores = next(d.value for d in at.dataframe if "Origin" in d.value.columns)
    assert list(zip(scores["Metric"], scores["Origin"], scores["Direction"], strict=True)) == [
        ("err_pred", "imported", "lower is better")]
