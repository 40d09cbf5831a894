"""The endpoint pool against fake OpenAI-compatible endpoints (stdlib servers on 127.0.0.1).

Each fake endpoint answers ``/v1/models`` with its model id and a chat completion with a text
that depends only on the prompt (so any endpoint gives the same answer, as servers of one
model do). It counts requests and the most in flight, can fail (HTTP 503) from its n-th
completion on, and can hold requests until a given number are in flight.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from radconcord.backend.metrics.llm_backends import (
    OpenAIChatBackend,
    normalise_base_url,
)
from radconcord.backend.metrics.llm_pool import (
    EndpointError,
    EndpointPool,
    EndpointSpec,
    FailedGeneration,
    parse_endpoints,
    parse_item,
)
from radconcord.backend.metrics.llm_rexval import LlmRexval

JUDGEMENT = ('{"clinically_significant": {"A": 1, "B": 0, "C": 0, "D": 0, "E": 0, "F": 0},'
             ' "clinically_insignificant": {"A": 0, "B": 2, "C": 0, "D": 0, "E": 0, "F": 0}}')


def answer_for(messages: list[dict]) -> str:
    text = json.dumps(messages, sort_keys=True)
    if "judge" in text or "radiologist" in text:
        return JUDGEMENT
    return "answer " + hashlib.sha256(text.encode()).hexdigest()[:10]


class FakeEndpoint:
    """A canned OpenAI-compatible endpoint on loopback."""

    def __init__(self, model: str = "m", *, fail_from: int | None = None,
                 fail_count: int | None = None, hold_until: int = 0,
                 poison: str | None = None) -> None:
        self.model = model
        self.fail_from = fail_from  # the n-th completion (1-based) and later fail...
        self.fail_count = fail_count  # ...this many times (None: for good)
        self.poison = poison  # a prompt containing it fails here always
        self.hold_until = hold_until  # hold requests until this many are in flight
        self.gate = threading.Event()
        self.lock = threading.Lock()
        self.posts = 0
        self.ok = 0
        self.failed = 0
        self.in_flight = 0
        self.max_in_flight = 0
        fake = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a) -> None:
                pass

            def _send(self, status: int, body: dict) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:  # noqa: N802
                self._send(200, {"object": "list", "data": [{"id": fake.model}]})

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    fake.posts += 1
                    n = fake.posts
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                    if fake.in_flight >= fake.hold_until:
                        fake.gate.set()
                failing = (fake.poison is not None and fake.poison in json.dumps(body)) or (
                    fake.fail_from is not None and n >= fake.fail_from
                    and (fake.fail_count is None or n < fake.fail_from + fake.fail_count))
                if fake.hold_until:
                    fake.gate.wait(timeout=10)
                with fake.lock:
                    fake.in_flight -= 1
                    if failing:
                        fake.failed += 1
                    else:
                        fake.ok += 1
                if failing:
                    self._send(503, {"error": {"message": "overloaded"}})
                    return
                self._send(200, {"model": fake.model, "choices": [{"index": 0, "message": {
                    "role": "assistant", "content": answer_for(body["messages"])}}]})

        self.httpd = _Server(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fakes():
    made: list[FakeEndpoint] = []

    def make(*args, **kwargs) -> FakeEndpoint:
        made.append(FakeEndpoint(*args, **kwargs))
        return made[-1]

    yield make
    for f in made:
        f.close()


class _Server(ThreadingHTTPServer):
    # socketserver's default listen backlog is 5: 60 requests at once overflowed it now and
    # then, and a refused connection (no client retries here) moved an item to the other
    # endpoint, so the exact 40/20 spread failed about one run in three. A real server's
    # backlog is far larger (uvicorn, under vLLM: 2048).
    request_queue_size = 256


def pool_of(specs: list[EndpointSpec], *, retries: int = 0, **kw) -> EndpointPool:
    def client(url, sleep):
        return OpenAIChatBackend(url, max_retries=retries, backoff=0.01, timeout=30,
                                 sleep=sleep)
    return EndpointPool(specs, client_factory=client, **kw)


PROMPTS = [f"lungs are clear {i}" for i in range(60)]
EXPECTED = [answer_for([{"role": "user", "content": p}]) for p in PROMPTS]


# --------------------------------------------------------------------------- option syntax


def test_item_syntax() -> None:
    n = normalise_base_url
    assert parse_item("http://h:8000/v1*2@16", normalise=n) == EndpointSpec(
        "http://h:8000/v1", 2.0, 16)
    assert parse_item(" http://h:8000 ", normalise=n) == EndpointSpec("http://h:8000/v1")
    assert parse_item("http://h:1*0.5", normalise=n) == EndpointSpec("http://h:1/v1", 0.5)
    assert parse_item("http://h:1@3", normalise=n) == EndpointSpec("http://h:1/v1", 1.0, 3)
    # An @ inside the URL (user info) is not a concurrency.
    assert parse_item("http://u@h:1/v1", normalise=n).url == "http://u@h:1/v1"
    assert parse_endpoints("http://a:1*2,http://b:2", normalise=n) == [
        EndpointSpec("http://a:1/v1", 2.0), EndpointSpec("http://b:2/v1")]
    assert parse_endpoints(["http://a:1", {"url": "http://b:2", "weight": 3,
                                           "concurrency": 4}], normalise=n) == [
        EndpointSpec("http://a:1/v1"), EndpointSpec("http://b:2/v1", 3.0, 4)]


@pytest.mark.parametrize("value, words", [
    ("http://a:1*x,http://b:2", "endpoints item 'http://a:1*x': weight 'x' is not a positive"),
    ("http://a:1,http://b:2*0", "'http://b:2*0': weight '0' is not a positive number"),
    ("http://a:1*-1", "'http://a:1*-1': weight '-1'"),
    ("http://a:1@0", "'http://a:1@0': concurrency '0' is not a positive whole number"),
    ("http://a:1@many", "'http://a:1@many': concurrency 'many'"),
    ("http://a:1,,http://b:2", "empty item"),
    ("a:1*2", "endpoints item 'a:1*2': LLM endpoint base URL must start with http://"),
    ("*2", "endpoints item '*2': no URL"),
    ("http://a:1,http://a:1/v1", "http://a:1/v1 is listed twice"),
    ([{"url": "http://a:1", "wieght": 2}], "unknown field(s) wieght"),
    (7, "expected URL[*WEIGHT][@N]"),
])
def test_bad_items_are_named(value, words) -> None:
    with pytest.raises(ValueError) as err:
        parse_endpoints(value, normalise=normalise_base_url)
    assert words in str(err.value)


def test_endpoints_files(tmp_path) -> None:
    txt = tmp_path / "eps.txt"
    txt.write_text("# one server per GPU\nhttp://g0:8000*2@16\n\nhttp://g1:8000  # spare\n")
    assert parse_endpoints(f"@{txt}", normalise=normalise_base_url) == [
        EndpointSpec("http://g0:8000/v1", 2.0, 16), EndpointSpec("http://g1:8000/v1")]
    js = tmp_path / "eps.json"
    js.write_text(json.dumps({"endpoints": [{"url": "http://g0:8000", "concurrency": 2},
                                            "http://g1:8000*3"]}))
    assert parse_endpoints(f"@{js}", normalise=normalise_base_url) == [
        EndpointSpec("http://g0:8000/v1", 1.0, 2), EndpointSpec("http://g1:8000/v1", 3.0)]
    bad = tmp_path / "bad.txt"
    bad.write_text("http://g0:8000\nhttp://g1:8000*two\n")
    with pytest.raises(ValueError, match=r"'http://g1:8000\*two': weight 'two'"):
        parse_endpoints(f"@{bad}", normalise=normalise_base_url)
    with pytest.raises(ValueError, match="endpoints file .*missing.txt: cannot read it"):
        parse_endpoints(f"@{tmp_path / 'missing.txt'}")
    (tmp_path / "broken.json").write_text("[\"http://a:1\",")
    with pytest.raises(ValueError, match="broken.json: not valid JSON"):
        parse_endpoints(f"@{tmp_path / 'broken.json'}")
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(ValueError, match="empty.txt: no endpoint given"):
        parse_endpoints(f"@{tmp_path / 'empty.txt'}")


def test_family_options(fakes) -> None:
    with pytest.raises(ValueError, match=r"metric 'llm_rexval': endpoints item 'http://a:1\*x'"):
        LlmRexval(endpoints="http://a:1*x")
    with pytest.raises(ValueError, match="base_url or llm_rexval.endpoints, not both"):
        LlmRexval(endpoints="http://a:1", base_url="http://b:2")
    a, b, c = fakes("m1"), fakes("m2"), fakes("m1")
    reason = LlmRexval(endpoints=f"{a.url},{b.url}").availability()
    assert reason is not None and "different models" in reason
    assert LlmRexval(endpoints=f"{a.url}*2,{c.url}").availability() is None
    b.close()  # an endpoint that does not answer makes the pool unavailable, named
    reason = LlmRexval(endpoints=f"{a.url},{b.url}").availability()
    assert reason is not None and f"{b.url} cannot say which model it serves" in reason


# --------------------------------------------------------------------------- model check


def test_mixed_model_ids_are_refused(fakes) -> None:
    a, b, c = fakes("judge-7b"), fakes("judge-7b"), fakes("other-13b")
    pool = pool_of([EndpointSpec(a.url), EndpointSpec(b.url), EndpointSpec(c.url)])
    with pytest.raises(EndpointError) as err:
        pool.generate(["x"], max_new_tokens=4)
    msg = str(err.value)
    assert "different models" in msg
    for f in (a, b, c):
        assert f"{f.url} serves {f.model!r}" in msg
    assert a.posts == b.posts == c.posts == 0  # nothing was scored
    # The same model on two hosts: the identity is the single endpoint's (no URL in it).
    same = pool_of([EndpointSpec(a.url), EndpointSpec(b.url)])
    assert same.identity() == OpenAIChatBackend(a.url).identity() == "openai:judge-7b"


def test_family_signature_is_the_single_endpoints(fakes) -> None:
    a, b = fakes("judge"), fakes("judge")
    one = LlmRexval(backend="openai", base_url=a.url)
    two = LlmRexval(endpoints=f"{a.url}*2,{b.url}@4")
    assert two.signature() == one.signature()
    assert "127.0.0.1" not in two.signature()


# --------------------------------------------------------------------------- spread and caps


def test_weights_spread_requests(fakes) -> None:
    # No limit binds (64 slots each for 60 requests) and nothing fails, so every pick of the
    # one dispatcher sees both endpoints ready and smooth weighted round-robin gives exactly
    # 2 of every 3 to the weight-2 endpoint: the tolerance is zero, not a statistical one.
    a, b = fakes(), fakes()
    pool = pool_of([EndpointSpec(a.url, 2.0, 64), EndpointSpec(b.url, 1.0, 64)])
    assert pool.generate(PROMPTS, max_new_tokens=8) == EXPECTED
    assert (a.posts, b.posts) == (40, 20)
    st = pool.stats()
    assert [e["requests"] for e in st["endpoints"]] == [40, 20]
    assert st["items"] == 60 and st["failed_items"] == 0


def test_each_endpoint_keeps_its_concurrency_limit(fakes) -> None:
    # Each fake holds its requests until its limit is reached, so the limit is reached
    # (max == cap) and a pool that sent more would be seen above it.
    a, b = fakes(hold_until=3), fakes(hold_until=2)
    pool = pool_of([EndpointSpec(a.url, 1.0, 3), EndpointSpec(b.url, 1.0, 2)])
    assert pool.generate(PROMPTS[:30], max_new_tokens=8) == EXPECTED[:30]
    assert (a.max_in_flight, b.max_in_flight) == (3, 2)
    assert a.posts + b.posts == 30


# --------------------------------------------------------------------------- failures


def test_failing_endpoint_is_rested_and_its_work_moves(fakes) -> None:
    a, b = fakes(), fakes(fail_from=5)  # b fails for good from its 5th completion on
    single = OpenAIChatBackend(a.url).generate(PROMPTS, max_new_tokens=8)
    a.posts = a.ok = 0
    pool = pool_of([EndpointSpec(a.url, 1.0, 2), EndpointSpec(b.url, 1.0, 2)],
                   fail_after=3, rest_s=3600)
    out = pool.generate(PROMPTS, max_new_tokens=8)
    assert out == single == EXPECTED
    assert not any(isinstance(x, FailedGeneration) for x in out)
    st = {e["url"]: e for e in pool.stats()["endpoints"]}
    assert st[b.url]["rested"] == 1 and st[b.url]["state"] == "rested"
    assert "HTTP 503" in st[b.url]["last_error"]
    # b was left after 3 failures in a row, plus what was already in flight (its 2 slots).
    assert 3 <= st[b.url]["failures"] == b.failed <= 3 + 2
    assert b.ok == 4 and a.ok == 60 - 4
    assert st[a.url]["failures"] == 0 and pool.stats()["failed_items"] == 0


def test_retries_on_a_rested_endpoint_are_abandoned(fakes) -> None:
    # b's client: its first 3 requests fail at once (as after their retries), the next one
    # is in a 20 s wait between retries when b is rested. The rest must end that wait and
    # move its item to a (without it this test takes 20 s more).
    a, b = fakes(), fakes()
    calls = {"n": 0}
    lock = threading.Lock()

    class Flaky:
        def __init__(self, url, sleep):
            self.inner = OpenAIChatBackend(url)
            self.base_url, self.sleep = url, sleep

        def models(self):
            return self.inner.models()

        def model_info(self):
            return self.inner.model_info()

        def identity(self):
            return self.inner.identity()

        def complete(self, prompt, *, max_new_tokens):
            with lock:
                calls["n"] += 1
                n = calls["n"]
            if n > 3:
                self.sleep(20.0)
            raise RuntimeError(f"b down ({n})")

    def client(url, sleep):
        if url == b.url:
            return Flaky(url, sleep)
        return OpenAIChatBackend(url, max_retries=0, sleep=sleep)

    pool = EndpointPool([EndpointSpec(a.url, 1.0, 1), EndpointSpec(b.url, 1.0, 4)],
                        client_factory=client, fail_after=3, rest_s=3600)
    t = time.monotonic()
    out = pool.generate(PROMPTS[:12], max_new_tokens=8)
    assert out == EXPECTED[:12]
    assert time.monotonic() - t < 15
    st = {e["url"]: e for e in pool.stats()["endpoints"]}
    assert st[b.url]["failures"] == 3 and st[b.url]["rested"] == 1
    # b had 4 slots: its 3 failures, and the items waiting in its slots when it was rested
    # (not counted as failures: they moved to a).
    assert 4 <= st[b.url]["requests"] <= 3 + 4 and a.ok == 12


def test_all_rested_waits_for_the_earliest_to_come_back(fakes) -> None:
    # Both endpoints fail their first completion and are rested (fail_after=1); the items
    # not yet tried wait for the rests to end, then complete; the model is asked again first.
    a, b = fakes(fail_from=1, fail_count=1), fakes(fail_from=1, fail_count=1)
    pool = pool_of([EndpointSpec(a.url, 1.0, 1), EndpointSpec(b.url, 1.0, 1)],
                   fail_after=1, rest_s=0.5, wait_s=60)
    t = time.monotonic()
    out = pool.generate(PROMPTS[:6], max_new_tokens=8)
    assert time.monotonic() - t >= 0.5
    assert out == EXPECTED[:6]
    st = pool.stats()
    assert [(e["failures"], e["rested"], e["state"]) for e in st["endpoints"]] == \
        [(1, 1, "ok"), (1, 1, "ok")]
    assert st["failed_items"] == 0 and a.ok + b.ok == 6


def test_items_failing_everywhere_are_nan_with_reason(fakes) -> None:
    # The second pair fails on both endpoints: NaN in every key, with each endpoint's error;
    # the others are scored as by one endpoint.
    a, b = fakes("judge", poison="POISON"), fakes("judge", poison="POISON")
    refs = ["no acute process", "POISON", "mild cardiomegaly"]
    cands = ["lungs are clear", "pleural effusion", "small effusion"]
    metric = LlmRexval(endpoints=f"{a.url},{b.url}", max_retries=0)
    res = metric.score(references=refs, candidates=cands)
    single = LlmRexval(backend="openai", base_url=a.url).score(
        references=[refs[0], refs[2]], candidates=[cands[0], cands[2]])
    for k, vals in res.values.items():
        assert math.isnan(vals[1])
        assert [vals[0], vals[2]] == single.values[k]
    assert res.values["llm_rexval_total"][0] == 3.0
    d = res.details[1]
    assert d["endpoint_error"].startswith("failed on every endpoint")
    assert a.url in d["endpoint_error"] and b.url in d["endpoint_error"]
    assert "HTTP 503" in d["endpoint_error"]
    assert any(f.startswith("endpoint failed: ") for f in d["flags"])
    assert "endpoint_error" not in res.details[0]
    st = metric.endpoint_stats()
    assert st["failed_items"] == 1 and sum(e["failures"] for e in st["endpoints"]) == 2


def test_no_endpoint_within_the_deadline(fakes) -> None:
    a = fakes(fail_from=1)
    pool = pool_of([EndpointSpec(a.url, 1.0, 1)], fail_after=1, rest_s=3600, wait_s=0.3)
    t = time.monotonic()
    out = pool.generate(PROMPTS[:3], max_new_tokens=8)
    assert time.monotonic() - t < 10
    assert all(isinstance(x, FailedGeneration) and x == "" for x in out)
    assert out[0].reason.startswith("failed on every endpoint") and "HTTP 503" in out[0].reason
    assert out[1].reason == out[2].reason == "no endpoint available within 0.3 s"
    assert pool.stats()["failed_items"] == 3 and a.posts == 1


def test_endpoint_serving_another_model_after_its_rest_is_dropped(fakes) -> None:
    # Both fail their first completion and are rested; b comes back serving other weights:
    # it is dropped for good, a does the rest. The first item failed on a and cannot go to
    # b any more, so it is NaN naming both reasons.
    a, b = fakes("m", fail_from=1, fail_count=1), fakes("m", fail_from=1, fail_count=1)
    pool = pool_of([EndpointSpec(a.url, 1.0, 1), EndpointSpec(b.url, 1.0, 1)],
                   fail_after=1, rest_s=0.2)
    pool.check_models()
    b.model = "swapped"  # b restarts with other weights while rested
    out = pool.generate(PROMPTS[:8], max_new_tokens=8)
    assert out[1:] == EXPECTED[1:8]
    assert isinstance(out[0], FailedGeneration)
    assert f"{a.url}: " in out[0].reason and "HTTP 503" in out[0].reason
    assert f"{b.url}: disabled: it now serves swapped, not 'm'" in out[0].reason
    st = {e["url"]: e for e in pool.stats()["endpoints"]}
    assert st[b.url]["state"] == "disabled" and "swapped" in st[b.url]["last_error"]
    assert st[a.url]["state"] == "ok" and b.ok == 0 and a.ok == 7


@pytest.mark.parametrize("family", ["green", "crimson", "llm_rexval"])
def test_each_llm_family_takes_endpoints(fakes, family) -> None:
    from radconcord.backend.metrics.crimson import Crimson
    from radconcord.backend.metrics.green import Green

    cls = {"green": Green, "crimson": Crimson, "llm_rexval": LlmRexval}[family]
    a, b = fakes("judge"), fakes("judge")
    pooled = cls(endpoints=f"{a.url}*2,{b.url}@3")
    assert pooled.backend_name == "openai" and pooled.availability() is None
    assert pooled.signature() == cls(backend="openai", base_url=b.url).signature()
    assert pooled.endpoint_stats()["endpoints"][1]["concurrency"] == 3
    if family == "crimson":
        assert pooled.guidelines() is True  # asks the pool which model it serves
    # The failure handling is the family's to set, and checked; without a pool it is refused.
    tuned = cls(endpoints=f"{a.url},{b.url}", fail_after=1, rest_s=5, wait_s=20)
    pool = tuned._endpoint
    assert (pool.fail_after, pool.rest_s, pool.wait_s) == (1, 5.0, 20.0)
    assert tuned.signature() == pooled.signature()  # operational settings, not the method
    default = pooled._endpoint
    assert (default.fail_after, default.rest_s, default.wait_s) == (3, 30.0, 600.0)
    with pytest.raises(ValueError, match=f"{family}.fail_after must be at least 1"):
        cls(endpoints=a.url, fail_after=0)
    with pytest.raises(ValueError, match=f"{family}.fail_after must be a whole number"):
        cls(endpoints=a.url, fail_after=2.5)
    with pytest.raises(ValueError, match=f"{family}.rest_s must be a number"):
        cls(endpoints=a.url, rest_s="soon")
    with pytest.raises(ValueError, match="rest_s only apply to a pool of endpoints"):
        cls(backend="openai", base_url=a.url, rest_s=5)
    with pytest.raises(ValueError, match=f"metric '{family}': endpoints item 'x'"):
        cls(endpoints="http://a:1,x")


def test_a_pair_no_endpoint_answered_is_not_cached_and_is_retried(fakes, tmp_path) -> None:
    # Through the runner and its score cache: the outage's NaN is never stored, so the next
    # run (here on healthy servers of the same model) scores that pair and reuses the others.
    from radconcord.api import score

    refs = ["no acute process", "POISON", "mild cardiomegaly"]
    cands = ["lungs are clear", "pleural effusion", "small effusion"]
    cache_file = tmp_path / "cache.db"
    a, b = fakes("judge", poison="POISON"), fakes("judge", poison="POISON")
    first = score(references=refs, candidates=cands, metrics="llm_rexval_total",
                  options={"llm_rexval": {"endpoints": f"{a.url},{b.url}", "max_retries": 0}},
                  cache=cache_file)
    assert math.isnan(first["llm_rexval_total"].iloc[1])
    healthy = fakes("judge")
    second = score(references=refs, candidates=cands, metrics="llm_rexval_total",
                   options={"llm_rexval": {"endpoints": healthy.url, "max_retries": 0}},
                   cache=cache_file)
    assert second["llm_rexval_total"].iloc[1] == 3.0  # JUDGEMENT's total, now answered
    assert second["llm_rexval_total"].iloc[[0, 2]].tolist() == \
        first["llm_rexval_total"].iloc[[0, 2]].tolist()
    assert healthy.ok == 1  # only the pair the outage left unscored was asked again


def test_the_runner_reports_the_pool(fakes) -> None:
    from radconcord.backend.scoring import runner
    from radconcord.backend.scoring.runner import ScorePair as Pair

    a, b = fakes("judge", poison="POISON"), fakes("judge")
    pairs = [Pair(id=str(i), reference=r, candidate="lungs are clear")
             for i, r in enumerate(["no acute process", "POISON", "mild cardiomegaly"])]
    table = runner.score(pairs, ["llm_rexval"], options={
        "llm_rexval": {"endpoints": f"{a.url}*2,{b.url}", "max_retries": 0}})
    run = table.families["llm_rexval"]
    assert run.endpoint_failed == 0  # the poisoned pair moved to b
    assert [e["url"] for e in run.endpoints] == [a.url, b.url]
    assert sum(e["requests"] for e in run.endpoints) >= 3
