"""CT-RATE's released report classifier: the loading and inference wiring, on a tiny BERT.

The released model (CT-CLIP ``text_classifier/classifier.py``) is an encoder
(``zzxslp/RadBERT-RoBERTa-4m``) with ``nn.Linear(hidden, 18)`` over ``pooler_output``; its
``torch.save``-d state dict has ``model.*`` and ``classifier.*`` keys; inference applies a
sigmoid and calls ``>= 0.5`` positive. Here a seeded random BERT of that shape (BertConfig,
word-piece vocabulary written here; one test also with a RobertaConfig, the released encoder's
architecture) stands in: the tests check the label order, the threshold,
batching and order restoration, the checkpoint formats and the unavailable path, not accuracy.
Reference values come from running the same modules by hand (tolerance 1e-5).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from radconcord.backend.metrics.base import MetricUnavailable
from radconcord.backend.metrics.crg import Crg, crg
from radconcord.backend.metrics.ctrate import (
    CTRATE_LABELS,
    CtRateClassifier,
    CtRateClassifierModel,
    locate_classifier_checkpoint,
)
from radconcord.backend.util import cached_file_sha256

WORDS = ("no yes there is a pleural effusion cardiomegaly nodule in the right left lung lobe"
         " lower upper heart size increased emphysema atelectasis trachea open . ,").split()


def _build(tmp_path: Path, *, seed: int = 0, arch: str = "bert") -> tuple[Path, Any, Any]:
    """Save a tiny encoder folder; return it with an unsaved encoder + head.

    ``arch="roberta"`` builds the released encoder's architecture (RadBERT-RoBERTa) with the
    same word-piece vocabulary: the tokenizer does not matter to the wiring, the encoder class
    ``AutoModel`` picks from the config and the state dict's key names do.
    """
    from transformers import BertConfig, BertModel, BertTokenizer, RobertaConfig, RobertaModel

    enc_dir = tmp_path / "tiny-radbert"
    enc_dir.mkdir()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (enc_dir / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tok = BertTokenizer(str(enc_dir / "vocab.txt"), do_lower_case=True)
    tok.save_pretrained(str(enc_dir))
    config_class, model_class = ((RobertaConfig, RobertaModel) if arch == "roberta"
                                 else (BertConfig, BertModel))
    config = config_class(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
                          num_attention_heads=4, intermediate_size=64,
                          max_position_embeddings=80, pad_token_id=0)
    torch.manual_seed(seed)
    encoder = model_class(config).eval()
    encoder.save_pretrained(str(enc_dir))  # the hub folder ships weights; the checkpoint wins
    torch.manual_seed(seed + 1)
    head = torch.nn.Linear(config.hidden_size, len(CTRATE_LABELS))
    torch.manual_seed(seed + 2)
    for p in encoder.parameters():  # the checkpoint's encoder differs from the folder's
        p.data.add_(0.05 * torch.randn_like(p))
    return enc_dir, encoder, head


def _state(encoder, head, prefix: str = "") -> dict:
    state = {f"{prefix}model.{k}": v for k, v in encoder.state_dict().items()}
    state.update({f"{prefix}classifier.{k}": v for k, v in head.state_dict().items()})
    return state


def _reference_probs(enc_dir: Path, encoder, head, texts: list[str]) -> list[list[float]]:
    from transformers import BertTokenizer

    tok = BertTokenizer.from_pretrained(str(enc_dir), do_lower_case=True)
    out = []
    with torch.no_grad():
        for t in texts:  # one at a time: no padding at all
            enc = tok(t, truncation=True, max_length=512, return_tensors="pt")
            pooled = encoder(input_ids=enc["input_ids"],
                             attention_mask=enc["attention_mask"]).pooler_output
            out.append(torch.sigmoid(head(pooled))[0].tolist())
    return out


TEXTS = [
    "There is a pleural effusion in the right lower lobe.",
    "No cardiomegaly.",
    "Heart size increased, emphysema in the upper lobe, atelectasis in the left lung, nodule.",
    "Trachea open.",
    "no",
]


@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_probabilities_match_the_modules_run_by_hand_in_any_batch_size(tmp_path, arch):
    enc_dir, encoder, head = _build(tmp_path, arch=arch)
    ckpt = tmp_path / "RadBertClassifier.pth"
    torch.save(_state(encoder, head), ckpt)
    model = CtRateClassifierModel(encoder_dir=enc_dir, checkpoint=ckpt, device="cpu")
    assert type(model.net.model) is type(encoder)
    want = _reference_probs(enc_dir, encoder, head, TEXTS)
    for batch_size in (1, 2, 32):
        got = model.probabilities(TEXTS, batch_size=batch_size)
        assert len(got) == len(TEXTS)
        for g_row, w_row in zip(got, want, strict=True):
            assert len(g_row) == 18
            assert g_row == pytest.approx(w_row, abs=1e-5)
    # Labels are the probabilities cut at 0.5, in the same order.
    labels = model.label(TEXTS, batch_size=2)
    assert labels == [tuple(int(p >= 0.5) for p in row) for row in want]


def test_label_order_and_the_threshold_is_inclusive(tmp_path):
    enc_dir, encoder, head = _build(tmp_path)
    with torch.no_grad():
        head.weight.zero_()  # logits = bias, whatever the text
        bias = torch.full((18,), -9.0)
        bias[CTRATE_LABELS.index("Cardiomegaly")] = 9.0
        bias[CTRATE_LABELS.index("Interlobular septal thickening")] = 0.0  # sigmoid = 0.5
        bias[CTRATE_LABELS.index("Medical material")] = -0.01  # just under 0.5
        head.bias.copy_(bias)
    ckpt = tmp_path / "clf.pth"
    # The DataParallel prefix and a wrapper dict are both accepted.
    torch.save({"state_dict": _state(encoder, head, prefix="module.")}, ckpt)
    model = CtRateClassifierModel(encoder_dir=enc_dir, checkpoint=ckpt, device="cpu")
    (row,) = model.label(["No cardiomegaly."])
    positive = {CTRATE_LABELS[i] for i, v in enumerate(row) if v}
    assert positive == {"Cardiomegaly", "Interlobular septal thickening"}


def test_a_checkpoint_that_is_not_the_18_label_classifier_is_refused(tmp_path):
    enc_dir, encoder, _ = _build(tmp_path)
    wrong = torch.nn.Linear(encoder.config.hidden_size, 20)  # CT-CLIP's older 20-label head
    ckpt = tmp_path / "wrong.pth"
    torch.save(_state(encoder, wrong), ckpt)
    with pytest.raises(ValueError, match="18-label"):
        CtRateClassifierModel(encoder_dir=enc_dir, checkpoint=ckpt, device="cpu")
    state = _state(encoder, torch.nn.Linear(encoder.config.hidden_size, 18))
    state.pop("model.pooler.dense.weight")
    torch.save(state, ckpt)
    with pytest.raises(ValueError, match="does not fit"):
        CtRateClassifierModel(encoder_dir=enc_dir, checkpoint=ckpt, device="cpu")


def test_weights_absent_means_unavailable_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("RADCONCORD_MODEL_DIR", str(tmp_path / "models"))
    path, reason = locate_classifier_checkpoint(None)
    assert path is None and "RadBertClassifier.pth" in reason and "CT-RATE" in reason
    metric = Crg(labels="ctrate", labeler="classifier")
    got = metric.availability()
    assert got is not None and "gated" in got and "crg.checkpoint" in got
    with pytest.raises(MetricUnavailable):
        metric.signature()
    _, reason = locate_classifier_checkpoint(str(tmp_path / "nope.pth"))
    assert reason is not None and "does not exist" in reason
    # A copy under the models folder is found.
    (tmp_path / "models" / "ibrahimhamamci--CT-RATE").mkdir(parents=True)
    target = tmp_path / "models" / "ibrahimhamamci--CT-RATE" / "RadBertClassifier.pth"
    target.write_bytes(b"x")
    assert locate_classifier_checkpoint(None) == (target.resolve(), None)


def test_crg_over_the_classifier(tmp_path):
    enc_dir, encoder, head = _build(tmp_path, seed=3)
    ckpt = tmp_path / "RadBertClassifier.pth"
    torch.save(_state(encoder, head), ckpt)
    metric = Crg(labels="ctrate", labeler="classifier", checkpoint=str(ckpt),
                 model=str(enc_dir), batch_size=2)
    assert metric.availability() is None
    refs, cands = TEXTS[:3], TEXTS[2:5]
    res = metric.score(references=refs, candidates=cands)
    want = [tuple(int(p >= 0.5) for p in row)
            for row in _reference_probs(enc_dir, encoder, head, refs + cands)]
    for i in range(3):
        r, c = want[i], want[3 + i]
        tp = sum(a and b for a, b in zip(r, c, strict=True))
        fn = sum(a and not b for a, b in zip(r, c, strict=True))
        fp = sum(b and not a for a, b in zip(r, c, strict=True))
        expected = crg(tp, fn, fp, 18, sum(r))
        assert res.values["crg"][i] == pytest.approx(expected, abs=1e-12)
        assert res.details[i]["reference_labels"] == list(r)
    assert not math.isnan(res.corpus["crg_corpus"])
    sig = metric.signature()
    assert sig.startswith("crg|labels:ctrate|bin:uncertain=positive|labeler:[ctrate-classifier|")
    assert f"ckpt:sha256:{cached_file_sha256(ckpt)[:16]}" in sig
    assert "enc:tiny-radbert@sha256:" in sig and "sigmoid>=0.5" in sig


def test_classifier_options_are_checked():
    with pytest.raises(ValueError, match="structured"):
        Crg(labels="ctrate", labeler="classifier", structured=True)
    with pytest.raises(ValueError, match="labeler"):
        Crg(labels="ctrate", labeler="chexbert")
    assert isinstance(Crg(labels="ctrate", labeler="classifier")._get_labeler(),
                      CtRateClassifier)
