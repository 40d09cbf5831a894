"""Explorer, data-version and probe services on a small imported study.

The study is built with ``imports.import_cases``; ratings are Rating rows without assignments
(counted as imported ratings, data.py) and metric scores are MetricScore rows with values chosen
here, so expected rankings are recomputed in the test from those numbers. The probe test scores
real lexical metrics (bleu4, rougeL) through the runner and checks the summary against the
per-perturbation values recomputed from ``backend.metrics.lexical`` directly.
"""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pytest
from sqlalchemy import select

from radconcord.backend.analysis.perturb import KINDS, SIGNIFICANT, generate
from radconcord.backend.errors import InvalidInput, NotFound, PermissionDenied
from radconcord.backend.services.evaluation import explore
from radconcord.backend.services.scores import probes
from radconcord.backend.services.transfer import imports
from radconcord.backend.types import Actor, CandidateInput, CaseInput
from radconcord.db.models import MetricScore, Pair, Rating, User
from radconcord.db.session import Database

ADMIN = Actor.system()
RATER = Actor(user_id=99, username="rita", role="rater")
STUDY = "explore study"
REFS = [
    "PA and lateral views of the chest. There is a small left pleural effusion. Heart size is"
    " normal. Osseous structures are unremarkable.",
    "Mild cardiomegaly. No pneumothorax. The lungs are clear.",
    "Comparison is made to the prior study. Large right upper lobe opacity is seen. No pleural"
    " effusion.",
    "No acute cardiopulmonary process.",
]
CANDS = ["No acute disease.", "Small effusion on the left.", "Cardiomegaly.",
         "Right upper lobe pneumonia.", "Normal chest."]
# Per pair (position order): raters' error totals, r1 and r2; and a bleu4 value.
ERRORS = [(0, 1), (3, 3), (1, 1), (5, 4), (2, 2), (0, 0), (4, 6), (1, 0)]
BLEU = [0.9, 0.1, 0.2, 0.3, 0.5, 0.8, 0.05, 0.6]
RADCLIQ = [0.5, 3.0, 1.5, 4.0, 2.0, 0.1, 5.0, 0.3]  # lower is better, agrees with the raters


