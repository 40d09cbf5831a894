"""AppTest: the Quality control page (admin) on the seeded page-test study.

Both raters complete the three study pairs through the rating service; rita answers all zeros
and has two hidden repeats (``Pair`` rows of kind ``repeat``) and a training item; she flags a
pair with a note. The page's tables must show what ``backend.services.quality.qc``, ``flags`` and
``calibration`` compute, with blank cells (never "None") and 1-based pair numbers; raters get
only the access error.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from sqlalchemy import select, update

from radconcord.backend.services.annotation import flags, rating
from radconcord.backend.services.quality import calibration, qc
from radconcord.db.models import PAIR_REPEAT, PAIR_TRAINING, Assignment, Pair, Rating, Study

SCRIPT = Path(__file__).resolve().parents[2] / "webapp" / "views" / "qc.py"
T0 = dt.datetime(2026, 11, 24, 9, 0, tzinfo=dt.UTC)


@pytest.fixture
def qc_env(study_env):
    env = study_env
    for rater, counts in ((env.rater, (0, 0, 0)), (env.other_rater, (1, 2, 0))):
        for item, n in zip(rating.rater_queue(env.db, rater, study_name=env.study), counts,
                           strict=True):
            if n:
                rating.set_count(env.db, rater, opaque_id=item.opaque_id, category=1,
                                 significant=True, count=n)
            rating.complete_pair(env.db, rater, opaque_id=item.opaque_id, confirm_zero=True)
    with env.db.begin() as s:
        study = s.scalar(select(Study).where(Study.name == env.study))
        pairs = list(s.scalars(select(Pair).where(Pair.study_id == study.id)
                               .order_by(Pair.position)))
        # Times on task: 30, 40, 50 s for rita; 60 s for each of ravi's pairs.
        for i, p in enumerate(pairs):
            s.execute(update(Assignment).where(Assignment.pair_id == p.id,
                                               Assignment.rater_id == env.rater.user_id)
                      .values(active_seconds=30.0 + 10 * i))
            s.execute(update(Assignment).where(Assignment.pair_id == p.id,
                                               Assignment.rater_id == env.other_rater.user_id)
                      .values(active_seconds=60.0))
        # Hidden repeats of pairs 1 and 2 for rita: she gives pair 2's repeat one error.
        for n, src in enumerate(pairs[:2]):
            rep = Pair(study_id=study.id, case_id=src.case_id, reference_id=src.reference_id,
                       candidate_id=src.candidate_id, source=src.source,
                       opaque_id=f"qcrepeat{n}", position=10 + n, input_hash=src.input_hash,
                       kind=PAIR_REPEAT, repeat_of_id=src.id)
            s.add(rep)
            s.flush()
            s.add(Assignment(study_id=study.id, rater_id=env.rater.user_id, pair_id=rep.id,
                             order_index=50 + n, completed_at=T0, active_seconds=5.0))
            if n == 1:
                s.add(Rating(rater_id=env.rater.user_id, pair_id=rep.id, category=3,
                             significant=False, count=1))
        src = pairs[0]
        train = Pair(study_id=study.id, case_id=src.case_id, reference_id=src.reference_id,
                     candidate_id=src.candidate_id, source=src.source, opaque_id="qctraining",
                     position=20, input_hash=src.input_hash, kind=PAIR_TRAINING,
                     expert={"counts": {"1:1": 1}, "source": "expert panel"})
        s.add(train)
        s.flush()
        s.add(Assignment(study_id=study.id, rater_id=env.rater.user_id, pair_id=train.id,
                         order_index=-1, completed_at=T0))
        flagged_oid = pairs[1].opaque_id
    flags.flag_pair(env.db, env.rater, opaque_id=flagged_oid, note="Image looks rotated?")
    return env


def _frame(at, index):
    frame = at.dataframe[index].value
    # A missing value is a blank text cell, never None/NaN drawn as "None".
    assert not frame.isna().any().any(), frame
    return frame


def test_qc_page_shows_monitoring_repeats_flags_and_training(qc_env, make_app, all_text):
    env = qc_env
    at = make_app(env.admin, script=SCRIPT)
    assert not at.exception, at.exception
    text = all_text(at)
    assert "Quality control" in text
    monitoring = _frame(at, 0)
    assert list(monitoring["Rater"]) == ["ravi", "rita"]
    rita = monitoring[monitoring["Rater"] == "rita"].iloc[0]
    assert rita["Done"] == "3 / 3" and rita["Median/pair"] == "40.0 s"
    assert rita["Zero run"] == "3"
    # First third -> last third, short enough for its column at 1280 px.
    assert rita["Drift"] == "0.0→0.0"
    # rita's totals are all 0: her Spearman with ravi is undefined, a blank cell.
    assert rita["Spearman"] == ""
    assert rita["Per hour"] == f"{3 * 3600 / 120:.1f}"
    assert "No rater is flagged." in text
    # Intra-rater: rita's two repeats, totals (0, 0) vs (0, 1).
    intra = _frame(at, 1)
    row = intra[intra["Rater"] == "rita"].iloc[0]
    assert row["Repeats (done / assigned)"] == "2 / 2"
    assert row["Exact agreement"] == "0.50"
    expected = qc.intra_rater(env.db, env.admin, env.study).raters[0].agreement
    assert row["Kappa (quadratic)"] == f"{expected.scope('total').kappa:.3f}"
    assert row["ICC(2,1)"] == f"{expected.scope('total').icc2_1:.3f}"
    flagged = _frame(at, 2)
    assert flagged.iloc[0].to_dict() | {"Flagged at": ""} == {
        "Pair": "2", "Kind": "study", "Rater": "rita", "Note": "Image looks rotated?",
        "Flagged at": "", "Done": "yes"}
    training = _frame(at, 3)
    standing = {q.rater: q for q in calibration.qualification_status(
        env.db, env.admin, study_name=env.study)}
    assert training[training["Rater"] == "rita"].iloc[0].to_dict() == {
        "Rater": "rita", "Training items": "1", "Done": "1",
        "Passed": str(standing["rita"].passed), "Needed": "", "Status": "no gate"}


def test_lowering_the_run_threshold_flags_the_straight_liner(qc_env, make_app, all_text):
    at = make_app(qc_env.admin, script=SCRIPT)
    at.number_input(key="qcp_straight_run").set_value(3).run()
    assert not at.exception
    text = all_text(at)
    with qc_env.db.read() as s:
        order = ", ".join(str(pos + 1) for pos in s.scalars(
            select(Pair.position).join(Assignment, Assignment.pair_id == Pair.id)
            .where(Assignment.rater_id == qc_env.rater.user_id, Pair.kind == "study")
            .order_by(Assignment.completed_at, Pair.position)))
    assert (f"**rita**: straight-lining: 3 consecutive all-zero pairs (in completion order: "
            f"pairs {order}; flagged from 3)") in text
    assert "No rater is flagged." not in text
    assert _frame(at, 0)[lambda f: f["Rater"] == "rita"].iloc[0]["Flags"] == "1"
    # Another scope of the intra-rater table: category 3 holds the one disagreement.
    at.selectbox(key="qcp_scope").set_value("category 3").run()
    row = _frame(at, 1)[lambda f: f["Rater"] == "rita"].iloc[0]
    assert row["Exact agreement"] == "0.50"
    # Why ICC and kappa are blank, under the table (a note column is cut off at 1280 px).
    assert "Note" not in _frame(at, 1).columns
    note = qc.intra_rater(qc_env.db, qc_env.admin, qc_env.study).raters[0].agreement
    note = note.scope("category 4").icc_note
    at.selectbox(key="qcp_scope").set_value("category 4").run()
    assert note and f"rita: {note}" in all_text(at)


def test_study_without_work_says_what_to_do(study_env, make_app, all_text):
    at = make_app(study_env.admin, script=SCRIPT)
    assert not at.exception
    text = all_text(at)
    assert "set repeat_share on the Assign page" in text
    assert "No rater has flagged a pair as unsure." in text
    assert "No training items in this study." in text
    frame = _frame(at, 0)
    assert list(frame["Done"]) == ["0 / 3", "0 / 3"]
    assert list(frame["Median/pair"]) == ["", ""]


def test_a_rater_gets_only_the_access_error(study_env, make_app, all_text):
    at = make_app(study_env.rater, script=SCRIPT)
    assert not at.dataframe
    assert "admin" in all_text(at).lower()


def test_a_pairwise_study_gets_the_judgement_table(study_env, make_app, all_text):
    """Judgements of rita (A every time) and ravi (A, B alternately) on six comparisons of
    the study's three pairs: the table shows what ``qc.judgement_monitoring`` computes and a
    lowered run threshold flags rita."""
    from radconcord.db.models import Comparison, Judgement

    env = study_env
    with env.db.begin() as s:
        study = s.scalar(select(Study).where(Study.name == env.study))
        pairs = list(s.scalars(select(Pair).where(Pair.study_id == study.id)
                               .order_by(Pair.position)))
        sides = [(0, 1), (0, 2), (1, 2), (1, 0), (2, 0), (2, 1)]
        for i, (a, b) in enumerate(sides):
            comp = Comparison(study_id=study.id, pair_a_id=pairs[a].id, pair_b_id=pairs[b].id,
                              position=i, opaque_id=f"qccmp{i}")
            s.add(comp)
            s.flush()
            for rater, pref in ((env.rater, "A"), (env.other_rater, "AB"[i % 2])):
                s.add(Judgement(rater_id=rater.user_id, comparison_id=comp.id, order_index=i,
                                preference=pref, rating_a=4 if pref == "A" else 2,
                                rating_b=2 if pref == "A" else 4,
                                completed_at=T0 + dt.timedelta(minutes=i),
                                active_seconds=20.0 + 10 * i))
    at = make_app(env.admin, script=SCRIPT)
    assert not at.exception, at.exception
    assert "Judgement monitoring" in all_text(at)
    table = _frame(at, 1)
    rita = table[table["Rater"] == "rita"].iloc[0].to_dict()
    assert rita == {"Rater": "rita", "Done": "6 / 6", "A / B / tie": "6 / 0 / 0",
                    "A share": "1.00", "Side p": f"{2 / 2**6:.3f}", "Same run": "6",
                    "Agreement": "0.50", "Shared": "6",
                    # Median of 20, 30, ..., 70 s of time on task.
                    "Median/comparison": "45.0 s", "Flags": ""}
    at.number_input(key="qcp_straight_run").set_value(3).run()
    assert ("**rita**: straight-lining: the same answer 6 times in a row (comparisons "
            "1, 2, 3, 4, 5, 6)") in all_text(at)
    assert _frame(at, 1)[lambda f: f["Rater"] == "rita"].iloc[0]["Flags"] == "1"
