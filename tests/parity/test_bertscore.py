"""BERTScore against the reference implementation, plus its fallback, idf and edge rules.

Reference: ``bert_score.score`` (bert-score 0.3.13, installed) run in the same process on the
same local model folder, layer, idf setting and baseline file. Models: a random-weight
RoBERTa built in tmp_path (byte-level BPE tokenizer saved with ``add_prefix_space=True``,
because transformers 5 ignores bert_score's encode-time ``add_prefix_space`` flag) and the
packaged all-MiniLM-L6-v2. Tolerance (:func:`tolerance`): 2.5e-6 absolute on raw P, R and F,
and 2.5e-6 / (1 - b) on values rescaled with baseline b. Both sides compute in float32 on
CPU; they differ only in batching/padding and summation order, which also changes with the
CPU and its torch/MKL kernels. P, R and F are (idf-weighted) means of token cosines, float32
dot products over up to 384 dims (MiniLM): about sqrt(384) * eps = 2.3e-6 for another
reduction order, eps = 2**-23. A rescale (x - b) / (1 - b) multiplies the error by
1 / (1 - b), 5.3 for MiniLM's b = 0.81 here. Observed over the kernels we could switch
(MKL_CBWR, ATEN_CPU_CAPABILITY, OMP_NUM_THREADS): at most 2.4e-7 raw and 9.2e-7 rescaled,
which a flat 1e-6 only just let through. Our own batchings on the 32-dim tiny RoBERTa
(whole set against chunks, reversed, one pair at a time) stay at 1e-6, about sqrt(64) * eps.

bert_score lets padded positions (similarity 0) join the token max; ours does not. The two agree
whenever every token's best real match is positive, which the tests assert through the
``min_match_p``/``min_match_r`` details (the benchmark counts the pairs where it is not).

bert_score itself cannot score empty strings on transformers 5 (it calls the removed
``build_inputs_with_special_tokens``), so the empty-side rule is tested on its own.
"""

from __future__ import annotations

import math
import shutil

import bert_score
import pytest

from radconcord.backend.metrics import hf
from radconcord.backend.metrics.base import MetricUnavailable
from radconcord.backend.metrics.bertscore import (
    DISTILROBERTA_L5_BASELINE,
    FALLBACK_LABEL,
    IMPL_VERSION,
    BertScore,
    read_baseline,
)
from tests.helpers_models import build_tiny_roberta, minilm_dir, write_baseline_tsv

TOL = 2.5e-6  # raw P/R/F: float32 cosines over <= 384 dims in another reduction order

REFS = [
    "No pleural effusion. Heart size is normal.",
    "Mild cardiomegaly with small bilateral pleural effusions.",
    "The lungs are clear.",
    "Right lower lobe consolidation concerning for pneumonia.",
    "No acute cardiopulmonary process.",
    "Endotracheal tube terminates 4 cm above the carina.",
    "The lungs are clear.",
    "Interval increase in left basilar atelectasis compared with the prior study, no new"
    " focal opacity, unchanged mediastinal contours and degenerative changes of the spine.",
]
CANDS = [
    "Heart size is normal, no effusion.",
    "Cardiomegaly. Bilateral effusions are small.",
    "Clear lungs.",
    "Consolidation in the right lower lobe.",
    "No acute cardiopulmonary process.",
    "ET tube 4 cm above the carina",
    "Low lung volumes with bibasilar opacities.",
    "Left basilar atelectasis has increased.",
]
KEYS = ("bertscore_p", "bertscore_r", "bertscore_f")


@pytest.fixture(scope="module")
def tiny_roberta(tmp_path_factory):
    return build_tiny_roberta(tmp_path_factory.mktemp("rb"), add_prefix_space=True)


@pytest.fixture(scope="module")
def baseline_file(tmp_path_factory):
    rows = [(0.1, 0.2, 0.3), (0.5, 0.4, 0.45), (0.6, 0.61, 0.62), (0.7, 0.72, 0.71)]
    rows += [(0.8, 0.81, 0.805)] * 4
    return write_baseline_tsv(tmp_path_factory.mktemp("bl") / "baseline.tsv", rows)


