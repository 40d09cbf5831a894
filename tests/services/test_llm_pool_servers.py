"""llm_rexval through a pool of two of our own ``llm-serve`` servers, one killed mid-run.

Both servers load the same tiny random-weight Llama (built here, nothing downloaded) in their
own processes on loopback. The pool's results must equal those of one endpoint alone: the
killed server's work moves to the other, nothing is NaN, and the kill is counted.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from radconcord.backend.metrics.llm_rexval import LlmRexval
from tests.helpers_llm import build_tiny_llama
from tests.process_helpers import interruptible

REPO = Path(__file__).resolve().parents[2]
# The command module on a parser of its own, as tests/services/test_llm_server_cli.py does.
RUN = (
    "import argparse, sys\n"
    "from radconcord.backend.cli import llm\n"
    "from radconcord.backend.cli.common import Commands, UserError\n"
    "p = argparse.ArgumentParser()\n"
    "c = Commands(p.add_subparsers(dest='c', required=True)); llm.register(c); c.finish()\n"
    "a = p.parse_args(sys.argv[1:])\n"
    "try:\n"
    "    a.func(a)\n"
    "except UserError as e:\n"
    "    print('error:', e, file=sys.stderr); sys.exit(2)\n"
    "except KeyboardInterrupt:\n"
    "    sys.exit(130)\n"
)

REFS = ["no acute cardiopulmonary process", "mild cardiomegaly", "small left pleural effusion",
        "right lower lobe consolidation", "there is pneumothorax", "bilateral edema"]
CANDS = ["lungs are clear", "heart size normal", "no pleural effusion",
         "left lower lobe atelectasis", "no pneumothorax", "mild edema"]
N = 36


def _serve(path: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN, "llm-serve", "--model", str(path), "--port", "0",
         "--device", "cpu", "--model-id", "judge"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)}, preexec_fn=interruptible)
    line = proc.stdout.readline()
    assert line.startswith("serving judge at http://127.0.0.1:"), (line, proc.stderr.read())
    return proc, line.split(" at ")[1].split(" ")[0]


def _same(x: float, y: float) -> bool:
    return (math.isnan(x) and math.isnan(y)) or x == y


def test_pool_of_two_servers_survives_one_killed_mid_run(tmp_path) -> None:
    path = build_tiny_llama(tmp_path)
    refs = [REFS[i % len(REFS)] + f" {i % 9 + 1}" for i in range(N)]
    cands = [CANDS[(i * 5) % len(CANDS)] for i in range(N)]
    a, url_a = _serve(path)
    b, url_b = _serve(path)
    try:
        single = LlmRexval(backend="openai", base_url=url_a, max_new_tokens=8,
                           concurrency=2).score(references=refs, candidates=cands)
        metric = LlmRexval(endpoints=f"{url_a}@2,{url_b}*2@2", max_new_tokens=8,
                           max_retries=0)
        assert metric.signature() == LlmRexval(backend="openai", base_url=url_a,
                                               max_new_tokens=8).signature()
        box: dict = {}
        done = threading.Event()

        def score() -> None:
            try:
                box["result"] = metric.score(references=refs, candidates=cands)
            finally:
                done.set()

        worker = threading.Thread(target=score)
        worker.start()
        # Kill b once it has been sent its third request: b's first two slots filled at
        # once, so a third means one answered and the run is well under way.
        killed_at = None
        while not done.is_set():
            st = metric.endpoint_stats()
            if st is not None and st["endpoints"][1]["requests"] >= 3:
                b.send_signal(signal.SIGKILL)
                b.wait(timeout=30)
                killed_at = sum(e["requests"] for e in st["endpoints"])
                break
            done.wait(0.005)
        worker.join(timeout=600)
        assert not worker.is_alive()
        assert killed_at is not None and killed_at < N, "the run ended before the kill"
        got = box["result"]
        assert [d["generation"] for d in got.details] == \
            [d["generation"] for d in single.details]
        for k in got.values:
            assert all(_same(x, y) for x, y in zip(got.values[k], single.values[k],
                                                   strict=True)), k
        assert not any("endpoint_error" in d for d in got.details)
        st = metric.endpoint_stats()
        ea, eb = st["endpoints"]
        assert st["failed_items"] == 0 and st["items"] == N
        # b failed (refused or dropped connections) until it was rested, then got nothing.
        assert eb["failures"] >= 3 and eb["rested"] == 1 and eb["state"] == "rested"
        assert "cannot connect" in eb["last_error"] or "connection" in eb["last_error"]
        assert ea["failures"] == 0 and ea["requests"] > N // 3
        # Everything b did not answer was answered by a.
        assert ea["requests"] + eb["requests"] - eb["failures"] >= N
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
                p.wait(timeout=30)
