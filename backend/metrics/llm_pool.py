"""A pool of OpenAI-compatible chat endpoints serving one model (e.g. one vLLM server per GPU).

An LLM family given ``endpoints=`` instead of ``base_url=`` sends its requests to several
servers::

    --set llm_rexval.endpoints=http://gpu0:8000/v1*2@16,http://gpu1:8000/v1
    --set green.endpoints=@endpoints.txt

Each item is ``URL[*WEIGHT][@CONCURRENCY]``: the weight (a positive number, default 1) sets the
share of requests the endpoint gets while it has free slots, the concurrency (a positive whole
number, default the family's ``concurrency`` option) the most requests in flight there.
``@FILE`` reads the items from a file: a JSON list (of such strings, or of objects
``{"url", "weight", "concurrency"}``) or a text file with one item per line (blank lines and
``#`` comments skipped). See ``docs/llm_endpoints.md``.

:class:`EndpointPool` is a chat backend like
:class:`~backend.metrics.llm_backends.OpenAIChatBackend`
(``generate(prompts, max_new_tokens=)``, ``identity()``):

* At first use it asks every endpoint's ``/v1/models`` and refuses a pool whose endpoints serve
  different model ids (or state different weights fingerprints): their scores would not be
  comparable. The identity is the one model's, without URLs -- the same model on other hosts
  gives the same numbers, so a pool and a single endpoint of that model share the signature.
* One dispatcher spreads requests by smooth weighted round-robin over the endpoints that have a
  free slot (so while no limit binds the spread is exactly the weights; when all are busy, the
  endpoint that frees a slot first gets the next request). Outputs come back in prompt order.
* An endpoint whose requests fail ``fail_after`` times in a row (each failure is after the
  client's own retries) is rested for ``rest_s`` seconds: its retries in progress are abandoned
  and those items, like every failed one, go to the other endpoints. When its rest is over the
  endpoint is asked ``/v1/models`` again (still the same model?) before it gets work. When every
  endpoint an item can still use is rested, the pool waits for the earliest to come back, at
  most ``wait_s`` seconds per call.
* An item that failed on every endpoint (or found none within ``wait_s``) comes back as a
  :class:`FailedGeneration`: an empty string whose ``reason`` names each endpoint's error. The
  families parse it as an empty answer (all values NaN) and
  :class:`~backend.metrics.llm_backends.LLMMetric` adds the reason to the pair's flags.
* :meth:`EndpointPool.stats` counts requests, failures and rests per endpoint and failed items.

This module knows no HTTP: the clients come from a factory (``llm_backends.endpoint_pool``
builds them as ``OpenAIChatBackend``), so the import runs one way, llm_backends -> llm_pool.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

logger = logging.getLogger(__name__)

#: Defaults of the pool's failure handling.
FAIL_AFTER = 3
REST_S = 30.0
WAIT_S = 600.0


class EndpointError(RuntimeError):
    """An endpoint, or a pool of them, could not be used; the message says why."""


class FailedGeneration(str):
    """The answer of an item no endpoint could complete: ``""`` with the ``reason``."""

    reason: str

    def __new__(cls, reason: str) -> FailedGeneration:
        obj = super().__new__(cls, "")
        obj.reason = reason
        return obj


class _Abandoned(Exception):
    """A client's retry wait cut short because its endpoint was rested."""


class ChatClient(Protocol):
    """What the pool needs of one endpoint's client."""

    base_url: str

    def models(self) -> list[dict[str, Any]]:
        """The ``/v1/models`` entries (read now, not cached)."""

    def model_info(self) -> dict[str, Any]:
        """The entry of the model used (read once)."""

    def identity(self) -> str:
        """``openai:<id>[@fingerprint]``."""

    def complete(self, prompt: Any, *, max_new_tokens: int) -> str:
        """One greedy completion (after the client's own retries)."""


#: ``factory(url, sleep) -> client``; ``sleep`` is the wait between the client's retries.
ClientFactory = Callable[[str, Callable[[float], None]], ChatClient]


# --------------------------------------------------------------------------- option parsing


@dataclass(frozen=True)
class EndpointSpec:
    """One endpoint of a pool: its base URL, weight and concurrency limit (None: default)."""

    url: str
    weight: float = 1.0
    concurrency: int | None = None


