"""Quality control services on both databases: a study built in the test (three raters, hidden
repeats as ``Pair`` rows of kind ``repeat``, a training item, completed assignments, activity
spans) and the monitoring and intra-rater numbers the lead sees, checked by hand; raters are
refused; training items and repeats never enter monitoring."""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pytest
from scipy.stats import spearmanr
from sqlalchemy import select

from radconcord.backend.analysis import intra_rater as ir
from radconcord.backend.errors import InvalidInput, NotFound, PermissionDenied
from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import activity
from radconcord.backend.services.annotation.activity import SpanInput
from radconcord.backend.services.quality import qc
from radconcord.backend.types import Actor
from radconcord.db.models import PAIR_REPEAT, PAIR_TRAINING, Assignment, Pair, Rating, Study

SYSTEM = Actor.system()
T0 = dt.datetime(2026, 11, 24, 9, 0, tzinfo=dt.UTC)
NOW = T0 + dt.timedelta(hours=3)
STUDY = "QC"

# Per rater: study pair position -> {(category, significant): count}; None = assigned, not done.
STUDY_COUNTS = {
    "r1": {0: {(1, 1): 1}, 1: {(2, 0): 2}, 2: {}, 3: {(4, 1): 1, (5, 0): 1}, 4: {}, 5: {}},
    "r2": {0: {(1, 1): 2}, 1: {(2, 0): 1}, 2: {(3, 0): 1}, 3: {(4, 1): 2}, 4: {}, 5: {}},
    "r3": {0: {(1, 1): 1}, 1: {(2, 0): 2}, 2: {}, 3: {(4, 1): 1}, 4: {(6, 0): 1}, 5: None},
}
# (rater, source position) -> counts at the repeat (None: repeat assigned, not done).
REPEATS = {
    ("r1", 0): {(1, 1): 1},
    ("r1", 1): {(2, 0): 1},
    ("r1", 2): {},
    ("r2", 0): {(1, 1): 2},
    ("r2", 1): None,
    ("r3", 5): {(3, 1): 1},  # the source is not done: never counted
}


def _grid(cells):
    g = np.zeros((6, 2))
    for (c, sig), n in cells.items():
        g[c - 1, sig] = n
    return g


@pytest.fixture
def world(any_db, make_study, fast_password_hashing):
    db = any_db
    make_study(db, STUDY, 6)
    actors = {}
    for name, role in (("boss", "admin"), ("r1", "rater"), ("r2", "rater"), ("r3", "rater")):
        auth.create_user(db, SYSTEM, username=name, password=f"{name}-password", role=role)
        actors[name] = auth.authenticate(db, username=name, password=f"{name}-password")
    with db.begin() as s:
        study = s.scalar(select(Study).where(Study.name == STUDY))
        pairs = {p.position: p for p in s.scalars(select(Pair).where(Pair.study_id == study.id))}
        repeat_of: dict[int, Pair] = {}
        for n, src in enumerate(sorted({pos for _, pos in REPEATS})):
            base = pairs[src]
            repeat_of[src] = Pair(
                study_id=study.id, case_id=base.case_id, reference_id=base.reference_id,
                candidate_id=base.candidate_id, source=base.source,
                opaque_id=f"rep{n}{base.opaque_id}"[:32], position=6 + n,
                input_hash=base.input_hash, kind=PAIR_REPEAT, repeat_of_id=base.id)
            s.add(repeat_of[src])
        base = pairs[0]
        training = Pair(study_id=study.id, case_id=base.case_id, reference_id=base.reference_id,
                        candidate_id=base.candidate_id, source=base.source,
                        opaque_id="train" + base.opaque_id, position=20,
                        input_hash=base.input_hash, kind=PAIR_TRAINING,
                        expert={"counts": {}, "source": "expert"})
        s.add(training)
        s.flush()

        def assign(user, pair, order, done_minute, cells, seconds=0.0):
            s.add(Assignment(study_id=study.id, rater_id=actors[user].user_id, pair_id=pair.id,
                             order_index=order, active_seconds=seconds,
                             completed_at=None if done_minute is None
                             else T0 + dt.timedelta(minutes=done_minute)))
            for (c, sig), n in (cells or {}).items():
                s.add(Rating(rater_id=actors[user].user_id, pair_id=pair.id, category=c,
                             significant=bool(sig), count=n))

        for user, per_pair in STUDY_COUNTS.items():
            # Done in reverse pair order, one a minute: completion order is 6, 5, ..., 1.
            for pos, cells in per_pair.items():
                assign(user, pairs[pos], pos + 1, None if cells is None else 10 - pos, cells,
                       seconds=0.0 if user == "r1" else 20.0 + pos)
            # A training item done first, all zeros: never in the monitoring.
            assign(user, training, 0, 0, {}, seconds=1.0)
        for (user, src), cells in REPEATS.items():
            assign(user, repeat_of[src], 10 + src, None if cells is None else 30 + src, cells,
                   seconds=1.0)
    # r1's time on task comes from the browser's activity spans (the study is open).
    with db.read() as s:
        oids = dict(s.execute(select(Pair.position, Pair.opaque_id)).all())
    spans = [SpanInput(oids[pos], T0 + dt.timedelta(minutes=pos),
                       T0 + dt.timedelta(minutes=pos, seconds=10 * (pos + 1)), 3)
             for pos in range(6)]
    spans.append(SpanInput(oids[0], T0 + dt.timedelta(minutes=30),
                           T0 + dt.timedelta(minutes=30, seconds=400), 3))
    res = activity.record_spans(db, actors["r1"], client_id="qc-tab-0001", spans=spans, now=NOW)
    assert res.refused == ()
    return db, actors


