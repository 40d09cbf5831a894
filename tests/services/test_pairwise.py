"""Pairwise mode (backend/services/annotation/pairwise.py) on SQLite and PostgreSQL, and
``correlate``'s
pairwise block.

Statistics are checked against hand computations written out here from the inserted ratings
and metric values (plain Python loops, nothing from the code under test).
"""

from __future__ import annotations

import dataclasses
import json
from itertools import combinations

import numpy as np
import pytest
from sqlalchemy import func, select

from radconcord.backend.cli import main
from radconcord.backend.errors import InvalidInput, NotFound, PermissionDenied
from radconcord.backend.scoring.hashing import input_hash
from radconcord.backend.services import transactions
from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import pairwise
from radconcord.backend.services.study_admin import study_settings
from radconcord.backend.types import Actor
from radconcord.db.models import (
    PAIR_TRAINING,
    Case,
    Comparison,
    Judgement,
    MetricScore,
    Pair,
    Report,
    Study,
)
from radconcord.db.session import Database

SYSTEM = Actor.system()
RATERS = ("r1", "r2", "r3")
# Candidates per case: cases 0-2 have two, case 3 three, case 4 one (no comparison).
LAYOUT = (("sys-x", "sys-y"),) * 3 + (("sys-x", "sys-y", "sys-z"), ("sys-x",))


def build(db, name="PW", mode="pairwise", *, training=True):
    """A study laid out as LAYOUT (plus a training pair on case 0); returns pair ids by
    (case index, source)."""
    ids = {}
    with db.begin() as s:
        study = Study(name=name, status="open",
                      settings={"annotation_mode": mode} if mode else {})
        s.add(study)
        s.flush()
        position = 0
        for c, sources in enumerate(LAYOUT):
            case = Case(external_id=f"{name}-case-{c}", study_id=study.id)
            s.add(case)
            s.flush()
            ref_text = f"Reference {c}: heart size normal."
            ref = Report(case_id=case.id, role="reference", text=ref_text)
            s.add(ref)
            for src in sources:
                text = f"Candidate {c} by {src}: small effusion."
                cand = Report(case_id=case.id, role="candidate", source=src, text=text)
                s.add(cand)
                s.flush()
                pair = Pair(study_id=study.id, case_id=case.id, reference_id=ref.id,
                            candidate_id=cand.id, source=src, opaque_id=f"{name}-p{position}",
                            position=position, input_hash=input_hash(ref_text, text))
                s.add(pair)
                s.flush()
                ids[(c, src)] = pair.id
                position += 1
            if c == 0 and training:
                cand = Report(case_id=case.id, role="candidate", source="expert", text="T")
                s.add(cand)
                s.flush()
                s.add(Pair(study_id=study.id, case_id=case.id, reference_id=ref.id,
                           candidate_id=cand.id, source="expert", opaque_id=f"{name}-train",
                           position=100, input_hash="t" * 64, kind=PAIR_TRAINING,
                           expert={"counts": {}, "source": "test"}))
    return ids


def _world(db):
    ids = build(db)
    actors = {}
    for name in RATERS:
        auth.create_user(db, SYSTEM, username=name, password=f"{name}-password", role="rater")
        actors[name] = auth.authenticate(db, username=name, password=f"{name}-password")
    return db, ids, actors


@pytest.fixture
def world(any_db, fast_password_hashing):
    return _world(any_db)


@pytest.fixture
def sqlite_world(tmp_path, monkeypatch, fast_password_hashing):
    """The same study on a SQLite file, for the command line (which opens it by URL)."""
    monkeypatch.setenv("RADCONCORD_DATA_DIR", str(tmp_path))
    db = Database(f"sqlite:///{tmp_path / 'cli.db'}")
    yield _world(db)
    db.dispose()


def _comparisons(db):
    with db.read() as s:
        return s.execute(select(Comparison.pair_a_id, Comparison.pair_b_id, Comparison.position,
                                Comparison.opaque_id).order_by(Comparison.position)).all()


