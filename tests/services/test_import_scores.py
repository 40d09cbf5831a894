"""``import-scores`` (backend/services/scores/score_imports.py): files, refusals, storage, and the
views that pick an imported key up (analysis columns, correlate, explorer, export, report)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from sqlalchemy import func, select

from radconcord.backend.analysis.html_report import render_html
from radconcord.backend.errors import InvalidInput, PermissionDenied
from radconcord.backend.metrics.base import signature_hash
from radconcord.backend.scoring.hashing import input_hash
from radconcord.backend.services.evaluation import explore
from radconcord.backend.services.evaluation.correlation import correlate_study
from radconcord.backend.services.evaluation.study_data import load_metric_columns, load_ratings
from radconcord.backend.services.scores.score_imports import import_scores, list_score_imports
from radconcord.backend.services.transfer.exports import export_study
from radconcord.backend.types import Actor
from radconcord.db.models import (
    Assignment,
    Case,
    MetricScore,
    Pair,
    Rating,
    Report,
    ScoreImport,
    Study,
    User,
)

ADMIN = Actor(user_id=1, username="lead", role="admin")
RATER = Actor(user_id=2, username="rita", role="rater")
ALLOW = "missing values are refused unless allowed (--allow-missing)"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _jsonl(path: Path, rows: list[dict]) -> Path:
    return _write(path, "".join(json.dumps(r) + "\n" for r in rows))


def _counts(db) -> tuple[int, int]:
    with db.read() as s:
        return (s.scalar(select(func.count(MetricScore.id))),
                s.scalar(select(func.count(ScoreImport.id))))


def _hashes(db, study: str) -> list[str]:
    with db.read() as s:
        return list(s.scalars(select(Pair.input_hash).join(Study, Study.id == Pair.study_id)
                              .where(Study.name == study).order_by(Pair.position)))


def _refused(db, message: str, **kwargs) -> None:
    """The import raises exactly ``message`` and writes nothing."""
    before = _counts(db)
    with pytest.raises(InvalidInput) as err:
        import_scores(db, ADMIN, **kwargs)
    assert str(err.value) == message
    assert _counts(db) == before


@pytest.fixture
def four(db, make_study):
    """A study 's' of 4 pairs (cases s-case-0..3) and its opaque ids."""
    return make_study(db, "s", 4)


# -- files ------------------------------------------------------------------------------------


def test_csv_by_pair_number_stores_external_rows_and_the_import(db, four, tmp_path):
    path = _write(tmp_path / "ext.csv", "pair_number,value\n1,0.5\n2,0.25\n3,1\n4,-2e-1\n")
    summary = import_scores(db, ADMIN, study_name="s", path=path, metric="my_metric",
                            description="GPT judge", source="https://example.org/run/7")
    digest = _sha(path)
    signature = f"external:my_metric|sha256:{digest}"
    assert summary.file_sha256 == digest and summary.layout == "value"
    assert summary.n_rows_written == 4
    assert summary.lines() == [
        f"imported 'my_metric' (higher is better) for 4 of 4 pairs of study 's'; "
        f"signature {signature}"]
    with db.read() as s:
        rows = s.execute(select(MetricScore.input_hash, MetricScore.family, MetricScore.key,
                                MetricScore.signature, MetricScore.signature_hash,
                                MetricScore.value)).all()
        record = s.scalars(select(ScoreImport)).one()
        study_id = s.scalar(select(Study.id).where(Study.name == "s"))
    hashes = _hashes(db, "s")
    assert sorted(rows) == sorted(
        (h, "external", "my_metric", signature, signature_hash(signature), v)
        for h, v in zip(hashes, [0.5, 0.25, 1.0, -0.2], strict=True))
    assert (record.study_id, record.key, record.signature, record.signature_hash,
            record.higher_is_better, record.description, record.source, record.file_name,
            record.file_sha256, record.n_pairs, record.n_missing, record.imported_by) == (
        study_id, "my_metric", signature, signature_hash(signature), True, "GPT judge",
        "https://example.org/run/7", "ext.csv", digest, 4, 0, "lead")
    assert record.imported_at is not None


def test_jsonl_by_opaque_id_and_pair_alias(db, four, tmp_path):
    path = _jsonl(tmp_path / "ext.jsonl", [
        {"pair_id": four[2], "value": 3}, {"pair": four[0], "value": 1.5},
        {"pair_id": four[3], "value": 0}, {"pair": four[1], "value": -1}])
    import_scores(db, ADMIN, study_name="s", path=path, metric="api_score",
                  lower_is_better=True)
    columns = load_metric_columns(db, load_ratings(db, "s"))
    col = columns["api_score"]
    assert list(col.values) == [1.5, -1.0, 3.0, 0.0]
    assert (col.family, col.higher_is_better, col.n_signatures) == ("external", False, 1)
    assert col.imported is not None and col.imported.file_name == "ext.jsonl"


def test_the_jsonl_export_numbers_and_ids_import_back(db, four, tmp_path):
    """pair_number and pair_id as the study's JSONL export writes them; the export's other
    columns (case_id checked, the rest ignored) may stay in the file."""
    export_study(db, ADMIN, study_name="s", fmt="jsonl", out_dir=tmp_path / "exp")
    lines = [json.loads(x) for x in (tmp_path / "exp" / "pairs.jsonl").read_text().splitlines()]
    rows = [{**rec, "value": 10.0 * rec["pair_number"]} for rec in reversed(lines)]
    import_scores(db, ADMIN, study_name="s", path=_jsonl(tmp_path / "v.jsonl", rows),
                  metric="judge")
    col = load_metric_columns(db, load_ratings(db, "s"))["judge"]
    assert list(col.values) == [10.0, 20.0, 30.0, 40.0]


def test_wide_file_imports_every_key_column_or_the_keys_named(db, four, tmp_path):
    path = _write(tmp_path / "wide.csv",
                  "pair_number,case_id,k_a,k_b\n1,s-case-0,1,10\n2,s-case-1,2,20\n"
                  "3,s-case-2,3,30\n4,s-case-3,4,40\n")
    summary = import_scores(db, ADMIN, study_name="s", path=path, lower_is_better="k_b")
    assert summary.layout == "wide"
    assert [(i.key, i.higher_is_better) for i in summary.imports] == [("k_a", True),
                                                                      ("k_b", False)]
    columns = load_metric_columns(db, load_ratings(db, "s"))
    assert list(columns["k_a"].values) == [1, 2, 3, 4]
    assert list(columns["k_b"].values) == [10, 20, 30, 40]
    assert (columns["k_a"].higher_is_better, columns["k_b"].higher_is_better) == (True, False)

    other = _write(tmp_path / "wide2.csv", "pair_number,k_c,junk\n1,5,x\n2,6,y\n3,7,z\n4,8,w\n")
    summary = import_scores(db, ADMIN, study_name="s", path=other, metric="k_c")
    assert [i.key for i in summary.imports] == ["k_c"]  # 'junk' is not read
    assert "junk" not in load_metric_columns(db, load_ratings(db, "s"))


def test_allow_missing_counts_pairs_without_a_row_and_blank_values(db, four, tmp_path):
    path = _write(tmp_path / "m.csv", "pair_number,value\n1,0.5\n3,\n")
    summary = import_scores(db, ADMIN, study_name="s", path=path, metric="partial",
                            allow_missing=True)
    (imp,) = summary.imports
    assert (imp.n_pairs, imp.n_missing) == (1, 3)
    assert summary.missing == {"partial": (2, 3, 4)}
    assert summary.lines()[0] == (
        "imported 'partial' (higher is better) for 1 of 4 pairs of study 's'; 3 missing "
        f"(pairs 2, 3, 4); signature external:partial|sha256:{_sha(path)}")
    col = load_metric_columns(db, load_ratings(db, "s"))["partial"]
    assert col.values[0] == 0.5 and np.isnan(col.values[1:]).all()
    with db.read() as s:  # the blank value is stored as undefined, the absent pairs not at all
        assert sorted(s.scalars(select(MetricScore.value)), key=str) == [0.5, None]


def test_reimport_makes_a_new_signature_and_the_latest_import_wins(db, four, tmp_path):
    first = _write(tmp_path / "v1.csv", "pair_number,value\n1,1\n2,2\n3,3\n4,4\n")
    second = _write(tmp_path / "v2.csv", "pair_number,value\n1,9\n2,8\n3,7\n4,6\n")
    import_scores(db, ADMIN, study_name="s", path=first, metric="ext")
    import_scores(db, ADMIN, study_name="s", path=second, metric="ext", lower_is_better=True)
    col = load_metric_columns(db, load_ratings(db, "s"))["ext"]
    assert list(col.values) == [9, 8, 7, 6]
    assert (col.signature, col.higher_is_better, col.n_signatures) == (
        f"external:ext|sha256:{_sha(second)}", False, 2)
    assert _counts(db) == (8, 2)  # the first file's rows are kept

    again = import_scores(db, ADMIN, study_name="s", path=first, metric="ext")
    assert again.n_rows_written == 0
    assert again.lines()[-1] == "this file was imported before: its stored values are used again"
    col = load_metric_columns(db, load_ratings(db, "s"))["ext"]
    assert (list(col.values), col.higher_is_better) == ([1, 2, 3, 4], True)
    assert [i.file_name for i in list_score_imports(db, ADMIN, study_name="s")] == [
        "v1.csv", "v2.csv", "v1.csv"]


def test_another_study_with_the_same_pairs_does_not_see_the_import(db, make_study, tmp_path):
    make_study(db, "a", 3)
    make_study(db, "b", 3)  # same texts: the same input hashes
    assert _hashes(db, "a") == _hashes(db, "b")
    import_scores(db, ADMIN, study_name="a",
                  path=_write(tmp_path / "v.csv", "pair_number,value\n1,1\n2,2\n3,3\n"),
                  metric="ext")
    assert "ext" in load_metric_columns(db, load_ratings(db, "a"))
    assert load_metric_columns(db, load_ratings(db, "b")) == {}
    assert explore.study_pairs(db, ADMIN, study_name="b").keys == ()
    # The adaptive order's question may name the key on its own study only.
    from radconcord.backend.services.study_admin import assignment

    assert assignment.scored_keys(db, ADMIN, study_name="a") == ["ext"]
    assert assignment.scored_keys(db, ADMIN, study_name="b") == []


def test_study_scores_read_the_latest_import_in_its_direction(db, make_study, tmp_path):
    """``services.scoring.study_scores`` (the Metrics page's table, build-study) treats an
    imported key like the loaders do: its latest import, its direction, this study only."""
    from radconcord.backend.services.scores.scoring import study_scores

    make_study(db, "a", 3)
    make_study(db, "b", 3)  # same texts: another study's import must not show here
    import_scores(db, ADMIN, study_name="a", metric="ext",
                  path=_write(tmp_path / "v1.csv", "pair_number,value\n1,1\n2,2\n3,3\n"))
    second = _write(tmp_path / "v2.csv", "pair_number,value\n1,9\n2,8\n3,7\n")
    import_scores(db, ADMIN, study_name="a", path=second, metric="ext", lower_is_better=True)
    got = study_scores(db, ADMIN, "a")
    assert got.keys == ("ext",) and got.directions == {"ext": False}
    assert got.signatures == {"ext": f"external:ext|sha256:{_sha(second)}"}
    assert [r["ext"] for r in got.rows] == [9, 8, 7]
    assert study_scores(db, ADMIN, "b").keys == ()


def test_only_an_admin_imports(db, four, tmp_path):
    path = _write(tmp_path / "v.csv", "pair_number,value\n1,1\n2,2\n3,3\n4,4\n")
    with pytest.raises(PermissionDenied):
        import_scores(db, RATER, study_name="s", path=path, metric="ext")
    assert _counts(db) == (0, 0)


# -- refusals: one message naming file, row and field; nothing written -------------------------


def test_unknown_pair_number(db, four, tmp_path):
    path = _write(tmp_path / "v.csv", "pair_number,value\n1,1\n5,2\n")
    _refused(db, f"{path}: row 2 (line 3), field 'pair_number': no pair 5 in study 's'",
             study_name="s", path=path, metric="ext")


def test_unknown_pair_id(db, four, tmp_path):
    path = _jsonl(tmp_path / "v.jsonl", [{"pair_id": four[0], "value": 1},
                                         {"pair_id": "nope", "value": 2}])
    _refused(db, f"{path}: line 2, field 'pair_id': no pair 'nope' in study 's'",
             study_name="s", path=path, metric="ext")


def test_duplicate_pair(db, four, tmp_path):
    path = _write(tmp_path / "v.csv", f"pair_id,value\n{four[1]},1\n{four[0]},2\n{four[1]},3\n")
    _refused(db, f"{path}: row 3 (line 4), field 'pair_id': pair 2 is also on row 1 (line 2)",
             study_name="s", path=path, metric="ext")


def test_not_a_number(db, four, tmp_path):
    path = _write(tmp_path / "v.csv", "pair_number,value\n1,0.5\n2,high\n")
    _refused(db, f"{path}: row 2 (line 3), field 'value': not a number: 'high'",
             study_name="s", path=path, metric="ext")


def test_infinity_is_not_a_value(db, four, tmp_path):
    path = _write(tmp_path / "v.csv", "pair_number,value\n1,inf\n")
    _refused(db, f"{path}: row 1 (line 2), field 'value': not a finite number: 'inf'",
             study_name="s", path=path, metric="ext", allow_missing=True)


def test_json_text_is_not_a_number(db, four, tmp_path):
    path = _jsonl(tmp_path / "v.jsonl", [{"pair_number": 1, "value": "0.5"}])
    _refused(db, f"{path}: line 1, field 'value': expected a number, got text '0.5'",
             study_name="s", path=path, metric="ext")


def test_nan_needs_allow_missing(db, four, tmp_path):
    path = _write(tmp_path / "v.csv", "pair_number,value\n1,1\n2,2\n3,NaN\n4,4\n")
    _refused(db, f"{path}: row 3 (line 4), field 'value': no value (blank or NaN); {ALLOW}",
             study_name="s", path=path, metric="ext")


def test_nan_in_jsonl_needs_allow_missing(db, four, tmp_path):
    path = _write(tmp_path / "v.jsonl", '{"pair_number": 1, "value": NaN}\n')
    _refused(db, f"{path}: line 1, field 'value': no value (blank or NaN); {ALLOW}",
             study_name="s", path=path, metric="ext")


def test_missing_pairs_need_allow_missing(db, four, tmp_path):
    path = _write(tmp_path / "v.csv", "pair_number,value\n1,1\n3,3\n")
    _refused(db, f"{path}: 2 of the 4 pairs of study 's' have no row: pairs 2, 4; {ALLOW}",
             study_name="s", path=path, metric="ext")


def test_wide_missing_value_names_its_column(db, four, tmp_path):
    path = _write(tmp_path / "v.csv", "pair_number,k_a,k_b\n1,1,1\n2,2,\n3,3,3\n4,4,4\n")
    _refused(db, f"{path}: row 2 (line 3), field 'k_b': no value (blank or NaN); {ALLOW}",
             study_name="s", path=path)


def test_no_value_at_all(db, four, tmp_path):
    path = _write(tmp_path / "v.csv", "pair_number,value\n1,\n")
    _refused(db, f"{path}: no pair has a value for 'ext'",
             study_name="s", path=path, metric="ext", allow_missing=True)


def test_key_of_a_registered_metric(db, four, tmp_path):
    path = _write(tmp_path / "v.csv", "pair_number,value\n1,1\n2,2\n3,3\n4,4\n")
    _refused(db, "metric key 'bleu4' is a registered metric key (family 'bleu'): imported "
                 "scores need a key of their own, such as 'bleu4_ext'",
             study_name="s", path=path, metric="bleu4")
    _refused(db, "metric key 'meteor' is a registered metric family (keys meteor): imported "
                 "scores need a key of their own, such as 'meteor_ext'",
             study_name="s", path=path, metric="meteor")


def test_wide_column_of_a_registered_metric(db, four, tmp_path):
    path = _write(tmp_path / "v.csv", "pair_number,mine,rougeL\n1,1,1\n")
    _refused(db, f"{path}: header: metric key 'rougeL' is a registered metric key (family "
                 "'rouge'): imported scores need a key of their own, such as 'rougeL_ext'",
             study_name="s", path=path)


def test_malformed_key(db, four, tmp_path):
    path = _write(tmp_path / "v.csv", "pair_number,value\n1,1\n")
    _refused(db, "metric key 'my metric': use 1-64 letters, digits, '_', '-' or '.', "
                 "starting with a letter", study_name="s", path=path, metric="my metric")


def test_number_and_id_must_name_one_pair(db, four, tmp_path):
    path = _write(tmp_path / "v.csv", f"pair_number,pair_id,value\n1,{four[0]},1\n"
                                      f"2,{four[3]},2\n")
    _refused(db, f"{path}: row 2 (line 3), field 'pair_id': '{four[3]}' is pair 4, but "
                 "pair_number says 2", study_name="s", path=path, metric="ext")


def test_case_id_must_match_the_pair(db, four, tmp_path):
    path = _write(tmp_path / "v.csv", "pair_number,case_id,value\n1,s-case-0,1\n2,s-case-3,2\n")
    _refused(db, f"{path}: row 2 (line 3), field 'case_id': pair 2 is case 's-case-1', not "
                 "'s-case-3'", study_name="s", path=path, metric="ext")


def test_value_column_needs_a_key(db, four, tmp_path):
    path = _write(tmp_path / "v.csv", "pair_number,value\n1,1\n")
    _refused(db, f"{path}: header: a 'value' column needs its metric key (--metric KEY)",
             study_name="s", path=path)


def test_no_pair_column(db, four, tmp_path):
    path = _write(tmp_path / "v.csv", "id,value\n1,1\n")
    _refused(db, f"{path}: header: missing column 'pair_number' (or 'pair_id', 'pair') "
                 "(found: 'id', 'value')", study_name="s", path=path, metric="ext")


def test_wide_filter_names_a_missing_column(db, four, tmp_path):
    path = _write(tmp_path / "v.csv", "pair_number,k_a\n1,1\n")
    _refused(db, f"{path}: header: no column 'k_z' (metric columns in the file: 'k_a')",
             study_name="s", path=path, metric="k_z")


def test_lower_is_better_names_keys_of_the_file(db, four, tmp_path):
    path = _write(tmp_path / "v.csv", "pair_number,k_a\n1,1\n2,2\n3,3\n4,4\n")
    _refused(db, "lower-is-better: 'k_q' is not imported from this file (keys: 'k_a')",
             study_name="s", path=path, lower_is_better=["k_q"])


def test_identical_pairs_need_one_value(db, four, tmp_path):
    """Two pairs of the same reference, candidate text and images share the score cache's
    key: the file must not give them different values."""
    with db.begin() as s:
        first = s.scalars(select(Pair).where(Pair.position == 0)).one()
        text = s.get(Report, first.candidate_id).text
        twin = Report(case_id=first.case_id, role="candidate", source="gen-z", text=text)
        s.add(twin)
        s.flush()
        s.add(Pair(study_id=first.study_id, case_id=first.case_id,
                   reference_id=first.reference_id, candidate_id=twin.id, source="gen-z",
                   opaque_id="twin", position=4, input_hash=first.input_hash))
    path = _write(tmp_path / "v.csv", "pair_number,value\n1,1\n2,2\n3,3\n4,4\n5,9\n")
    _refused(db, f"{path}: row 5 (line 6), field 'value': pair 5 has the same reference, "
                 "candidate and images as pair 1 (row 1 (line 2)) but another value; scores "
                 "are stored per pair content, so identical pairs need one value",
             study_name="s", path=path, metric="ext")


def test_unknown_study(db, four, tmp_path):
    from radconcord.backend.errors import NotFound

    path = _write(tmp_path / "v.csv", "pair_number,value\n1,1\n")
    with pytest.raises(NotFound, match="no study named 'nope'"):
        import_scores(db, ADMIN, study_name="nope", path=path, metric="ext")


# -- the views ---------------------------------------------------------------------------------

N_RATED = 12


@pytest.fixture
def rated(db):
    """Study 'r': 12 pairs (two sources) completed by two raters; the truth per pair."""
    rng = np.random.default_rng(5)
    errors = rng.poisson(2.0, size=(2, N_RATED))
    with db.begin() as s:
        users = [User(username=u, role="rater", password_hash="x") for u in ("r1", "r2")]
        study = Study(name="r")
        s.add_all([*users, study])
        s.flush()
        for i in range(N_RATED):
            case = Case(external_id=f"case-{i}", study_id=study.id)
            s.add(case)
            s.flush()
            ref = Report(case_id=case.id, role="reference", text=f"ref {i}")
            cand = Report(case_id=case.id, role="candidate", source="ab"[i % 2],
                          text=f"cand {i}")
            s.add_all([ref, cand])
            s.flush()
            pair = Pair(study_id=study.id, case_id=case.id, reference_id=ref.id,
                        candidate_id=cand.id, source="ab"[i % 2], opaque_id=f"r{i}",
                        position=i, input_hash=input_hash(f"ref {i}", f"cand {i}"))
            s.add(pair)
            s.flush()
            for r, user in enumerate(users):
                s.add(Assignment(study_id=study.id, rater_id=user.id, pair_id=pair.id,
                                 order_index=i, completed_at=dt.datetime(2024, 1, 1,
                                                                         tzinfo=dt.UTC)))
                s.add(Rating(rater_id=user.id, pair_id=pair.id, category=1,
                             significant=True, count=int(errors[r, i])))
    mean = errors.mean(axis=0)
    # An error predictor: lower is better, close to the raters.
    values = mean + rng.normal(scale=0.7, size=N_RATED)
    return mean, values


def _import_rated(db, tmp_path, values) -> Path:
    path = _write(tmp_path / "pred.csv", "pair_number,value\n" + "".join(
        f"{i + 1},{float(v)!r}\n" for i, v in enumerate(values)))
    import_scores(db, ADMIN, study_name="r", path=path, metric="err_pred",
                  lower_is_better=True, description="error predictor",
                  source="notebook run 3")
    return path


def test_correlate_includes_the_imported_key_with_its_direction(db, rated, tmp_path):
    mean, values = rated
    path = _import_rated(db, tmp_path, values)
    with db.begin() as s:  # a computed metric beside it, for the paired tests
        for h, v in zip(_hashes(db, "r"), -mean + np.arange(N_RATED) / 10, strict=True):
            s.add(MetricScore(input_hash=h, family="bleu", key="bleu4", signature_hash="b",
                              signature="bleu4|v1", value=float(v)))
    report = correlate_study(db, study_name="r", bootstrap=0, permutations=10)
    entry = report["metrics"]["err_pred"]
    tau = stats.kendalltau(-values, -mean).statistic
    assert entry["kendall_tau_b"] == pytest.approx(tau, abs=1e-12)
    assert entry["kendall_tau_b"] > 0  # lower is better was honoured
    assert (entry["higher_is_better"], entry["family"], entry["n"]) == (False, "external", 12)
    assert entry["signature"] == f"external:err_pred|sha256:{_sha(path)}"
    assert entry["imported"]["description"] == "error predictor"
    assert entry["imported"]["source"] == "notebook run 3"
    assert entry["imported"]["file_name"] == "pred.csv"
    assert report["metrics"]["bleu4"]["imported"] is None
    # The paired tests and the system ranking work on the same oriented columns.
    assert set(report["pairwise"]["pairs"]) == {"bleu4|err_pred"}
    assert "err_pred" in report["systems"]["ranking"]


def test_explorer_export_and_report_mark_the_imported_key(db, rated, tmp_path):
    _, values = rated
    _import_rated(db, tmp_path, values)
    table = explore.study_pairs(db, ADMIN, study_name="r")
    assert table.imported == ("err_pred",) and table.directions["err_pred"] is False
    assert table.rows[0].values["err_pred"] == pytest.approx(values[0])
    ranking = explore.disagreements(db, ADMIN, study_name="r", key="err_pred")
    assert ranking.imported and ranking.n_ranked == N_RATED
    detail = explore.pair_detail(db, ADMIN, study_name="r", pair_id=table.rows[0].pair_id)
    assert [(m.key, m.imported) for m in detail.metrics] == [("err_pred", True)]

    out = tmp_path / "export"
    export_study(db, ADMIN, study_name="r", fmt="jsonl", out_dir=out, with_scores=True)
    rows = [json.loads(x) for x in (out / "metric_scores.jsonl").read_text().splitlines()]
    assert len(rows) == N_RATED
    assert {(r["key"], r["family"], r["higher_is_better"], r["chosen"]) for r in rows} == {
        ("err_pred", "external", False, True)}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["scores"]["keys"]["err_pred"]["imported"]["description"] == (
        "error predictor")

    report = correlate_study(db, study_name="r", bootstrap=0, permutations=10)
    page = render_html(report, {})
    assert "err_pred <span class=\"muted\">(imported)</span>" in page
    assert "<h3>Imported scores</h3>" in page and "notebook run 3" in page


def test_data_version_changes_with_an_import_that_writes_no_score(db, four, tmp_path):
    path = _write(tmp_path / "v.csv", "pair_number,value\n1,1\n2,2\n3,3\n4,4\n")
    import_scores(db, ADMIN, study_name="s", path=path, metric="ext")
    before = explore.data_version(db, ADMIN, study_name="s").token
    import_scores(db, ADMIN, study_name="s", path=path, metric="ext", lower_is_better=True)
    assert explore.data_version(db, ADMIN, study_name="s").token != before
    assert math.isfinite(load_metric_columns(db, load_ratings(db, "s"))["ext"].values[0])


def test_import_and_reimport_on_sqlite_and_postgres(any_db, make_study, tmp_path):
    make_study(any_db, "p", 3)
    first = _write(tmp_path / "a.csv", "pair_number,value\n1,1\n2,2\n3,\n")
    second = _write(tmp_path / "b.csv", "pair_number,value\n1,3\n2,2\n3,1\n")
    import_scores(any_db, ADMIN, study_name="p", path=first, metric="ext", allow_missing=True)
    import_scores(any_db, ADMIN, study_name="p", path=second, metric="ext",
                  lower_is_better=True)
    assert import_scores(any_db, ADMIN, study_name="p", path=second,
                         metric="ext").n_rows_written == 0
    col = load_metric_columns(any_db, load_ratings(any_db, "p"))["ext"]
    assert (list(col.values), col.higher_is_better, col.n_signatures) == ([3, 2, 1], True, 2)
    assert _counts(any_db) == (6, 3)


def test_pairwise_preference_stats_read_the_imported_key_with_its_direction(
        db, fast_password_hashing, tmp_path):
    """On a pairwise study, an imported lower-is-better key equal to 1 - bleu4 agrees with the
    raters' preferences exactly as bleu4 does (test_pairwise.py's judged study)."""
    from radconcord.backend.services.annotation import pairwise
    from tests.services.test_pairwise import SYSTEM, _judged, _world

    db, actors, _, _, bleu = _judged(*_world(db))
    with db.read() as s:
        number = dict(s.execute(select(Pair.id, Pair.position)).all())
    path = _write(tmp_path / "v.csv", "pair_number,value\n" + "".join(
        f"{number[pid] + 1},{1.0 - v!r}\n" for pid, v in bleu.items()))
    import_scores(db, ADMIN, study_name="PW", path=path, metric="one_minus_bleu",
                  lower_is_better=True)  # the training item is no study pair: no row
    got = pairwise.study_preference_stats(db, SYSTEM, "PW", resamples=0)
    by_key = {m.key: m for m in got.metrics}
    assert by_key["one_minus_bleu"].higher_is_better is False
    assert by_key["one_minus_bleu"].agreement.value == pytest.approx(
        by_key["bleu4"].agreement.value)
    assert by_key["one_minus_bleu"].kendall_tau_b_rating == pytest.approx(
        by_key["bleu4"].kendall_tau_b_rating)
