"""llm_rexval: the judge's answer parser on hand-written answers, and the generation path.

Reference: the output format is ours (JSON of the 12 ReXVal cells); CheXprompt's text format
(microsoft/chexprompt ``eval_utils.parse_rating_text``, MIT) is read as a fallback. Tolerance:
exact (counts are integers).
"""

from __future__ import annotations

import math

import pytest

from radconcord.backend.metrics import llm_rexval
from radconcord.backend.metrics.llm_rexval import KEYS, LlmRexval, build_messages, parse_judgement
from tests.helpers_llm import build_tiny_llama

GOOD = (
    '{"clinically_significant": {"A": 1, "B": 2, "C": 0, "D": 0, "E": 0, "F": 1},'
    ' "clinically_insignificant": {"A": 0, "B": 0, "C": 1, "D": 0, "E": 0, "F": 0}}'
)


def _cells(j) -> dict[str, int | None]:
    return {f"c{i}_{lvl}": v for (i, lvl), v in j.counts.items()}


def test_well_formed_json() -> None:
    j = parse_judgement(GOOD)
    assert j.flags == [] and j.notes == [] and j.source == "json" and j.complete
    v = j.values()
    assert v["llm_rexval_total"] == 5.0 and v["llm_rexval_sig"] == 4.0
    assert v["llm_rexval_c2_sig"] == 2.0 and v["llm_rexval_c3_insig"] == 1.0
    assert set(v) == set(KEYS)


def test_code_fences_prose_and_trailing_text() -> None:
    text = f"Sure! Here are the counts.\n```json\n{GOOD}\n```\nLet me know if you need more."
    j = parse_judgement(text)
    assert j.flags == [] and j.values()["llm_rexval_total"] == 5.0
    # No fence, prose on both sides, and a brace in the prose before it.
    j = parse_judgement("Errors {see below}: " + GOOD + " (done)")
    assert j.flags == [] and j.values()["llm_rexval_sig"] == 4.0


def test_single_quotes_trailing_commas_python_literals() -> None:
    text = ("{'clinically_significant': {'A': 1, 'B': 0, 'C': 0, 'D': 0, 'E': 0, 'F': 0,},"
            " 'clinically_insignificant': {'A': 0, 'B': 0, 'C': 0, 'D': 0, 'E': 0, 'F': 2,},}")
    j = parse_judgement(text)
    assert j.flags == [] and j.values()["llm_rexval_total"] == 3.0


def test_other_spellings_of_sections_and_categories() -> None:
    text = ('{"significant": {"1": 1, "2": 0, "c3": 0, "category_4": 1, "E": 0, "f": 0},'
            ' "insignificant": {"false prediction of finding": 1, "omission of finding": 0,'
            ' "incorrect location": 0, "incorrect severity": 0,'
            ' "mention of comparison not in reference": 1,'
            ' "omission of comparison": 0}}')
    j = parse_judgement(text)
    assert j.flags == [], j.flags
    assert _cells(j)["c4_sig"] == 1 and _cells(j)["c1_insig"] == 1
    assert _cells(j)["c5_insig"] == 1 and _cells(j)["c6_insig"] == 0
    flat = ", ".join(f'"c{i}_{lvl}": {i % 2}' for i in range(1, 7) for lvl in ("sig", "insig"))
    j = parse_judgement("{" + flat + "}")
    assert j.flags == [] and j.values()["llm_rexval_total"] == 6.0
    per_cat = ", ".join(f'"{c}": {{"significant": 1, "insignificant": 0}}' for c in "ABCDEF")
    j = parse_judgement('{"errors": {' + per_cat + "}}")
    assert j.flags == [] and j.values()["llm_rexval_sig"] == 6.0
    j = parse_judgement('{"significant": [1, 0, 0, 0, 0, 0], "insignificant": [0,0,0,0,0,1]}')
    assert j.flags == [] and j.values()["llm_rexval_total"] == 2.0


def test_missing_cells_are_nan_and_flagged() -> None:
    text = '{"clinically_significant": {"A": 1, "B": 0, "C": 0, "D": 0, "E": 0, "F": 0}}'
    j = parse_judgement(text)
    assert not j.complete
    v = j.values()
    assert v["llm_rexval_sig"] == 1.0  # the significant level is complete
    assert math.isnan(v["llm_rexval_total"]) and math.isnan(v["llm_rexval_c1_insig"])
    assert "missing: c1 insig" in j.flags and len(j.flags) == 6


@pytest.mark.parametrize(
    "value, why",
    [('"two"', None), ('"3 errors"', None), ("2.0", None), ('"several"', "not a count"),
     ("1.5", "not a whole number"), ("-1", "negative"), ("true", "not a count"),
     ("null", "not a count"), ('["x", "y"]', "list")],
)
def test_cell_values(value, why) -> None:
    text = GOOD.replace('"B": 2', f'"B": {value}')
    j = parse_judgement(text)
    c2 = _cells(j)["c2_sig"]
    if why is None:
        assert c2 in (2, 3) and j.flags == []
    else:
        assert c2 is None and math.isnan(j.values()["llm_rexval_c2_sig"])
        assert math.isnan(j.values()["llm_rexval_total"])
        assert any(f.startswith("unreadable: c2 sig") and why in f for f in j.flags) or \
            any("c2 sig" in f for f in j.flags), j.flags
        # The other cells still parse.
        assert _cells(j)["c1_sig"] == 1 and _cells(j)["c3_insig"] == 1


