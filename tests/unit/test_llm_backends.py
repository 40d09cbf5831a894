"""The backend helpers: message checks, prompt hashes, settings from the environment, and the
signature of a hub model that is not downloaded yet."""

from __future__ import annotations

import pytest
import torch

from radconcord.backend.metrics import hf, llm
from radconcord.backend.metrics.base import Resources
from radconcord.backend.metrics.llm_backends import (
    ENV_API_KEY,
    ENV_BASE_URL,
    ENV_MODEL,
    TransformersBackend,
    as_messages,
    openai_backend,
    prompt_hash,
)
from tests.helpers_llm import build_tiny_llama

SHA = "0123456789abcdef0123456789abcdef01234567"


def test_messages_are_checked() -> None:
    assert as_messages("hi") == [{"role": "user", "content": "hi"}]
    with pytest.raises(ValueError, match="message 1 must be a dict"):
        as_messages([{"role": "user", "content": "a"}, {"role": "user"}])
    with pytest.raises(ValueError, match="message 0"):
        as_messages(["just a string"])


def test_prompt_hash_names_the_template() -> None:
    a = prompt_hash("Reference: {reference}")
    assert a == prompt_hash([{"role": "user", "content": "Reference: {reference}"}])
    assert a != prompt_hash("Reference:  {reference}") and len(a) == 12


def test_endpoint_settings_from_environment(monkeypatch) -> None:
    monkeypatch.setenv(ENV_BASE_URL, "http://10.0.0.5:8000")
    monkeypatch.setenv(ENV_MODEL, "served-judge")
    monkeypatch.setenv(ENV_API_KEY, "sk-test")
    be = openai_backend("llm_rexval", {"concurrency": 3, "timeout": 7, "max_retries": 1})
    assert (be.base_url, be._model, be.api_key) == ("http://10.0.0.5:8000/v1", "served-judge",
                                                    "sk-test")
    assert (be.concurrency, be.timeout, be.max_retries) == (3, 7.0, 1)
    # Options win over the environment.
    be = openai_backend("x", {"base_url": "https://judge.example/v1", "endpoint_model": "m"})
    assert be.base_url == "https://judge.example/v1" and be._model == "m"


def test_single_user_message_is_the_old_green_prompt(tmp_path) -> None:
    """GREEN's prompts go through format_messages now: same string as format_prompt gave."""
    path = build_tiny_llama(tmp_path)
    lm = llm.shared_lm(Resources(), path, device="cpu", dtype=torch.float32)
    be = TransformersBackend(lm)
    assert be.format("lungs are clear") == "lungs are clear"  # no chat template: unchanged
    assert be.format([{"role": "system", "content": "a"}, {"role": "user", "content": "b"}]) \
        == "a\n\nb"
    lm.tokenizer.chat_template = "{% for m in messages %}[{{ m['content'] }}]{% endfor %}"
    assert be.format("x") == lm.format_prompt("x") == "[x]"


def test_unpinned_hub_model_not_yet_downloaded_is_named_by_its_commit(monkeypatch) -> None:
    monkeypatch.setattr(hf, "resolve_or_reason", lambda ref: (None, None))
    monkeypatch.setattr(hf, "pinned", lambda ref: hf.ModelRef(ref.model, SHA))
    assert llm.identity(llm.LMRef("acme/judge")) == f"ref:acme/judge@{SHA}"
