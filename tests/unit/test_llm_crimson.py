"""CRIMSON the metric: prompt options, patient context, NaN on unreadable answers, backends.

The score itself is parity-tested against upstream in tests/parity/test_crimson.py.
"""

from __future__ import annotations

import json
import math

import pytest

from radconcord.backend.metrics import crimson
from radconcord.backend.metrics.base import MetricInputError
from radconcord.backend.metrics.crimson import Crimson, parse_answer, score_evaluation
from radconcord.backend.metrics.llm_server import LLMServer
from tests.helpers_llm import build_tiny_llama

ANSWER = {
    "reference_findings": [
        {"id": "R1", "finding": "mild cardiomegaly", "clinical_significance":
         "actionable_not_urgent"},
        {"id": "R2", "finding": "small left effusion", "clinical_significance":
         "actionable_not_urgent"}],
    "predicted_findings": [
        {"id": "P1", "finding": "cardiomegaly", "clinical_significance": "actionable_not_urgent"},
        {"id": "P2", "finding": "pneumothorax", "clinical_significance": "urgent"}],
    "matched_findings": [{"ref_id": "R1", "pred_id": "P1"}],
    "errors": {"false_findings": ["P2"], "missing_findings": ["R2"],
               "attribute_errors": [{"ref_id": "R1", "pred_id": "P1", "severity": "negligible",
                                     "error_types": ["severity"], "explanation": "mild"}]},
}


def test_guidelines_follow_upstream_rule() -> None:
    assert Crimson().guidelines() is False  # the fine-tune was trained without them
    assert Crimson(model="/models/other-chat-model").guidelines() is True
    assert Crimson(guidelines="true").guidelines() is True
    assert Crimson(model="x/y", guidelines=False).guidelines() is False
    with pytest.raises(ValueError, match="guidelines"):
        Crimson(guidelines="sometimes")
    with_g = Crimson(model="x/y").prompts(["R"], ["C"])[0][1]["content"]
    without = Crimson().prompts(["R"], ["C"])[0][1]["content"]
    assert "Specific guidelines for attribute error severity" in with_g
    assert "Specific guidelines for attribute error severity" not in without


def test_patient_context_goes_into_the_prompt_in_order() -> None:
    msgs = Crimson(model="x/y").prompts(
        ["Aortic atherosclerosis."], ["Clear lungs."],
        [{"Age": "82", "Indication": "Routine preoperative evaluation"}])[0]
    assert msgs[0] == {"role": "system", "content": crimson.SYSTEM}
    user = msgs[1]["content"]
    assert "Patient Context:\n    Age: 82\n    Indication: Routine preoperative evaluation\n" \
        in user
    assert "Context guidelines:" in user  # with a context and guidelines on
    assert user.index("Aortic atherosclerosis.") < user.index("Clear lungs.")
    assert "Patient Context" not in Crimson(model="x/y").prompts(["a"], ["b"], [None])[0][1][
        "content"]


def test_contexts_are_checked(tmp_path) -> None:
    m = Crimson(model=str(build_tiny_llama(tmp_path)), max_new_tokens=2)
    with pytest.raises(MetricInputError, match=r"contexts \(1\) and pairs \(2\)"):
        m.score(references=["a", "b"], candidates=["c", "d"], contexts=[None])
    with pytest.raises(MetricInputError, match=r"contexts\[0\] is str"):
        m.score(references=["a"], candidates=["c"], contexts=["Age 82"])


def test_answer_to_score_wiring(monkeypatch, tmp_path) -> None:
    """Answers from the backend are parsed and scored; unreadable ones are NaN + flag."""
    m = Crimson(model=str(build_tiny_llama(tmp_path)))
    answers = [json.dumps(ANSWER), "```json\n" + json.dumps(ANSWER) + "\n```\nDone.",
               "I am not sure.", json.dumps({"matched_findings": [{"pred_id": "P1"}]})]
    m.load("cpu")
    monkeypatch.setattr(m, "chat", lambda prompts, max_new_tokens: answers[: len(prompts)])
    res = m.score(references=["r"] * 4, candidates=["c"] * 4,
                  contexts=[{"Age": 70}, None, None, None])
    expected = score_evaluation(ANSWER)["crimson"]
    # correct = 0.5 * 0.5/(0.5+0) = 0.5; E_false = 1; N_G = 1: S = -0.5, x = 0.5 -> -1/3.
    assert expected == pytest.approx(-1 / 3)
    assert res.values["crimson"][:2] == [expected, expected]
    assert res.values["crimson_false"][0] == 1.0 and res.values["crimson_attribute"][0] == 1.0
    assert res.details[0]["context"] == {"Age": 70} and res.details[1]["context"] is None
    assert math.isnan(res.values["crimson"][2]) and res.details[2]["flags"] == [
        "answer is not readable JSON"]
    assert math.isnan(res.values["crimson_missing"][3])
    assert "malformed evaluation: matched_findings[0] has no 'ref_id'" in res.details[3]["flags"]