def test_monitoring_by_hand(world):
    db, actors = world
    result = qc.monitoring(db, actors["boss"], STUDY)
    assert result.study == STUDY and [r.rater for r in result.raters] == ["r1", "r2", "r3"]
    r1, r2, r3 = result.raters
    # Study pairs only: 6 assigned, the training item and repeats left out.
    assert (r1.assigned, r1.done, r3.assigned, r3.done) == (6, 6, 6, 5)
    # r1's times from spans: 410, 20, 30, 40, 50, 60 s (pair 1 got a second span of 400 s).
    # Completion order is pair 6..1, so the seconds come in that order.
    assert r1.seconds == pytest.approx((60, 50, 40, 30, 20, 410))
    # Sorted 20 30 40 50 60 410: Q1 at 1.25 -> 32.5, median 45, Q3 at 3.75 -> 57.5; IQR 25,
    # slow limit 57.5 + 75 = 132.5: pair 1 is slow.
    assert (r1.q1_seconds, r1.median_seconds, r1.q3_seconds) == pytest.approx((32.5, 45, 57.5))
    assert r1.slow_pairs == (1,) and r1.fast_pairs == ()
    assert r1.time_seconds == pytest.approx(610.0)
    assert r1.done_per_hour == pytest.approx(6 * 3600 / 610)
    # r1's totals in completion order (pairs 6..1): 0 0 2 0 2 1 -> thirds (0+0)/2 and (2+1)/2.
    assert (r1.drift_n, r1.drift_first, r1.drift_last) == (2, 0.0, 1.5)
    assert r1.zero_run == 2 and r1.zero_run_pairs == (6, 5) and not r1.straight_lining
    # r3 has not done pair 6; r3's times: 20+pos for pairs 1..5, plus 25 s on the open pair 6.
    assert r3.time_seconds == pytest.approx(20 + 21 + 22 + 23 + 24 + 25)
    # Agreement of r2 with the mean of r1 and r3 on pairs 1-6 (pair 6 only r1):
    # r2 totals 2 1 1 2 0 0; others 1, 2, 0, (2+1)/2, (0+1)/2, 0
    assert r2.shared_pairs == 6
    assert r2.abs_diff == pytest.approx((1 + 1 + 1 + 0.5 + 0.5 + 0) / 6)
    expected = spearmanr([2, 1, 1, 2, 0, 0], [1, 2, 0, 1.5, 0.5, 0]).statistic
    assert r2.spearman == pytest.approx(expected)


def test_straight_lining_and_thresholds(world):
    db, actors = world
    flagged = qc.monitoring(db, actors["boss"], STUDY, straight_run=2)
    assert flagged.flagged[:1] == ("r1",)
    assert flagged.raters[0].flags[0].startswith("straight-lining: 2 consecutive all-zero")
    with pytest.raises(InvalidInput, match="straight_run"):
        qc.monitoring(db, actors["boss"], STUDY, straight_run=1)
    with pytest.raises(InvalidInput, match="outlier_z"):
        qc.monitoring(db, actors["boss"], STUDY, outlier_z=float("nan"))


def test_intra_rater_by_hand(world):
    db, actors = world
    result = qc.intra_rater(db, actors["boss"], STUDY)
    assert result.repeat_pairs == 4
    by = {r.rater: r for r in result.raters}
    assert {u: (r.assigned, r.counted) for u, r in by.items()} == {
        "r1": (3, 3), "r2": (2, 1), "r3": (1, 0)}
    r1 = by["r1"].agreement
    # totals: first showing (1, 2, 0), repeat (1, 1, 0)
    total = r1.scope("total")
    assert total.n == 3 and total.exact == pytest.approx(2 / 3)
    assert total.icc2_1 == pytest.approx(ir.icc_2_1([1, 2, 0], [1, 1, 0])[0])
    assert total.kappa == pytest.approx(ir.quadratic_kappa([1, 2, 0], [1, 1, 0])[0])
    assert r1.exact_all_cells == pytest.approx(2 / 3)
    assert by["r2"].agreement.scope("total").icc_note == "needs at least 2 repeats, got 1"
    assert by["r3"].agreement.n_repeats == 0
    pooled = result.pooled
    assert pooled is not None and pooled.rater == qc.POOLED and pooled.counted == 4
    # pooled totals: r1 (1, 2, 0) + r2 (2) vs (1, 1, 0) + (2)
    assert pooled.agreement.scope("total").exact == pytest.approx(3 / 4)
    expect = ir.rater_agreement("x", [_grid({(1, 1): 1}), _grid({(2, 0): 2}), _grid({}),
                                      _grid({(1, 1): 2})],
                                [_grid({(1, 1): 1}), _grid({(2, 0): 1}), _grid({}),
                                 _grid({(1, 1): 2})])
    assert pooled.agreement.scope("category 2").kappa == pytest.approx(
        expect.scope("category 2").kappa)