def _build(tmp_path) -> Database:
    db = Database(f"sqlite:///{tmp_path}/explore.db")
    cases = [
        CaseInput(case_id=f"c{i}", reference=ref, candidates=[
            CandidateInput(text=CANDS[(2 * i) % 5], source="gen-a"),
            CandidateInput(text=CANDS[(2 * i + 1) % 5], source="gen-b"),
        ])
        for i, ref in enumerate(REFS)
    ]
    imports.import_cases(db, ADMIN, study_name=STUDY, cases=cases)
    with db.begin() as s:
        users = [User(username=u, role="rater", password_hash="x") for u in ("r1", "r2")]
        s.add_all(users)
        s.flush()
        pairs = s.scalars(select(Pair).order_by(Pair.position)).all()
        assert len(pairs) == len(ERRORS)
        for pair, errs, b, rq in zip(pairs, ERRORS, BLEU, RADCLIQ, strict=True):
            for user, e in zip(users, errs, strict=True):
                # Split each total over two cells so the per-category view has something.
                s.add(Rating(rater_id=user.id, pair_id=pair.id, category=1, significant=True,
                             count=e // 2))
                s.add(Rating(rater_id=user.id, pair_id=pair.id, category=2, significant=False,
                             count=e - e // 2))
            s.add(MetricScore(input_hash=pair.input_hash, family="bleu", key="bleu4",
                              signature_hash="sig-b", signature="bleu4|test", value=b))
            s.add(MetricScore(input_hash=pair.input_hash, family="radcliq", key="radcliq_v1",
                              signature_hash="sig-r", signature="radcliq_v1|test", value=rq))
    return db


@pytest.fixture
def db(tmp_path):
    database = _build(tmp_path)
    yield database
    database.dispose()


def _norm_ranks(values):
    # Reference: plain double loop for average ranks, scaled to [0, 1].
    v = list(values)
    ranks = []
    for x in v:
        less = sum(1 for y in v if y < x)
        equal = sum(1 for y in v if y == x)
        ranks.append(less + (equal + 1) / 2)
    return [(r - 1) / (len(v) - 1) for r in ranks]


def test_disagreements_rank_pairs_by_normalised_rank_gap(db):
    result = explore.disagreements(db, ADMIN, study_name=STUDY, key="bleu4", limit=None)
    mean = [sum(e) / 2 for e in ERRORS]
    gaps = [abs(a - b) for a, b in zip(_norm_ranks(BLEU), _norm_ranks([-m for m in mean]),
                                        strict=True)]
    expected = sorted(range(len(gaps)), key=lambda i: (-gaps[i], i))
    assert result.n_ranked == len(ERRORS)
    assert [r.pair.position for r in result.rows] == expected
    assert [r.score for r in result.rows] == pytest.approx([gaps[i] for i in expected])
    top = result.rows[0]
    assert top.rank == 1 and top.value == BLEU[top.pair.position]
    assert top.pair.mean_errors == mean[top.pair.position]
    assert result.signature == "bleu4|test" and result.higher_is_better


def test_lower_is_better_metric_is_oriented_before_ranking(db):
    # radcliq_v1 (lower is better) orders the pairs almost as the raters' mean errors do.
    result = explore.disagreements(db, ADMIN, study_name=STUDY, key="radcliq_v1", limit=3)
    assert not result.higher_is_better
    assert len(result.rows) == 3
    mean = [sum(e) / 2 for e in ERRORS]
    oriented = _norm_ranks([-v for v in RADCLIQ])
    gaps = [abs(a - b) for a, b in zip(oriented, _norm_ranks([-m for m in mean]), strict=True)]
    expected = sorted(range(len(gaps)), key=lambda i: (-gaps[i], i))[:3]
    assert [r.pair.position for r in result.rows] == expected
    assert [r.metric_rank for r in result.rows] == pytest.approx([oriented[i] for i in expected])
    assert max(r.score for r in result.rows) < 0.1
    # Without the orientation the same values would disagree almost everywhere.
    unoriented = [abs(a - b) for a, b in zip(_norm_ranks(RADCLIQ), _norm_ranks(
        [-m for m in mean]), strict=True)]
    assert max(unoriented) > 0.9


def test_disagreements_errors(db):
    with pytest.raises(PermissionDenied):
        explore.disagreements(db, RATER, study_name=STUDY, key="bleu4")
    with pytest.raises(NotFound):
        explore.disagreements(db, ADMIN, study_name="nope", key="bleu4")
    with pytest.raises(InvalidInput, match="no scores for rougeL"):
        explore.disagreements(db, ADMIN, study_name=STUDY, key="rougeL")


def test_pair_detail_shows_texts_diff_scores_and_rater_counts(db):
    table = explore.study_pairs(db, ADMIN, study_name=STUDY)
    row = table.rows[3]
    detail = explore.pair_detail(db, ADMIN, study_name=STUDY, pair_id=row.pair_id)
    assert detail.reference == REFS[1]
    assert detail.candidate == CANDS[3]
    assert "".join(op.a_text for op in detail.diff) == REFS[1]
    assert "".join(op.b_text for op in detail.diff) == CANDS[3]
    assert {m.key: m.value for m in detail.metrics} == {"bleu4": BLEU[3],
                                                         "radcliq_v1": RADCLIQ[3]}
    assert [(r.rater, r.total, r.significant, r.counted) for r in detail.raters] == [
        ("r1", 5, 2, True), ("r2", 4, 2, True)]
    assert detail.raters[0].counts[(1, True)] == 2 and detail.raters[0].counts[(2, False)] == 3
    assert detail.pair.source == "gen-b" and detail.pair.mean_errors == 4.5
    assert detail.mean_significant == 2.0
    with pytest.raises(NotFound):
        explore.pair_detail(db, ADMIN, study_name=STUDY, pair_id=10_000)
    with pytest.raises(PermissionDenied):
        explore.pair_detail(db, RATER, study_name=STUDY, pair_id=row.pair_id)


def test_study_pairs_significant_target(db):
    table = explore.study_pairs(db, ADMIN, study_name=STUDY, significant_only=True)
    assert [r.mean_errors for r in table.rows] == [sum(e // 2 for e in errs) / 2
                                                   for errs in ERRORS]
    assert table.keys == ("bleu4", "radcliq_v1")
    assert table.directions == {"bleu4": True, "radcliq_v1": False}


def test_data_version_changes_with_ratings_and_scores(db):
    v0 = explore.data_version(db, ADMIN, study_name=STUDY)
    # Ratings are rater x pair (2 raters, imported without assignments), not grid cells.
    assert (v0.n_ratings, v0.n_rating_cells, v0.n_scores) == (
        len(ERRORS) * 2, len(ERRORS) * 4, len(ERRORS) * 2)
    assert explore.data_version(db, ADMIN, study_name=STUDY).token == v0.token
    with db.begin() as s:
        rating = s.scalars(select(Rating).order_by(Rating.id)).first()
        rating.count += 1
        rating.updated_at = dt.datetime(2031, 1, 1, tzinfo=dt.UTC)
    v1 = explore.data_version(db, ADMIN, study_name=STUDY)
    assert v1.token != v0.token and v1.n_ratings == v0.n_ratings
    with db.begin() as s:
        h = s.scalars(select(Pair.input_hash)).first()
        s.add(MetricScore(input_hash=h, family="rouge", key="rougeL", signature_hash="x",
                          signature="x", value=0.4))
    v2 = explore.data_version(db, ADMIN, study_name=STUDY)
    assert v2.n_scores == v1.n_scores + 1 and v2.token != v1.token
    with pytest.raises(PermissionDenied):
        explore.data_version(db, RATER, study_name=STUDY)
    with pytest.raises(NotFound):
        explore.data_version(db, ADMIN, study_name="nope")


def test_run_probes_with_lexical_metrics(db):
    """bleu4/rougeL per perturbation recomputed with the metric classes directly (no cache)."""
    from radconcord.backend.metrics import registry

    result = probes.run_probes(db, ADMIN, study_name=STUDY, metrics=["bleu4", "rougeL"],
                               seed=3, max_reports=10)
    assert result.n_reports == len(REFS)
    assert [k.kind for k in result.kinds] == list(KINDS)
    probe_set = generate(REFS, seed=3)
    by_kind = {k: [p for p in probe_set.perturbations if p.kind == k] for k in KINDS}
    assert {k.kind: k.n for k in result.kinds} == {k: len(v) for k, v in by_kind.items()}
    assert {k.kind: k.n + k.n_skipped for k in result.kinds} == {k: len(REFS) for k in KINDS}
    assert len(result.examples) == len(probe_set.perturbations)

    rows = {r.key: r for r in result.rows}
    assert set(rows) == {"bleu4", "rougeL"}
    bleu = registry.create("bleu")
    rouge = registry.create("rouge")
    for key, metric in (("bleu4", bleu), ("rougeL", rouge)):
        type_means = {}
        for kind, items in by_kind.items():
            values = metric.score(references=[p.original for p in items],
                                  candidates=[p.perturbed for p in items]).values[key]
            type_means[kind] = float(np.mean(values)) if items else None
            assert rows[key].means[kind] == pytest.approx(type_means[kind], abs=1e-9)
        sig = np.mean([m for k, m in type_means.items() if SIGNIFICANT[k] and m is not None])
        insig = np.mean([m for k, m in type_means.items()
                         if not SIGNIFICANT[k] and m is not None])
        assert rows[key].delta == pytest.approx(insig - sig, abs=1e-9)
    # Cached: a second run gives the same numbers from the score cache.
    again = probes.run_probes(db, ADMIN, study_name=STUDY, metrics=["bleu4", "rougeL"],
                              seed=3, max_reports=10)
    assert again.rows == result.rows


def test_run_probes_sampling_and_errors(db):
    small = probes.run_probes(db, ADMIN, study_name=STUDY, metrics=["rougeL"], seed=1,
                              max_reports=2)
    assert small.n_reports == 2
    assert all(math.isfinite(v) for v in small.examples[0].scores.values())
    with pytest.raises(PermissionDenied):
        probes.run_probes(db, RATER, study_name=STUDY, metrics=["rougeL"])
    with pytest.raises(NotFound):
        probes.run_probes(db, ADMIN, study_name="nope", metrics=["rougeL"])
    with pytest.raises(InvalidInput, match="nonexistent"):
        probes.run_probes(db, ADMIN, study_name=STUDY, metrics=["nonexistent"])
    with pytest.raises(InvalidInput, match="max_reports"):
        probes.run_probes(db, ADMIN, study_name=STUDY, metrics=["rougeL"], max_reports=0)
