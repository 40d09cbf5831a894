"""Where an LLM metric's generations come from: transformers in the worker, or a chat server.

Every LLM family (GREEN, CRIMSON, llm_rexval) builds its prompts as chat messages and asks a
:class:`ChatBackend` for greedy completions::

    backend.generate(prompts, max_new_tokens=512) -> list[str]

where each prompt is a list of ``{"role", "content"}`` messages (a bare string is one user
message). Two backends:

* :class:`TransformersBackend`: the model loaded in this process (:mod:`backend.metrics.llm`;
  one per :class:`~backend.metrics.base.Resources`), batched with left padding, greedy,
  bf16 on CUDA when the family asks for it.
* :class:`OpenAIChatBackend`: any OpenAI-compatible ``/v1/chat/completions`` endpoint (vLLM,
  llama.cpp's server, :mod:`backend.metrics.llm_server`), ``temperature = 0``, a thread pool
  bounded by ``concurrency``, a per-request timeout and retries with exponential backoff on
  429, 5xx, timeouts and refused or dropped connections. Stdlib ``urllib`` only.

Endpoint settings come from the family's options or, when an option is not given, from the
environment: ``RADCONCORD_LLM_BASE_URL`` (e.g. ``http://127.0.0.1:8000/v1``),
``RADCONCORD_LLM_MODEL`` (the served model id) and ``RADCONCORD_LLM_API_KEY`` (sent as a bearer
token; never part of a signature). The served model id (from ``/v1/models``, or the one named)
goes into the family's signature with the hash of its prompt template (:func:`prompt_hash`).

``endpoints=URL1*2,URL2@16`` (or ``endpoints=@FILE``) instead of ``base_url`` spreads the
requests over several servers of one model: :class:`~backend.metrics.llm_pool.EndpointPool`,
built by :func:`endpoint_pool` (docs/llm_endpoints.md).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, Protocol

from radconcord.backend.metrics import hf, llm
from radconcord.backend.metrics.base import BaseMetric, MetricResult, Resources
from radconcord.backend.metrics.llm_pool import (
    FAIL_AFTER,
    REST_S,
    WAIT_S,
    EndpointError,
    EndpointPool,
    FailedGeneration,
    parse_endpoints,
)

logger = logging.getLogger(__name__)

Message = dict[str, str]
Prompt = str | Sequence[Message]

ENV_BASE_URL = "RADCONCORD_LLM_BASE_URL"
ENV_MODEL = "RADCONCORD_LLM_MODEL"
ENV_API_KEY = "RADCONCORD_LLM_API_KEY"

BACKENDS = ("transformers", "openai")

#: Options every LLM family accepts for choosing and configuring its backend.
BACKEND_DEFAULTS: dict[str, Any] = {
    "backend": "transformers",
    "base_url": None,
    "endpoints": None,
    "endpoint_model": None,
    "api_key": None,
    "concurrency": 8,
    "timeout": 300.0,
    "max_retries": 4,
    # A pool of endpoints only (``endpoints=``): when a failing endpoint is rested, for how
    # long, and how long one call waits for a rested one to come back (llm_pool's defaults).
    "fail_after": FAIL_AFTER,
    "rest_s": REST_S,
    "wait_s": WAIT_S,
}
#: The options that only a pool of endpoints uses.
POOL_OPTIONS = ("fail_after", "rest_s", "wait_s")

# HTTP statuses worth retrying: rate limits and server-side trouble (a vLLM still loading
# answers 503). Any other 4xx is the request's fault and fails at once.
_RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class LLMEndpointError(EndpointError):
    """An OpenAI-compatible endpoint could not give a completion; the message says why."""


class _Skipped(Exception):
    """A request not sent because another one of the same call failed for good."""


def as_messages(prompt: Prompt) -> list[Message]:
    """``prompt`` as chat messages (a string becomes one user message).

    Raises:
        ValueError: for a message without a string ``role`` and ``content``.
    """
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    out: list[Message] = []
    for i, m in enumerate(prompt):
        ok = isinstance(m, Mapping)
        role, content = (m.get("role"), m.get("content")) if ok else (None, None)
        if not isinstance(role, str) or not isinstance(content, str):
            raise ValueError(f"message {i} must be a dict with string 'role' and 'content'")
        out.append({"role": role, "content": content})
    return out


def prompt_hash(template: Prompt) -> str:
    """Short sha256 of a prompt template (messages with placeholders) for signatures."""
    blob = json.dumps(as_messages(template), ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:12]


class ChatBackend(Protocol):
    """What an LLM family needs from a backend."""

    def generate(self, prompts: Sequence[Prompt], *, max_new_tokens: int) -> list[str]:
        """Greedy completions of ``prompts``, in order."""

    def identity(self) -> str:
        """The model that answers, for signatures."""


# --------------------------------------------------------------------------- transformers


class TransformersBackend:
    """Greedy batched generation with a model loaded in this process.

    Args:
        lm: The loaded model (:func:`backend.metrics.llm.shared_lm`).
        batch_size: Prompts per forward batch (length-sorted, left-padded).
        model_identity: What the signature names (``fp:<16>``, ``gguf:sha256:<16>``).
    """

    def __init__(self, lm: llm.CausalLM, *, batch_size: int = 8, model_identity: str = "") -> None:
        self.lm = lm
        self.batch_size = int(batch_size)
        self._identity = model_identity

    def format(self, prompt: Prompt) -> str:
        """The exact prompt string the model sees (chat template applied when it has one)."""
        return self.lm.format_messages(as_messages(prompt))

    def generate(self, prompts: Sequence[Prompt], *, max_new_tokens: int) -> list[str]:
        """Greedy completions, batched with left padding."""
        texts = [self.format(p) for p in prompts]
        if not texts:
            return []
        return self.lm.generate(texts, max_new_tokens=int(max_new_tokens),
                                batch_size=self.batch_size)

    def identity(self) -> str:
        return self._identity


# --------------------------------------------------------------------------- OpenAI-compatible


def normalise_base_url(url: str) -> str:
    """``http://host:8000``, ``.../v1`` or ``.../v1/`` -> ``http://host:8000/v1``.

    Raises:
        ValueError: for a URL that is not http(s).
    """
    u = url.strip().rstrip("/")
    if not u.startswith(("http://", "https://")):
        raise ValueError(f"LLM endpoint base URL must start with http:// or https:// (got {url!r})")
    if u.endswith("/chat/completions"):
        u = u[: -len("/chat/completions")]
    if not u.endswith("/v1"):
        u += "/v1"
    return u


class OpenAIChatBackend:
    """Chat completions from an OpenAI-compatible server (vLLM, llama.cpp, llm_server).

    Args:
        base_url: ``http://host:port`` or ``http://host:port/v1``.
        model: Served model id; ``None`` picks ``prefer`` when served, else the only one.
        api_key: Bearer token (``None``: no Authorization header).
        concurrency: Most requests in flight at once.
        timeout: Seconds per HTTP request (connect + read).
        max_retries: Retries after the first attempt on 429/5xx/timeouts/connection errors.
        backoff: First retry delay in seconds; doubled each retry (with up to 10% jitter),
            at most ``backoff_max``; a ``Retry-After`` header is honoured up to that cap.
        backoff_max: Longest delay between two attempts.
        prefer: A model id to choose when the endpoint serves several and ``model`` is None
            (the family's default model, e.g. the GREEN checkpoint's hub id).
        extra_body: Extra JSON fields for every request (e.g. ``{"seed": 0}``).
        sleep: The wait between attempts (default ``time.sleep``; the endpoint pool passes
            one that a rest of the endpoint cuts short).
    """

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        api_key: str | None = None,
        concurrency: int = 8,
        timeout: float = 300.0,
        max_retries: int = 4,
        backoff: float = 1.0,
        backoff_max: float = 60.0,
        prefer: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        if int(concurrency) < 1:
            raise ValueError("concurrency must be >= 1")
        if int(max_retries) < 0:
            raise ValueError("max_retries must be >= 0")
        if float(timeout) <= 0:
            raise ValueError("timeout must be > 0 seconds")
        self.base_url = normalise_base_url(base_url)
        self._model = model
        self.api_key = api_key
        self.concurrency = int(concurrency)
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff = float(backoff)
        self.backoff_max = float(backoff_max)
        self.prefer = prefer
        self.extra_body = dict(extra_body or {})
        self._lock = threading.Lock()
        self._model_info: dict[str, Any] | None = None
        #: ``model`` fields of the responses seen (a server may answer with another name).
        self.answered_by: set[str] = set()
        #: HTTP attempts made (first tries and retries), for tests and logs.
        self.attempts = 0
        self._sleep: Callable[[float], None] = sleep or time.sleep

    # ----------------------------------------------------------------- http

    def _request(self, method: str, path: str, body: Mapping[str, Any] | None) -> Any:
        """One JSON request with retries; returns the decoded JSON body."""
        url = f"{self.base_url}{path}"
        data = None if body is None else json.dumps(body).encode("utf-8")
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last = ""
        for attempt in range(self.max_retries + 1):
            retry_after: float | None = None
            with self._lock:
                self.attempts += 1
            try:
                req = urllib.request.Request(url, data=data, headers=headers, method=method)
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    raw = resp.read()
                try:
                    return json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                    raise LLMEndpointError(
                        f"LLM endpoint {url} answered with something that is not JSON:"
                        f" {raw[:200]!r}"
                    ) from exc
            except urllib.error.HTTPError as exc:
                detail = _error_detail(exc)
                last = f"HTTP {exc.code} {detail}".strip()
                if exc.code not in _RETRY_STATUSES:
                    raise LLMEndpointError(f"LLM endpoint {url} refused the request: {last}") \
                        from exc
                retry_after = _retry_after(exc.headers.get("Retry-After") if exc.headers else None)
            except TimeoutError as exc:
                last = f"no answer within {self.timeout:g} s ({exc})"
            except urllib.error.URLError as exc:
                reason = exc.reason
                if isinstance(reason, TimeoutError):
                    last = f"no answer within {self.timeout:g} s"
                else:
                    last = f"cannot connect ({reason})"
            except (ConnectionError, http.client.HTTPException, OSError) as exc:
                last = f"connection failed ({type(exc).__name__}: {exc})"
            if attempt >= self.max_retries:
                break
            delay = min(self.backoff_max, self.backoff * (2 ** attempt))
            delay *= 1.0 + 0.1 * random.random()
            if retry_after is not None:
                delay = max(delay, min(retry_after, self.backoff_max))
            logger.info("LLM endpoint %s: %s; retry %d in %.2f s", url, last, attempt + 1, delay)
            self._sleep(delay)
        raise LLMEndpointError(
            f"LLM endpoint {url} failed after {self.max_retries + 1} attempt(s): {last}"
        )

    # ----------------------------------------------------------------- model id

    def models(self) -> list[dict[str, Any]]:
        """The endpoint's ``/v1/models`` entries.

        Raises:
            LLMEndpointError: when it cannot be read.
        """
        body = self._request("GET", "/models", None)
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise LLMEndpointError(f"LLM endpoint {self.base_url}/models has no 'data' list")
        return [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]

    def model_info(self) -> dict[str, Any]:
        """The ``/v1/models`` entry of the model used (read once, then kept).

        Raises:
            LLMEndpointError: when the endpoint cannot be read, does not serve the named
                model, or serves several and none was named.
        """
        with self._lock:
            if self._model_info is not None:
                return self._model_info
        served = self.models()
        ids = [m["id"] for m in served]
        chosen: dict[str, Any] | None = None
        want = self._model or (self.prefer if self.prefer in ids else None)
        if want is not None:
            chosen = next((m for m in served if m["id"] == want), None)
            if chosen is None and self._model is not None:
                raise LLMEndpointError(
                    f"LLM endpoint {self.base_url} does not serve model {self._model!r}"
                    f" (it serves: {', '.join(ids) or 'nothing'})"
                )
        if chosen is None:
            if len(served) != 1:
                raise LLMEndpointError(
                    f"LLM endpoint {self.base_url} serves {len(served)} models"
                    f" ({', '.join(ids) or 'none'}); name one with endpoint_model= or"
                    f" {ENV_MODEL}"
                )
            chosen = served[0]
        with self._lock:
            self._model_info = chosen
        return chosen

    @property
    def model(self) -> str:
        """The served model id requests name."""
        return str(self.model_info()["id"])

    def identity(self) -> str:
        """``openai:<served id>`` plus the weights' fingerprint when the server states one.

        vLLM states the weights folder as ``root``; :mod:`backend.metrics.llm_server` states
        the folder's fingerprint. The base URL is not part of it: the same model served
        elsewhere gives the same numbers.
        """
        info = self.model_info()
        ident = f"openai:{info['id']}"
        extra = info.get("fingerprint") or info.get("root")
        if isinstance(extra, str) and extra and extra != info["id"]:
            ident += f"@{extra}"
        return ident

    # ----------------------------------------------------------------- generation

    def complete(self, prompt: Prompt, *, max_new_tokens: int) -> str:
        """One greedy chat completion.

        Raises:
            LLMEndpointError: when the endpoint fails after the retries or answers without a
                message.
        """
        body = {
            **self.extra_body,
            "model": self.model,
            "messages": as_messages(prompt),
            "max_tokens": int(max_new_tokens),
            "temperature": 0.0,
            "stream": False,
        }
        out = self._request("POST", "/chat/completions", body)
        try:
            content = out["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise LLMEndpointError(
                f"LLM endpoint {self.base_url} answered without choices[0].message.content:"
                f" {json.dumps(out)[:200]}"
            ) from exc
        if isinstance(out, dict) and isinstance(out.get("model"), str):
            with self._lock:
                self.answered_by.add(out["model"])
        return "" if content is None else str(content)

    def generate(self, prompts: Sequence[Prompt], *, max_new_tokens: int) -> list[str]:
        """Greedy completions of ``prompts`` in order, at most ``concurrency`` in flight."""
        items = list(prompts)
        if not items:
            return []
        self.model_info()  # fail once, before the pool, when the endpoint is not there
        if self.concurrency == 1 or len(items) == 1:
            return [self.complete(p, max_new_tokens=max_new_tokens) for p in items]
        failed = threading.Event()

        def task(prompt: Prompt) -> str:
            # Once one request has failed for good (after its retries), the others are not
            # started: they would each retry against an endpoint that is not answering.
            if failed.is_set():
                raise _Skipped
            try:
                return self.complete(prompt, max_new_tokens=max_new_tokens)
            except BaseException:
                failed.set()
                raise

        pool = ThreadPoolExecutor(max_workers=min(self.concurrency, len(items)),
                                  thread_name_prefix="llm-http")
        futures = [pool.submit(task, p) for p in items]
        try:
            out = [f.result() for f in futures]
        except BaseException as first:
            pool.shutdown(wait=True, cancel_futures=True)
            for f in futures:  # raise the request's own error, not a skipped one's
                if f.done() and not f.cancelled():
                    exc = f.exception()
                    if exc is not None and not isinstance(exc, _Skipped):
                        raise exc from None
            raise first
        pool.shutdown(wait=True)
        stray = self.answered_by - {self.model}
        if stray:
            logger.warning("LLM endpoint %s asked for %s answered as %s", self.base_url,
                           self.model, ", ".join(sorted(stray)))
        return out


def _error_detail(exc: urllib.error.HTTPError) -> str:
    try:
        raw = exc.read()[:300].decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - the body is only a hint in the message
        return exc.reason if isinstance(exc.reason, str) else ""
    try:
        body = json.loads(raw)
        msg = body.get("error", {}).get("message") if isinstance(body, dict) else None
        if isinstance(msg, str):
            return msg
    except (json.JSONDecodeError, AttributeError):
        pass
    return raw.strip()


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


# --------------------------------------------------------------------------- family helpers


def endpoint_settings(options: Mapping[str, Any]) -> tuple[str | None, str | None, str | None]:
    """``(base_url, model, api_key)`` from a family's options, else the environment."""
    base = options.get("base_url") or os.environ.get(ENV_BASE_URL) or None
    model = options.get("endpoint_model") or os.environ.get(ENV_MODEL) or None
    key = options.get("api_key") or os.environ.get(ENV_API_KEY) or None
    return base, model, key


