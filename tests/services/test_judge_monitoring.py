"""QC of a pairwise study: the judgements in the database reach the analysis as written, and
the ``qc`` command prints and writes them (SQLite and PostgreSQL).

The data are those of tests/unit/test_judge_monitoring.py (hand-computed there); here each
rater's judgements are rows, one left open, and one rater is only assigned.
"""

from __future__ import annotations

import csv
import datetime as dt

import pytest
from sqlalchemy import select

from radconcord.backend.errors import InvalidInput, PermissionDenied
from radconcord.backend.services.accounts import auth
from radconcord.backend.services.quality import qc
from radconcord.backend.types import Actor
from radconcord.db.models import Comparison, Judgement, Pair, Study

SYSTEM = Actor.system()
T0 = dt.datetime(2026, 1, 5, 9, 0, tzinfo=dt.UTC)
ALTERNATING = ["A", "B"] * 6
ANSWERS = {
    "r1": [("A", 4, 2)] * 12,
    "r2": [("A", 4, 3) if p == "A" else ("B", 2, 4) for p in ALTERNATING],
    "r3": [("A", 4, 3) if p == "A" else ("B", 2, 4) for p in ALTERNATING],
    "r4": [("B", 2, 4), ("A", 4, 2), ("tie", 3, 3), ("B", 2, 4)],
}


@pytest.fixture
def world(any_db, make_study, fast_password_hashing):
    db = any_db
    make_study(db, "PW", 24)
    users = {}
    for name in (*ANSWERS, "idle"):
        users[name] = auth.create_user(db, SYSTEM, username=name,
                                       password=f"{name}-password", role="rater").user_id
    with db.begin() as s:
        study = s.scalar(select(Study).where(Study.name == "PW"))
        pairs = s.scalars(select(Pair).where(Pair.study_id == study.id)
                          .order_by(Pair.position)).all()
        comps = []
        for i in range(12):
            comp = Comparison(study_id=study.id, pair_a_id=pairs[2 * i].id,
                              pair_b_id=pairs[2 * i + 1].id, position=i,
                              opaque_id=f"cmp-{i}")
            s.add(comp)
            comps.append(comp)
        s.flush()
        for name, answers in ANSWERS.items():
            for i, comp in enumerate(comps):
                p, a, b = answers[i] if i < len(answers) else (None, None, None)
                s.add(Judgement(rater_id=users[name], comparison_id=comp.id, order_index=i,
                                preference=p, rating_a=a, rating_b=b,
                                completed_at=T0 + dt.timedelta(minutes=i + 1) if p else None))
        # Answered but not marked done: not an input.
        s.add(Judgement(rater_id=users["idle"], comparison_id=comps[0].id, order_index=0,
                        preference="B", rating_a=1, rating_b=5))
    return db


def test_the_study_judgements_reach_the_analysis(world):
    got = {m.rater: m for m in qc.judgement_monitoring(world, SYSTEM, "PW")}
    assert sorted(got) == ["idle", "r1", "r2", "r3", "r4"]
    assert (got["r4"].assigned, got["r4"].done, got["r4"].agreement) == (12, 4, 0.25)
    assert (got["idle"].assigned, got["idle"].done) == (1, 0)
    assert got["r1"].side_p == pytest.approx(2 / 2**12) and got["r1"].straight_lining
    assert got["r2"].agreement == pytest.approx(7 / 12)
    rows = qc.judgement_monitoring_rows(world, SYSTEM, "PW", straight_run=13)
    r1 = next(r for r in rows if r["rater"] == "r1")
    assert r1["same_run_comparisons"] == " ".join(str(n) for n in range(1, 13))
    assert r1["straight_lining"] is False  # 12 in a row, threshold 13
    assert r1["flags"].startswith("side bias: chose A in 12 of 12")
    assert next(r for r in rows if r["rater"] == "idle")["agreement"] is None


def test_imported_comparisons_keep_their_sides_out_of_the_side_test(world):
    with world.begin() as s:
        for comp in s.scalars(select(Comparison)):
            comp.meta = {"radpref": {"case_index": comp.position}}
    got = {m.rater: m for m in qc.judgement_monitoring(world, SYSTEM, "PW")}
    assert (got["r1"].n_a, got["r1"].side_decided) == (12, 0)
    assert not any(f.startswith("side bias") for f in got["r1"].flags)


def test_admin_only_bad_thresholds_and_a_counts_study(world, make_study):
    rater = auth.authenticate(world, username="r1", password="r1-password")
    with pytest.raises(PermissionDenied):
        qc.judgement_monitoring(world, rater, "PW")
    with pytest.raises(InvalidInput):
        qc.judgement_monitoring(world, SYSTEM, "PW", straight_run=1)
    make_study(world, "Counts", 2)
    assert qc.judgement_monitoring(world, SYSTEM, "Counts") == ()


def test_qc_command_prints_and_writes_the_judgement_table(world, tmp_path, monkeypatch,
                                                          capsys):
    from radconcord.backend import cli
    from radconcord.backend.cli import monitoring as qc_cli

    monkeypatch.setenv("DATABASE_URL", world.url)
    out = tmp_path / "qc"
    assert cli.main(["qc", "--study", "PW", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Judgement monitoring of 'PW' (pairwise: which is better, 1-5 ratings)" in text
    assert "  r1: side bias: chose A in 12 of 12 decided comparisons" in text
    assert "  r4: agreement with the others 0.25 is far below the other raters'" in text
    assert f"and {out / qc_cli.JUDGEMENT_CSV}" in text
    with open(out / qc_cli.JUDGEMENT_CSV, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == list(qc_cli.JUDGEMENT_COLUMNS)
    assert [(r["rater"], r["done"], r["n_a"], r["n_b"], r["n_tie"]) for r in rows] == [
        ("idle", "0", "0", "0", "0"), ("r1", "12", "12", "0", "0"),
        ("r2", "12", "6", "6", "0"), ("r3", "12", "6", "6", "0"), ("r4", "4", "1", "2", "1")]
    assert float(rows[4]["agreement"]) == 0.25 and rows[0]["agreement"] == ""
