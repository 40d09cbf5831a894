"""The CT-RATE LLM labeler: its answer parser on hand-written answers, the prompt, and CRG
through both LLM backends.

The parser gets the robustness cases of llm_rexval's: code fences and prose, trailing text,
single quotes / trailing commas / Python literals, other key spellings, missing keys and wrong
types (``nan`` with the reason, never a silent "absent"), extra keys, a cut answer, garbage.
The endpoint tests run a small OpenAI-compatible server in the test that answers with fixed
JSON per report; the in-process test runs a random tiny Llama (whose answers are garbage).
"""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from radconcord.backend.metrics.crg import Crg, crg
from radconcord.backend.metrics.ctrate import (
    CTRATE_LABELS,
    LLM_PROMPT_HASH,
    LLM_STRUCTURED_PROMPT_HASH,
    CtRateLLMLabeler,
    build_messages,
    parse_labels,
)
from tests.helpers_llm import build_tiny_llama

ALL_ABSENT = {n: "absent" for n in CTRATE_LABELS}


def _answer(**present: str) -> dict[str, str]:
    out = dict(ALL_ABSENT)
    for key, value in present.items():
        name = next(n for n in CTRATE_LABELS if n.lower().replace(" ", "_") == key)
        out[name] = value
    return out


GOOD = json.dumps(_answer(cardiomegaly="present", pleural_effusion="uncertain"))


def _nan_at(labels) -> set[str]:
    return {n for n, v in zip(CTRATE_LABELS, labels, strict=True)
            if isinstance(v, float) and math.isnan(v)}


def test_well_formed_json():
    r = parse_labels(GOOD)
    assert r.flags == [] and r.notes == [] and r.complete
    got = dict(zip(CTRATE_LABELS, r.labels, strict=True))
    assert got["Cardiomegaly"] == 1 and got["Pleural effusion"] == -1 and got["Emphysema"] == 0


def test_code_fences_prose_and_trailing_text():
    text = f"Here are the labels.\n```json\n{GOOD}\n```\nLet me know if you need more."
    assert parse_labels(text).labels == parse_labels(GOOD).labels
    assert parse_labels(f"Answer: {GOOD} -- hope this helps {{not json}}").complete


def test_single_quotes_trailing_commas_python_literals():
    body = ", ".join(f"'{n}': False" for n in CTRATE_LABELS[1:])
    text = "{'Medical material': True, " + body + ",}"
    r = parse_labels(text)
    assert r.complete and r.labels[0] == 1 and set(r.labels[1:]) == {0}
    r = parse_labels(GOOD.replace("}", ",}"))
    assert r.complete


def test_other_key_spellings_and_value_words():
    obj = {n.upper().replace(" ", "_"): "no" for n in CTRATE_LABELS}
    obj["LUNG_NODULE"] = "Positive"
    obj["EMPHYSEMA"] = 1
    obj["ATELECTASIS"] = "possible"
    obj["BRONCHIECTASIS"] = {"status": "present"}
    obj["CONSOLIDATION"] = "-1"
    obj["MOSAIC_ATTENUATION_PATTERN"] = " 1 "
    r = parse_labels(json.dumps({"labels": obj}))
    got = dict(zip(CTRATE_LABELS, r.labels, strict=True))
    assert r.complete, r.flags
    assert (got["Lung nodule"], got["Emphysema"], got["Atelectasis"], got["Bronchiectasis"],
            got["Consolidation"], got["Mosaic attenuation pattern"]) == (1, 1, -1, 1, -1, 1)


def test_missing_keys_are_nan_and_flagged_never_absent():
    obj = dict(ALL_ABSENT)
    del obj["Emphysema"], obj["Consolidation"]
    r = parse_labels(json.dumps(obj))
    assert not r.complete
    assert _nan_at(r.labels) == {"Emphysema", "Consolidation"}
    assert "missing: Emphysema" in r.flags and "missing: Consolidation" in r.flags


