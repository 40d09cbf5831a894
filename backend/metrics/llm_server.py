"""A small OpenAI-compatible chat server around a transformers causal LM.

For users without vLLM or llama.cpp, and for the tests of the HTTP backend: it serves
``GET /v1/models`` and ``POST /v1/chat/completions`` (non-streaming, greedy) for one model
loaded with :mod:`backend.metrics.llm` (a hub id with revision, a folder or a ``.gguf`` file).
The chat template is applied exactly as :class:`~backend.metrics.llm_backends.TransformersBackend`
applies it, so a completion equals the in-process one for the same prompt.

Concurrent requests are gathered into batches: a single worker thread takes every request that
arrived within ``batch_wait_ms`` of the first (at most ``max_batch``) and generates them in one
left-padded batch (the in-process batching, hence the same greedy outputs).

Start it with ``python -m backend llm-serve --model PATH`` or, in Python::

    with LLMServer(model="/path/to/model", port=0) as server:
        print(server.base_url)   # http://127.0.0.1:<port>/v1

Only greedy decoding is offered: a request with ``temperature > 0``, ``n > 1`` or
``stream: true`` is refused with HTTP 400 rather than answered differently from what it asked.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from radconcord.backend.metrics import hf, llm
from radconcord.backend.metrics.base import Resources

logger = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 512
MAX_BODY_BYTES = 8 << 20


class RequestError(ValueError):
    """A request the server refuses (HTTP 400); the message is returned to the client."""


@dataclass
class _Job:
    prompt: str
    max_tokens: int
    future: Future[tuple[str, int, int]]


class _Batcher:
    """One worker thread that generates queued prompts in batches."""

    def __init__(self, lm: llm.CausalLM, *, max_batch: int, wait_s: float) -> None:
        self.lm = lm
        self.max_batch = max(1, int(max_batch))
        self.wait_s = max(0.0, float(wait_s))
        self._q: queue.Queue[_Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="llm-server-batcher", daemon=True)
        self.batches: list[int] = []  # batch sizes, for tests and logs
        self._thread.start()

    def submit(self, prompt: str, max_tokens: int) -> Future[tuple[str, int, int]]:
        """Queue a prompt; the future gives ``(text, prompt tokens, completion tokens)``."""
        fut: Future[tuple[str, int, int]] = Future()
        self._q.put(_Job(prompt, max_tokens, fut))
        return fut

    def close(self) -> None:
        self._q.put(None)
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while True:
            first = self._q.get()
            if first is None:
                return
            jobs = [first]
            deadline = time.monotonic() + self.wait_s
            stop = False
            while len(jobs) < self.max_batch:
                left = deadline - time.monotonic()
                try:
                    nxt = self._q.get(timeout=left) if left > 0 else self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                jobs.append(nxt)
            # One generate call per max_tokens value: the budget is per batch.
            groups: dict[int, list[_Job]] = {}
            for j in jobs:
                groups.setdefault(j.max_tokens, []).append(j)
            for max_tokens, group in groups.items():
                self.batches.append(len(group))
                try:
                    outs = self.lm.generate([j.prompt for j in group], max_new_tokens=max_tokens,
                                            batch_size=self.max_batch)
                except Exception as exc:  # noqa: BLE001 - reported to each waiting request
                    logger.exception("generation failed")
                    for j in group:
                        j.future.set_exception(exc)
                    continue
                # Token counts here, in the one thread that uses the tokenizer: a fast
                # tokenizer called from two threads while one pads can fail.
                tok = self.lm.tokenizer
                for j, text in zip(group, outs, strict=True):
                    n_prompt = len(tok(j.prompt, add_special_tokens=not self.lm.has_chat_template)
                                   ["input_ids"])
                    n_out = len(tok(text, add_special_tokens=False)["input_ids"]) if text else 0
                    j.future.set_result((text, n_prompt, n_out))
            if stop:
                return


def parse_chat_request(body: Any, *, served_id: str) -> tuple[list[dict[str, str]], int]:
    """Check a ``/v1/chat/completions`` body; return ``(messages, max_tokens)``.

    Raises:
        RequestError: naming the field that is wrong.
    """
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    model = body.get("model")
    if model is not None and model != served_id:
        raise RequestError(f"model {model!r} is not served here (this server serves {served_id!r})")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise RequestError("'messages' must be a non-empty list")
    messages: list[dict[str, str]] = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise RequestError(f"messages[{i}] must be an object with a string 'role'")
        content = m.get("content")
        if isinstance(content, list):  # OpenAI "content parts": keep the text parts
            parts = [p.get("text") for p in content if isinstance(p, dict)
                     and p.get("type") == "text" and isinstance(p.get("text"), str)]
            if len(parts) != len(content):
                raise RequestError(f"messages[{i}].content: only text parts are supported")
            content = "".join(parts)
        if not isinstance(content, str):
            raise RequestError(f"messages[{i}].content must be a string")
        messages.append({"role": m["role"], "content": content})
    raw = body.get("max_completion_tokens", body.get("max_tokens", DEFAULT_MAX_TOKENS))
    if raw is None:
        raw = DEFAULT_MAX_TOKENS
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise RequestError("'max_tokens' must be a positive integer")
    temp = body.get("temperature", 0)
    if temp is not None and (not isinstance(temp, (int, float)) or temp > 0):
        raise RequestError("this server decodes greedily only: 'temperature' must be 0")
    if body.get("stream"):
        raise RequestError("streaming is not supported: send 'stream': false")
    n = body.get("n", 1)
    if n not in (1, None):
        raise RequestError("'n' must be 1")
    return messages, raw


class _HTTPServer(ThreadingHTTPServer):
    # socketserver listens with a backlog of 5; a pool of clients opening dozens of
    # connections at once then sees some refused (the pool's tests saw one run in three).
    request_queue_size = 256


class LLMServer:
    """An OpenAI-compatible chat server for one causal LM, in a background thread.

    Args:
        model: Hub id (with ``revision``), model folder or ``.gguf`` file.
        revision: Hub revision for a hub id.
        host: Interface to bind (default loopback only).
        port: TCP port; 0 picks a free one (see :attr:`port` after :meth:`start`).
        device: ``auto`` | ``cpu`` | ``cuda`` | ``cuda:N``.
        dtype: ``auto`` (bf16 on CUDA, fp32 on CPU) | ``fp32`` | ``bf16`` | ``fp16``.
        model_id: Name served in ``/v1/models`` (default: the ``model`` string).
        max_batch: Most requests generated in one batch.
        batch_wait_ms: How long the first request of a batch waits for others.
        lm: An already loaded model to serve instead of loading ``model``.
    """

    def __init__(
        self,
        model: str = "",
        *,
        revision: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        device: str = "auto",
        dtype: str = "auto",
        model_id: str | None = None,
        max_batch: int = 8,
        batch_wait_ms: float = 10.0,
        lm: llm.CausalLM | None = None,
    ) -> None:
        if lm is None and not model:
            raise ValueError("LLMServer needs model= or lm=")
        self.ref = llm.LMRef(model, revision) if model else None
        self.host = host
        self._port = int(port)
        self.device = device
        self.dtype = dtype
        self.model_id = model_id or model or Path(str(lm.path)).name  # type: ignore[union-attr]
        self.max_batch = int(max_batch)
        self.batch_wait_s = float(batch_wait_ms) / 1000.0
        self.lm = lm
        self._resources = Resources()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.batcher: _Batcher | None = None
        self.fingerprint = ""
        self.requests = 0

    # ----------------------------------------------------------------- lifecycle

    def load(self) -> llm.CausalLM:
        """Load the model (once)."""
        if self.lm is None:
            assert self.ref is not None
            device = hf.pick_device(self.device)
            folder = llm.resolve_folder(self.ref)
            self.lm = llm.shared_lm(self._resources, folder, device=device,
                                    dtype=hf.pick_dtype(device, self.dtype))
        if not self.fingerprint:
            self.fingerprint = (llm.identity(self.ref) if self.ref is not None
                                else f"fp:{hf.fingerprint(self.lm.path)[:16]}")
        return self.lm

    def start(self) -> LLMServer:
        """Load the model, bind the port and serve in a daemon thread."""
        lm = self.load()
        self.batcher = _Batcher(lm, max_batch=self.max_batch, wait_s=self.batch_wait_s)
        handler = type("Handler", (_Handler,), {"server_ref": self})
        self._httpd = _HTTPServer((self.host, self._port), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="llm-server",
                                        daemon=True)
        self._thread.start()
        logger.info("serving %s at %s", self.model_id, self.base_url)
        return self

    def serve_forever(self) -> None:
        """Start (unless started) and block until interrupted (the CLI's loop)."""
        if self._httpd is None:
            self.start()
        try:
            while self._thread is not None and self._thread.is_alive():
                self._thread.join(timeout=1.0)
        finally:
            self.stop()

    def stop(self) -> None:
        """Stop serving and end the worker thread."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self.batcher is not None:
            self.batcher.close()
            self.batcher = None

    def __enter__(self) -> LLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound port (after :meth:`start`)."""
        if self._httpd is None:
            return self._port
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://host:port/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    # ----------------------------------------------------------------- API

    def models_body(self) -> dict[str, Any]:
        """The ``/v1/models`` answer."""
        return {
            "object": "list",
            "data": [{
                "id": self.model_id,
                "object": "model",
                "created": 0,
                "owned_by": "radconcord",
                # Not an OpenAI field: lets clients record which weights answered.
                "fingerprint": self.fingerprint,
            }],
        }

    def complete(self, body: Any) -> dict[str, Any]:
        """Answer one chat completion request (blocks until generated).

        Raises:
            RequestError: for a request the server refuses.
        """
        messages, max_tokens = parse_chat_request(body, served_id=self.model_id)
        assert self.lm is not None and self.batcher is not None
        prompt = self.lm.format_messages(messages)
        text, n_prompt, n_out = self.batcher.submit(prompt, max_tokens).result()
        self.requests += 1
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_id,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length" if n_out >= max_tokens else "stop",
            }],
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_out,
                      "total_tokens": n_prompt + n_out},
        }


