"""SRR-BERT (backend.metrics.srrbert): aggregation parity with RadEval, sentence clean-up,
label mappings, and the full path on a tiny random-weight BERT classifier with 163 outputs.

Parity: ``tests/fixtures/srrbert_aggregation_reference.json`` made by
``tests/fixtures/generators/srrbert_aggregation_reference.py`` from jbdel/RadEval@e0a39097
(``radeval/utils.py`` ``multilabel_prf_per_sample``; ``radeval/metrics/SRRBert/srr_bert.py``
``SRRBert.evaluate``'s sklearn ``classification_report`` weighted average and
``srr_bert_parse_sentences``'s clean-up). Tolerance: per-pair values equal to 1e-15, weighted
averages to 1e-12 (sklearn sums in another order), cleaned texts equal. Not verifiable without
the StanfordAIMI weights: the labels the real classifier predicts.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from radconcord.backend.metrics import hf, registry
from radconcord.backend.metrics.base import MetricUnavailable
from radconcord.backend.metrics.srrbert import (
    DEFAULT_MODEL_TYPE,
    MODELS,
    SrrBert,
    clean_numbering,
    label_mapping,
    label_names,
    per_pair_prf,
    weighted_prf,
)
from tests.helpers_models import CORPUS

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "srrbert_aggregation_reference.json"


@pytest.fixture(scope="module")
def reference() -> dict:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


def build_tiny_srrbert(folder: Path, n_labels: int = 163, seed: int = 0) -> Path:
    """A random-weight ``BertForSequenceClassification`` with ``n_labels`` outputs and a
    WordPiece tokenizer, saved in ``folder`` (same architecture as SRR-BERT, tiny)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    words = sorted({w for s in CORPUS for w in re.findall(r"\w+|[^\w\s]", s.lower())})
    chars = sorted({c for w in words for c in w})
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = specials + words + [c for c in chars if c not in words] + [f"##{c}" for c in chars]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tok = BertTokenizer(vocab=str(folder / "vocab.txt"), do_lower_case=True)
    tok.save_pretrained(str(folder))
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64, max_position_embeddings=128,
                        num_labels=n_labels, problem_type="multi_label_classification")
    model = BertForSequenceClassification(config)
    with torch.no_grad():  # random logits near 0 -> a spread of labels above the threshold
        model.classifier.weight.mul_(40.0)
    model.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_srrbert(tmp_path_factory.mktemp("srr") / "tiny-srrbert")


def _metric(folder: Path, **kw) -> SrrBert:
    return SrrBert(model=str(folder), tokenizer=str(folder), splitter="punkt-untrained",
                   batch_size=3, **kw)


# ------------------------------------------------------------------------- parity, pure parts


@pytest.mark.parametrize("name", ["all", "empty_refs"])
def test_aggregation_equals_radeval(reference, name):
    case = reference["sets"][name]
    t, p = np.array(case["y_true"]), np.array(case["y_pred"])
    sp, sr, sf = per_pair_prf(t, p)
    np.testing.assert_allclose(sp, case["sample_precision"], rtol=0, atol=1e-15)
    np.testing.assert_allclose(sr, case["sample_recall"], rtol=0, atol=1e-15)
    np.testing.assert_allclose(sf, case["sample_f1"], rtol=0, atol=1e-15)
    got = weighted_prf(t, p)
    want = case["weighted_avg"]
    assert got["precision"] == pytest.approx(want["precision"], rel=0, abs=1e-12)
    assert got["recall"] == pytest.approx(want["recall"], rel=0, abs=1e-12)
    assert got["f1"] == pytest.approx(want["f1-score"], rel=0, abs=1e-12)


def test_sentence_cleanup_equals_radeval(reference):
    for text, cleaned in reference["cleaned_texts"]:
        assert clean_numbering(text) == cleaned, text


def test_label_mappings_as_radeval_ships_them():
    assert {t: len(label_mapping(t)) for t in MODELS} == {
        "leaves": 55, "upper": 25, "leaves_with_statuses": 163, "upper_with_statuses": 73}
    names = label_names(DEFAULT_MODEL_TYPE)
    assert sorted(label_mapping(DEFAULT_MODEL_TYPE).values()) == list(range(163))
    # Labels RadEval's own tests name.
    for label in ("Edema (Present)", "Cardiomegaly (Present)", "No Finding",
                  "Atelectasis (Present)"):
        assert label in names
    assert MODELS[DEFAULT_MODEL_TYPE] == "StanfordAIMI/SRR-BERT-Leaves-with-Statuses"
    with pytest.raises(ValueError, match="unknown model_type"):
        SrrBert(model_type="nope")


# ------------------------------------------------------------------------- the model path