def test_rows_for_the_export(world):
    db, actors = world
    rows = qc.intra_rater_rows(db, actors["boss"], STUDY)
    assert len(rows) == 4 * len(ir.SCOPES)  # r1, r2, r3 and the pooled row
    r3_total = next(r for r in rows if r["rater"] == "r3" and r["scope"] == "total")
    assert r3_total["icc2_1"] is None and r3_total["exact_agreement"] is None
    assert r3_total["icc_note"] == "no repeat done in both showings yet"
    r1_total = next(r for r in rows if r["rater"] == "r1" and r["scope"] == "total")
    assert r1_total["exact_agreement"] == pytest.approx(2 / 3)
    mrows = qc.monitoring_rows(db, actors["boss"], STUDY)
    assert [r["rater"] for r in mrows] == ["r1", "r2", "r3"]
    assert mrows[0]["slow_pairs"] == "1" and mrows[0]["zero_run_pairs"] == "6 5"
    assert all(not (isinstance(v, float) and math.isnan(v)) for r in mrows for v in r.values())


def test_admin_only_and_unknown_study(world):
    db, actors = world
    for fn in (qc.monitoring, qc.intra_rater, qc.intra_rater_rows, qc.monitoring_rows):
        with pytest.raises(PermissionDenied):
            fn(db, actors["r1"], STUDY)
        with pytest.raises(NotFound, match="no study named 'Nope'"):
            fn(db, actors["boss"], "Nope")


def test_study_without_repeats(any_db, make_study, fast_password_hashing):
    make_study(any_db, "Plain", 2)
    auth.create_user(any_db, SYSTEM, username="boss", password="boss-password", role="admin")
    boss = auth.authenticate(any_db, username="boss", password="boss-password")
    result = qc.intra_rater(any_db, boss, "Plain")
    assert (result.repeat_pairs, result.raters, result.pooled) == (0, (), None)
    assert qc.monitoring(any_db, boss, "Plain").raters == ()
    assert qc.intra_rater_rows(any_db, boss, "Plain") == []


def test_qc_command_prints_tables_and_writes_csvs(world, tmp_path, monkeypatch, capsys):
    import csv

    from radconcord.backend import cli
    from radconcord.backend.cli import monitoring as qc_cli

    db, _ = world
    monkeypatch.setenv("DATABASE_URL", db.url)
    out = tmp_path / "qc-out"
    assert cli.main(["qc", "--study", STUDY, "--out", str(out), "--straight-run", "2"]) == 0
    text = capsys.readouterr().out
    assert "Rater monitoring of 'QC'" in text and "Intra-rater agreement of 'QC'" in text
    assert "  r1: straight-lining: 2 consecutive all-zero pairs" in text
    with open(out / qc_cli.MONITORING_CSV, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["rater"] for r in rows] == ["r1", "r2", "r3"]
    assert rows[0]["slow_pairs"] == "1" and rows[0]["straight_lining"] == "True"
    assert float(rows[0]["median_seconds"]) == pytest.approx(45.0)
    with open(out / qc_cli.INTRA_CSV, newline="", encoding="utf-8") as fh:
        intra = list(csv.DictReader(fh))
    r3 = next(r for r in intra if r["rater"] == "r3" and r["scope"] == "total")
    # An undefined value is a blank cell, with the reason beside it.
    assert r3["icc2_1"] == "" and r3["icc_note"] == "no repeat done in both showings yet"
    # Errors: one line, status 2, nothing written.
    assert cli.main(["qc", "--study", "Nope", "--out", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err == "error: no study named 'Nope'\n"
    assert not (tmp_path / "x").exists()
    (tmp_path / "file").write_text("x", encoding="utf-8")
    assert cli.main(["qc", "--study", STUDY, "--out", str(tmp_path / "file")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def test_cli_defaults_are_the_analysis_defaults():
    from radconcord.backend.analysis import monitoring as mon
    from radconcord.backend.cli import monitoring as qc_cli

    assert qc_cli.DEFAULT_STRAIGHT_RUN == mon.STRAIGHT_RUN
    assert qc_cli.DEFAULT_OUTLIER_Z == mon.OUTLIER_Z
