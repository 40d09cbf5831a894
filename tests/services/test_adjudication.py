"""Adjudication service: adjudicators, the queue rule on stored ratings, anonymised view,
consensus with versions, export rows, analysis with adjudicated counts, and the CLI.

Expected values are computed by hand from the counts inserted here (see ``world``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import numpy as np
import pytest
from scipy import stats
from sqlalchemy import func, select

from radconcord.backend.analysis.data import AnalysisInputError
from radconcord.backend.cli import main
from radconcord.backend.errors import InvalidInput, NotFound, PermissionDenied
from radconcord.backend.services.accounts import auth
from radconcord.backend.services.annotation import assignment_writes, rating
from radconcord.backend.services.evaluation.correlation import (
    study_agreement,
    study_correlation,
    study_failure_modes,
)
from radconcord.backend.services.evaluation.study_data import load_ratings
from radconcord.backend.services.quality import adjudication
from radconcord.backend.services.study_admin.study_settings import update_study_settings
from radconcord.backend.types import Actor
from radconcord.db.models import (
    Adjudication,
    Assignment,
    MetricScore,
    Pair,
    Rating,
    StudyRole,
    User,
)

SYSTEM = Actor.system()
T0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
CELLS = assignment_writes.CELLS

# Counts per pair (study order) and rater; None: assigned, not completed. Hand computation:
#   pair 1: significant totals 1, 0, 0 -> range 1; category 1: 1 of 3 -> queued (cat 1).
#   pair 2: significant totals 3, 1, 0 -> range 0-3 >= 2 -> queued (range).
#   pair 3: everyone 1 not-significant error -> not queued.
#   pair 4: r3 not done; r1, r2 totals 1, 2 and both a cat-2 error -> not queued.
#   pair 5: only r1 done -> never queued.
COUNTS = {
    1: {"r1": {(1, True): 1}, "r2": {}, "r3": {}},
    2: {"r1": {(3, True): 3}, "r2": {(3, True): 1}, "r3": {(4, False): 2}},
    3: {"r1": {(2, False): 1}, "r2": {(2, False): 1}, "r3": {(2, False): 1}},
    4: {"r1": {(2, True): 1}, "r2": {(2, True): 2}, "r3": None},
    5: {"r1": {(1, True): 5}, "r2": None, "r3": None},
}
# Raw per-pair mean of total errors, by hand: p1 1/3, p2 (3+1+2)/3, p3 1, p4 1.5, p5 5.
RAW_TOTAL = [1 / 3, 2.0, 1.0, 1.5, 5.0]
# Total 6 (above pair 5, so the adjudicated ranking differs from the raw one), significant 2.
CONSENSUS_P2 = {**dict.fromkeys(CELLS, 0), (3, True): 2, (4, False): 4}
BLEU = [0.9, 0.5, 0.6, 0.55, 0.1]


def _full(cells):
    return {**dict.fromkeys(CELLS, 0), **cells}


@pytest.fixture
def world(any_db, make_study, fast_password_hashing):
    """Study "Adj" (5 pairs, raters r1-r3), judge adjudicates it, outsider does not."""
    db = any_db
    opaque = make_study(db, "Adj", 5)
    make_study(db, "Other", 2)
    actors = {}
    for name, role in (("lead", "admin"), ("r1", "rater"), ("r2", "rater"), ("r3", "rater"),
                       ("judge", "rater"), ("outsider", "rater")):
        auth.create_user(db, SYSTEM, username=name, password=f"{name}-password-1", role=role)
        actors[name] = auth.authenticate(db, username=name, password=f"{name}-password-1")
    with db.begin() as s:
        pairs = {p.opaque_id: p for p in s.scalars(select(Pair))}
        for number, by_rater in COUNTS.items():
            pair = pairs[opaque[number - 1]]
            for username, cells in by_rater.items():
                uid = actors[username].user_id
                s.add(Assignment(study_id=pair.study_id, rater_id=uid, pair_id=pair.id,
                                 order_index=number, completed_at=None if cells is None else T0))
                for (c, sig), n in (cells or {}).items():
                    s.add(Rating(rater_id=uid, pair_id=pair.id, category=c, significant=sig,
                                 count=n))
            s.add(MetricScore(input_hash=pair.input_hash, family="bleu", key="bleu4",
                              signature_hash="b" * 32, signature="bleu|test",
                              value=BLEU[number - 1]))
    adjudication.set_adjudicator(db, actors["lead"], study_name="Adj", username="judge")
    return db, actors, opaque


def test_adjudicators_are_set_listed_and_removed(world):
    db, a, _ = world
    assert adjudication.adjudicators(db, a["lead"], study_name="Adj") == ("judge",)
    assert adjudication.adjudicated_studies(db, a["judge"]) == ["Adj"]
    assert adjudication.adjudicated_studies(db, a["lead"]) == ["Adj", "Other"]
    assert adjudication.adjudicated_studies(db, a["outsider"]) == []
    # Adding twice keeps one row; an admin can be listed too.
    assert adjudication.set_adjudicator(db, a["lead"], study_name="Adj", username="judge") == (
        "judge",)
    with pytest.raises(PermissionDenied):
        adjudication.set_adjudicator(db, a["judge"], study_name="Adj", username="outsider")
    with pytest.raises(NotFound, match="nobody"):
        adjudication.set_adjudicator(db, a["lead"], study_name="Adj", username="nobody")
    with pytest.raises(NotFound, match="Nope"):
        adjudication.set_adjudicator(db, a["lead"], study_name="Nope", username="judge")
    with db.begin() as s:
        s.scalar(select(User).where(User.username == "outsider")).active = False
    with pytest.raises(InvalidInput, match="deactivated"):
        adjudication.set_adjudicator(db, a["lead"], study_name="Adj", username="outsider")
    assert adjudication.set_adjudicator(db, a["lead"], study_name="Adj", username="judge",
                                        on=False) == ()
    with pytest.raises(PermissionDenied):
        adjudication.queue(db, a["judge"], study_name="Adj")
    with db.read() as s:
        assert s.scalar(select(func.count()).select_from(StudyRole)) == 0


def test_queue_follows_the_rule_by_hand(world):
    db, a, opaque = world
    entries = adjudication.queue(db, a["judge"], study_name="Adj")
    assert [(e.pair_number, e.opaque_id, e.reason, e.adjudicated) for e in entries] == [
        (1, opaque[0], "category 1 significant: 1 of 3 raters", False),
        (2, opaque[1], "significant errors range 0-3 (>= 2)", False),
    ]
    assert adjudication.queue(db, a["lead"], study_name="Adj") == entries
    update_study_settings(db, SYSTEM, study_name="Adj", adjudicate_category_12=False)
    assert [e.pair_number for e in adjudication.queue(db, a["judge"], study_name="Adj")] == [2]
    # Range 1: pair 1 (0-1), pair 2 (0-3), pair 4 (1-2; r3's unfinished pair is left out).
    update_study_settings(db, SYSTEM, study_name="Adj", adjudicate_significant_range=1)
    assert [(e.pair_number, e.reason) for e in adjudication.queue(
        db, a["judge"], study_name="Adj")] == [
        (1, "significant errors range 0-1 (>= 1)"), (2, "significant errors range 0-3 (>= 1)"),
        (4, "significant errors range 1-2 (>= 1)")]
    update_study_settings(db, SYSTEM, study_name="Adj", adjudicate_significant_range=0)
    assert adjudication.queue(db, a["judge"], study_name="Adj") == []


def _walk(value):
    if dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            yield f.name
            yield from _walk(getattr(value, f.name))
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(k)
            yield from _walk(v)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            yield from _walk(v)
    else:
        yield value


def test_view_is_anonymised_and_stable(world):
    db, a, opaque = world
    view = adjudication.get_item(db, a["judge"], study_name="Adj", pair_number=2)
    assert view.opaque_id == opaque[1] and view.pair_number == 2
    assert view.reference_text == "Reference 1: no focal consolidation."
    assert view.candidate_text == "Candidate 1: small left effusion."
    assert [r.label for r in view.raters] == ["Rater A", "Rater B", "Rater C"]
    assert sorted(tuple(sorted(r.counts.items())) for r in view.raters) == sorted(
        tuple(sorted(_full(c).items())) for c in COUNTS[2].values())
    assert view.disagreeing == {(3, True), (4, False)}
    assert view.reason == "significant errors range 0-3 (>= 2)"
    assert view.consensus is None and view.version == 0
    assert view.prev_opaque_id == opaque[0] and view.next_opaque_id is None
    # The same letters for the same raters on every call, by number or opaque id.
    again = adjudication.get_item(db, a["lead"], study_name="Adj", opaque_id=opaque[1])
    assert again.raters == view.raters
    # No names, ids, sources or scores anywhere in the view.
    values = {str(v) for v in _walk(view)}
    for hidden in ("r1", "r2", "r3", "gen-a", "gen-b", "0.5", "source", "rater_id",
                   "username", "user_id", "score"):
        assert hidden not in values
    fields = {f.name for f in dataclasses.fields(adjudication.AdjudicationView)}
    assert not fields & {"source", "sources", "rater_ids", "usernames", "scores"}
    # A pair outside the queue can be opened; it has no reason and no queue neighbours.
    view3 = adjudication.get_item(db, a["judge"], study_name="Adj", pair_number=3)
    assert view3.reason is None and view3.disagreeing == frozenset()
    assert view3.prev_opaque_id is None and view3.next_opaque_id is None
    with pytest.raises(NotFound, match="pair number 6"):
        adjudication.get_item(db, a["judge"], study_name="Adj", pair_number=6)
    with pytest.raises(InvalidInput, match="exactly one"):
        adjudication.get_item(db, a["judge"], study_name="Adj")


def test_access_plain_raters_are_refused_and_adjudicators_cannot_rate(world):
    db, a, opaque = world
    for fn, kwargs in ((adjudication.queue, {}),
                       (adjudication.get_item, {"pair_number": 1}),
                       (adjudication.record, {"opaque_id": opaque[0],
                                              "counts": _full({}), "note": "x"})):
        for who in ("outsider", "r1"):
            with pytest.raises(PermissionDenied, match="not an adjudicator"):
                fn(db, a[who], study_name="Adj", **kwargs)
    # The judge adjudicates "Adj" only; an unknown study reads the same to a rater.
    with pytest.raises(PermissionDenied):
        adjudication.queue(db, a["judge"], study_name="Other")
    with pytest.raises(PermissionDenied):
        adjudication.queue(db, a["judge"], study_name="No such study")
    with pytest.raises(NotFound):
        adjudication.queue(db, a["lead"], study_name="No such study")
    with pytest.raises(PermissionDenied):
        adjudication.export_rows(db, a["judge"], study_name="Adj")
    # Adjudicating is no way to rate: the rating service refuses the judge, and recording a
    # consensus leaves the raters' ratings as they were.
    with pytest.raises(NotFound):
        rating.set_count(db, a["judge"], opaque_id=opaque[0], category=1, significant=True,
                         count=1)
    with db.read() as s:
        before = s.execute(select(Rating.rater_id, Rating.pair_id, Rating.category,
                                  Rating.significant, Rating.count).order_by(Rating.id)).all()
    adjudication.record(db, a["judge"], study_name="Adj", opaque_id=opaque[0],
                        counts=_full({}), note="", expected_version=0)
    with db.read() as s:
        after = s.execute(select(Rating.rater_id, Rating.pair_id, Rating.category,
                                 Rating.significant, Rating.count).order_by(Rating.id)).all()
    assert after == before


def test_record_versions_notes_and_stale_writes(world):
    db, a, opaque = world
    # Different from every rater's counts, and no note: refused, nothing stored.
    with pytest.raises(InvalidInput, match="note: required"):
        adjudication.record(db, a["judge"], study_name="Adj", opaque_id=opaque[1],
                            counts=CONSENSUS_P2, note="  ", expected_version=0)
    with pytest.raises(InvalidInput, match="missing 6:significant, 6:not significant"):
        adjudication.record(db, a["judge"], study_name="Adj", opaque_id=opaque[1],
                            counts={k: v for k, v in CONSENSUS_P2.items() if k[0] != 6},
                            note="x", expected_version=0)
    with pytest.raises(InvalidInput, match=r"counts\[2, True\]: count must be an integer 0-99"):
        adjudication.record(db, a["judge"], study_name="Adj", opaque_id=opaque[1],
                            counts={**CONSENSUS_P2, (2, True): -1}, note="x",
                            expected_version=0)
    with pytest.raises(NotFound):
        adjudication.record(db, a["judge"], study_name="Adj", opaque_id="nope",
                            counts=CONSENSUS_P2, note="x", expected_version=0)
    with db.read() as s:
        assert s.scalar(select(func.count()).select_from(Adjudication)) == 0

    saved = adjudication.record(db, a["judge"], study_name="Adj", opaque_id=opaque[1],
                                counts=CONSENSUS_P2, note="two significant in cat 3",
                                expected_version=0)
    assert saved.version == 1 and saved.reason == "significant errors range 0-3 (>= 2)"
    view = adjudication.get_item(db, a["judge"], study_name="Adj", pair_number=2)
    assert view.consensus.counts == CONSENSUS_P2 and view.version == 1
    assert view.consensus.note == "two significant in cat 3"
    assert view.consensus.adjudicator == "judge"
    # A second window still at version 0: refused with what is stored; nothing changes.
    with pytest.raises(adjudication.StaleAdjudication) as info:
        adjudication.record(db, a["lead"], study_name="Adj", opaque_id=opaque[1],
                            counts=_full({}), note="other window", expected_version=0)
    assert info.value.version == 1 and info.value.counts == CONSENSUS_P2
    assert info.value.note == "two significant in cat 3"
    # Picking one rater's counts needs no note; the admin may adjudicate too.
    saved = adjudication.record(db, a["lead"], study_name="Adj", opaque_id=opaque[1],
                                counts=_full(COUNTS[2]["r2"]), note="", expected_version=1)
    assert saved.version == 2
    view = adjudication.get_item(db, a["judge"], study_name="Adj", pair_number=2)
    assert view.consensus.counts == _full(COUNTS[2]["r2"])
    assert view.consensus.adjudicator == "lead"
    entries = adjudication.queue(db, a["judge"], study_name="Adj")
    assert [(e.pair_number, e.adjudicated) for e in entries] == [(1, False), (2, True)]
    # A done pair stays listed with its stored reason when the rule no longer picks it.
    update_study_settings(db, SYSTEM, study_name="Adj", adjudicate_significant_range=0,
                          adjudicate_category_12=False)
    assert [(e.pair_number, e.reason, e.adjudicated) for e in adjudication.queue(
        db, a["judge"], study_name="Adj")] == [(2, "significant errors range 0-3 (>= 2)", True)]
    with db.read() as s:
        assert s.scalar(select(func.count()).select_from(Adjudication)) == 1


def test_export_rows(world):
    db, a, opaque = world
    adjudication.record(db, a["judge"], study_name="Adj", opaque_id=opaque[1],
                        counts=CONSENSUS_P2, note="agreed", expected_version=0)
    rows = adjudication.export_rows(db, a["lead"], study_name="Adj")
    assert len(rows) == 12
    assert list(rows[0]) == ["pair_number", "pair_id", "adjudicator", "error_category",
                             "clinically_significant", "num_errors", "note", "reason",
                             "updated_at"]
    assert [(r["error_category"], r["clinically_significant"], r["num_errors"])
            for r in rows] == [(c, s, CONSENSUS_P2[(c, s)]) for c, s in CELLS]
    assert {(r["pair_number"], r["pair_id"], r["adjudicator"], r["note"], r["reason"])
            for r in rows} == {(2, opaque[1], "judge", "agreed",
                                "significant errors range 0-3 (>= 2)")}
    assert dt.datetime.fromisoformat(rows[0]["updated_at"]).tzinfo is not None


def test_load_ratings_adjudicated_replaces_the_mean_only(world):
    db, a, opaque = world
    adjudication.record(db, a["judge"], study_name="Adj", opaque_id=opaque[1],
                        counts=CONSENSUS_P2, note="agreed", expected_version=0)
    raw = load_ratings(db, "Adj")
    adj = load_ratings(db, "Adj", counts="adjudicated")
    np.testing.assert_allclose(raw.mean_errors("total"), RAW_TOTAL)
    np.testing.assert_allclose(adj.mean_errors("total"), [1 / 3, 6.0, 1.0, 1.5, 5.0])
    # Significant: raw p2 (3+1+0)/3; the consensus has 2.
    np.testing.assert_allclose(adj.mean_errors("significant"), [1 / 3, 2.0, 0.0, 1.5, 5.0])
    # Per category: category 4 of pair 2 is 2/3 raw, 4 in the consensus.
    assert raw.mean_errors("total", 4)[1] == pytest.approx(2 / 3)
    assert adj.mean_errors("total", 4)[1] == 4.0
    # The raters' own counts are untouched (agreement statistics stay raw).
    np.testing.assert_array_equal(adj.rater_errors("total"), raw.rater_errors("total"))
    assert (raw.counts_mode, raw.n_adjudicated) == ("raw", 0)
    assert (adj.counts_mode, adj.n_adjudicated) == ("adjudicated", 1)
    with pytest.raises(AnalysisInputError, match="counts must be one of raw, adjudicated"):
        load_ratings(db, "Adj", counts="consensus")


def test_analysis_services_say_which_counts(world):
    db, a, opaque = world
    adjudication.record(db, a["judge"], study_name="Adj", opaque_id=opaque[1],
                        counts=CONSENSUS_P2, note="agreed", expected_version=0)
    # gen-b pairs are numbers 2 and 4: raw (2.0 + 1.5) / 2, adjudicated (6 + 1.5) / 2.
    raw = study_failure_modes(db, a["lead"], study_name="Adj")
    adj = study_failure_modes(db, a["lead"], study_name="Adj", counts="adjudicated")
    assert dict(raw.means["gen-b"])["total"] == pytest.approx(1.75)
    assert dict(adj.means["gen-b"])["total"] == pytest.approx(3.75)
    assert (raw.counts, raw.n_adjudicated, adj.counts, adj.n_adjudicated) == (
        "raw", 0, "adjudicated", 1)
    agreement = study_agreement(db, a["lead"], study_name="Adj", counts="adjudicated")
    assert (agreement.counts, agreement.n_adjudicated) == ("raw", 1)
    with pytest.raises(InvalidInput, match="counts must be one of"):
        study_failure_modes(db, a["lead"], study_name="Adj", counts="mean")


def test_correlation_with_adjudicated_counts(world, tmp_path):
    """Kendall tau-b of bleu4 against -mean errors, recomputed with scipy from the hand means."""
    db, a, opaque = world
    adjudication.record(db, a["judge"], study_name="Adj", opaque_id=opaque[1],
                        counts=CONSENSUS_P2, note="agreed", expected_version=0)
    adjudicated_total = [1 / 3, 6.0, 1.0, 1.5, 5.0]
    raw = study_correlation(db, a["lead"], study_name="Adj", resamples=0)
    adj = study_correlation(db, a["lead"], study_name="Adj", resamples=0, counts="adjudicated")
    expect_raw = stats.kendalltau(BLEU, [-v for v in RAW_TOTAL]).statistic
    expect_adj = stats.kendalltau(BLEU, [-v for v in adjudicated_total]).statistic
    assert expect_raw != pytest.approx(expect_adj)
    assert raw.metrics[0].kendall_tau_b == pytest.approx(expect_raw)
    assert adj.metrics[0].kendall_tau_b == pytest.approx(expect_adj)
    assert (raw.counts, raw.n_adjudicated) == ("raw", 0)
    assert (adj.counts, adj.n_adjudicated) == ("adjudicated", 1)
    # Agreement inside the report stays on the raters' own counts.
    assert adj.report["agreement"] == raw.report["agreement"]

    out = tmp_path / "adj.json"
    assert main(["correlate", "--study", "Adj", "--bootstrap", "0", "--counts", "adjudicated",
                 "--database-url", db.url, "--output", str(out)]) == 0
    result = json.loads(out.read_text())
    assert (result["counts"], result["n_adjudicated"]) == ("adjudicated", 1)
    assert result["metrics"]["bleu4"]["kendall_tau_b"] == pytest.approx(expect_adj)


def test_cli_adjudicators(world, monkeypatch, capsys):
    db, _, _ = world
    monkeypatch.setenv("DATABASE_URL", db.url)
    assert main(["adjudicators", "--study", "Adj", "--add", "outsider"]) == 0
    assert "adjudicators: judge, outsider" in capsys.readouterr().out
    assert main(["adjudicators", "--study", "Adj", "--remove", "judge"]) == 0
    assert "adjudicators: outsider" in capsys.readouterr().out
    assert main(["adjudicators", "--study", "Adj", "--list"]) == 0
    assert "adjudicators: outsider" in capsys.readouterr().out
    assert main(["adjudicators", "--study", "Adj", "--add", "ghost"]) != 0
    assert "no account named 'ghost'" in capsys.readouterr().err


def test_an_adjudicator_who_still_rates_the_study_sees_no_other_raters_counts(world):
    """Blinding: an adjudicator who is also a rater of the study sees nothing of the others'
    counts (queue reasons, counts, consensus) while any of their own pairs there is open,
    hidden repeats included; once they are done, the queue opens. Nothing is written."""
    db, a, opaque = world
    adjudication.set_adjudicator(db, a["lead"], study_name="Adj", username="r3")
    with db.begin() as s:
        pairs = {p.opaque_id: p for p in s.scalars(select(Pair))}
        p2 = pairs[opaque[1]]
        # r3 has done pair 2; a hidden repeat of it is still to do (pairs 4, 5 are open too).
        repeat = Pair(study_id=p2.study_id, case_id=p2.case_id, reference_id=p2.reference_id,
                      candidate_id=p2.candidate_id, input_hash=p2.input_hash,
                      source=p2.source, position=99, opaque_id="repeat-of-2",
                      kind="repeat", repeat_of_id=p2.id)
        s.add(repeat)
        s.flush()
        s.add(Assignment(study_id=p2.study_id, rater_id=a["r3"].user_id, pair_id=repeat.id,
                         order_index=99, completed_at=None))
    calls = (
        lambda: adjudication.queue(db, a["r3"], study_name="Adj"),
        lambda: adjudication.get_item(db, a["r3"], study_name="Adj", pair_number=2),
        lambda: adjudication.record(db, a["r3"], study_name="Adj", opaque_id=opaque[1],
                                    counts=CONSENSUS_P2, note="r3's view",
                                    expected_version=0),
    )
    for call in calls:
        with pytest.raises(PermissionDenied, match="3 pairs left to rate in study 'Adj'"):
            call()
    # The message names no pair and says nothing of a repeat.
    with pytest.raises(PermissionDenied) as refused:
        calls[0]()
    assert "repeat" not in str(refused.value) and "pair 2" not in str(refused.value)
    with db.read() as s:
        assert s.scalar(select(func.count()).select_from(Adjudication)) == 0
    # Other adjudicators and admins are not held back by r3's open pairs.
    assert [e.pair_number for e in adjudication.queue(db, a["judge"], study_name="Adj")] == [
        1, 2]
    with db.begin() as s:
        for row in s.scalars(select(Assignment).where(
                Assignment.rater_id == a["r3"].user_id)):
            row.completed_at = T0
    # Done: the queue opens. r3's zeros (no ratings) join pair 4 (totals 1, 2, 0: range
    # 0-2) and pair 5 (5 and 0): both queued now.
    assert [e.pair_number for e in adjudication.queue(db, a["r3"], study_name="Adj")] == [
        1, 2, 4, 5]
    assert adjudication.get_item(db, a["r3"], study_name="Adj", pair_number=2).raters


def test_a_rater_who_adjudicates_has_final_counts_once_adjudication_opens(world):
    """Blinding, the other way: once r3's own pairs are done the adjudication view shows
    them the other raters' counts, so their own can no longer change (no edit of a done
    pair, no reopen: the one check error records go through too); the view says so. A
    rater who does not adjudicate keeps editing done pairs; taking the role away lets r3
    correct again."""
    db, a, opaque = world
    adjudication.set_adjudicator(db, a["lead"], study_name="Adj", username="r3")
    # r3 has pairs 4 and 5 open: still an independent reader, edits are taken.
    pair_1 = rating.get_pair(db, a["r3"], opaque_id=opaque[0])
    assert not pair_1.read_only and not pair_1.final_for_adjudicator
    rating.set_count(db, a["r3"], opaque_id=opaque[0], category=5, significant=False,
                     count=1)
    for number in (4, 5):
        rating.complete_pair(db, a["r3"], opaque_id=opaque[number - 1], confirm_zero=True)
    view = rating.get_pair(db, a["r3"], opaque_id=opaque[0])
    assert view.read_only and view.final_for_adjudicator
    with db.read() as s:
        before = sorted(s.execute(select(Rating.pair_id, Rating.category, Rating.significant,
                                         Rating.count)
                                  .where(Rating.rater_id == a["r3"].user_id)).all())
    final = r"your ratings of study 'Adj' are final: as its adjudicator"
    with pytest.raises(PermissionDenied, match=final):
        rating.set_count(db, a["r3"], opaque_id=opaque[0], category=5, significant=False,
                         count=2)
    with pytest.raises(PermissionDenied, match=final):
        rating.reopen_pair(db, a["r3"], opaque_id=opaque[1])
    with db.read() as s:
        assert sorted(s.execute(select(Rating.pair_id, Rating.category, Rating.significant,
                                       Rating.count)
                                .where(Rating.rater_id == a["r3"].user_id)).all()) == before
        assert s.scalar(select(func.count()).select_from(Assignment).where(
            Assignment.rater_id == a["r3"].user_id, Assignment.completed_at.is_(None))) == 0
    # r1 adjudicates nothing: a done pair stays editable.
    rating.set_count(db, a["r1"], opaque_id=opaque[0], category=5, significant=False, count=1)
    # Without the role r3 may correct (an admin's decision, recorded by the role change).
    adjudication.set_adjudicator(db, a["lead"], study_name="Adj", username="r3", on=False)
    assert not rating.get_pair(db, a["r3"], opaque_id=opaque[0]).read_only
    rating.set_count(db, a["r3"], opaque_id=opaque[0], category=5, significant=False,
                     count=2)