def check_backend_option(family: str, options: Mapping[str, Any]) -> str:
    """The ``backend`` option, checked.

    Raises:
        ValueError: for an unknown backend name.
    """
    name = str(options.get("backend") or "transformers").strip().lower()
    if name not in BACKENDS:
        raise ValueError(
            f"unknown backend {options.get('backend')!r} for metric '{family}'"
            f" (use {' or '.join(BACKENDS)})"
        )
    return name


def openai_backend(
    family: str, options: Mapping[str, Any], *, prefer: str | None = None
) -> OpenAIChatBackend:
    """The endpoint backend a family's options (or the environment) describe.

    Raises:
        ValueError: when no base URL is given anywhere, or a setting is invalid.
    """
    base, model, key = endpoint_settings(options)
    if not base:
        raise ValueError(
            f"metric '{family}' with backend=openai needs {family}.base_url=<http://host:port/v1>"
            f" or {ENV_BASE_URL}"
        )
    return OpenAIChatBackend(
        base,
        model=model,
        api_key=key,
        concurrency=int(options.get("concurrency", BACKEND_DEFAULTS["concurrency"])),
        timeout=float(options.get("timeout", BACKEND_DEFAULTS["timeout"])),
        max_retries=int(options.get("max_retries", BACKEND_DEFAULTS["max_retries"])),
        prefer=prefer,
    )


