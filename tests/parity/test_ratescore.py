"""RaTEScore against the reference code on the same tiny random-weight models.

Reference: the ``RaTEScore`` 0.6.0 package from PyPI (github.com/Angelakeke/RaTEScore, MIT),
whose ``scorer.py``/``score.py``/``utils.py`` RadEval 2.2 vendors unchanged
(jbdel/RadEval@e0a39097e7788b6d0a229432add96c63ea60d62f ``radeval/metrics/RaTEScore/``). It
imports medspaCy, which cannot be installed next to this project's numpy 2, so
``tests/fixtures/ratescore/generate_reference.py`` ran it in a separate environment on the
tiny models of ``tests/helpers_ratescore.py`` (same seeds; their weight digests are in the
fixture) and wrote ``tests/fixtures/ratescore/reference.json``.

Tolerances: BIO decoding, sentence splits of the pair reports and entity lists: exact.
Directional matching (``compute``) on the same float32 vectors: 2.5e-6 absolute
(:data:`COMPUTE_TOL`). The cosines are float32 (normalise: a sum of d squares, a square
root, a division; then a d-term dot product), so each is within (d + 2) * eps of the exact
value, eps = 2**-23 = 1.19e-7: 1.2e-6 for the fixture's d <= 8. The reference and we may
sum in another order (other torch/MKL kernels, another CPU: a fresh clone on an AMD EPYC
was 2e-8 off), so two results are at most twice that apart, and the weighted mean of the
cosines (weights and negation factor in [0, 1]) keeps the bound. 1e-12 held only on the
machine that wrote the fixture.
Per-pair RaTEScore, both affinity matrices: 2e-6 absolute (:data:`TOL`). Our entity vectors
come from other encoder batches (8/16 strings against the reference's 1), so they differ
from the reference's in the last float32 bits: float32 dot products over at most 64 dims
(hidden 32, feed-forward 64) give about sqrt(64) * eps = 1e-6 per cosine, and the harmonic
combination of the two directions (both positive here) at most doubles that. Observed:
at most 4.3e-7 over the CPU kernels we could switch (MKL_CBWR, ATEN_CPU_CAPABILITY,
OMP_NUM_THREADS).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from radconcord.backend.metrics.ratescore import (
    RaTEScore,
    bio_spans,
    directional_score,
    load_affinity,
    split_sentences,
)
from tests.helpers_ratescore import (
    build_tiny_entity_encoder,
    build_tiny_rate_ner,
    weights_digest,
)

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "ratescore" / "reference.json"
TOL = 2e-6  # per-pair scores from differently batched float32 entity vectors
COMPUTE_TOL = 2.5e-6  # 2 * (d + 2) * eps for float32 cosines of d <= 8 dims


@pytest.fixture(scope="module")
def reference() -> dict:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def models(tmp_path_factory, reference) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("ratescore-models")
    ner = build_tiny_rate_ner(root)
    enc = build_tiny_entity_encoder(root)
    # A different torch may draw other random weights: then regenerate the fixture.
    assert weights_digest(ner) == reference["ner_digest"], "tiny NER differs from the fixture's"
    assert weights_digest(enc) == reference["encoder_digest"], "tiny encoder differs"
    return ner, enc


def test_bio_decoding_equals_reference_post_process(reference) -> None:
    cases = reference["bio_cases"]
    assert len(cases) >= 80
    for case in cases:
        tokens = case["tokens"]
        got = [["|".join(tokens[a : b + 1]), t] for a, b, t in bio_spans(tokens, case["labels"])]
        assert got == case["entities"], case


def test_directional_score_equals_reference_compute(reference) -> None:
    """Our ``directional_score`` against the reference's ``compute``; COMPUTE_TOL (above)."""
    import torch

    cases = reference["compute_cases"]
    assert max(len(c["query"][0]) for c in cases) <= 8  # COMPUTE_TOL assumes d <= 8
    assert len(cases) >= 50 and {c["affinity"] for c in cases} == {"long", "short"}
    for case in cases:
        got = directional_score(
            torch.tensor(case["query"], dtype=torch.float32),
            case["query_types"],
            torch.tensor(case["target"], dtype=torch.float32),
            case["target_types"],
            load_affinity(case["affinity"]),
        )
        assert got == pytest.approx(case["score"], abs=COMPUTE_TOL, rel=0), case


def test_simple_splitter_gives_pyrush_sentences_on_the_pair_reports(reference) -> None:
    texts = {p["reference"] for p in reference["pairs"]} | {p["candidate"] for p in
                                                            reference["pairs"]}
    by_text = {r["text"]: r["sentences"] for r in reference["reports"]}
    for text in sorted(texts):
        assert split_sentences(text) == by_text[text], text


def test_entities_equal_reference_ner(reference, models) -> None:
    ner, enc = models
    metric = RaTEScore(ner_model=str(ner), embed_model=str(enc))
    reports = reference["reports"]
    # From the reference's own sentences: every report, the known splitter differences too.
    for report in reports:
        per_sentence = metric.entities_of_sentences(report["sentences"])
        got = [list(e) for ents in per_sentence for e in ents]
        assert got == report["entities"], report["text"]
    # End to end with our splitter on the pair reports.
    pair_texts = [r for r in reports if r["text"] not in reference["extra_texts"]]
    got_all = metric.report_entities([r["text"] for r in pair_texts])
    for got, report in zip(got_all, pair_texts, strict=True):
        assert [list(e) for e in got] == report["entities"], report["text"]
    assert sum(1 for r in reports if not r["entities"]) >= 3  # the 0.5 rule is exercised


@pytest.mark.parametrize("affinity", ["long", "short"])
def test_scores_equal_reference(reference, models, affinity) -> None:
    ner, enc = models
    pairs = reference["pairs"]
    assert len(pairs) >= 25
    metric = RaTEScore(ner_model=str(ner), embed_model=str(enc), affinity=affinity,
                       batch_size=8, embed_batch_size=16)
    result = metric.score(references=[p["reference"] for p in pairs],
                          candidates=[p["candidate"] for p in pairs])
    got = result.values["ratescore"]
    expected = [p[affinity] for p in pairs]
    for g, e, p in zip(got, expected, pairs, strict=True):
        assert g == pytest.approx(e, abs=TOL, rel=0), p
    assert 0.5 in expected and len(set(round(e, 3) for e in expected)) > 15
    assert result.corpus["ratescore_mean"] == pytest.approx(sum(expected) / len(expected),
                                                             abs=TOL)
