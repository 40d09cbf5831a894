"""SMAS and SMAS variance on hand-checkable cases.

The building blocks are checked by hand (sentence split, a 2x2 optimal-transport problem, the
length penalty) and by brute force (greedy matching); the full metric runs on the packaged
all-MiniLM-L6-v2. Sentence embeddings are compared with sentence-transformers' own encoding
of the same model (mean pooling), tolerance 1e-6 per component (components are about
1/sqrt(384) = 0.05; observed 2.5e-8).

SMAS computed in float64 from the same vectors is compared at 1e-12. SMAS of the same
reports encoded in another batch (other sentences around them, other padding, other row
order) comes from other float32 hidden states: cosines over 384 dims in another reduction
order differ by about sqrt(384) * eps = 2.3e-6 (eps = 2**-23), so those comparisons use
:data:`BATCH_TOL`; the optimal-transport cost moves by at most the largest cost change.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from radconcord.backend.metrics.base import MetricInputError
from radconcord.backend.metrics.smas import (
    Encoded,
    Smas,
    SmasVar,
    greedy_match,
    smas_from_encoded,
    split_sentences,
    word_rotators_distance,
)
from tests.helpers_models import minilm_dir

# SMAS from float32 MiniLM hidden states of another batch: sqrt(384) * eps = 2.3e-6 (above).
BATCH_TOL = 2.5e-6


@pytest.fixture(scope="module")
def smas():
    m = Smas()
    m.load("cpu")
    return m


def test_split_sentences():
    text = "1. No effusion. Heart size 4.5 cm!\nLungs clear?\n--\n  Stable lines."
    assert split_sentences(text) == [
        "No effusion.",
        "Heart size 4.5 cm!",
        "Lungs clear?",
        "Stable lines.",
    ]
    assert split_sentences("   ") == []


def brute_force_greedy(sim):
    sim = np.array(sim, dtype=float)
    pairs = []
    for _ in range(min(sim.shape)):
        r, c = np.unravel_index(np.argmax(sim), sim.shape)
        pairs.append((int(r), int(c)))
        sim[r, :] = -np.inf
        sim[:, c] = -np.inf
    return pairs


@pytest.mark.parametrize("shape", [(1, 1), (3, 3), (4, 2), (2, 5), (7, 6)])
def test_greedy_match_equals_brute_force(shape):
    rng = np.random.default_rng(sum(shape))
    for _ in range(20):
        sim = rng.uniform(-1, 1, size=shape)
        assert greedy_match(sim) == brute_force_greedy(sim)


def test_greedy_is_not_optimal_assignment():
    # Greedy takes 0.9 first and is left with 0.0: total 0.9, the optimum 0.8 + 0.8 is skipped.
    assert greedy_match([[0.9, 0.8], [0.8, 0.0]]) == [(0, 0), (1, 1)]


def test_wrd_two_by_two_by_hand():
    # x: norms 1 and 2 -> masses 1/3, 2/3; y: norms 3 and 3 -> masses 1/2, 1/2.
    # Costs 1 - cos: x1-y1 0, x1-y2 1, x2-y1 1, x2-y2 0. Best plan moves 1/3 x1->y1, 1/2
    # x2->y2 and the remaining 1/6 of x2 to y1 at cost 1: WRD = 1/6.
    x = np.array([[1.0, 0.0], [0.0, 2.0]])
    y = np.array([[3.0, 0.0], [0.0, 3.0]])
    assert word_rotators_distance(x, y) == pytest.approx(1 / 6, abs=1e-12)
    assert word_rotators_distance(y, x) == pytest.approx(1 / 6, abs=1e-12)
    # One word each at 45 degrees: all mass moves at cost 1 - cos 45.
    assert word_rotators_distance(np.array([[1.0, 0.0]]), np.array([[2.0, 2.0]])) == pytest.approx(
        1 - 1 / math.sqrt(2), abs=1e-12
    )
    assert word_rotators_distance(x, x) == pytest.approx(0.0, abs=1e-12)
    assert math.isnan(word_rotators_distance(np.zeros((0, 2)), y))


def encoded(vectors):
    """A report whose i-th sentence is one word with vector ``vectors[i]``."""
    v = np.asarray(vectors, dtype=float)
    unit = v / np.linalg.norm(v, axis=1, keepdims=True)
    return Encoded([f"s{i}" for i in range(len(v))], unit, [row[None, :] for row in v])


def test_smas_identical_and_length_penalty_exactly():
    a = encoded([[1, 0, 0], [0, 1, 0], [0, 0, 1]])
    assert smas_from_encoded(a, a).smas == pytest.approx(1.0, abs=1e-12)
    b = encoded([[0, 0, 1], [1, 0, 0]])  # two of a's three sentences, reordered
    parts = smas_from_encoded(a, b)
    assert sorted((i, j) for i, j, _, _ in parts.matches) == [(0, 1), (2, 0)]
    # SMS = 2 / (3 + 2) * (1 + 1) = 0.8; penalty = 1 - 1/3.
    assert parts.sms == pytest.approx(0.8, abs=1e-12)
    assert parts.smas == pytest.approx(0.8 * (2 / 3), abs=1e-12)


def test_smas_uses_wrs_of_matched_pairs():
    a = encoded([[1, 0], [0, 1]])
    b = encoded([[1, 1], [0, 1]])
    parts = smas_from_encoded(a, b)
    # Greedy: (1,1) cos 1 first, then (0,0) cos 1/sqrt2; WRS = 1 and 1/sqrt2.
    assert [(i, j) for i, j, _, _ in parts.matches] == [(1, 1), (0, 0)]
    assert parts.smas == pytest.approx((1 + 1 / math.sqrt(2)) / 2, abs=1e-12)


def test_smas_empty_sides():
    a = encoded([[1, 0]])
    empty = Encoded([], np.zeros((0, 2)), [])
    assert smas_from_encoded(a, empty).smas == 0.0
    assert math.isnan(smas_from_encoded(empty, empty).smas)


REPORT = "No pleural effusion. Heart size is normal. The lungs are clear."


def test_minilm_identical_reports_score_one(smas):
    res = smas.score(references=[REPORT], candidates=[REPORT])
    assert res.values["smas"][0] == pytest.approx(1.0, abs=1e-6)
    assert res.details[0]["n_ref_sentences"] == 3


def test_minilm_missing_sentence_gives_exact_penalty(smas):
    cand = "The lungs are clear. No pleural effusion."
    res = smas.score(references=[REPORT], candidates=[cand])
    # Both candidate sentences match their identical reference sentence (WRS 1):
    # SMS = 2/(3+2) * 2 = 0.8, penalty 1 - 1/3.
    assert res.values["smas"][0] == pytest.approx(0.8 * 2 / 3, abs=1e-6)
    assert res.details[0]["sms"] == pytest.approx(0.8, abs=1e-6)


def test_minilm_different_reports_score_below_one_and_symmetric(smas):
    a = "Mild cardiomegaly. Small left pleural effusion."
    b = "Heart is enlarged. No effusion. Lines unchanged."
    ab = smas.score(references=[a], candidates=[b]).values["smas"][0]
    ba = smas.score(references=[b], candidates=[a]).values["smas"][0]
    assert 0.0 < ab < 1.0
    assert ab == pytest.approx(ba, abs=BATCH_TOL)  # the batch holds the sentences in another order
    assert ab <= 1 - 1 / 3 + 1e-9  # 2 vs 3 sentences caps SMAS at the penalty


def test_minilm_empty_and_nan(smas):
    res = smas.score(references=[REPORT, ""], candidates=["", "  "])
    assert res.values["smas"][0] == 0.0
    assert math.isnan(res.values["smas"][1])


def test_sentence_embeddings_match_sentence_transformers(smas):
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(minilm_dir()), device="cpu")
    sents = split_sentences(REPORT)
    theirs = st.encode(sents, normalize_embeddings=True)
    ours = smas.encode_reports([REPORT])[0].sentence_emb
    assert np.abs(ours - theirs).max() <= 1e-6


def test_signature(smas):
    from radconcord.backend.metrics import hf

    sig = smas.signature()
    assert sig.startswith(
        f"smas|model:all-MiniLM-L6-v2(packaged)@sha256:{hf.fingerprint(minilm_dir())[:16]}|"
        "pool:mean|tokens:last-layer-no-special|match:greedy-cos|wrd:emd-norm-mass|split:v1|"
    )


def test_explicit_absent_model_is_unavailable(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    reason = Smas(model="acme/absent-encoder", revision="c" * 40).availability()
    assert reason is not None and "acme/absent-encoder" in reason


def test_smas_var_identical_samples(smas):
    var = SmasVar()
    var.smas = smas
    out = var.score_samples(samples=[REPORT, REPORT, REPORT])
    assert out["smas_var"] == pytest.approx(0.0, abs=1e-12)
    assert out["smas_mean"] == pytest.approx(1.0, abs=1e-6)
    assert out["sentences"] == split_sentences(REPORT)
    assert out["sentence_var"] == pytest.approx([0.0, 0.0, 0.0], abs=1e-12)


def test_smas_var_matches_pairwise_smas(smas):
    samples = [
        REPORT,
        "No pleural effusion. Heart size is normal.",
        "Small right pleural effusion. Heart size is normal. The lungs are clear.",
        "Cardiomegaly.",
    ]
    var = SmasVar()
    var.smas = smas
    out = var.score_samples(samples=samples)
    pw = np.array(out["pairwise"])
    for i in range(4):
        for j in range(i + 1, 4):
            direct = smas.score(references=[samples[i]], candidates=[samples[j]]).values["smas"][0]
            # direct encodes two reports' sentences, pairwise all four's: other batches.
            assert pw[i, j] == pytest.approx(direct, abs=BATCH_TOL)
    upper = pw[np.triu_indices(4, k=1)]
    assert out["smas_var"] == pytest.approx(float(np.var(upper)), abs=1e-12)
    medoid = out["medoid_index"]
    assert medoid == int(np.argmax((pw - np.eye(4)).sum(axis=1)))
    assert len(out["sentence_var"]) == len(split_sentences(samples[medoid]))
    assert all(v >= 0 for v in out["sentence_var"])


def test_smas_var_needs_two_samples(smas):
    var = SmasVar()
    var.smas = smas
    with pytest.raises(MetricInputError, match="at least 2"):
        var.score_samples(samples=[REPORT])
    with pytest.raises(MetricInputError, match="not str"):
        var.score_samples(samples=REPORT)
    assert var.signature().startswith("smas_var|var:population|medoid:max-sum|model:")