def test_make_comparisons_every_two_candidates_of_a_reference_idempotent(world):
    db, ids, _ = world
    summary = pairwise.make_comparisons(db, SYSTEM, "PW", seed=3)
    # 3 cases x 1 + 3 candidates -> 3 = 6; case 4 has one candidate; the training pair is out.
    assert (summary.created, summary.total, summary.references) == (6, 6, 4)
    rows = _comparisons(db)
    assert [r.position for r in rows] == list(range(6))
    got = {frozenset((a, b)) for a, b, _, _ in rows}
    want = {frozenset((ids[(c, x)], ids[(c, y)])) for c, sources in enumerate(LAYOUT)
            for x, y in combinations(sources, 2)}
    assert got == want
    assert len({r.opaque_id for r in rows}) == 6
    assert all(len(r.opaque_id) == 16 and "PW" not in r.opaque_id for r in rows)
    # The seeded draw puts both systems on the left somewhere.
    source_of = {pid: src for (c, src), pid in ids.items()}
    assert len({source_of[a] for a, *_ in rows}) > 1

    again = pairwise.make_comparisons(db, SYSTEM, "PW", seed=99)
    assert (again.created, again.total) == (0, 6)
    assert _comparisons(db) == rows


def test_make_comparisons_sides_follow_the_seed(any_db):
    build(any_db, "S1", training=False)
    build(any_db, "S2", training=False)
    pairwise.make_comparisons(any_db, SYSTEM, "S1", seed=5)
    pairwise.make_comparisons(any_db, SYSTEM, "S2", seed=5)
    with any_db.read() as s:
        def sides(name):
            return s.scalars(select(Pair.position)
                             .join(Comparison, Comparison.pair_a_id == Pair.id)
                             .join(Study, Study.id == Comparison.study_id)
                             .where(Study.name == name).order_by(Comparison.position)).all()
        assert sides("S1") == sides("S2")


def test_make_and_assign_refuse_bad_requests(world):
    db, _, actors = world
    build(db, "Counts", mode=None)
    with pytest.raises(InvalidInput, match="annotation mode 'counts', not 'pairwise'"):
        pairwise.make_comparisons(db, SYSTEM, "Counts")
    with pytest.raises(PermissionDenied):
        pairwise.make_comparisons(db, actors["r1"], "PW")
    with pytest.raises(NotFound):
        pairwise.make_comparisons(db, SYSTEM, "nope")
    with pytest.raises(InvalidInput, match="no comparisons: make them first"):
        pairwise.assign_judgements(db, SYSTEM, "PW", ["r1"], 1, 0)
    pairwise.make_comparisons(db, SYSTEM, "PW")
    with pytest.raises(InvalidInput, match="needs at least that many raters"):
        pairwise.assign_judgements(db, SYSTEM, "PW", ["r1"], 2, 0)
    with pytest.raises(InvalidInput, match="no account named 'ghost'"):
        pairwise.assign_judgements(db, SYSTEM, "PW", ["r1", "ghost"], 1, 0)
    with db.read() as s:
        assert s.scalar(select(func.count(Judgement.id))) == 0


def test_assign_judgements_balanced_and_idempotent(world):
    db, _, actors = world
    pairwise.make_comparisons(db, SYSTEM, "PW")
    summary = pairwise.assign_judgements(db, SYSTEM, "PW", list(RATERS), 2, 11)
    assert (summary.created, summary.n_comparisons) == (12, 6)
    assert summary.per_rater == {"r1": 4, "r2": 4, "r3": 4}
    with db.read() as s:
        per_comparison = s.execute(select(Judgement.comparison_id,
                                          func.count(func.distinct(Judgement.rater_id)))
                                   .group_by(Judgement.comparison_id)).all()
    assert sorted(n for _, n in per_comparison) == [2] * 6
    again = pairwise.assign_judgements(db, SYSTEM, "PW", list(RATERS), 2, 11)
    assert again.created == 0
    more = pairwise.assign_judgements(db, SYSTEM, "PW", list(RATERS), 3, 11)
    assert more.created == 6 and more.per_rater == {"r1": 6, "r2": 6, "r3": 6}
    queue = pairwise.rater_comparisons(db, actors["r1"], "PW")
    assert [q.index for q in queue] == list(range(1, 7))