@pytest.mark.parametrize(
    "value, why",
    [
        ([1], "list"),
        ({"confidence": 0.9}, "an object without a value"),
        (2, "not a label value (2)"),
        (0.5, "not a label value (0.5)"),
        ("maybe not sure", "not a label value"),
        (None, "NoneType"),
    ],
)
def test_wrong_types_are_nan_with_the_reason(value, why):
    obj: dict[str, Any] = dict(ALL_ABSENT)
    obj["Hiatal hernia"] = value
    r = parse_labels(json.dumps(obj))
    assert _nan_at(r.labels) == {"Hiatal hernia"}
    (flag,) = r.flags
    assert flag.startswith("unreadable: Hiatal hernia") and why in flag


def test_extra_keys_are_noted_not_fatal():
    obj = {**ALL_ABSENT, "explanation": "normal study", "Pneumothorax": "present"}
    r = parse_labels(json.dumps(obj))
    assert r.complete and r.flags == []
    assert "ignored key: explanation" in r.notes and "ignored key: Pneumothorax" in r.notes


def test_truncated_answer_keeps_what_was_written():
    cut = GOOD[: GOOD.index('"Lung nodule"')]
    r = parse_labels(cut)
    read = [n for n, v in zip(CTRATE_LABELS, r.labels, strict=True)
            if not (isinstance(v, float) and math.isnan(v))]
    assert read == list(CTRATE_LABELS[: CTRATE_LABELS.index("Lung nodule")])
    assert r.labels[2] == 1  # cardiomegaly survived the cut
    assert "missing: Lung nodule" in r.flags


@pytest.mark.parametrize("text", ["", "   ", None, 42, "I cannot answer that.", "{}", "{{}}",
                                  "[1, 2, 3]", '{"a": {"b": "c"}}', "```json\n```"])
def test_garbage_never_raises(text):
    r = parse_labels(text)
    assert _nan_at(r.labels) == set(CTRATE_LABELS)
    assert r.flags and not r.complete


def test_structured_findings():
    obj = {
        "labels": _answer(emphysema="present", lung_nodule="present"),
        "findings": [
            {"label": "Emphysema", "type": "centrilobular", "location": "upper lobes",
             "laterality": "Bilateral"},
            {"label": "lung nodule", "type": None, "location": "right upper lobe",
             "laterality": "right"},
            {"label": "Pneumothorax", "type": None},
            {"label": "Lung nodule", "laterality": "anterior"},
            "not an object",
        ],
    }
    r = parse_labels(json.dumps(obj))
    assert r.complete
    assert r.findings[0] == {"label": "Emphysema", "type": "centrilobular",
                             "location": "upper lobes", "laterality": "bilateral"}
    assert r.findings[1]["label"] == "Lung nodule" and r.findings[1]["type"] is None
    assert r.findings[2] == {"label": "Lung nodule", "type": None, "location": None,
                             "laterality": None}
    assert any("Pneumothorax" in n for n in r.notes)
    assert any("laterality 'anterior'" in n for n in r.notes)
    assert any("finding 4 is not an object" in n for n in r.notes)


def test_prompts_carry_the_report_and_all_18_names():
    for structured in (False, True):
        msgs = build_messages("REPORT TEXT", structured=structured)
        assert [m["role"] for m in msgs] == ["system", "user"]
        user = msgs[1]["content"]
        assert "REPORT TEXT" in user and all(f"- {n}\n" in user for n in CTRATE_LABELS)
        assert ("laterality" in user) is structured
    assert LLM_PROMPT_HASH != LLM_STRUCTURED_PROMPT_HASH


# --------------------------------------------------------------------------- CRG via LLM