def test_parse_answer_never_raises() -> None:
    for text in (None, "", "{", "[1,2]", "}{", '{"a": "\\q"}', "x" * 1000):
        obj, flags = parse_answer(text)
        assert obj is None or isinstance(obj, dict)
        assert obj is not None or flags


@pytest.mark.slow
def test_tiny_model_through_server_equals_in_process(tmp_path) -> None:
    path = build_tiny_llama(tmp_path)
    local = Crimson(model=str(path), max_new_tokens=6, batch_size=2)
    refs, cands = ["Mild cardiomegaly.", "No acute process."], ["Lungs are clear.", "Edema."]
    ctx = [{"Age": "60", "Indication": "dyspnea"}, None]
    a = local.score(references=refs, candidates=cands, contexts=ctx)
    assert all(math.isnan(v) for v in a.values["crimson"])  # random weights: no JSON
    with LLMServer(str(path), device="cpu") as server:
        remote = Crimson(model=str(path), backend="openai", base_url=server.base_url,
                         max_new_tokens=6)
        assert remote.availability() is None
        b = remote.score(references=refs, candidates=cands, contexts=ctx)
        assert [d["generation"] for d in b.details] == [d["generation"] for d in a.details]
        assert remote.signature().startswith(f"crimson|endpoint:openai:{path}@")
    sig = local.signature()
    assert "guidelines:1" in sig and "prompt:crimson@07e333152f2c-" in sig and "fp:" in sig


def _tiny_gemma3(tmp_path):
    """A random Gemma 3 image-text model (the architecture of MedGemma, CRIMSON's default)
    with the tiny word-level tokenizer and a Gemma-style chat template."""
    import torch
    from transformers import AutoTokenizer, Gemma3Config, Gemma3ForConditionalGeneration

    from tests.helpers_llm import tiny_vocab

    src = build_tiny_llama(tmp_path)
    out = tmp_path / "tiny-gemma3"
    v = len(tiny_vocab())
    cfg = Gemma3Config(
        text_config=dict(vocab_size=v, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                         max_position_embeddings=1024, sliding_window=64, pad_token_id=0,
                         bos_token_id=1, eos_token_id=2),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                           num_attention_heads=2, image_size=28, patch_size=14),
        mm_tokens_per_image=4, image_token_index=v - 1, boi_token_index=v - 2,
        eoi_token_index=v - 3,
    )
    torch.manual_seed(0)
    Gemma3ForConditionalGeneration(cfg).save_pretrained(str(out))
    tok = AutoTokenizer.from_pretrained(str(src))
    tok.chat_template = (
        "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m['role'] }}\n"
        "{{ m['content'] }}<end_of_turn>\n{% endfor %}"
        "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
    tok.save_pretrained(str(out))
    return out


def test_gemma3_architecture_loads_and_generates_text_only(tmp_path) -> None:
    """MedGemma is a Gemma 3 image-text model: it loads as a causal LM and writes text from a
    text-only chat prompt (random weights here: the answer is flagged, nothing invented)."""
    path = _tiny_gemma3(tmp_path)
    m = Crimson(model=str(path), max_new_tokens=5, batch_size=2)
    assert m.availability() is None
    res = m.score(references=["Mild cardiomegaly.", "No acute process."],
                  candidates=["Lungs are clear.", "Edema."])
    assert type(m.backend.lm.model).__name__ == "Gemma3ForConditionalGeneration"
    assert all(isinstance(d["generation"], str) and d["flags"] for d in res.details)
    assert all(math.isnan(v) for v in res.values["crimson"])