def test_rater_view_is_blinded_and_only_their_own(world):
    db, ids, actors = world
    pairwise.make_comparisons(db, SYSTEM, "PW")
    pairwise.assign_judgements(db, SYSTEM, "PW", ["r1", "r2"], 1, 0)
    names = [f.name for f in dataclasses.fields(pairwise.ComparisonView)]
    assert names == ["opaque_id", "study_name", "index", "total", "reference_text",
                     "candidate_a_text", "candidate_b_text", "images", "preference",
                     "rating_a", "rating_b", "version", "completed_at", "prev_opaque_id",
                     "next_opaque_id", "read_only"]
    for cls in (pairwise.ComparisonView, pairwise.ComparisonItem, pairwise.JudgementSaved,
                pairwise.RaterPairwiseStudy):
        for f in dataclasses.fields(cls):
            assert not any(w in f.name for w in ("source", "score", "metric", "pair_id",
                                                 "rater", "position")), (cls, f.name)
    r1, r2 = actors["r1"], actors["r2"]
    mine = pairwise.rater_comparisons(db, r1, "PW")
    theirs = pairwise.rater_comparisons(db, r2, "PW")
    assert len(mine) == 3 and len(theirs) == 3
    view = pairwise.get_comparison(db, r1, mine[0].opaque_id)
    assert (view.index, view.total, view.prev_opaque_id) == (1, 3, None)
    assert view.next_opaque_id == mine[1].opaque_id
    assert view.candidate_a_text != view.candidate_b_text
    assert view.reference_text.startswith("Reference ")
    for text in (view.candidate_a_text, view.candidate_b_text):
        assert text.startswith("Candidate ")
    assert (view.preference, view.rating_a, view.rating_b, view.version) == (None, None, None, 0)
    with pytest.raises(NotFound, match="is not in your assignments"):
        pairwise.get_comparison(db, r1, theirs[0].opaque_id)
    with pytest.raises(NotFound):
        pairwise.save_judgement(db, r1, theirs[0].opaque_id, preference="A")
    with pytest.raises(NotFound, match="no comparisons in study"):
        pairwise.rater_comparisons(db, actors["r3"], "PW")
    assert [s.name for s in pairwise.rater_studies(db, r1)] == ["PW"]


def test_save_fields_alone_stale_refused_complete_requires_all(world):
    db, _, actors = world
    pairwise.make_comparisons(db, SYSTEM, "PW")
    pairwise.assign_judgements(db, SYSTEM, "PW", ["r1"], 1, 0)
    r1 = actors["r1"]
    first, second = (q.opaque_id for q in pairwise.rater_comparisons(db, r1, "PW")[:2])
    saved = pairwise.save_judgement(db, r1, first, preference="B", expected_version=0)
    assert (saved.preference, saved.rating_a, saved.version, saved.changed) == ("B", None, 1,
                                                                                True)
    saved = pairwise.save_judgement(db, r1, first, rating_a=4, expected_version=1)
    assert (saved.preference, saved.rating_a, saved.rating_b, saved.version) == ("B", 4, None, 2)
    # The same value again changes nothing and keeps the version.
    same = pairwise.save_judgement(db, r1, first, rating_a=4, expected_version=2)
    assert (same.changed, same.version) == (False, 2)
    # Another tab still showing version 1: refused, nothing written, stored answer given back.
    with pytest.raises(pairwise.JudgementStale) as stale:
        pairwise.save_judgement(db, r1, first, preference="A", expected_version=1)
    assert (stale.value.stored.preference, stale.value.stored.version) == ("B", 2)
    with pytest.raises(InvalidInput, match="not done yet, give the rating of B"):
        pairwise.complete(db, r1, first, expected_version=2)
    with pytest.raises(InvalidInput, match=r"which is better \(A, tie or B\) and the rating of "
                                           r"A and the rating of B"):
        pairwise.complete(db, r1, second)
    for bad, match in ((dict(preference="C"), "preference: must be one of A, B, tie"),
                       (dict(rating_a=6), "rating_a: must be an integer from 1 to 5"),
                       (dict(rating_b=True), "rating_b: must be an integer from 1 to 5"),
                       ({}, "give a preference, rating_a or rating_b"),
                       (dict(preference="A", expected_version=-1), "expected_version")):
        with pytest.raises(InvalidInput, match=match):
            pairwise.save_judgement(db, r1, first, **bad)
    pairwise.save_judgement(db, r1, first, rating_b=2, expected_version=2)
    done = pairwise.complete(db, r1, first, expected_version=3)
    assert done.completed_at is not None and done.version == 4
    assert done.next_open_opaque_id == second
    view = pairwise.get_comparison(db, r1, first)
    assert (view.preference, view.rating_a, view.rating_b, view.version) == ("B", 4, 2, 4)
    assert pairwise.rater_comparisons(db, r1, "PW")[0].completed
    assert pairwise.rater_studies(db, r1)[0].completed == 1


