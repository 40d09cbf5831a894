"""Benchmark: the scoring runner on Ray against the in-process runner, same process, same pairs.

On a 2-core machine no speed-up is expected: two actors share the two cores the local run
uses alone, and each chunk travels to an actor and back. What this measures is that the Ray
path gives the same numbers (checked bit for bit for the lexical families) and what it costs:

* ``startup_s``: ``ray.init`` plus creating the actors and their first import of the
  families (a warm-up chunk), paid once per command;
* ``local_s`` and ``ray_s``: median wall time of ``runner.score`` over ``--pairs`` pairs with
  ``--metrics`` (no cache, so every pair is computed), in chunks of ``--batch-size``;
* ``ray_over_local``: ``ray_s / local_s`` (1.0: no overhead; below 1 only with more cores
  than the local run uses).

CIDEr is corpus-dependent: its document frequencies are computed once (one actor) and sent
with every chunk, so its values equal the local whole-set call.

Usage: python bench/bench_ray_engine.py [--pairs 4000] [--metrics bleu,rouge,cider]
       [--batch-size 256] [--workers 2] [--reps 3]

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SENTENCES = (
    "The lungs are clear.", "There is no pleural effusion or pneumothorax.",
    "Heart size is normal.", "Mild cardiomegaly.", "Small left pleural effusion.",
    "Right lower lobe consolidation concerning for pneumonia.",
    "Low lung volumes with bibasilar atelectasis.", "Degenerative changes of the spine.",
    "Moderate pulmonary edema.", "No acute cardiopulmonary process.",
    "Stable right upper lobe nodule.", "Interval increase in the left effusion.",
)


def _pairs(n: int, seed: int) -> list[Any]:
    from radconcord.backend.scoring.runner import ScorePair

    rng = random.Random(seed)

    def report() -> str:
        return " ".join(rng.sample(SENTENCES, rng.randint(2, 5)))

    return [ScorePair(id=str(i), reference=report(), candidate=report()) for i in range(n)]


def _same(a: list[float], b: list[float]) -> bool:
    return all((math.isnan(x) and math.isnan(y)) or x == y for x, y in zip(a, b, strict=True))


def main() -> None:
    """Time both engines and print the JSON report."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=4000)
    ap.add_argument("--metrics", default="bleu,rouge,cider")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from radconcord.backend.scoring.engines import RayEngine
    from radconcord.backend.scoring.runner import score

    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    pairs = _pairs(args.pairs, args.seed)
    warm = _pairs(16, args.seed + 1)

    def timed(**kw: Any) -> tuple[float, Any]:
        t0 = time.perf_counter()
        table = score(pairs, metrics, batch_size=args.batch_size, device="cpu", **kw)
        return time.perf_counter() - t0, table

    score(warm, metrics, batch_size=8, device="cpu")  # imports and first-call costs
    local = [timed() for _ in range(args.reps)]

    import ray

    t0 = time.perf_counter()
    ray.init(num_cpus=max(2, args.workers), include_dashboard=False, log_to_driver=False)
    engine = RayEngine(workers=args.workers)
    try:
        score(warm, metrics, batch_size=8, device="cpu", engine=engine)  # actors, imports
        startup = time.perf_counter() - t0
        on_ray = [timed(engine=engine) for _ in range(args.reps)]
    finally:
        engine.close()
        ray.shutdown()

    ref = local[0][1]
    equal = all(_same(table.columns[k], ref.columns[k])
                for _, table in on_ray for k in ref.columns)
    local_s = statistics.median(t for t, _ in local)
    ray_s = statistics.median(t for t, _ in on_ray)
    print(json.dumps({
        "bench": "ray_engine", "pairs": args.pairs, "metrics": metrics,
        "batch_size": args.batch_size, "workers": args.workers, "reps": args.reps,
        "cpus": os.cpu_count(), "python": platform.python_version(), "ray": ray.__version__,
        "startup_s": round(startup, 2), "local_s": round(local_s, 3), "ray_s": round(ray_s, 3),
        "ray_over_local": round(ray_s / local_s, 2),
        "pairs_per_s": {"local": round(args.pairs / local_s, 1),
                        "ray": round(args.pairs / ray_s, 1)},
        "values_equal_bit_for_bit": equal,
    }, indent=2))
    if not equal:
        raise SystemExit("the Ray engine's values differ from the local runner's")


if __name__ == "__main__":
    main()