def endpoint_pool(
    family: str, options: Mapping[str, Any], *, prefer: str | None = None
) -> EndpointPool:
    """The pool of endpoints the family's ``endpoints`` option lists.

    Each endpoint's client is an :class:`OpenAIChatBackend` with the family's
    ``endpoint_model``, ``api_key``, ``timeout`` and ``max_retries``; an endpoint without
    ``@N`` gets the family's ``concurrency``.

    Raises:
        ValueError: for a bad item (named), or ``endpoints`` given with ``base_url``.
    """
    if options.get("base_url"):
        raise ValueError(f"metric '{family}': give {family}.base_url or {family}.endpoints,"
                         " not both")
    try:
        specs = parse_endpoints(options.get("endpoints"), normalise=normalise_base_url)
    except ValueError as exc:
        raise ValueError(f"metric '{family}': {exc}") from None
    _, model, key = endpoint_settings(options)
    timeout = float(options.get("timeout", BACKEND_DEFAULTS["timeout"]))
    retries = int(options.get("max_retries", BACKEND_DEFAULTS["max_retries"]))

    def client(url: str, sleep: Callable[[float], None]) -> OpenAIChatBackend:
        return OpenAIChatBackend(url, model=model, api_key=key, timeout=timeout,
                                 max_retries=retries, prefer=prefer, sleep=sleep)

    settings = {}
    for name in POOL_OPTIONS:
        value = options.get(name, BACKEND_DEFAULTS[name])
        try:
            settings[name] = int(value) if name == "fail_after" else float(value)
        except (TypeError, ValueError):
            raise ValueError(f"metric '{family}': {family}.{name} must be a number,"
                             f" got {value!r}") from None
        if isinstance(value, float) and name == "fail_after" and not value.is_integer():
            raise ValueError(f"metric '{family}': {family}.fail_after must be a whole number,"
                             f" got {value!r}")
    if settings["fail_after"] < 1 or settings["rest_s"] < 0 or settings["wait_s"] < 0:
        raise ValueError(f"metric '{family}': {family}.fail_after must be at least 1 and"
                         f" {family}.rest_s and {family}.wait_s at least 0 (got"
                         f" {settings['fail_after']}, {settings['rest_s']}, {settings['wait_s']})")
    return EndpointPool(
        specs, client_factory=client,
        concurrency=int(options.get("concurrency", BACKEND_DEFAULTS["concurrency"])),
        **settings,
    )


