"""CRG score: hand-worked examples, invariants, edge cases and the metric wrapper.

Reference: the formula of the CRG score paper (Hamamci et al.),
r = (X-A)/(2A), U = (X-A)/2, s = r*TP - r*FN - FP, CRG = U/(2U - s); tolerance 1e-12.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from radconcord.backend.metrics import registry
from radconcord.backend.metrics.base import MetricUnavailable
from radconcord.backend.metrics.chexpert import ChexpertLabels
from radconcord.backend.metrics.crg import Crg, crg


def _paper_formula(tp, fn, fp, x, a):
    r = (x - a) / (2 * a)
    u = (x - a) / 2
    s = r * tp - r * fn - fp
    return u / (2 * u - s)


def test_hand_worked_example():
    # X=14, A=3, TP=2, FN=1, FP=1: N=11, r=11/6, U=5.5, s=22/6-11/6-1=5/6,
    # CRG = 5.5 / (11 - 5/6) = 33/61.
    assert crg(2, 1, 1, 14, 3) == pytest.approx(33 / 61, abs=1e-12)


def test_matches_the_published_formula_on_random_counts():
    rng = np.random.default_rng(0)
    for _ in range(500):
        x = int(rng.integers(2, 200))
        a = int(rng.integers(1, x))
        tp = int(rng.integers(0, a + 1))
        fp = int(rng.integers(0, x - a + 1))
        got = crg(tp, a - tp, fp, x, a)
        assert got == pytest.approx(_paper_formula(tp, a - tp, fp, x, a), abs=1e-12)
        # Closed form 1 / (1 + 2 FNR + 2 FPR).
        assert got == pytest.approx(1 / (1 + 2 * (a - tp) / a + 2 * fp / (x - a)), abs=1e-12)


def test_invariants():
    x, a = 14, 4
    assert crg(a, 0, 0, x, a) == 1.0  # perfect
    assert crg(0, a, x - a, x, a) == pytest.approx(0.2)  # every label wrong
    assert crg(0, a, 0, x, a) == pytest.approx(1 / 3)  # predicts nothing
    assert crg(a, 0, x - a, x, a) == pytest.approx(1 / 3)  # predicts everything
    # More false positives never raise the score; a missed positive costs more than a
    # false positive when positives are rarer than negatives.
    scores = [crg(a, 0, fp, x, a) for fp in range(x - a + 1)]
    assert all(s1 > s2 for s1, s2 in zip(scores, scores[1:], strict=False))
    assert crg(a - 1, 1, 0, x, a) < crg(a, 0, 1, x, a)


def test_no_reference_positive_uses_the_limit():
    # A = 0: limit A -> 0 of the formula is N / (N + 2 FP).
    assert crg(0, 0, 0, 14, 0) == 1.0
    assert crg(0, 0, 2, 14, 0) == pytest.approx(14 / 18)
    # Approaching the limit through the published formula on a scaled-up problem:
    # A tiny relative to N with a perfect hit on it.
    n, fp = 14, 2
    for k in (10**3, 10**6):
        x, a = n * k + 1, 1
        approx = _paper_formula(1, 0, fp * k, x, a)
        assert approx == pytest.approx(n / (n + 2 * fp), rel=1e-3)


def test_all_labels_positive_uses_the_limit():
    assert crg(5, 0, 0, 5, 5) == 1.0
    assert crg(3, 2, 0, 5, 5) == pytest.approx(5 / 9)


def test_nothing_to_score_is_nan():
    assert math.isnan(crg(0, 0, 0, 0, 0))


@pytest.mark.parametrize(
    "args, match",
    [
        ((1, 1, 0, 14, 3), "must equal"),
        ((0, 0, 0, 3, 4), "exceeds"),
        ((1, 0, 20, 14, 1), "fp"),
        ((-1, 0, 0, 14, 0), ">= 0"),
    ],
)
def test_inconsistent_counts_raise(args, match):
    with pytest.raises(ValueError, match=match):
        crg(*args)


def test_metric_per_pair_and_corpus():
    metric = registry.create("crg")
    assert isinstance(metric, Crg)
    refs = ["Mild cardiomegaly. No pleural effusion.", "No acute cardiopulmonary process."]
    cands = ["Mild cardiomegaly with small left pleural effusion.", "No acute process."]
    res = metric.score(references=refs, candidates=cands)
    # Pair 1 over 14 labels: A=1 (Cardiomegaly), TP=1, FP=1 (Pleural Effusion).
    assert res.values["crg"][0] == pytest.approx(crg(1, 0, 1, 14, 1))
    assert res.details is not None and res.details[0] == {
        "tp": 1, "fn": 0, "fp": 1, "num_positives": 1, "num_labels": 14
    }
    # Pair 2: both No Finding only -> perfect.
    assert res.values["crg"][1] == 1.0
    # Corpus pools the counts: X = 28, A = 2, TP = 2, FP = 1.
    assert res.corpus["crg_corpus"] == pytest.approx(crg(2, 0, 1, 28, 2))


def test_metric_five_labels_and_normal_reference():
    metric = Crg(labels="5")
    res = metric.score(references=["No acute process."], candidates=["Small left effusion."])
    # A = 0 among the five; one false positive out of five negatives: 5 / (5 + 2).
    assert res.values["crg"] == [pytest.approx(5 / 7)]


def test_signature_embeds_labeler_signature():
    sig = Crg().signature()
    assert sig == (
        "crg|labels:14|bin:uncertain=positive|labeler:[" + ChexpertLabels().signature() + "]"
    )
    assert Crg(labels=5).signature().startswith("crg|labels:5|")


def test_bad_options_and_unusable_labelers():
    with pytest.raises(ValueError, match="labels"):
        Crg(labels="7")
    with pytest.raises(ValueError, match="labeler"):
        Crg(labeler="nope")
    # radgraph is a registered family but not a labeler (and may not be installed).
    metric = Crg(labeler="radgraph")
    reason = metric.availability()
    assert reason is not None and "radgraph" in reason
    with pytest.raises(MetricUnavailable):
        metric.signature()
