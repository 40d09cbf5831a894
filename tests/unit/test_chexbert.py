"""CheXbert labels and s_emb on a tiny random-weight checkpoint in the public file format.

The checkpoint is written exactly like ``chexbert.pth``: ``torch.save({"model_state_dict":
...})`` with ``module.``-prefixed keys (DataParallel) and the legacy ``position_ids`` buffer,
so the same loading code a user's real checkpoint goes through is exercised.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from radconcord.backend.metrics import chexbert, labels
from radconcord.backend.metrics.base import MetricUnavailable
from tests.helpers_chexbert import write_chexbert_checkpoint
from tests.helpers_models import build_tiny_bert

REPORTS = [
    "No acute cardiopulmonary process.",
    "Small left pleural effusion. Mild cardiomegaly.",
    "Possible right lower lobe pneumonia.\n\nNo pneumothorax.",
    "",
]


def _write_checkpoint(tmp_path, seed: int = 0):
    return write_chexbert_checkpoint(tmp_path, seed)


def _reference_forward(bert, heads, tokenizer, text):
    """Independent forward pass: BERT [CLS] -> each head -> argmax."""
    enc = tokenizer(chexbert.preprocess(text), truncation=True, max_length=512, return_tensors="pt")
    with torch.no_grad():
        cls = bert(**{k: enc[k] for k in ("input_ids", "attention_mask")})[0][:, 0, :]
        preds = [int(h(cls).argmax(dim=1)) for h in heads]
    return cls[0].numpy().astype(np.float64), preds


def test_labels_and_semb_match_an_independent_forward_pass(tmp_path):
    """Labels equal argmax of an independent forward pass (exact); s_emb equal to the cosine of
    independently computed CLS vectors within 1e-5 (fp32 batching/padding noise)."""
    enc, ckpt, bert, heads = _write_checkpoint(tmp_path)
    metric = chexbert.ChexbertLabels(checkpoint=str(ckpt), encoder=str(enc), batch_size=2)
    assert metric.availability() is None
    got = metric.label_reports(REPORTS)
    tok = metric._model.tokenizer
    mapping = {0: None, 1: 1, 2: 0, 3: -1}
    for text, lab in zip(REPORTS, got, strict=True):
        _, preds = _reference_forward(bert, heads, tok, text)
        expected_by_name = {
            name: mapping[p] for name, p in zip(chexbert.CHEXBERT_CONDITIONS, preds, strict=True)
        }
        assert lab == tuple(expected_by_name[o] for o in labels.OBSERVATIONS)

    semb = chexbert.SEmb(checkpoint=str(ckpt), encoder=str(enc))
    refs, cands = REPORTS[:3], [REPORTS[1], REPORTS[1], REPORTS[0]]
    res = semb.score(references=refs, candidates=cands)
    for r, c, value in zip(refs, cands, res.values["semb"], strict=True):
        vr, _ = _reference_forward(bert, heads, tok, r)
        vc, _ = _reference_forward(bert, heads, tok, c)
        expected = float(vr @ vc / (np.linalg.norm(vr) * np.linalg.norm(vc)))
        assert value == pytest.approx(expected, abs=1e-5)
    assert res.values["semb"][1] == pytest.approx(1.0, abs=1e-6)


def test_pair_scores_and_corpus_outputs(tmp_path):
    enc, ckpt, _, _ = _write_checkpoint(tmp_path)
    metric = chexbert.ChexbertLabels(checkpoint=str(ckpt), encoder=str(enc))
    res = metric.score(references=REPORTS, candidates=REPORTS)
    assert res.values["chexbert_acc"] == [1.0] * 4
    assert res.values["chexbert_f1"] == [1.0] * 4
    assert set(res.corpus) == set(labels.corpus_keys("chexbert"))
    assert len(res.details) == 4 and "reference_labels" in res.details[0]


def test_signature_names_checkpoint_hash_and_changes_with_weights(tmp_path):
    enc, ckpt, _, _ = _write_checkpoint(tmp_path)
    sha = chexbert.file_sha256(ckpt)
    sig = chexbert.ChexbertLabels(checkpoint=str(ckpt), encoder=str(enc)).signature()
    assert sig.startswith(f"chexbert|ckpt:sha256:{sha[:16]}|tok:")
    assert sig.endswith("|maxlen:512|dtype:fp32|bin:uncertain=positive|version:1")
    other = tmp_path / "other"
    other.mkdir()
    _, ckpt2, _, _ = _write_checkpoint(other, seed=5)
    sig2 = chexbert.ChexbertLabels(checkpoint=str(ckpt2), encoder=str(enc)).signature()
    assert sig2 != sig
    semb_sig = chexbert.SEmb(checkpoint=str(ckpt), encoder=str(enc)).signature()
    assert semb_sig.startswith("semb|ckpt:") and "pool:cls|sim:cosine" in semb_sig


def test_unavailable_without_weights_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("RADCONCORD_MODEL_DIR", raising=False)
    metric = chexbert.ChexbertLabels()
    reason = metric.availability()
    assert reason is not None and "chexbert.pth" in reason and "HF_HUB_OFFLINE" in reason
    with pytest.raises(MetricUnavailable):
        metric.score(references=["a"], candidates=["b"])
    missing = chexbert.SEmb(checkpoint=str(tmp_path / "nope.pth")).availability()
    assert missing is not None and "does not exist" in missing


def test_model_dir_lookup(tmp_path, monkeypatch):
    enc, ckpt, _, _ = _write_checkpoint(tmp_path)
    monkeypatch.setenv("RADCONCORD_MODEL_DIR", str(tmp_path))
    path, reason = chexbert.locate_checkpoint(None)
    assert reason is None and path == ckpt.resolve()


def test_wrong_checkpoint_is_rejected(tmp_path):
    enc = build_tiny_bert(tmp_path, name="enc")
    bad = tmp_path / "bad.pth"
    torch.save({"model_state_dict": {"module.foo.weight": torch.zeros(2)}}, bad)
    metric = chexbert.SEmb(checkpoint=str(bad), encoder=str(enc))
    with pytest.raises(ValueError, match="not a CheXbert checkpoint"):
        metric.load("cpu")


def test_empty_report_embeds_without_nan(tmp_path):
    enc, ckpt, _, _ = _write_checkpoint(tmp_path)
    res = chexbert.SEmb(checkpoint=str(ckpt), encoder=str(enc)).score(
        references=[""], candidates=["No effusion."]
    )
    assert not math.isnan(res.values["semb"][0])