class _Handler(BaseHTTPRequestHandler):
    server_ref: LLMServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        logger.debug("%s " + format, self.address_string(), *args)

    def _send(self, status: int, body: dict[str, Any]) -> None:
        raw = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _error(self, status: HTTPStatus, message: str, kind: str) -> None:
        self._send(status, {"error": {"message": message, "type": kind, "code": int(status)}})

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        path = self.path.split("?", 1)[0].rstrip("/")
        if path in ("/v1/models", "/models"):
            self._send(HTTPStatus.OK, self.server_ref.models_body())
        elif path in ("/health", "/v1/health"):
            self._send(HTTPStatus.OK, {"status": "ok"})
        else:
            self._error(HTTPStatus.NOT_FOUND, f"no route {path}", "not_found")

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        path = self.path.split("?", 1)[0].rstrip("/")
        if path not in ("/v1/chat/completions", "/chat/completions"):
            self._error(HTTPStatus.NOT_FOUND, f"no route {path}", "not_found")
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY_BYTES:
            self._error(HTTPStatus.BAD_REQUEST, "bad or too large Content-Length",
                        "invalid_request_error")
            return
        try:
            body = json.loads(self.rfile.read(length).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            self._error(HTTPStatus.BAD_REQUEST, f"the body is not JSON: {exc}",
                        "invalid_request_error")
            return
        try:
            answer = self.server_ref.complete(body)
        except RequestError as exc:
            self._error(HTTPStatus.BAD_REQUEST, str(exc), "invalid_request_error")
            return
        except Exception as exc:  # noqa: BLE001 - a generation failure is a 500, not a crash
            logger.exception("completion failed")
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}",
                        "server_error")
            return
        self._send(HTTPStatus.OK, answer)
