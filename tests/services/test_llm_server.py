"""The OpenAI-compatible HTTP path of the LLM metrics against a real local server.

The server (:mod:`backend.metrics.llm_server`) loads a tiny random-weight Llama built by the
test and generates for real; the HTTP backend's completions must equal the in-process
transformers backend's for the same prompts (greedy). Retries, timeouts and the concurrency
limit are checked with small stdlib servers in front of it or beside it.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch

from radconcord.backend.metrics import llm
from radconcord.backend.metrics.base import Resources
from radconcord.backend.metrics.llm_backends import (
    LLMEndpointError,
    OpenAIChatBackend,
    TransformersBackend,
    normalise_base_url,
)
from radconcord.backend.metrics.llm_server import LLMServer
from tests.helpers_llm import build_tiny_llama

PROMPTS = [
    "Reference report: no acute cardiopulmonary process. Candidate report: lungs are clear.",
    "Reference report: mild cardiomegaly. Candidate report: small left pleural effusion.",
    [
        {"role": "system", "content": "You judge chest radiograph reports."},
        {"role": "user", "content": "Compare: there is pneumothorax. / no pneumothorax."},
    ],
    "count the errors",
    "Reference report: bilateral lower lobe consolidation and edema. Candidate report: none.",
]
# A chat template of our own, so the templated path is exercised on the tiny model too.
TEMPLATE = (
    "{% for m in messages %}<s> [ {{ m['role'] }} ] {{ m['content'] }} </s>{% endfor %}"
    "{% if add_generation_prompt %}<s> [ assistant ] {% endif %}"
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("llm-server"))


@pytest.fixture(scope="module")
def tiny_chat(tmp_path_factory) -> Path:
    from transformers import AutoTokenizer

    path = build_tiny_llama(tmp_path_factory.mktemp("llm-server-chat"), seed=3)
    tok = AutoTokenizer.from_pretrained(str(path))
    tok.chat_template = TEMPLATE
    tok.save_pretrained(str(path))
    return path


def _local(path: Path, batch_size: int) -> TransformersBackend:
    lm = llm.shared_lm(Resources(), path, device="cpu", dtype=torch.float32)
    return TransformersBackend(lm, batch_size=batch_size)


@pytest.mark.parametrize("model", ["tiny", "tiny_chat"])
def test_http_completions_equal_in_process_generation(model, request) -> None:
    path = request.getfixturevalue(model)
    local = _local(path, batch_size=3)
    assert local.lm.has_chat_template == (model == "tiny_chat")
    expected = local.generate(PROMPTS, max_new_tokens=12)
    assert all(isinstance(t, str) for t in expected) and len(set(expected)) > 1
    with LLMServer(str(path), device="cpu", max_batch=4, batch_wait_ms=50) as server:
        client = OpenAIChatBackend(server.base_url, concurrency=4, timeout=60)
        got = client.generate(PROMPTS, max_new_tokens=12)
        assert got == expected
        # The served id and the weights' fingerprint name the model in signatures.
        assert client.model == str(path)
        assert client.identity() == f"openai:{path}@{llm.identity(llm.LMRef(str(path)))}"
        assert client.answered_by == {str(path)}
        # Concurrent requests were generated together, not one by one.
        assert max(server.batcher.batches) > 1
        # A different token budget gives the in-process result for that budget too.
        assert client.generate(PROMPTS[:2], max_new_tokens=3) == local.generate(
            PROMPTS[:2], max_new_tokens=3)


def _post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_server_refuses_what_it_cannot_honour(tiny) -> None:
    with LLMServer(str(tiny), device="cpu", model_id="tiny") as server:
        url = server.base_url + "/chat/completions"
        msgs = [{"role": "user", "content": "lungs are clear"}]
        status, body = _post(url, {"model": "tiny", "messages": msgs, "max_tokens": 4})
        assert status == 200 and body["choices"][0]["message"]["role"] == "assistant"
        assert body["usage"]["completion_tokens"] <= 4 and body["model"] == "tiny"
        for bad, words in (
            ({"temperature": 0.7}, "greedily"),
            ({"stream": True}, "streaming"),
            ({"model": "other"}, "not served"),
            ({"max_tokens": 0}, "max_tokens"),
            ({"messages": []}, "messages"),
            ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
        ):
            status, body = _post(url, {"model": "tiny", "messages": msgs, "max_tokens": 4, **bad})
            assert status == 400 and words in body["error"]["message"], (bad, body)
        # The client does not retry a refused request and names the reason.
        client = OpenAIChatBackend(server.base_url, model="tiny", max_retries=3, backoff=0.01,
                                   extra_body={"n": 2})
        with pytest.raises(LLMEndpointError, match="refused the request: HTTP 400 'n' must be 1"):
            client.generate(["x"], max_new_tokens=2)
        assert client.attempts == 2  # /models once, the completion once
        with pytest.raises(LLMEndpointError, match="does not serve model 'nope'.*tiny"):
            OpenAIChatBackend(server.base_url, model="nope").generate(["x"], max_new_tokens=2)


class _Proxy:
    """A stdlib server in front of the real one: fails the first ``fail`` completions."""

    def __init__(self, target: str, *, fail: int = 0, status: int = 503, delay: float = 0.0):
        self.target, self.fail, self.status, self.delay = target, fail, status, delay
        self.seen = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        proxy = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a) -> None:
                pass

            def _forward(self, method: str) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(n) if n else None
                with proxy.lock:
                    proxy.seen += 1
                    proxy.in_flight += 1
                    proxy.max_in_flight = max(proxy.max_in_flight, proxy.in_flight)
                    failing = method == "POST" and proxy.fail > 0
                    if failing:
                        proxy.fail -= 1
                # The answer is prepared first and the request leaves the in-flight count
                # before a byte is written back: the client may send its next request as
                # soon as it reads this one's answer.
                try:
                    if proxy.delay:
                        time.sleep(proxy.delay)
                    if failing:
                        status, raw = proxy.status, b'{"error": {"message": "overloaded"}}'
                    else:
                        req = urllib.request.Request(proxy.target + self.path, data=data,
                                                     method=method,
                                                     headers={"Content-Type": "application/json"})
                        with urllib.request.urlopen(req, timeout=60) as r:
                            status, raw = 200, r.read()
                finally:
                    with proxy.lock:
                        proxy.in_flight -= 1
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:  # noqa: N802
                self._forward("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._forward("POST")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_retries_on_503_then_answers_like_the_server(tiny) -> None:
    with LLMServer(str(tiny), device="cpu") as server:
        direct = OpenAIChatBackend(server.base_url).generate(PROMPTS[:1], max_new_tokens=8)
        proxy = _Proxy(f"http://127.0.0.1:{server.port}", fail=2, status=503)
        try:
            client = OpenAIChatBackend(proxy.url, max_retries=3, backoff=0.01)
            slept: list[float] = []
            client._sleep = lambda s: (slept.append(s), time.sleep(s))
            assert client.generate(PROMPTS[:1], max_new_tokens=8) == direct
            assert client.attempts == 4  # /models, then 503, 503, OK
            assert len(slept) == 2 and slept[1] > slept[0]  # exponential backoff
            # Too few retries: the error says what happened and how often it was tried.
            proxy.fail = 5
            few = OpenAIChatBackend(proxy.url, max_retries=1, backoff=0.01)
            with pytest.raises(LLMEndpointError, match=r"2 attempt\(s\): HTTP 503 overloaded"):
                few.generate(PROMPTS[:1], max_new_tokens=8)
        finally:
            proxy.close()


def test_timeout_is_retried_then_reported(tiny) -> None:
    with LLMServer(str(tiny), device="cpu") as server:
        proxy = _Proxy(f"http://127.0.0.1:{server.port}", delay=1.5)
        try:
            client = OpenAIChatBackend(proxy.url, model=str(tiny), timeout=0.3, max_retries=1,
                                       backoff=0.01)
            client._model_info = {"id": str(tiny)}  # skip /models: time only the completion
            t = time.monotonic()
            with pytest.raises(LLMEndpointError, match=r"after 2 attempt\(s\): no answer within"):
                client.generate(["lungs are clear"], max_new_tokens=4)
            assert time.monotonic() - t < 3.0
            assert client.attempts == 2
            # A timeout long enough gets the answer through the same slow proxy.
            patient = OpenAIChatBackend(proxy.url, timeout=10, max_retries=0)
            assert patient.generate(["lungs are clear"], max_new_tokens=4) == \
                OpenAIChatBackend(server.base_url).generate(["lungs are clear"], max_new_tokens=4)
        finally:
            proxy.close()


def test_connection_refused_is_retried_and_named() -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    client = OpenAIChatBackend(f"http://127.0.0.1:{port}", max_retries=2, backoff=0.01)
    with pytest.raises(LLMEndpointError, match=r"after 3 attempt\(s\): cannot connect"):
        client.generate(["x"], max_new_tokens=2)
    assert client.attempts == 3


def test_concurrency_limit_bounds_requests_in_flight(tiny) -> None:
    with LLMServer(str(tiny), device="cpu", max_batch=8, batch_wait_ms=5) as server:
        proxy = _Proxy(f"http://127.0.0.1:{server.port}", delay=0.2)
        try:
            prompts = [f"lungs are clear {i}" for i in range(9)]
            client = OpenAIChatBackend(proxy.url, concurrency=3)
            out = client.generate(prompts, max_new_tokens=3)
            assert len(out) == 9
            assert proxy.max_in_flight == 3
            proxy.max_in_flight = 0
            OpenAIChatBackend(proxy.url, concurrency=1).generate(prompts[:3], max_new_tokens=3)
            assert proxy.max_in_flight == 1
            # Room for a pool's burst of connections (socketserver's default backlog is 5).
            assert server._httpd.request_queue_size >= 128
        finally:
            proxy.close()


def test_settings_are_checked() -> None:
    assert normalise_base_url("http://h:8000") == "http://h:8000/v1"
    assert normalise_base_url("http://h:8000/v1/") == "http://h:8000/v1"
    assert normalise_base_url("https://h/v1/chat/completions") == "https://h/v1"
    with pytest.raises(ValueError, match="http://"):
        normalise_base_url("h:8000")
    with pytest.raises(ValueError, match="concurrency"):
        OpenAIChatBackend("http://h", concurrency=0)


def test_a_request_failing_for_good_drops_the_queued_ones(tiny) -> None:
    with LLMServer(str(tiny), device="cpu") as server:
        proxy = _Proxy(f"http://127.0.0.1:{server.port}", fail=10_000, status=503)
        try:
            client = OpenAIChatBackend(proxy.url, concurrency=2, max_retries=1, backoff=0.01)
            with pytest.raises(LLMEndpointError, match="HTTP 503"):
                client.generate([f"p{i}" for i in range(20)], max_new_tokens=2)
            # /models + at most the requests in flight (2 at a time) with their retries, not
            # 20 prompts x 2 attempts.
            assert client.attempts <= 1 + 2 * 2
        finally:
            proxy.close()