def _weight(text: Any, item: str) -> float:
    try:
        w = float(text)
    except (TypeError, ValueError):
        w = math.nan
    if isinstance(text, bool) or not math.isfinite(w) or w <= 0:
        raise ValueError(f"endpoints item {item!r}: weight {text!r} is not a positive number")
    return w


def _concurrency(text: Any, item: str) -> int:
    try:
        n = int(str(text).strip()) if not isinstance(text, bool) else 0
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"endpoints item {item!r}: concurrency {text!r} is not a positive"
                         " whole number")
    return n


def _url(text: Any, item: str, normalise: Callable[[str], str]) -> str:
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"endpoints item {item!r}: no URL")
    try:
        return normalise(text)
    except ValueError as exc:
        raise ValueError(f"endpoints item {item!r}: {exc}") from None


def parse_item(item: str, *, normalise: Callable[[str], str] = str.strip) -> EndpointSpec:
    """``URL[*WEIGHT][@CONCURRENCY]`` as an :class:`EndpointSpec`.

    The ``@`` suffix is read as a concurrency only when what follows the last ``@`` has no
    ``/``, ``:`` or ``.`` (so ``http://user@host/v1`` stays a URL).

    Raises:
        ValueError: naming the item and what is wrong in it.
    """
    text = item.strip()
    if not text:
        raise ValueError("endpoints: empty item (two commas in a row?)")
    conc: int | None = None
    head, at, tail = text.rpartition("@")
    if at and not any(c in tail for c in "/:."):
        conc = _concurrency(tail, item)
        text = head
    weight = 1.0
    head, star, tail = text.rpartition("*")
    if star:
        weight = _weight(tail, item)
        text = head
    return EndpointSpec(_url(text, item, normalise), weight, conc)


def _from_json(data: Any, source: str, normalise: Callable[[str], str]) -> list[EndpointSpec]:
    if isinstance(data, Mapping) and "endpoints" in data:
        data = data["endpoints"]
    if not isinstance(data, list):
        raise ValueError(f"endpoints file {source}: expected a JSON list of endpoints")
    out: list[EndpointSpec] = []
    for i, entry in enumerate(data):
        if isinstance(entry, str):
            out.append(parse_item(entry, normalise=normalise))
            continue
        if not isinstance(entry, Mapping):
            raise ValueError(f"endpoints file {source}: item {i} is neither a string nor an"
                             " object")
        unknown = set(entry) - {"url", "weight", "concurrency"}
        name = json.dumps(entry)[:120]
        if unknown:
            raise ValueError(f"endpoints item {name}: unknown field(s)"
                             f" {', '.join(sorted(unknown))} (known: url, weight, concurrency)")
        conc = entry.get("concurrency")
        out.append(EndpointSpec(
            _url(entry.get("url"), name, normalise),
            _weight(entry.get("weight", 1), name),
            None if conc is None else _concurrency(conc, name),
        ))
    return out


def parse_endpoints(value: Any, *, normalise: Callable[[str], str] = str.strip,
                    base_dir: Path | None = None) -> list[EndpointSpec]:
    """The ``endpoints`` option as a list of :class:`EndpointSpec`.

    ``value`` is ``"URL1*2,URL2@4"``, ``"@FILE"`` (JSON or one item per line) or a list of
    items (strings or ``{"url", "weight", "concurrency"}`` objects, e.g. from a job's JSON).

    Raises:
        ValueError: naming the bad item (or file), for an empty list and for a URL given twice.
    """
    if isinstance(value, str) and value.strip().startswith("@"):
        path = Path(value.strip()[1:]).expanduser()
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"endpoints file {path}: cannot read it ({exc.strerror or exc})") \
                from None
        stripped = text.lstrip()
        if stripped.startswith(("[", "{")):
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"endpoints file {path}: not valid JSON ({exc})") from None
            specs = _from_json(data, str(path), normalise)
        else:
            lines = [ln.split("#", 1)[0].strip() for ln in text.splitlines()]
            specs = [parse_item(ln, normalise=normalise) for ln in lines if ln]
        where = f"endpoints file {path}"
    elif isinstance(value, str):
        specs = [parse_item(p, normalise=normalise) for p in value.split(",")]
        where = "endpoints"
    elif isinstance(value, Sequence):
        specs = _from_json(list(value), "option", normalise)
        where = "endpoints"
    else:
        raise ValueError(f"endpoints: expected URL[*WEIGHT][@N],... or @FILE, got {value!r}")
    if not specs:
        raise ValueError(f"{where}: no endpoint given")
    seen: set[str] = set()
    for s in specs:
        if s.url in seen:
            raise ValueError(f"{where}: {s.url} is listed twice (give it a weight instead)")
        seen.add(s.url)
    return specs