def endpoint_availability(family: str, options: Mapping[str, Any], *,
                          prefer: str | None = None) -> str | None:
    """``None`` when the family's endpoint answers ``/v1/models`` with a usable model (every
    endpoint of a pool, with one model).

    One short request (5 s timeout, no retry): enough for ``availability()``.
    """
    if options.get("endpoints"):
        try:
            pool = endpoint_pool(family, {**options, "timeout": 5.0, "max_retries": 0},
                                 prefer=prefer)
        except ValueError as exc:
            return f"{family}: LLM endpoints not usable: {exc}"
        reason = pool.availability()
        return None if reason is None else f"{family}: LLM endpoints not usable: {reason}"
    try:
        be = openai_backend(family, {**options, "timeout": 5.0, "max_retries": 0},
                            prefer=prefer)
        be.model_info()
    except (ValueError, LLMEndpointError) as exc:
        return f"{family}: LLM endpoint not usable: {exc}"
    return None


def transformers_backend(
    resources: Resources, ref: llm.LMRef, *, device: str, dtype: str, batch_size: int
) -> TransformersBackend:
    """The in-process backend for ``ref`` (model shared through ``resources``).

    Raises:
        hf.ModelNotAvailable: when the model cannot be found nor fetched.
        ValueError: for a dtype the device does not support.
    """
    folder = llm.resolve_folder(ref)
    torch_dtype = hf.pick_dtype(device, dtype)
    lm = llm.shared_lm(resources, folder, device=device, dtype=torch_dtype)
    return TransformersBackend(lm, batch_size=batch_size, model_identity=llm.identity(ref))