def test_the_mode_stays_once_a_judgement_is_answered(world):
    """Assigned but unanswered judgements do not fix the mode; one answer does."""
    db, _, actors = world
    pairwise.make_comparisons(db, SYSTEM, "PW")
    pairwise.assign_judgements(db, SYSTEM, "PW", ["r1"], 1, 0)
    study_settings.update_study_settings(db, SYSTEM, study_name="PW", annotation_mode="counts")
    study_settings.update_study_settings(db, SYSTEM, study_name="PW", annotation_mode="pairwise")
    first = pairwise.rater_comparisons(db, actors["r1"], "PW")[0].opaque_id
    pairwise.save_judgement(db, actors["r1"], first, rating_b=3)
    with pytest.raises(InvalidInput, match=r"annotation_mode stays 'pairwise': raters have "
                                           r"already stored 1 answer\(s\)"):
        study_settings.update_study_settings(db, SYSTEM, study_name="PW",
                                             annotation_mode="counts", repeat_share=0.1)
    now = study_settings.study_settings(db, SYSTEM, "PW")
    # Nothing of the refused call was written, the other key included.
    assert now.annotation_mode == "pairwise" and now.values["repeat_share"] == 0.0
    assert len(now.history) == 2


def test_mode_check_and_closed_study(world):
    db, _, actors = world
    pairwise.make_comparisons(db, SYSTEM, "PW")
    pairwise.assign_judgements(db, SYSTEM, "PW", ["r1"], 1, 0)
    r1 = actors["r1"]
    oid = pairwise.rater_comparisons(db, r1, "PW")[0].opaque_id
    with db.begin() as s:
        s.scalar(select(Study).where(Study.name == "PW")).status = "closed"
    assert pairwise.get_comparison(db, r1, oid).read_only
    with pytest.raises(PermissionDenied, match="closed"):
        pairwise.save_judgement(db, r1, oid, preference="A")
    with db.begin() as s:
        study = s.scalar(select(Study).where(Study.name == "PW"))
        study.status, study.settings = "open", {"annotation_mode": "counts"}
    with pytest.raises(InvalidInput, match="not 'pairwise'"):
        pairwise.get_comparison(db, r1, oid)
    assert pairwise.rater_studies(db, r1) == []


def _judge(db, actors, answers):
    """answers: {rater: {comparison position: (preference, rating_a, rating_b)}}, completed."""
    with db.read() as s:
        oid_at = dict(s.execute(select(Comparison.position, Comparison.opaque_id)).all())
    for rater, by_pos in answers.items():
        for pos, (p, a, b) in by_pos.items():
            pairwise.save_judgement(db, actors[rater], oid_at[pos], preference=p, rating_a=a,
                                    rating_b=b)
            pairwise.complete(db, actors[rater], oid_at[pos])


def _score(db, key, value_of_pair):
    with db.begin() as s:
        for pid, value in value_of_pair.items():
            h = s.scalar(select(Pair.input_hash).where(Pair.id == pid))
            s.add(MetricScore(input_hash=h, family=key, key=key, signature_hash=f"sig-{key}",
                              signature=f"{key}|v1", value=value))


@pytest.fixture
def judged(world):
    return _judged(*world)


def _judged(db, ids, actors):
    """Three raters on all six comparisons: r1 and r2 answer all, r3 completes one and leaves
    one open; bleu4 and radcliq_v1 on every pair."""
    pairwise.make_comparisons(db, SYSTEM, "PW", seed=1)
    pairwise.assign_judgements(db, SYSTEM, "PW", list(RATERS), 3, 0)
    answers = {
        "r1": {0: ("A", 5, 2), 1: ("B", 2, 4), 2: ("tie", 3, 3), 3: ("A", 4, 3),
               4: ("B", 1, 5), 5: ("A", 4, 4)},
        "r2": {0: ("A", 4, 3), 1: ("A", 4, 3), 2: ("B", 2, 3), 3: ("B", 3, 4),
               4: ("B", 2, 4), 5: ("tie", 3, 3)},
        "r3": {0: ("B", 2, 5)},
    }
    _judge(db, actors, answers)
    with db.read() as s:
        oid = s.scalar(select(Comparison.opaque_id).where(Comparison.position == 1))
    # r3's answer to comparison 1 is never completed: it must not count.
    pairwise.save_judgement(db, actors["r3"], oid, preference="A", rating_a=5, rating_b=1)
    bleu = {pid: 0.1 * (i + 1) for i, pid in enumerate(sorted(ids.values()))}
    radcliq = {pid: 1.0 - v for pid, v in bleu.items()}
    _score(db, "bleu4", bleu)
    _score(db, "radcliq_v1", radcliq)
    with db.read() as s:
        sides = s.execute(select(Comparison.pair_a_id, Comparison.pair_b_id)
                          .order_by(Comparison.position)).all()
    return db, actors, answers, sides, bleu