def test_extra_keys_are_noted_not_fatal() -> None:
    text = GOOD[:-1] + ', "explanation": "left vs right", "confidence": 0.9}'
    j = parse_judgement(text)
    assert j.flags == [] and j.complete
    assert "ignored key: explanation" in j.notes and "ignored key: confidence" in j.notes
    text = GOOD.replace('"F": 1}', '"F": 1, "G": 4}')
    j = parse_judgement(text)
    assert j.complete and "ignored key: clinically_significant.G" in j.notes


def test_chexprompt_text_format_fallback() -> None:
    text = ("Number of clinically significant errors by type: ((A, 1), (B, 1), (C, 0), (D, 0),"
            " (E, 0), (F, 1))\nNumber of clinically insignificant errors by type: ((A, 0),"
            " (B, 0), (C, 0), (D, 0), (E, 0), (F, 0))\nExplanation: ...")
    j = parse_judgement(text)
    assert j.source == "chexprompt-text" and j.flags == []
    assert j.values()["llm_rexval_sig"] == 3.0 and j.values()["llm_rexval_total"] == 3.0


def test_truncated_answer_keeps_what_was_written() -> None:
    cut = GOOD[: GOOD.index('"D": 0, "E": 0, "F": 0}}')]
    j = parse_judgement(cut)
    assert j.values()["llm_rexval_sig"] == 4.0  # first section complete
    assert math.isnan(j.values()["llm_rexval_total"])
    assert "missing: c4 insig" in j.flags


@pytest.mark.parametrize("text", ["", "   ", None, 42, "no errors at all", "{", "{}", "{{{}}}",
                                  '{"a": [1, {"b": }', "}{" * 50, "[1, 2, 3]"])
def test_garbage_never_raises(text) -> None:
    j = parse_judgement(text)
    assert not j.complete and j.flags
    assert all(math.isnan(v) for v in j.values().values())


def test_prompt_carries_both_reports_and_the_six_categories() -> None:
    msgs = build_messages("REF TEXT", "CAND TEXT")
    assert [m["role"] for m in msgs] == ["system", "user"]
    user = msgs[1]["content"]
    assert user.index("REF TEXT") < user.index("CAND TEXT")
    for i, name in llm_rexval.CATEGORIES.items():
        assert f"{'ABCDEF'[i - 1]}) {name}" in user
    # The worked example is a valid answer for the parser.
    assert parse_judgement(llm_rexval._EXAMPLE_ANSWER).complete


def test_options_and_availability(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("RADCONCORD_LLM_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="base_url"):
        LlmRexval(backend="openai")
    with pytest.raises(ValueError, match="unknown backend 'vllm'"):
        LlmRexval(backend="vllm")
    reason = LlmRexval(model=str(tmp_path / "missing.gguf")).availability()
    assert reason is not None and "does not exist" in reason
    reason = LlmRexval(backend="openai", base_url="http://127.0.0.1:9").availability()
    assert reason is not None and "LLM endpoint not usable" in reason


def test_tiny_model_full_path(tmp_path) -> None:
    """A random tiny Llama writes garbage: every value NaN and flagged, nothing invented."""
    path = build_tiny_llama(tmp_path)
    metric = LlmRexval(model=str(path), max_new_tokens=10, batch_size=2)
    assert metric.availability() is None
    refs = ["No acute process.", "Mild cardiomegaly."]
    cands = ["Lungs are clear.", "Small left effusion."]
    res = metric.score(references=refs, candidates=cands)
    assert set(res.values) == set(KEYS) and res.details is not None
    for i, d in enumerate(res.details):
        j = parse_judgement(d["generation"])
        assert d["flags"] == j.flags and d["parsed"] == j.complete
        for k, v in j.values().items():
            assert (math.isnan(v) and math.isnan(res.values[k][i])) or v == res.values[k][i]
    sig = metric.signature()
    assert "fp:" in sig and f"prompt:v1-{llm_rexval.PROMPT_HASH}" in sig and "greedy" in sig


def test_endpoint_backend_equals_in_process(tmp_path) -> None:
    """The same judge behind the local OpenAI-compatible server: same answers, same values."""
    from radconcord.backend.metrics.llm_server import LLMServer

    path = build_tiny_llama(tmp_path)
    refs, cands = ["Mild cardiomegaly.", "No acute process."], ["Edema.", "Lungs are clear."]
    local = LlmRexval(model=str(path), max_new_tokens=8).score(references=refs, candidates=cands)
    with LLMServer(str(path), device="cpu", model_id="judge") as server:
        remote = LlmRexval(backend="openai", base_url=server.base_url, max_new_tokens=8)
        res = remote.score(references=refs, candidates=cands)
        assert remote.signature().startswith("llm_rexval|endpoint:openai:judge@")
    assert [d["generation"] for d in res.details] == [d["generation"] for d in local.details]
    assert [d["flags"] for d in res.details] == [d["flags"] for d in local.details]
