"""BERTScore on a ModernBERT encoder, as RadEval's ``radeval_bertscore`` computes it.

RadEval 2.2 (jbdel/RadEval@e0a39097, ``radeval/metrics/radevalbertscore/adapter.py``) scores
with ``IAMJB/RadEvalModernBERT`` at ``num_layers=22``, no idf, no baseline rescaling, through
its vendored bert_score, whose ``get_model`` cuts a ModernBERT like bert_score 0.3.13 cuts
BART: ``model.layers[:num_layers]``, then reads ``last_hidden_state`` (after ModernBERT's final
norm). Reference here: ``bert_score.score`` (0.3.13, installed; same ``layers`` branch) on a
tiny random-weight ``ModernBertModel`` saved by the test, with a non-trivial final norm so that
reading the wrong tensor shows. Tolerance 1e-6 on P, R, F, on pairs where every best match
is positive (bert_score's padding rule, see ``test_bertscore.py``): both sides run in float32
and differ in batching/padding and summation order (and so with the CPU's kernels); the
model is 32 wide with a 64-wide feed-forward, about sqrt(64) * eps = 9.5e-7 for another
reduction order (eps = 2**-23), observed at most 1.3e-7. No rescaling, so no 1 / (1 - b)
factor. The real RadEvalModernBERT weights could not be checked here.
"""

from __future__ import annotations

import bert_score
import pytest
import torch

from radconcord.backend.metrics.bertscore import KNOWN_LAYERS, BertScore
from tests.helpers_models import build_tiny_bert

REFS = [
    "No pleural effusion. Heart size is normal.",
    "Mild cardiomegaly with small bilateral pleural effusions.",
    "Right lower lobe consolidation concerning for pneumonia.",
    "No acute cardiopulmonary process.",
]
CANDS = [
    "Heart size is normal, no effusion.",
    "Cardiomegaly. Bilateral effusions are small.",
    "Consolidation in the right lower lobe.",
    "No acute cardiopulmonary process.",
]
KEYS = ("bertscore_p", "bertscore_r", "bertscore_f")
N_LAYERS = 4


@pytest.fixture(scope="module")
def tiny_modernbert(tmp_path_factory):
    from transformers import BertTokenizerFast, ModernBertConfig, ModernBertModel

    root = tmp_path_factory.mktemp("mb")
    tok = BertTokenizerFast.from_pretrained(str(build_tiny_bert(root, own_vocab=True)))
    torch.manual_seed(0)
    config = ModernBertConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=N_LAYERS,
        num_attention_heads=4, global_attn_every_n_layers=2, local_attention=8,
        max_position_embeddings=128, pad_token_id=tok.pad_token_id,
        cls_token_id=tok.cls_token_id, sep_token_id=tok.sep_token_id,
        bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id,
    )
    model = ModernBertModel(config).eval()
    with torch.no_grad():  # a final norm that is not the identity
        model.final_norm.weight.copy_(torch.rand(32, generator=torch.Generator().manual_seed(1))
                                      * 3)
    out = root / "tiny-modernbert"
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    return out


def _reference(folder, layer):
    p, r, f = bert_score.score(CANDS, REFS, model_type=str(folder), num_layers=layer,
                               lang="en", batch_size=3, nthreads=0)
    return {"bertscore_p": p.tolist(), "bertscore_r": r.tolist(), "bertscore_f": f.tolist()}


@pytest.mark.parametrize("layer", [2, N_LAYERS])
def test_parity_with_bert_score_on_a_tiny_modernbert(tiny_modernbert, layer):
    ours = BertScore(model=str(tiny_modernbert), num_layers=layer, batch_size=2).score(
        references=REFS, candidates=CANDS)
    theirs = _reference(tiny_modernbert, layer)
    checked = 0
    for i, d in enumerate(ours.details):
        if d["min_match_p"] <= 0 or d["min_match_r"] <= 0:
            continue  # bert_score's padded positions may win the max there
        checked += 1
        for k in KEYS:
            assert abs(ours.values[k][i] - theirs[k][i]) <= 1e-6, (k, i)
    assert checked >= 3


def test_radeval_modernbert_layer_and_signature(tiny_modernbert, tmp_path, monkeypatch):
    assert KNOWN_LAYERS["IAMJB/RadEvalModernBERT"] == 22
    # The hub id found in the model folder: its layer (22), no baseline, no idf.
    (tmp_path / "IAMJB--RadEvalModernBERT").symlink_to(tiny_modernbert, target_is_directory=True)
    monkeypatch.setenv("RADCONCORD_MODEL_DIR", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sig = BertScore(model="IAMJB/RadEvalModernBERT").signature()
    assert "|model:IAMJB/RadEvalModernBERT@sha256:" in sig and "|L22|" in sig
    assert "rescale:" not in sig