@pytest.fixture
def offline(monkeypatch, tmp_path):
    monkeypatch.delenv("RADCONCORD_MODEL_DIR", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path


def reference(model_dir, layer, idf, baseline=None):
    p, r, f = bert_score.score(
        CANDS,
        REFS,
        model_type=str(model_dir),
        num_layers=layer,
        idf=idf,
        lang="en",
        rescale_with_baseline=baseline is not None,
        baseline_path=None if baseline is None else str(baseline),
        batch_size=3,
        nthreads=0,
    )
    return {"bertscore_p": p.tolist(), "bertscore_r": r.tolist(), "bertscore_f": f.tolist()}


def tolerance(baseline, layer) -> dict[str, float]:
    """TOL per key, divided by 1 - b where the values are rescaled with baseline b."""
    if baseline is None:
        return dict.fromkeys(KEYS, TOL)
    return {k: TOL / (1 - b) for k, b in zip(KEYS, read_baseline(baseline, layer), strict=True)}


def assert_close(result, theirs, tol):
    for d in result.details:
        assert d["min_match_p"] > 0 and d["min_match_r"] > 0, "bert_score padding rule applies"
    ours = result.values
    for k in KEYS:
        diff = max(abs(a - b) for a, b in zip(ours[k], theirs[k], strict=True))
        assert diff <= tol[k], f"{k}: max abs diff {diff} > {tol[k]}"


@pytest.mark.parametrize(
    ("layer", "idf", "rescale"),
    [(2, False, False), (2, True, False), (3, False, True), (1, True, True)],
)
def test_parity_tiny_roberta(tiny_roberta, baseline_file, layer, idf, rescale):
    base = baseline_file if rescale else None
    ours = BertScore(
        model=str(tiny_roberta),
        num_layers=layer,
        idf=idf,
        rescale=rescale,
        baseline=None if base is None else str(base),
        batch_size=4,
    ).score(references=REFS, candidates=CANDS)
    assert_close(ours, reference(tiny_roberta, layer, idf, base), tolerance(base, layer))


@pytest.mark.parametrize(("idf", "rescale"), [(False, False), (True, False), (True, True)])
def test_parity_packaged_minilm(baseline_file, idf, rescale):
    base = baseline_file if rescale else None
    ours = BertScore(
        model=str(minilm_dir()),
        num_layers=6,
        idf=idf,
        rescale=rescale,
        baseline=None if base is None else str(base),
    ).score(references=REFS, candidates=CANDS)
    assert_close(ours, reference(minilm_dir(), 6, idf, base), tolerance(base, 6))


def test_roberta_prefix_space_is_added_even_when_not_saved(tmp_path):
    plain = build_tiny_roberta(tmp_path, add_prefix_space=False)
    m = BertScore(model=str(plain), num_layers=1)
    m.load("cpu")
    assert m._tok.convert_ids_to_tokens(m._encode(["No effusion"])[0])[1] == "ĠNo"


def test_fallback_when_default_model_is_absent(offline):
    m = BertScore()
    assert m.availability() is None
    assert m.is_fallback and m.label == FALLBACK_LABEL
    fp = hf.fingerprint(minilm_dir())[:16]
    import transformers

    assert m.signature() == (
        f"bertscore|model:{FALLBACK_LABEL}@sha256:{fp}|L6|no-idf|no-rescale"
        f"|version:{IMPL_VERSION}(transformers={transformers.__version__})"
    )
    values = m.score(references=REFS[:3], candidates=CANDS[:3]).values
    theirs = bert_score.score(CANDS[:3], REFS[:3], model_type=str(minilm_dir()), num_layers=6)
    assert (
        max(abs(a - b) for a, b in zip(values["bertscore_f"], theirs[2].tolist(), strict=True))
        <= TOL
    )


def test_fallback_refuses_rescale_without_baseline(offline):
    reason = BertScore(rescale=True).availability()
    assert reason is not None and "baseline" in reason


def test_default_model_from_model_dir_uses_layer5_baseline(offline, monkeypatch):
    root = offline / "models"
    build_tiny_roberta(root, num_layers=5, name="distilbert--distilroberta-base")
    monkeypatch.setenv("RADCONCORD_MODEL_DIR", str(root))
    m = BertScore()
    assert not m.is_fallback and m.label == "distilroberta-base"
    sig = m.signature()
    assert "|L5|no-idf|rescale:P=0.84732,R=0.84759504,F=0.8473319|" in sig
    raw = BertScore(rescale=False).score(references=REFS, candidates=CANDS).values
    scaled = m.score(references=REFS, candidates=CANDS).values
    for key, b in zip(KEYS, DISTILROBERTA_L5_BASELINE, strict=True):
        for x, y in zip(raw[key], scaled[key], strict=True):
            assert y == pytest.approx((x - b) / (1 - b), abs=1e-12)


def test_builtin_baseline_matches_bert_score_file():
    f = bert_score.__file__.replace("__init__.py", "rescale_baseline/en/distilroberta-base.tsv")
    assert read_baseline(f, 5) == pytest.approx(DISTILROBERTA_L5_BASELINE, abs=0)


def test_explicit_absent_model_is_unavailable(offline):
    m = BertScore(model="acme/absent-model", revision="b" * 40)
    reason = m.availability()
    assert reason is not None and "acme/absent-model" in reason
    with pytest.raises(MetricUnavailable):
        m.score(references=["a"], candidates=["b"])


def test_idf_uses_all_references_of_the_call(tiny_roberta):
    opts = {"model": str(tiny_roberta), "num_layers": 2, "idf": True}
    whole = BertScore(**opts).score(references=REFS, candidates=CANDS).values["bertscore_f"]
    one = BertScore(**opts)
    per_pair = [
        one.score(references=[r], candidates=[c]).values["bertscore_f"][0]
        for r, c in zip(REFS, CANDS, strict=True)
    ]
    # With M = 1 every reference token gets idf log(2/2) = 0: recall is undefined (0/0).
    assert all(math.isfinite(v) for v in whole)
    assert all(math.isnan(v) for v in per_pair)
    fitted = BertScore(**opts)
    fitted.fit_idf(references=REFS)
    chunked = [
        fitted.score(references=REFS[i : i + 3], candidates=CANDS[i : i + 3]).values
        for i in range(0, len(REFS), 3)
    ]
    flat = [v for part in chunked for v in part["bertscore_f"]]
    assert max(abs(a - b) for a, b in zip(whole, flat, strict=True)) <= 1e-6  # batch padding only
    assert "|idf:refs-" in fitted.signature()


def test_empty_side_scores_zero_before_rescale(tiny_roberta, baseline_file):
    raw = BertScore(model=str(tiny_roberta), num_layers=2).score(
        references=["No effusion.", "", "  "], candidates=["", "Clear lungs.", "No effusion."]
    )
    for k in KEYS:
        assert raw.values[k] == [0.0, 0.0, 0.0]
    scaled = BertScore(model=str(tiny_roberta), num_layers=2, baseline=str(baseline_file)).score(
        references=["No effusion."], candidates=[""]
    )
    b = read_baseline(baseline_file, 2)
    for k, bk in zip(KEYS, b, strict=True):
        assert scaled.values[k][0] == pytest.approx((0 - bk) / (1 - bk), abs=1e-12)


def test_duplicates_and_order_do_not_change_scores(tiny_roberta):
    m = BertScore(model=str(tiny_roberta), num_layers=2)
    a = m.score(references=REFS, candidates=CANDS).values["bertscore_f"]
    rev = m.score(references=REFS[::-1], candidates=CANDS[::-1]).values["bertscore_f"][::-1]
    single = [
        m.score(references=[r], candidates=[c]).values["bertscore_f"][0]
        for r, c in zip(REFS, CANDS, strict=True)
    ]
    assert max(abs(x - y) for x, y in zip(a, rev, strict=True)) <= 1e-6
    assert max(abs(x - y) for x, y in zip(a, single, strict=True)) <= 1e-6
    same = m.score(references=["No acute process."], candidates=["No acute process."])
    assert same.values["bertscore_f"][0] == pytest.approx(1.0, abs=1e-6)
    assert same.details[0]["min_match_p"] == pytest.approx(1.0, abs=1e-6)
    assert same.details[0]["min_match_r"] == pytest.approx(1.0, abs=1e-6)


def test_all_zero_idf_weights_are_nan_not_zero(tiny_roberta):
    # Every candidate token occurs in every reference: all idf weights are 0.
    res = BertScore(model=str(tiny_roberta), num_layers=2, idf=True).score(
        references=["clear lungs", "clear lungs"], candidates=["clear lungs", "clear lungs"]
    )
    assert all(math.isnan(v) for v in res.values["bertscore_f"])


def test_signature_states_model_layer_idf_rescale(tiny_roberta, baseline_file, tmp_path):
    copy = tmp_path / "copy-of-roberta"
    shutil.copytree(tiny_roberta, copy)
    m = BertScore(model=str(copy), num_layers=3, idf=True, baseline=str(baseline_file))
    fp = hf.fingerprint(copy)[:16]
    assert m.signature().startswith(
        f"bertscore|model:copy-of-roberta@sha256:{fp}|L3|idf:scored-set|"
        "rescale:P=0.7,R=0.72,F=0.71|version:"
    )
    assert BertScore(model=str(copy)).signature().split("|")[2] == "L3"  # last layer


def test_bad_options_fail_clearly(tiny_roberta, tmp_path):
    with pytest.raises(ValueError, match="unknown option"):
        BertScore(layers=3)
    with pytest.raises(ValueError, match="num_layers"):
        BertScore(num_layers=-1)
    bad = tmp_path / "bad.tsv"
    bad.write_text("x,y\n1,2\n")
    reason = BertScore(model=str(tiny_roberta), num_layers=1, baseline=str(bad)).availability()
    assert reason is not None and "bad.tsv" in reason and "LAYER,P,R,F" in reason


def test_idf_makes_the_metric_corpus_dependent_until_fitted():
    """The runner scores corpus-dependent metrics in one call over the whole scored set."""
    from radconcord.backend.metrics.bertscore import BertScore

    assert BertScore(idf=False).corpus_dependent is False
    metric = BertScore(idf=True)
    assert metric.corpus_dependent is True
    assert "idf:scored-set" in metric.signature()
