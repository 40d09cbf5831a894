"""Benchmark: build a metric-oracle study from the IU reports, and candidate-stage recall.

1. ``build_study`` (temporary SQLite database) with ~100 IU test reports (seeded sample)
   against the rest of the corpus, metrics bleu4 + rougeL, TF-IDF top-k then exact re-ranking.
2. Recall@k of the candidate stage against exhaustive search (every corpus report scored with
   the metric) on 50 IU test reports, for several k, and the time of both on those reports
   (exhaustive search is the reference implementation; the ratio is exhaustive / staged).

Usage: python bench/bench_build_study.py [--tests 100] [--recall-tests 50] [--top-k 50]
                                         [--engine local|ray] [--seed 0]
The IU archive is fetched with scripts/fetch_iu_reports.sh when absent.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from radconcord.backend.datasets import oracle  # noqa: E402
from radconcord.backend.datasets.corpus import load_iu_corpus  # noqa: E402

METRICS = ["bleu4", "rougeL"]


def main() -> int:
    """Run the benchmark and print the numbers."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=100)
    parser.add_argument("--recall-tests", type=int, default=50)
    parser.add_argument("--top-k", type=int, default=50)
    parser.add_argument("--ks", default="10,25,50,100,200")
    parser.add_argument("--engine", choices=("local", "ray"), default="local")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    t0 = time.perf_counter()
    iu = load_iu_corpus()
    print(f"IU corpus: {len(iu)} reports with text ({iu.n_skipped} skipped), sha256 "
          f"{iu.sha256[:16]}..., loaded in {time.perf_counter() - t0:.2f} s")

    # 1. The study build through the service, as `build-study --tests iu --corpus iu` does.
    from radconcord.backend.services.study_admin import build_study
    from radconcord.backend.types import Actor
    from radconcord.db.session import Database

    with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
        db = Database(f"sqlite:///{Path(tmp) / 'bench.db'}")
        t1 = time.perf_counter()
        summary = build_study.build_study(
            db, Actor.system(), study_name="bench", tests=iu, corpus=iu, metrics=METRICS,
            per_metric=1, top_k=args.top_k, engine=args.engine, seed=args.seed,
            limit_tests=args.tests,
        )
        wall = time.perf_counter() - t1
        db.dispose()
    print(f"\nbuild-study: {summary.n_tests} IU test reports x {len(iu) - 1} corpus reports, "
          f"metrics {'+'.join(METRICS)}, top-k {args.top_k}, engine {summary.engine}")
    print(f"  wall time (oracle + study import): {wall:.2f} s")
    for name, sec in summary.timings.items():
        print(f"    {name:<18} {sec:8.2f} s")
    print(f"  pairs: {summary.n_pairs} (from {summary.n_picks_before_dedup} metric picks)")
    for source, n in sorted(summary.sources.items()):
        print(f"    {source:<24} {n}")

    # 2. Recall of the candidate stage vs exhaustive search on a smaller sample.
    ks = sorted({int(k) for k in args.ks.split(",")} | {args.top_k})
    tests = random.Random(args.seed + 1).sample(list(iu.reports), args.recall_tests)
    t2 = time.perf_counter()
    exhaustive = oracle.build_oracle(tests, iu.reports, METRICS, top_k=None, engine=args.engine)
    t_exh = time.perf_counter() - t2
    t3 = time.perf_counter()
    staged = oracle.build_oracle(tests, iu.reports, METRICS, top_k=args.top_k,
                                 engine=args.engine)
    t_stg = time.perf_counter() - t3
    table = oracle.recall_table(exhaustive, tests, iu.reports, ks)
    print(f"\ncandidate stage (TF-IDF 1-3-gram cosine) recall@k vs exhaustive search, "
          f"{len(tests)} IU test reports x {exhaustive.n_pool} distinct corpus texts:")
    print("  k     " + "  ".join(f"{key:>12}" for key in METRICS))
    for k in ks:
        cells = [f"{table[key][k].hits:>3}/{table[key][k].n_tests} "
                 f"({table[key][k].recall:.2f})" for key in METRICS]
        print(f"  {k:<5} " + "  ".join(f"{c:>12}" for c in cells))
    same = sum(
        1 for t in tests for key in METRICS
        if staged.best_values[t.report_id][key] == exhaustive.best_values[t.report_id][key]
    )
    print(f"  oracle value equal to exhaustive at k={args.top_k}: {same}/{len(tests) * 2}")
    print(f"\ntime on these {len(tests)} reports: exhaustive {t_exh:.2f} s "
          f"({exhaustive.n_scored_pairs} pairs), staged k={args.top_k} {t_stg:.2f} s "
          f"({staged.n_scored_pairs} pairs); speed-up x{t_exh / t_stg:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
