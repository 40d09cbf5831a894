"""bench/bench_ray_engine.py cannot rot: a small run on a local 2-CPU Ray instance.

The script itself exits non-zero when the Ray engine's values differ from the in-process
runner's; here it must also report both timings and the ratio.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_small_run_is_bit_for_bit_and_timed():
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_ray_engine.py"), "--pairs", "96",
         "--batch-size", "16", "--reps", "1"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert data["values_equal_bit_for_bit"] is True
    assert data["metrics"] == ["bleu", "rouge", "cider"] and data["workers"] == 2
    assert data["local_s"] > 0 and data["ray_s"] > 0 and data["startup_s"] > 0
    assert data["ray_over_local"] > 0  # computed before rounding the two timings