class LLMMetric(BaseMetric):
    """Base of the LLM families: one model behind either backend.

    Subclasses add :data:`BACKEND_DEFAULTS` plus ``model``, ``revision``, ``dtype`` and
    ``batch_size`` to their ``defaults`` and call :meth:`chat`; :meth:`backend_signature` says
    which model answered. ``availability`` is cheap: a local lookup for transformers, one
    ``/v1/models`` request (5 s) for an endpoint.
    """

    #: Label used in messages ("GREEN model not available: ...").
    model_label: ClassVar[str] = "LLM"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.backend_name = check_backend_option(self.spec.name, self.options)
        self._backend: ChatBackend | None = None
        self._endpoint: OpenAIChatBackend | EndpointPool | None = None
        #: ``pair position -> reason`` of the last :meth:`chat`'s items no endpoint completed.
        self.endpoint_failures: dict[int, str] = {}
        prefer = str(self.options.get("model") or "") or None
        if self.options.get("endpoints"):
            # A pool of endpoints implies the endpoint backend; settings are checked now.
            self.backend_name = "openai"
            self._endpoint = endpoint_pool(self.spec.name, self.options, prefer=prefer)
        else:
            # A pool's failure handling set without a pool would silently do nothing.
            given = [n for n in POOL_OPTIONS
                     if n in options and options[n] != BACKEND_DEFAULTS[n]]
            if given:
                raise ValueError(
                    f"metric '{self.spec.name}': {', '.join(given)} only apply to a pool of"
                    f" endpoints ({self.spec.name}.endpoints=URL1,URL2,...)")
        if not self.options.get("endpoints") and self.backend_name == "openai":
            # Settings are checked now (bad URL, missing URL), the endpoint is asked later.
            self._endpoint = openai_backend(self.spec.name, self.options, prefer=prefer)

    def lm_ref(self) -> llm.LMRef:
        """The in-process model's reference (``model`` + ``revision`` options)."""
        return llm.LMRef(str(self.options["model"]), self.options.get("revision"))

    def availability(self) -> str | None:
        if isinstance(self._endpoint, EndpointPool):
            return endpoint_availability(self.spec.name, self.options,
                                         prefer=str(self.options.get("model") or "") or None)
        if self._endpoint is not None:
            try:
                saved = (self._endpoint.timeout, self._endpoint.max_retries)
                self._endpoint.timeout, self._endpoint.max_retries = min(saved[0], 5.0), 0
                try:
                    self._endpoint.model_info()
                finally:
                    self._endpoint.timeout, self._endpoint.max_retries = saved
            except EndpointError as exc:
                return f"{self.spec.name}: LLM endpoint not usable: {exc}"
            return None
        reason = llm.availability(self.lm_ref())
        if reason is None:
            return None
        return f"{self.model_label} model not available: {reason}"

    def _load(self) -> None:
        if self._endpoint is not None:
            self._backend = self._endpoint
            return
        self._backend = transformers_backend(
            self.resources, self.lm_ref(), device=self.device,
            dtype=str(self.options.get("dtype", "auto")),
            batch_size=int(self.options.get("batch_size", 8)),
        )

    @property
    def backend(self) -> ChatBackend:
        """The loaded backend (loads on first use)."""
        if not self._loaded:
            self.load(self.device)
        assert self._backend is not None
        return self._backend

    def chat(self, prompts: Sequence[Prompt], *, max_new_tokens: int) -> list[str]:
        """Greedy completions of chat prompts from the configured backend.

        An item an endpoint pool could not complete is ``""`` (the family parses it as an
        empty answer, hence NaN) and its reason is kept in :attr:`endpoint_failures`.
        """
        out = self.backend.generate(prompts, max_new_tokens=max_new_tokens)
        self.endpoint_failures = {i: a.reason for i, a in enumerate(out)
                                  if isinstance(a, FailedGeneration)}
        return out

    def endpoint_stats(self) -> dict[str, Any] | None:
        """The endpoint pool's counts (:meth:`EndpointPool.stats`), else ``None``."""
        if isinstance(self._endpoint, EndpointPool):
            return self._endpoint.stats()
        return None

    def score(self, *, references: Sequence[str], candidates: Sequence[str],
              images: Sequence[Any] | None = None) -> MetricResult:
        """The family's scores; a pair no endpoint answered is NaN in every key, with the
        reason in its details (``endpoint_error`` and ``flags``)."""
        self.endpoint_failures = {}
        result = super().score(references=references, candidates=candidates, images=images)
        failed = self.endpoint_failures
        if failed and len(result) == len(references):
            details = result.details or [{} for _ in range(len(result))]
            for i, reason in failed.items():
                for vals in result.values.values():
                    vals[i] = float("nan")
                d = details[i] = dict(details[i] or {})
                d["endpoint_error"] = reason
                d["flags"] = [*d.get("flags", []), f"endpoint failed: {reason}"]
            result.details = details
            logger.warning("%s: %d of %d pairs got no answer from any endpoint (NaN)",
                           self.spec.name, len(failed), len(result))
        return result

    def backend_signature(self) -> str:
        """``model:<identity>|rev:<revision>|dtype:<dtype>`` in-process, else
        ``endpoint:<served id>[@fingerprint]``.

        The same served model through a pool of endpoints gives the same signature as
        through one of them (the URLs are not part of it).

        Raises:
            EndpointError: when the endpoint cannot say which model it serves, or a pool's
                endpoints serve different models.
        """
        if self._endpoint is not None:
            return f"endpoint:{self._endpoint.identity()}"
        o = self.options
        return (f"model:{llm.identity(self.lm_ref())}|rev:{o.get('revision')}"
                f"|dtype:{o.get('dtype', 'auto')}")