# --------------------------------------------------------------------------- the pool


@dataclass
class _Endpoint:
    spec: EndpointSpec
    client: ChatClient
    cap: int
    identity: str = ""
    in_flight: int = 0
    current: float = 0.0  # smooth weighted round-robin state
    streak: int = 0  # failures in a row
    rested_until: float = 0.0
    probing: bool = False
    disabled: str = ""  # why it is out for good (it serves another model)
    requests: int = 0
    failures: int = 0
    rested: int = 0
    last_error: str = ""
    wake: threading.Event = field(default_factory=threading.Event)

    @property
    def url(self) -> str:
        return self.spec.url


@dataclass
class _Item:
    index: int
    prompt: Any
    failed_on: dict[str, str] = field(default_factory=dict)


class EndpointPool:
    """Several OpenAI-compatible endpoints of one model behind one chat backend.

    Args:
        endpoints: The endpoints (:func:`parse_endpoints`).
        client_factory: Builds one endpoint's client (``factory(url, sleep)``).
        concurrency: Default concurrency of an endpoint that states none.
        fail_after: Failures in a row (after the client's retries) that rest an endpoint.
        rest_s: How long a failing endpoint is rested.
        wait_s: Longest wait of one ``generate`` call for a rested endpoint to come back.
        clock: Monotonic clock (tests).
    """

    def __init__(
        self,
        endpoints: Sequence[EndpointSpec],
        *,
        client_factory: ClientFactory,
        concurrency: int = 8,
        fail_after: int = FAIL_AFTER,
        rest_s: float = REST_S,
        wait_s: float = WAIT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not endpoints:
            raise ValueError("an endpoint pool needs at least one endpoint")
        if int(fail_after) < 1 or float(rest_s) < 0 or float(wait_s) < 0:
            raise ValueError("fail_after must be >= 1, rest_s and wait_s >= 0")
        self.fail_after = int(fail_after)
        self.rest_s = float(rest_s)
        self.wait_s = float(wait_s)
        self._clock = clock
        self._cond = threading.Condition()
        self._eps: list[_Endpoint] = []
        for spec in endpoints:
            ep_wake = threading.Event()

            def sleep(seconds: float, wake: threading.Event = ep_wake) -> None:
                # The client's wait between retries; a rest of its endpoint ends it at once.
                if wake.wait(timeout=seconds):
                    raise _Abandoned
            cap = int(spec.concurrency or concurrency)
            if cap < 1:
                raise ValueError("concurrency must be >= 1")
            self._eps.append(_Endpoint(spec, client_factory(spec.url, sleep), cap, wake=ep_wake))
        self._identity: str | None = None
        self._model: str | None = None
        self.failed_items = 0
        self.items = 0

    # ----------------------------------------------------------------- model check

    @property
    def urls(self) -> list[str]:
        """The endpoints' base URLs, in the given order."""
        return [e.url for e in self._eps]

    def check_models(self) -> str:
        """Ask every endpoint which model it serves; return the one identity.

        Raises:
            EndpointError: when an endpoint cannot say, or the endpoints serve different
                models (the message names each URL and its model).
        """
        with self._cond:
            if self._identity is not None:
                return self._identity
        found: list[tuple[_Endpoint, str, str]] = []
        for ep in self._eps:
            try:
                info = ep.client.model_info()
                ident = ep.client.identity()
            except Exception as exc:  # noqa: BLE001 - named with its URL below
                raise EndpointError(f"endpoint pool: {ep.url} cannot say which model it"
                                    f" serves: {exc}") from exc
            found.append((ep, str(info["id"]), ident))
        listing = "; ".join(f"{ep.url} serves {mid!r}" for ep, mid, _ in found)
        if len({mid for _, mid, _ in found}) > 1:
            raise EndpointError("endpoint pool refused: its endpoints serve different models,"
                                f" whose scores are not comparable ({listing})")
        if len({ident for _, _, ident in found}) > 1:
            listing = "; ".join(f"{ep.url} is {ident}" for ep, _, ident in found)
            raise EndpointError("endpoint pool refused: its endpoints serve different weights"
                                f" under one model id ({listing})")
        with self._cond:
            for ep, _, ident in found:
                ep.identity = ident
            self._model, self._identity = found[0][1], found[0][2]
        return self._identity

    @property
    def model(self) -> str:
        """The one served model id."""
        self.check_models()
        assert self._model is not None
        return self._model

    def identity(self) -> str:
        """The model's identity, as one endpoint of it states it (no URL: see the module)."""
        return self.check_models()

    # ----------------------------------------------------------------- stats

    def stats(self) -> dict[str, Any]:
        """Counts for the job result and the CLI.

        ``{"endpoints": [{url, weight, concurrency, requests, failures, rested, state,
        last_error}], "items", "failed_items"}``: ``requests`` are completions sent (an item
        moved elsewhere counts again there), ``failures`` completions failed after the
        client's retries plus failed model checks after a rest, ``rested`` how many rests,
        ``state`` ``ok`` | ``rested`` | ``disabled``; ``items`` were asked for over the pool's
        life, ``failed_items`` came back as :class:`FailedGeneration`.
        """
        now = self._clock()
        with self._cond:
            eps = []
            for e in self._eps:
                state = ("disabled" if e.disabled else "rested" if e.rested_until > now
                         else "ok")
                eps.append({"url": e.url, "weight": e.spec.weight, "concurrency": e.cap,
                            "requests": e.requests, "failures": e.failures,
                            "rested": e.rested, "state": state,
                            "last_error": e.disabled or e.last_error})
            return {"endpoints": eps, "items": self.items, "failed_items": self.failed_items}

    # ----------------------------------------------------------------- scheduling

    def _usable(self, ep: _Endpoint, item: _Item, now: float) -> bool:
        return (not ep.disabled and ep.url not in item.failed_on
                and ep.rested_until <= now and not ep.probing)

    def _pick(self, item: _Item, now: float) -> _Endpoint | None:
        """Smooth weighted round-robin over the endpoints with a free slot for ``item``."""
        ready = [e for e in self._eps if self._usable(e, item, now) and e.in_flight < e.cap]
        if not ready:
            return None
        total = sum(e.spec.weight for e in ready)
        for e in ready:
            e.current += e.spec.weight
        best = max(ready, key=lambda e: e.current)
        best.current -= total
        return best

    def _hopeless(self, item: _Item) -> bool:
        """No endpoint is left to try ``item`` on."""
        return all(e.disabled or e.url in item.failed_on for e in self._eps)

    def _fail_item(self, item: _Item, results: list[str | None], why: str) -> None:
        why_not = dict(item.failed_on)
        why_not.update({e.url: e.disabled for e in self._eps
                        if e.disabled and e.url not in why_not})
        tried = "; ".join(f"{u}: {err}" for u, err in why_not.items())
        reason = why + (f" ({tried})" if tried else "")
        results[item.index] = FailedGeneration(reason)
        self.failed_items += 1
        logger.warning("endpoint pool: item %d not completed: %s", item.index, reason)

    def _rest(self, ep: _Endpoint, now: float) -> None:
        ep.rested_until = now + self.rest_s
        ep.rested += 1
        ep.streak = 0
        ep.wake.set()  # the endpoint's retry waits end now; their items move on
        logger.warning("endpoint pool: %s failed %d times in a row; rested for %.0f s (%s)",
                       ep.url, self.fail_after, self.rest_s, ep.last_error)

    def _probe(self, ep: _Endpoint) -> None:
        """After a rest: the endpoint gets work again only if it serves the pool's model."""
        try:
            served = [str(m.get("id")) for m in ep.client.models()]
            err = "" if self._model in served else (
                f"it now serves {', '.join(served) or 'nothing'}, not {self._model!r}")
        except Exception as exc:  # noqa: BLE001 - any failure keeps it rested
            served, err = [], f"{type(exc).__name__}: {exc}"
        with self._cond:
            ep.probing = False
            if err and served:
                ep.disabled = f"disabled: {err}"
                logger.error("endpoint pool: %s %s", ep.url, ep.disabled)
            elif err:
                ep.failures += 1
                ep.last_error = err
                ep.rested_until = self._clock() + self.rest_s
                ep.rested += 1
            else:
                ep.wake.clear()
            self._cond.notify_all()

    def generate(self, prompts: Sequence[Any], *, max_new_tokens: int) -> list[str]:
        """Greedy completions of ``prompts`` in order; a :class:`FailedGeneration` for an
        item that no endpoint could complete.

        Raises:
            EndpointError: when the pool is refused (see :meth:`check_models`).
        """
        items = [_Item(i, p) for i, p in enumerate(prompts)]
        if not items:
            return []
        self.check_models()
        results: list[str | None] = [None] * len(items)
        queue: deque[_Item] = deque(items)
        outstanding = len(items)
        deadline: float | None = None  # set while nothing can run because of rests
        workers = sum(e.cap for e in self._eps) + len(self._eps)
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llm-pool")

        def run(ep: _Endpoint, item: _Item) -> None:
            nonlocal outstanding
            try:
                text: str | None = ep.client.complete(item.prompt, max_new_tokens=max_new_tokens)
                err, abandoned = "", False
            except _Abandoned:
                text, err, abandoned = None, "", True
            except Exception as exc:  # noqa: BLE001 - counted, the item moves on
                text, err, abandoned = None, str(exc) or type(exc).__name__, False
            with self._cond:
                ep.in_flight -= 1
                now = self._clock()
                if text is not None:
                    ep.streak = 0
                    results[item.index] = text
                    outstanding -= 1
                elif abandoned:
                    # Not a failure of the item: it may go anywhere, even back here later.
                    queue.appendleft(item)
                else:
                    ep.failures += 1
                    ep.streak += 1
                    ep.last_error = err
                    item.failed_on[ep.url] = err
                    if ep.streak >= self.fail_after and ep.rested_until <= now:
                        self._rest(ep, now)
                    queue.appendleft(item)
                self._cond.notify_all()

        try:
            with self._cond:
                self.items += len(items)
                while outstanding:
                    now = self._clock()
                    for ep in self._eps:  # a rest is over: check the model first
                        if (ep.rested_until and ep.rested_until <= now and not ep.probing
                                and not ep.disabled and ep.wake.is_set()):
                            ep.probing = True
                            pool.submit(self._probe, ep)
                    progressed = False
                    blocked: list[_Item] = []
                    while queue:
                        item = queue.popleft()
                        if self._hopeless(item):
                            self._fail_item(item, results, "failed on every endpoint")
                            outstanding -= 1
                            progressed = True
                            continue
                        ep = self._pick(item, now)
                        if ep is None:
                            blocked.append(item)
                            continue
                        ep.in_flight += 1
                        ep.requests += 1
                        pool.submit(run, ep, item)
                        progressed = True
                    queue.extend(blocked)
                    if not outstanding:
                        break
                    if progressed:
                        continue  # look again before waiting: something changed
                    in_flight = any(e.in_flight or e.probing for e in self._eps)
                    wake_at = [e.rested_until for e in self._eps
                               if not e.disabled and e.rested_until > now]
                    if queue and not in_flight:
                        # Everything left waits for a rested endpoint.
                        if deadline is None:
                            deadline = now + self.wait_s
                        if now >= deadline or not wake_at:
                            for item in list(queue):
                                self._fail_item(item, results, "no endpoint available"
                                                f" within {self.wait_s:g} s")
                                outstanding -= 1
                            queue.clear()
                            continue
                    else:
                        deadline = None
                    timeout = None
                    if wake_at:
                        timeout = max(0.0, min(wake_at) - now)
                        if deadline is not None:
                            timeout = min(timeout, max(0.0, deadline - now))
                    elif deadline is not None:
                        timeout = max(0.0, deadline - now)
                    self._cond.wait(timeout=timeout)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        return [r if r is not None else FailedGeneration("not completed") for r in results]

    def availability(self) -> str | None:
        """``None`` when every endpoint answers ``/v1/models`` with the same model."""
        try:
            self.check_models()
        except EndpointError as exc:
            return str(exc)
        return None
