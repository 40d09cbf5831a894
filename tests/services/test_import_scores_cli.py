"""``radconcord import-scores`` (``python -m backend import-scores``): output, options, errors."""

from __future__ import annotations

import hashlib

from sqlalchemy import func, select

from radconcord.backend.cli import main
from radconcord.backend.services.evaluation.study_data import load_metric_columns, load_ratings
from radconcord.db.models import MetricScore, ScoreImport
from radconcord.db.session import Database


def _run(argv, capsys):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _db(tmp_path, monkeypatch, make_study) -> Database:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(tmp_path))
    db = Database(url)
    make_study(db, "s", 3)
    return db


def test_import_scores_prints_each_key_and_the_study_reads_it(tmp_path, monkeypatch,
                                                              make_study, capsys):
    db = _db(tmp_path, monkeypatch, make_study)
    path = tmp_path / "v.csv"
    path.write_text("pair_number,value\n1,0.1\n2,0.2\n3,\n", encoding="utf-8")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    code, out, err = _run(["import-scores", "--study", "s", "--input", path, "--metric",
                           "ext", "--lower-is-better", "--description", "an API metric",
                           "--source", "https://example.org", "--allow-missing"], capsys)
    assert (code, err) == (0, "")
    assert out == ("imported 'ext' (lower is better) for 2 of 3 pairs of study 's'; 1 missing "
                   f"(pair 3); signature external:ext|sha256:{digest}\n")
    col = load_metric_columns(db, load_ratings(db, "s"))["ext"]
    assert col.higher_is_better is False and col.imported.source == "https://example.org"
    db.dispose()


def test_wide_file_with_lower_is_better_for_some_keys(tmp_path, monkeypatch, make_study,
                                                      capsys):
    db = _db(tmp_path, monkeypatch, make_study)
    path = tmp_path / "wide.jsonl"
    path.write_text("".join(f'{{"pair_number": {i}, "k_a": {i}, "k_b": {-i}}}\n'
                            for i in (1, 2, 3)), encoding="utf-8")
    code, out, _ = _run(["import-scores", "--study", "s", "--input", path,
                         "--lower-is-better", "k_b"], capsys)
    assert code == 0
    assert [line.split(" for ")[0] for line in out.splitlines()] == [
        "imported 'k_a' (higher is better)", "imported 'k_b' (lower is better)"]
    db.dispose()


def test_a_refused_file_is_one_error_line_and_writes_nothing(tmp_path, monkeypatch,
                                                             make_study, capsys):
    db = _db(tmp_path, monkeypatch, make_study)
    path = tmp_path / "v.csv"
    path.write_text("pair_number,value\n1,0.1\n2,0.2\n", encoding="utf-8")
    code, out, err = _run(["import-scores", "--study", "s", "--input", path, "--metric",
                           "ext"], capsys)
    assert (code, out) == (2, "")
    assert err == (f"error: {path}: 1 of the 3 pairs of study 's' has no row: pair 3; "
                   "missing values are refused unless allowed (--allow-missing)\n")
    code, _, err = _run(["import-scores", "--study", "s", "--input", path, "--metric",
                         "bertscore_f"], capsys)
    assert code == 2
    assert err == ("error: metric key 'bertscore_f' is a registered metric key (family "
                   "'bertscore'): imported scores need a key of their own, such as "
                   "'bertscore_f_ext'\n")
    with db.read() as s:
        assert s.scalar(select(func.count(MetricScore.id))) == 0
        assert s.scalar(select(func.count(ScoreImport.id))) == 0
    db.dispose()
