"""Benchmark: throughput of the llm_rexval judge through a pool of LLM endpoints.

Simulated servers, not ``serve-llm`` instances of a tiny model: on a 2-core machine several
real model servers share the same two cores, so their sum cannot exceed one of them, and the
measure would be of the cores, not of the pool. A GPU server is modelled by a loopback
OpenAI-compatible endpoint that works on at most ``--capacity`` requests at once and takes
``--service-ms`` per request (a vLLM batch slot), so its throughput is ``capacity / service
time`` whatever the client does. The judge (the real ``llm_rexval`` family: prompt, HTTP
client, pool, parser) scores ``--pairs`` pairs through:

* ``1 endpoint``: the reference, in the same process;
* ``2 endpoints``, ``3 endpoints`` and ``4 endpoints`` of the same speed: the goal is a
  speed-up close to 2x, 3x and 4x (the pool keeps every server's slots busy);
* ``2 endpoints, one twice as fast, weights 2:1``: the goal is close to 3x (a server of twice
  the reference's throughput beside one like it);
* ``2 endpoints, one failing (503)``: the failing one is rested after ``fail_after``
  failures and its work moves; every pair is still scored, at about the one healthy
  endpoint's speed.

Each configuration runs ``--reps`` times; the median wall time is reported with pairs/s and
the ratio to the one-endpoint run. Every pair's answer is checked (12 counts read), so a
faster run that lost pairs is not a faster run.

Usage: python bench/bench_llm_pool.py [--pairs 96] [--capacity 8] [--service-ms 100]
       [--reps 3]

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MODEL = "judge-7b"
JUDGEMENT = ('{"clinically_significant": {"A": 1, "B": 0, "C": 0, "D": 0, "E": 0, "F": 0},'
             ' "clinically_insignificant": {"A": 0, "B": 1, "C": 0, "D": 0, "E": 0, "F": 0}}')


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # a real server's backlog, not socketserver's 5
    daemon_threads = True


class SimulatedGpuServer:
    """A loopback endpoint serving ``capacity`` requests at a time, ``service_s`` each."""

    def __init__(self, *, capacity: int, service_s: float, failing: bool = False) -> None:
        self.slots = threading.BoundedSemaphore(capacity)
        self.service_s = service_s
        self.failing = failing
        self.served = 0
        self.lock = threading.Lock()
        sim = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: dict[str, Any]) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:  # noqa: N802
                self._send(200, {"object": "list", "data": [{"id": MODEL}]})

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers["Content-Length"]))
                if sim.failing:
                    self._send(503, {"error": {"message": "overloaded"}})
                    return
                with sim.slots:  # a batch slot of the GPU
                    time.sleep(sim.service_s)
                with sim.lock:
                    sim.served += 1
                self._send(200, {"model": MODEL, "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": JUDGEMENT}}]})

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        """Stop serving."""
        self.httpd.shutdown()
        self.httpd.server_close()


def _pairs(n: int) -> tuple[list[str], list[str]]:
    refs = [f"Case {i}: small left pleural effusion. No pneumothorax." for i in range(n)]
    cands = [f"Case {i}: no effusion. Mild cardiomegaly." for i in range(n)]
    return refs, cands


def _run(endpoints: str, refs: list[str], cands: list[str], *, concurrency: int,
         **options: Any) -> tuple[float, dict[str, Any]]:
    from radconcord.backend.metrics.llm_rexval import LlmRexval

    metric = LlmRexval(endpoints=endpoints, concurrency=concurrency, max_retries=0,
                       **options)
    metric.load("cpu")
    t0 = time.perf_counter()
    result = metric.score(references=refs, candidates=cands)
    seconds = time.perf_counter() - t0
    totals = result.values["llm_rexval_total"]
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in totals):
        raise SystemExit(f"{endpoints}: some pairs were not scored")
    return seconds, metric.endpoint_stats() or {}


def main() -> None:
    """Run every configuration and print the JSON report."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=96)
    ap.add_argument("--capacity", type=int, default=8, help="slots of one simulated server")
    ap.add_argument("--service-ms", type=float, default=100.0, help="time per request")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()

    service = args.service_ms / 1000.0
    refs, cands = _pairs(args.pairs)
    fast = [SimulatedGpuServer(capacity=args.capacity, service_s=service) for _ in range(4)]
    faster = SimulatedGpuServer(capacity=args.capacity, service_s=service / 2)
    broken = SimulatedGpuServer(capacity=args.capacity, service_s=service, failing=True)
    # Each endpoint gets as many client slots as it has server slots.
    cap = args.capacity
    configs: dict[str, tuple[str, dict[str, Any]]] = {
        "1 endpoint": (f"{fast[0].url}@{cap}", {}),
        "2 endpoints": (",".join(f"{s.url}@{cap}" for s in fast[:2]), {}),
        "3 endpoints": (",".join(f"{s.url}@{cap}" for s in fast[:3]), {}),
        "4 endpoints": (",".join(f"{s.url}@{cap}" for s in fast), {}),
        "2 endpoints, one 2x faster, weights 2:1": (
            f"{faster.url}*2@{2 * cap},{fast[0].url}*1@{cap}", {}),
        "2 endpoints, one failing (503)": (
            f"{fast[0].url}@{cap},{broken.url}@{cap}", {"fail_after": 3, "rest_s": 3600}),
    }
    out: dict[str, Any] = {
        "bench": "llm_pool", "pairs": args.pairs, "capacity": args.capacity,
        "service_ms": args.service_ms, "reps": args.reps, "python": platform.python_version(),
        "ideal_one_endpoint_pairs_per_s": round(args.capacity / service, 2), "runs": {},
    }
    try:
        _run(configs["1 endpoint"][0], refs[:8], cands[:8], concurrency=cap)  # warm-up
        reference = None
        for name, (endpoints, options) in configs.items():
            times, stats = [], {}
            for _ in range(args.reps):
                seconds, stats = _run(endpoints, refs, cands, concurrency=cap, **options)
                times.append(seconds)
            median = statistics.median(times)
            reference = reference or median
            out["runs"][name] = {
                "median_s": round(median, 3), "pairs_per_s": round(args.pairs / median, 2),
                "speedup_vs_1_endpoint": round(reference / median, 2),
                "requests_per_endpoint": [e["requests"] for e in stats.get("endpoints", [])],
                "failures_per_endpoint": [e["failures"] for e in stats.get("endpoints", [])],
            }
    finally:
        for server in [*fast, faster, broken]:
            server.close()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
