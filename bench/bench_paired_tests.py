"""Benchmark: paired bootstrap of Kendall tau-b differences for every pair of metrics,
1,000 resamples x 200 pairs x 20 metrics (all 190 metric pairs: CI, p-value, Holm, Williams),
ours (backend.analysis.paired_tests on one vectorised replicate matrix) vs a straightforward loop
of scipy.stats.kendalltau per resample and metric.

The scipy loop is timed on the first LOOP_RESAMPLES resamples only and extrapolated linearly to
the full count (stated in the output); its taus on those resamples are checked against ours.
Also timed: the two-stage ``rater_pair`` unit (3 raters per pair, target re-drawn per resample).

Run: python bench/bench_paired_tests.py [--resamples 1000] [--pairs 200] [--metrics 20]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import scipy
from scipy import stats

# Plain script run from anywhere: make the repository importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from radconcord.backend.analysis.bootstrap import draw_resamples  # noqa: E402
from radconcord.backend.analysis.ceiling import resampled_rater_means  # noqa: E402
from radconcord.backend.analysis.paired_tests import metric_pairs, paired_tests_section  # noqa: E402
from radconcord.backend.analysis.stats import (  # noqa: E402
    rank_correlations_batch,
    rank_correlations_varying_target,
)

LOOP_RESAMPLES = 50
RATERS = 3


def make_data(n_pairs: int, n_metrics: int, seed: int = 0):
    """Three raters' error counts (ties) and metrics of varying quality (rounded: ties)."""
    rng = np.random.default_rng(seed)
    difficulty = rng.gamma(2.0, 1.0, n_pairs)
    raters = rng.poisson(difficulty[None, :] * np.ones((RATERS, 1))).astype(float)
    errors = raters.mean(axis=0)
    noise = rng.normal(size=(n_metrics, n_pairs))
    metrics = np.round(-errors[None, :] * rng.uniform(0.2, 1.0, (n_metrics, 1)) + noise, 2)
    return metrics, -errors, raters


def ours(x, y, resamples, seed=0):
    """Everything the correlate section does: draws, tau replicates, the 190-pair matrix."""
    draws = draw_resamples(x.shape[1], resamples, seed)
    tau0, _ = rank_correlations_batch(x, y, spearman=False)
    reps, _ = rank_correlations_batch(x, y, draws.weights, spearman=False)
    keys = [f"m{k}" for k in range(x.shape[0])]
    return paired_tests_section(keys, tau0[0], reps, x, y, unit="pair", correction="holm"), reps


def ours_rater_pair(x, raters, resamples, seed=0):
    draws = draw_resamples(x.shape[1], resamples, seed)
    y_b = resampled_rater_means(raters, resamples, np.random.default_rng((seed, 1)))
    reps, _ = rank_correlations_varying_target(x, -y_b, draws.weights, spearman=False)
    tau0, _ = rank_correlations_batch(x, -raters.mean(axis=0), spearman=False)
    keys = [f"m{k}" for k in range(x.shape[0])]
    return paired_tests_section(keys, tau0[0], reps, x, -raters.mean(axis=0), unit="rater_pair")


def scipy_loop(x, y, indices):
    """Straightforward: kendalltau per resample and metric, then per metric pair the
    difference, percentile CI and bootstrap p; Williams inputs by spearmanr per pair."""
    k = x.shape[0]
    taus = np.empty((len(indices), k))
    for b, row in enumerate(indices):
        yb = y[row]
        for m in range(k):
            taus[b, m] = stats.kendalltau(x[m, row], yb).statistic
    out = {}
    for a, c in zip(*metric_pairs(k), strict=True):
        d = taus[:, a] - taus[:, c]
        ci = np.quantile(d, [0.025, 0.975])
        p = min(1.0, 2 * min(1 + np.sum(d <= 0), 1 + np.sum(d >= 0)) / (d.size + 1))
        out[(a, c)] = (ci, p, stats.spearmanr(x[a], x[c]).statistic)
    return taus, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--pairs", type=int, default=200)
    ap.add_argument("--metrics", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    x, y, raters = make_data(args.pairs, args.metrics)
    n_cmp = args.metrics * (args.metrics - 1) // 2
    print(f"python {platform.python_version()}, numpy {np.__version__}, scipy {scipy.__version__},"
          f" {os.cpu_count()} CPUs, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    print(f"workload: {args.resamples} resamples x {args.pairs} pairs x {args.metrics} metrics,"
          f" all {n_cmp} metric pairs: tau-b difference CI, bootstrap p, Holm, Williams")

    ours(x, y, 10)  # warm-up (BLAS threads, imports)
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        section, reps = ours(x, y, args.resamples)
        times.append(time.perf_counter() - t0)
    t_ours = min(times)
    print(f"ours (vectorised, incl. drawing resamples): best of {args.repeat}: {t_ours:.3f} s")

    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        ours_rater_pair(x, raters, args.resamples)
        times.append(time.perf_counter() - t0)
    print(f"ours, unit rater_pair ({RATERS} raters re-drawn per pair and resample):"
          f" best of {args.repeat}: {min(times):.3f} s")

    draws = draw_resamples(args.pairs, args.resamples, seed=0)
    sub = draws.indices[:LOOP_RESAMPLES]
    t0 = time.perf_counter()
    loop_tau, _ = scipy_loop(x, y, sub)
    t_loop_sub = time.perf_counter() - t0
    t_loop = t_loop_sub * args.resamples / LOOP_RESAMPLES
    print(f"scipy loop: {t_loop_sub:.3f} s for {LOOP_RESAMPLES} resamples"
          f" -> extrapolated to {args.resamples}: {t_loop:.2f} s")
    print(f"speed-up (scipy loop extrapolated / ours): {t_loop / t_ours:.1f}x")
    print(f"max |ours - scipy| tau on the {LOOP_RESAMPLES} looped resamples:"
          f" {np.nanmax(np.abs(reps[:LOOP_RESAMPLES] - loop_tau)):.2e}")
    e = section["pairs"]["m0|m1"]
    print(f"example (m0|m1): tau diff {e['tau_diff']:.4f} CI [{e['ci95'][0]:.4f},"
          f" {e['ci95'][1]:.4f}], p {e['p']:.4f}, Holm {e['p_adjusted']:.4f},"
          f" Williams p {e['williams_p']:.4f}")


if __name__ == "__main__":
    main()