def _expected(answers, sides, bleu, source):
    """Hand computation: raters' preference per comparison, agreement of bleu4, tau inputs."""
    scores, ties, scored = [], 0, []
    ratings_of_pair = {}
    for pos, (pa, pb) in enumerate(sides):
        given = [by[pos] for by in answers.values() if pos in by]
        for _, a, b in given:
            ratings_of_pair.setdefault(pa, []).append(a)
            ratings_of_pair.setdefault(pb, []).append(b)
        if source == "mean_rating":
            ma = sum(a for _, a, _ in given) / len(given)
            mb = sum(b for _, _, b in given) / len(given)
            raters = "A" if ma > mb else "B" if mb > ma else "tie"
        else:
            tally = {k: sum(1 for p, _, _ in given if p == k) for k in ("A", "B", "tie")}
            top = max(tally.values())
            winners = [k for k, n in tally.items() if n == top]
            raters = winners[0] if len(winners) == 1 else "tie"
        if raters == "tie":
            ties += 1
            continue
        metric = "A" if bleu[pa] > bleu[pb] else "B" if bleu[pb] > bleu[pa] else "tie"
        scores.append(0.5 if metric == "tie" else float(metric == raters))
        scored.append(pa)
    return sum(scores) / len(scores), len(scores), ties, ratings_of_pair, scored


@pytest.mark.parametrize("source", ["mean_rating", "votes"])
def test_preference_stats_by_hand(judged, source):
    from scipy import stats

    db, actors, answers, sides, bleu = judged
    value, n, ties, ratings_of_pair, scored = _expected(answers, sides, bleu, source)
    got = pairwise.study_preference_stats(db, SYSTEM, "PW", source=source, resamples=200,
                                          seed=4)
    assert (got.preference_source, got.n_comparisons) == (source, 6)
    by_key = {m.key: m for m in got.metrics}
    assert set(by_key) == {"bleu4", "radcliq_v1"}
    b = by_key["bleu4"]
    assert b.higher_is_better and b.signature == "bleu4|v1"
    assert b.agreement.value == pytest.approx(value)
    assert (b.agreement.n_comparisons, b.agreement.n_ties_excluded) == (n, ties)
    assert b.agreement.ci_low <= b.agreement.value <= b.agreement.ci_high
    # The bootstrap draws references: case 3's three comparisons are one unit.
    with db.read() as s:
        cases = {s.scalar(select(Pair.case_id).where(Pair.id == pa)) for pa in scored}
    assert b.agreement.n_clusters == len(cases) <= n
    assert b.as_dict()["n_references"] == len(cases)
    assert "references with replacement" in got.as_dict()["resampling"]
    # radcliq_v1 = 1 - bleu4 and lower is better: the very same preferences.
    assert by_key["radcliq_v1"].agreement.value == pytest.approx(value)
    pids = sorted(ratings_of_pair)
    x = [bleu[p] for p in pids]
    y = [sum(ratings_of_pair[p]) / len(ratings_of_pair[p]) for p in pids]
    tau = stats.kendalltau(x, y, variant="b").statistic
    assert b.kendall_tau_b_rating == pytest.approx(tau)
    assert by_key["radcliq_v1"].kendall_tau_b_rating == pytest.approx(tau)
    assert b.n == got.n_candidates == len(pids) == 9
    with pytest.raises(PermissionDenied):
        pairwise.study_preference_stats(db, actors["r1"], "PW")
    with pytest.raises(InvalidInput, match="source: must be one of"):
        pairwise.study_preference_stats(db, SYSTEM, "PW", source="median")
    with pytest.raises(InvalidInput, match="no scores for meteor"):
        pairwise.study_preference_stats(db, SYSTEM, "PW", metrics=["meteor"])