REPORTS = {
    "ref one": _answer(cardiomegaly="present", pleural_effusion="present"),
    "cand one": _answer(cardiomegaly="present", emphysema="present"),
    "ref two": ALL_ABSENT,
    "cand two": "BROKEN",
    "ref s": {"labels": _answer(emphysema="present"), "findings": [
        {"label": "Emphysema", "type": "paraseptal", "location": "apex", "laterality": "left"}]},
    "cand s": {"labels": _answer(emphysema="present"), "findings": []},
}


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:  # keep the test output clean
        pass

    def _send(self, body: dict) -> None:
        raw = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._send({"data": [{"id": "fake-ct-labeler"}]})

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        user = body["messages"][-1]["content"]
        report = user.split("Report: ", 1)[1].split("\n", 1)[0]
        answer = REPORTS[report]
        content = ("The abnormality Emphysema is" if answer == "BROKEN"
                   else f"```json\n{json.dumps(answer)}\n```")
        self._send({"model": body["model"], "choices": [{"message": {"content": content}}]})


@pytest.fixture
def endpoint():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_crg_over_an_endpoint_labeler(endpoint):
    metric = Crg(labels="ctrate", labeler="llm", backend="openai", base_url=endpoint,
                 concurrency=2)
    assert metric.availability() is None
    res = metric.score(references=["ref one", "ref two"], candidates=["cand one", "cand two"])
    # Pair 1: A = 2 (cardiomegaly, effusion), TP = 1, FN = 1, FP = 1 (emphysema).
    assert res.values["crg"][0] == pytest.approx(crg(1, 1, 1, 18, 2), abs=1e-12)
    # Pair 2: the candidate's answer has no JSON: nan with the reason, not a score.
    assert math.isnan(res.values["crg"][1])
    assert "candidate no JSON object" in res.details[1]["reason"]
    # The corpus pools the readable pair only.
    assert res.corpus["crg_corpus"] == pytest.approx(crg(1, 1, 1, 18, 2), abs=1e-12)
    sig = metric.signature()
    assert sig.startswith("crg|labels:ctrate|bin:uncertain=positive|labeler:[ctrate-llm|"
                          "endpoint:openai:fake-ct-labeler|")
    assert f"prompt:v1-{LLM_PROMPT_HASH}" in sig and "structured:0" in sig


def test_structured_variant_reports_findings_and_signs_its_prompt(endpoint):
    metric = Crg(labels="ctrate", labeler="llm", backend="openai", base_url=endpoint,
                 structured=True)
    res = metric.score(references=["ref s"], candidates=["cand s"])
    assert res.values["crg"] == [1.0]  # CRG stays label-level (see the card)
    assert res.details[0]["reference_findings"][0]["type"] == "paraseptal"
    assert f"prompt:v1-{LLM_STRUCTURED_PROMPT_HASH}" in metric.signature()


def test_in_process_tiny_model_gives_nan_not_zero(tmp_path):
    path = build_tiny_llama(tmp_path)
    metric = Crg(labels="ctrate", labeler="llm", model=str(path), max_new_tokens=6,
                 batch_size=2)
    assert metric.availability() is None
    res = metric.score(references=["Cardiomegaly."], candidates=["No emphysema."])
    assert math.isnan(res.values["crg"][0]) and res.details[0]["reason"]
    assert math.isnan(res.corpus["crg_corpus"])  # nothing readable to pool
    assert "model:fp:" in metric.signature()


def test_llm_options_and_availability(tmp_path, monkeypatch):
    monkeypatch.delenv("RADCONCORD_LLM_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="base_url"):
        Crg(labels="ctrate", labeler="llm", backend="openai")
    with pytest.raises(ValueError, match="checkpoint"):
        Crg(labels="ctrate", labeler="llm", checkpoint="x.pth")
    reason = Crg(labels="ctrate", labeler="llm",
                 model=str(tmp_path / "missing.gguf")).availability()
    assert reason is not None and "does not exist" in reason
    labeler = Crg(labels="ctrate", labeler="llm")._get_labeler()
    assert isinstance(labeler, CtRateLLMLabeler)
    assert labeler.options["model"] == CtRateLLMLabeler.defaults["model"]
