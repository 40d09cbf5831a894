"""bench/bench_llm_pool.py cannot rot: a small run (16 pairs, 5 ms per request) end to end.

Every configuration must score every pair (the script exits non-zero otherwise) and report its
throughput and its requests per endpoint; the failing endpoint's requests fail and the healthy
one serves all pairs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_small_run_reports_every_configuration():
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_llm_pool.py"), "--pairs", "16",
         "--capacity", "4", "--service-ms", "5", "--reps", "1"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = json.loads(proc.stdout)["runs"]
    assert list(runs) == ["1 endpoint", "2 endpoints", "3 endpoints", "4 endpoints",
                          "2 endpoints, one 2x faster, weights 2:1",
                          "2 endpoints, one failing (503)"]
    for run in runs.values():
        assert run["pairs_per_s"] > 0 and run["median_s"] > 0
    assert runs["1 endpoint"]["speedup_vs_1_endpoint"] == 1.0
    assert runs["4 endpoints"]["requests_per_endpoint"] == [4, 4, 4, 4]
    healthy, broken = runs["2 endpoints, one failing (503)"]["requests_per_endpoint"]
    assert healthy == 16 and broken >= 3
    assert runs["2 endpoints, one failing (503)"]["failures_per_endpoint"] == [0, broken]