def test_the_interval_draws_references_not_comparisons(world):
    """Case 3 has three candidates, so three comparisons: with every comparison decided,
    six comparisons are four resampling units, and the interval is the plain loop over
    the drawn cases (np.unique order of the case ids)."""
    db, ids, actors = world
    pairwise.make_comparisons(db, SYSTEM, "PW", seed=1)
    pairwise.assign_judgements(db, SYSTEM, "PW", ["r1"], 1, 0)
    _judge(db, actors, {"r1": {pos: ("A", 4, 2) for pos in range(6)}})
    bleu = {pid: 0.1 * (i + 1) for i, pid in enumerate(sorted(ids.values()))}
    _score(db, "bleu4", bleu)
    got = pairwise.study_preference_stats(db, SYSTEM, "PW", source="votes", resamples=300,
                                          seed=3)
    (b,) = got.metrics
    assert (b.agreement.n_comparisons, b.agreement.n_clusters) == (6, 4)
    with db.read() as s:
        sides = s.execute(select(Comparison.pair_a_id, Comparison.pair_b_id)
                          .order_by(Comparison.position)).all()
        case_of = dict(s.execute(select(Pair.id, Pair.case_id)).all())
    scores = [float(bleu[a] > bleu[b]) + 0.5 * (bleu[a] == bleu[b]) for a, b in sides]
    units = sorted({case_of[a] for a, _ in sides})
    by_unit = {u: [x for (a, _), x in zip(sides, scores, strict=True) if case_of[a] == u]
               for u in units}
    assert sorted(len(v) for v in by_unit.values()) == [1, 1, 1, 3]
    idx = np.random.default_rng(3).integers(0, 4, size=(300, 4))
    means = [np.mean([x for u in row for x in by_unit[units[u]]]) for row in idx]
    lo, hi = np.quantile(means, [0.025, 0.975])
    assert (b.agreement.ci_low, b.agreement.ci_high) == (pytest.approx(lo, abs=1e-12),
                                                         pytest.approx(hi, abs=1e-12))


def test_results_and_export_rows_for_the_lead_only(judged):
    db, actors, answers, sides, _ = judged
    res = pairwise.results(db, SYSTEM, "PW")
    assert [r.position for r in res] == list(range(6))
    first = res[0]
    assert {first.source_a, first.source_b} <= {"sys-x", "sys-y", "sys-z"}
    assert [(j.rater, j.preference, j.rating_a, j.rating_b) for j in first.judgements] == [
        ("r1", "A", 5, 2), ("r2", "A", 4, 3), ("r3", "B", 2, 5)]
    rows = pairwise.export_rows(db, SYSTEM, "PW")
    assert len(rows) == 18  # 6 comparisons x 3 raters
    assert set(rows[0]) == {"comparison_position", "comparison_id", "case_id",
                            "pair_a_position", "pair_b_position", "source_a", "source_b",
                            "rater", "preference", "rating_a", "rating_b", "completed_at",
                            "active_seconds"}
    open_row = next(r for r in rows if r["comparison_position"] == 1 and r["rater"] == "r3")
    assert open_row["completed_at"] == "" and open_row["preference"] == "A"
    for fn in (pairwise.results, pairwise.export_rows):
        with pytest.raises(PermissionDenied):
            fn(db, actors["r1"], "PW")


def test_pairwise_cli_make_assign_export(sqlite_world, tmp_path, capsys):
    db, _, _ = sqlite_world
    url = db.url
    assert main(["pairwise", "make", "--study", "PW", "--seed", "2", "--database-url", url]) == 0
    assert "6 new comparisons" in capsys.readouterr().out
    assert main(["pairwise", "assign", "--study", "PW", "--raters", "r1,r2",
                 "--per-comparison", "2", "--database-url", url]) == 0
    assert "12 new judgements" in capsys.readouterr().out
    out = tmp_path / "pw.csv"
    assert main(["pairwise", "export", "--study", "PW", "--output", str(out),
                 "--database-url", url]) == 0
    lines = out.read_text().splitlines()
    assert lines[0].startswith("comparison_position,comparison_id,case_id")
    assert len(lines) == 13
    assert main(["pairwise", "export", "--study", "PW", "--output", str(tmp_path / "x.txt"),
                 "--database-url", url]) != 0
    assert "must end in .csv or .json" in capsys.readouterr().err