def test_tiny_model_full_path(tiny):
    metric = _metric(tiny)
    assert metric.availability() is None
    refs = ["1. Cardiomegaly. 2. Bilateral pleural effusions. 3. Pulmonary edema.",
            "No acute findings.", "Mild pulmonary edema."]
    cands = ["1. Cardiomegaly. 2. Bilateral pleural effusions.", "No acute findings.",
             "Small left pleural effusion. No pneumothorax."]
    res = metric.score(references=refs, candidates=cands)
    assert res.details is not None and len(res) == 3

    # Report labels = union of the sentence labels, each sentence classified on its own.
    clf = metric._classifier
    assert clf is not None
    names = label_names(DEFAULT_MODEL_TYPE)

    def labels(report: str) -> list[str]:
        rows = np.stack([clf.predict([s])[0] for s in metric.split(report)])
        return [names[j] for j in np.flatnonzero(rows.any(axis=0))]

    for i, d in enumerate(res.details):
        assert d["reference_labels"] == labels(refs[i])
        assert d["candidate_labels"] == labels(cands[i])
    assert metric.split(refs[0]) == ["Cardiomegaly.", "Bilateral pleural effusions.",
                                     "Pulmonary edema."]
    # Values follow from those labels through the aggregation checked against RadEval.
    index = label_mapping(DEFAULT_MODEL_TYPE)
    t = np.zeros((3, 163), int)
    p = np.zeros((3, 163), int)
    for i, d in enumerate(res.details):
        t[i, [index[x] for x in d["reference_labels"]]] = 1
        p[i, [index[x] for x in d["candidate_labels"]]] = 1
    sp, sr, sf = per_pair_prf(t, p)
    assert res.values["srrbert_weighted_f1"] == sf.tolist()
    assert res.values["srrbert_weighted_precision"] == sp.tolist()
    assert res.values["srrbert_weighted_recall"] == sr.tolist()
    assert res.corpus["srrbert_weighted_f1_corpus"] == weighted_prf(t, p)["f1"]
    # The random classifier fires a spread of labels, so the comparison is not trivial.
    assert all(d["reference_labels"] for d in res.details)
    assert res.details[2]["reference_labels"] != res.details[2]["candidate_labels"]
    assert 0 < res.values["srrbert_weighted_f1"][2] < 1
    # Identical reports: perfect agreement (up to RadEval's 1e-8 smoothing).
    assert res.values["srrbert_weighted_f1"][1] == pytest.approx(1.0, abs=1e-7)
    # Scores of a pair do not depend on the rest of the batch.
    alone = metric.score(references=refs[2:], candidates=cands[2:])
    assert alone.values["srrbert_weighted_f1"] == res.values["srrbert_weighted_f1"][2:]


def test_threshold_and_label_names_on_a_fixed_classifier(tmp_path):
    """Classifier weights zeroed, biases +-10: exactly the chosen labels fire on any text."""
    import torch
    from safetensors.torch import load_file, save_file

    folder = build_tiny_srrbert(tmp_path / "fixed")
    weights = load_file(str(folder / "model.safetensors"))
    weights["classifier.weight"] = torch.zeros_like(weights["classifier.weight"])
    bias = torch.full_like(weights["classifier.bias"], -10.0)
    index = label_mapping(DEFAULT_MODEL_TYPE)
    bias[index["Edema (Present)"]] = 10.0
    bias[index["No Finding"]] = 10.0
    weights["classifier.bias"] = bias
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    res = _metric(folder).score(references=["Edema.", "x"], candidates=["Clear.", "y. z."])
    for d in res.details:
        assert d["reference_labels"] == d["candidate_labels"] == sorted(
            ["Edema (Present)", "No Finding"], key=index.__getitem__)
    assert res.values["srrbert_weighted_f1"] == [pytest.approx(1.0, abs=1e-7)] * 2
    assert res.corpus["srrbert_weighted_f1_corpus"] == 1.0


def test_wrong_number_of_outputs_is_unavailable(tmp_path):
    folder = build_tiny_srrbert(tmp_path / "five", n_labels=5)
    with pytest.raises(MetricUnavailable, match="163-label"):
        _metric(folder).score(references=["a."], candidates=["b."])


# ------------------------------------------------------------------------- availability etc.


def test_unavailable_with_reasons(monkeypatch, tmp_path, tiny):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("RADCONCORD_MODEL_DIR", str(tmp_path))
    reason = SrrBert(splitter="punkt-untrained").availability()
    assert reason.startswith("SRR-BERT classifier not available")
    assert "StanfordAIMI/SRR-BERT-Leaves-with-Statuses" in reason
    with pytest.raises(MetricUnavailable):
        SrrBert(splitter="punkt-untrained").signature()
    reason = SrrBert(model=str(tiny), splitter="punkt-untrained").availability()
    assert "tokenizer" in reason and "BiomedVLP-CXR-BERT-general" in reason

    import nltk

    def no_data(name, *a, **k):
        raise LookupError(name)

    monkeypatch.setattr(nltk.data, "find", no_data)
    reason = SrrBert(model=str(tiny), tokenizer=str(tiny)).availability()
    assert "punkt_tab" in reason and "punkt-untrained" in reason


def test_signature_names_weights_and_settings(tiny):
    sig = _metric(tiny).signature()
    fp = hf.fingerprint(tiny)[:16]
    assert sig == (f"srrbert|type:leaves_with_statuses|model:tiny-srrbert@sha256:{fp}"
                   f"|tok:tiny-srrbert@sha256:{fp}|split:punkt-untrained|thr:0.5|max_len:512"
                   "|pair:mean-union|corpus:weighted")
    with pytest.raises(ValueError, match="splitter"):
        SrrBert(splitter="spacy")
    with pytest.raises(ValueError, match="batch_size"):
        SrrBert(batch_size=0)


def test_registry_entry():
    entry = registry.ENTRIES["srrbert"]
    assert entry.keys == ("srrbert_weighted_f1", "srrbert_weighted_precision",
                          "srrbert_weighted_recall")
    assert all(registry.higher_is_better(k) for k in entry.keys)
    assert not registry.corpus_dependent("srrbert", {})
