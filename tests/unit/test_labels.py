"""Label helpers shared by every labeler, checked against scikit-learn.

Reference: ``sklearn.metrics.f1_score`` (scikit-learn 1.9, installed as a test-time
reference); tolerance 1e-12 (same arithmetic, only summation order differs).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import f1_score

from radconcord.backend.metrics.labels import (
    INDEX_5,
    OBSERVATIONS,
    OBSERVATIONS_5,
    binarize,
    binarize_matrix,
    corpus_f1,
    corpus_keys,
    corpus_scores,
    pair_accuracy,
    pair_counts,
    pair_f1,
)


def test_observation_lists():
    assert len(OBSERVATIONS) == 14 and OBSERVATIONS[0] == "No Finding"
    assert OBSERVATIONS[-1] == "Support Devices"
    assert OBSERVATIONS_5 == (
        "Cardiomegaly", "Edema", "Consolidation", "Atelectasis", "Pleural Effusion"
    )
    assert [OBSERVATIONS[i] for i in INDEX_5] == list(OBSERVATIONS_5)


def test_binarize_counts_uncertain_as_positive():
    assert binarize([1, 0, -1, None]) == [1, 0, 1, 0]


@pytest.mark.parametrize("bad", [2, "1", True, 0.5])
def test_binarize_rejects_other_values(bad):
    with pytest.raises(ValueError, match="label 1"):
        binarize([1, bad])


def test_binarize_matrix_names_the_row():
    with pytest.raises(ValueError, match="row 1"):
        binarize_matrix([[None] * 14, [None] * 13])


def test_pair_counts_and_accuracy():
    ref = [1, 1, 0, 0, 1]
    cand = [1, 0, 1, 0, 1]
    assert pair_counts(ref, cand) == (2, 1, 1, 1)
    assert pair_accuracy(ref, cand) == pytest.approx(3 / 5)
    assert pair_f1(ref, cand) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))


def test_pair_f1_when_neither_has_a_positive_is_one():
    assert pair_f1([0] * 14, [0] * 14) == 1.0
    assert f1_score([0] * 14, [0] * 14, zero_division=1.0) == 1.0
    assert pair_f1([0] * 14, [0] * 14, empty=0.0) == 0.0


def test_pair_f1_matches_sklearn_on_random_vectors():
    rng = np.random.default_rng(0)
    for _ in range(200):
        ref = rng.integers(0, 2, 14)
        cand = rng.integers(0, 2, 14)
        expected = f1_score(ref, cand, zero_division=1.0)
        assert pair_f1(ref.tolist(), cand.tolist()) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_corpus_f1_matches_sklearn(seed):
    rng = np.random.default_rng(seed)
    yt = (rng.random((40, 14)) < 0.3).astype(int)
    yp = (rng.random((40, 14)) < 0.3).astype(int)
    # Columns without any positive exercise the ill-defined (zero_division) path.
    yt[:, 3] = 0
    yp[:, 3] = 0
    yt[:, 5] = 0
    got = corpus_f1(yt, yp)
    for avg in ("micro", "macro", "weighted"):
        expected = f1_score(yt, yp, average=avg, zero_division=0.0)
        assert got[avg] == pytest.approx(expected, abs=1e-12), avg


def test_corpus_f1_all_empty_is_zero_like_sklearn():
    z = np.zeros((3, 14), dtype=int)
    got = corpus_f1(z, z)
    for avg in ("micro", "macro", "weighted"):
        assert got[avg] == f1_score(z, z, average=avg, zero_division=0.0) == 0.0


def test_corpus_f1_shape_mismatch():
    with pytest.raises(ValueError, match="shape"):
        corpus_f1(np.zeros((2, 14)), np.zeros((2, 5)))


def test_corpus_scores_for_14_and_5_match_sklearn():
    rng = np.random.default_rng(7)
    values = [1, 0, -1, None]
    refs = [[values[i] for i in rng.integers(0, 4, 14)] for _ in range(30)]
    cands = [[values[i] for i in rng.integers(0, 4, 14)] for _ in range(30)]
    got = corpus_scores(refs, cands, "x")
    assert tuple(got) == corpus_keys("x")
    yt, yp = binarize_matrix(refs), binarize_matrix(cands)
    cols = list(INDEX_5)
    for avg in ("micro", "macro", "weighted"):
        assert got[f"x_{avg}_f1_14"] == pytest.approx(
            f1_score(yt, yp, average=avg, zero_division=0.0), abs=1e-12
        )
        assert got[f"x_{avg}_f1_5"] == pytest.approx(
            f1_score(yt[:, cols], yp[:, cols], average=avg, zero_division=0.0), abs=1e-12
        )


def test_corpus_scores_empty_is_nan():
    got = corpus_scores([], [], "x")
    assert all(math.isnan(v) for v in got.values())