def test_correlate_writes_the_pairwise_block(sqlite_world, tmp_path, capsys):
    db, _, answers, sides, bleu = _judged(*sqlite_world)
    out = tmp_path / "corr.json"
    assert main(["correlate", "--study", "PW", "--output", str(out), "--database-url", db.url,
                 "--bootstrap", "100", "--seed", "1"]) == 0
    # The summary line names what was computed, not "0 pairs, target None".
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("PW: no count ratings; pairwise: 6 comparisons, ")
    assert "(mean_rating)" in line and "target None" not in line
    res = json.loads(out.read_text())
    block = res["preference"]
    assert block["preference_source"] == "mean_rating" and block["n_comparisons"] == 6
    value, n, ties, _, _ = _expected(answers, sides, bleu, "mean_rating")
    entry = block["metrics"]["bleu4"]
    assert entry["pairwise_agreement"] == pytest.approx(value)
    assert (entry["n_comparisons"], entry["n_ties_excluded"], entry["n"]) == (n, ties, 9)
    assert entry["ci_low"] <= value <= entry["ci_high"]
    assert res["metrics"]["bleu4"]["pairwise_agreement"] == pytest.approx(value)
    assert res["metrics"]["bleu4"]["pairwise_agreement_ci95"] == [entry["ci_low"],
                                                                  entry["ci_high"]]
    assert res["metrics"]["radcliq_v1"]["kendall_tau_b_rating"] == pytest.approx(
        entry["kendall_tau_b_rating"])
    # No count ratings in this study: the count analysis says why it did not run.
    assert res["counts_analysis"].startswith("not run:")
    assert main(["correlate", "--study", "PW", "--output", str(out), "--database-url", db.url,
                 "--bootstrap", "0", "--preference-source", "votes"]) == 0
    votes = json.loads(out.read_text())["preference"]
    assert votes["preference_source"] == "votes"
    assert votes["metrics"]["bleu4"]["pairwise_agreement"] == pytest.approx(
        _expected(answers, sides, bleu, "votes")[0])


def test_a_busy_database_gives_up_cleanly_and_a_later_click_is_stored(sqlite_world,
                                                                     monkeypatch):
    """Another process holds the SQLite write lock: the click retries, then fails with the
    busy message and writes nothing; once free, the same click is stored."""
    import sqlite3


    db, _, actors = sqlite_world
    pairwise.make_comparisons(db, SYSTEM, "PW")
    pairwise.assign_judgements(db, SYSTEM, "PW", ["r1"], 1, 0)
    r1 = actors["r1"]
    oid = pairwise.rater_comparisons(db, r1, "PW")[0].opaque_id
    monkeypatch.setattr(transactions, "SAVE_RETRY_SECONDS", 0.3)
    raw = sqlite3.connect(db.engine.url.database, isolation_level=None)
    raw.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(transactions.SaveFailed, match="database is busy; nothing was changed"):
            pairwise.save_judgement(db, r1, oid, preference="A", expected_version=0)
    finally:
        raw.rollback()
        raw.close()
    assert pairwise.get_comparison(db, r1, oid).version == 0
    saved = pairwise.save_judgement(db, r1, oid, preference="A", expected_version=0)
    assert (saved.preference, saved.version) == ("A", 1)


def test_a_judge_reaches_the_film_of_their_comparisons_only(world):
    """The images service's access check knows judgements: a rater whose only work is a
    comparison of the case gets past it (to the missing-file error of this test image); a
    rater holding no comparison of it is refused."""
    from radconcord.backend.services.annotation import images
    from radconcord.db.models import Image

    db, ids, actors = world
    pairwise.make_comparisons(db, SYSTEM, "PW")
    pairwise.assign_judgements(db, SYSTEM, "PW", ["r1"], 1, 0)
    with db.begin() as s:
        case_id = s.scalar(select(Pair.case_id).where(Pair.id == ids[(0, LAYOUT[0][0])]))
        image = Image(case_id=case_id, path="nowhere/x.png", format="png", sha256="0" * 64)
        s.add(image)
        s.flush()
        image_id = image.id
    with pytest.raises(NotFound, match="missing"):
        images._image_file(db, actors["r1"], image_id)
    with pytest.raises(PermissionDenied, match="no pair assigned to you"):
        images._image_file(db, actors["r3"], image_id)
