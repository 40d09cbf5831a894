"""GREEN on the OpenAI-compatible backend: same generations as in-process, its own signature.

The transformers path keeps its values, tests (tests/unit/test_green.py) and signature.
"""

from __future__ import annotations

import math

import pytest

from radconcord.backend.metrics import green, llm
from radconcord.backend.metrics.green import Green, parse_generation
from radconcord.backend.metrics.llm_server import LLMServer
from tests.helpers_llm import build_tiny_llama

REFS = ["No acute process.", "Mild cardiomegaly.", "Lungs are clear."]
CANDS = ["Lungs are clear.", "Small left effusion.", "Pneumothorax."]


def test_endpoint_backend_equals_in_process(tmp_path, monkeypatch) -> None:
    path = build_tiny_llama(tmp_path)
    local = Green(model=str(path), max_new_tokens=10, batch_size=2)
    expected = local.generate(REFS, CANDS)
    with LLMServer(str(path), device="cpu", model_id="green-tiny") as server:
        # Settings from the environment, as a user with a vLLM server would give them.
        monkeypatch.setenv("RADCONCORD_LLM_BASE_URL", f"http://127.0.0.1:{server.port}")
        monkeypatch.setenv("RADCONCORD_LLM_MODEL", "green-tiny")
        remote = Green(backend="openai", max_new_tokens=10, concurrency=2)
        assert remote.availability() is None
        res = remote.score(references=REFS, candidates=CANDS)
        assert [d["generation"] for d in res.details] == expected
        for i, d in enumerate(res.details):
            v, p = res.values["green"][i], parse_generation(d["generation"]).score()
            assert (math.isnan(v) and math.isnan(p)) or v == p
        sig = remote.signature()
        fp = llm.identity(llm.LMRef(str(path)))
        assert sig == (f"green|endpoint:openai:green-tiny@{fp}|greedy|max_new:10|words:300"
                       f"|prompt:v1-{green.PROMPT_HASH}|parser:v1")
    # Server gone: availability says so in one line, without waiting long.
    assert "LLM endpoint not usable" in Green(backend="openai").availability()


def test_transformers_signature_is_unchanged(tmp_path) -> None:
    path = build_tiny_llama(tmp_path)
    m = Green(model=str(path), max_new_tokens=12)
    fp = llm.identity(llm.LMRef(str(path)))
    assert m.signature() == (f"green|model:{fp}|rev:None|greedy|max_new:12|words:300"
                             "|dtype:fp32|prompt:v1|parser:v1")


def test_backend_option_is_checked(monkeypatch) -> None:
    monkeypatch.delenv("RADCONCORD_LLM_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="green.base_url"):
        Green(backend="openai")
    with pytest.raises(ValueError, match="unknown backend"):
        Green(backend="tgi")
