"""Benchmark: paired approximate randomization between systems, 1,000 permutations x 20 metrics
x 6 source pairs (4 sources, 200 cases each), ours (backend.analysis.systems, one sign-matrix
product per source pair) vs straightforward loops on the same data:

* a numpy loop over source pairs x metrics x permutations that swaps the two systems' values
  pair by pair (``np.where``) and takes the difference of means, with the same random signs
  as ours (so its p-values must equal ours exactly; checked);
* ``scipy.stats.permutation_test(permutation_type="samples")``, the library's paired test,
  timed on the first SCIPY_METRICS metrics of one source pair and extrapolated linearly
  (stated in the output). Its p-value convention differs (two-sided = twice the smaller
  one-sided p), so only its time is compared.

The full ``systems_json`` (with 1,000 bootstrap resamples per source) is timed too.

Run: python bench/bench_systems.py [--permutations 1000] [--cases 200] [--metrics 20]
     [--sources 4]
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

from radconcord.backend.analysis.systems import paired_randomization, systems_json  # noqa: E402

SCIPY_METRICS = 2


def make_data(n_cases: int, n_metrics: int, n_sources: int, seed: int = 0):
    """Every source answers every case; sources differ a little; errors are integers."""
    rng = np.random.default_rng(seed)
    names = [f"sys{s}" for s in range(n_sources)]
    quality = np.linspace(0.0, 0.3, n_sources)
    rows, human, sources, cases = [], [], [], []
    for s, name in enumerate(names):
        errors = rng.poisson(2.0 - 2.0 * quality[s], n_cases).astype(float)
        noise = rng.normal(size=(n_cases, n_metrics))
        rows.append(np.round(-errors[:, None] * 0.3 + quality[s] + noise, 3))
        human.append(errors)
        sources += [name] * n_cases
        cases += [f"case{i:04d}" for i in range(n_cases)]
    return np.vstack(rows), np.concatenate(human), sources, cases


def loop_randomization(a: np.ndarray, b: np.ndarray, signs: np.ndarray) -> tuple[float, float]:
    """Difference of means and p-value by swapping values pair by pair (reference loop)."""
    observed = a.mean() - b.mean()
    hits = 0
    for row in signs:
        swap = row < 0
        a_star = np.where(swap, b, a)
        b_star = np.where(swap, a, b)
        if abs(a_star.mean() - b_star.mean()) >= abs(observed) * (1 - 1e-9):
            hits += 1
    return observed, (hits + 1) / (signs.shape[0] + 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--permutations", type=int, default=1000)
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--metrics", type=int, default=20)
    ap.add_argument("--sources", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    values, human, sources, cases = make_data(args.cases, args.metrics, args.sources)
    keys = [f"m{k}" for k in range(args.metrics)]
    hib = [True] * args.metrics
    names = sorted(set(sources))
    n_pairs_src = len(names) * (len(names) - 1) // 2
    print(f"python {platform.python_version()}, numpy {np.__version__}, scipy {scipy.__version__},"
          f" {os.cpu_count()} CPUs, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    print(f"workload: {args.permutations} permutations x {args.metrics} metrics (+ human errors)"
          f" x {n_pairs_src} source pairs, {args.cases} matched cases each")

    src = np.asarray(sources)
    per_source = {n: np.column_stack([values[src == n], human[src == n]]) for n in names}
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]

    def ours_randomization() -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        return [paired_randomization(per_source[a] - per_source[b],
                                     permutations=args.permutations, seed=0)
                for a, b in pairs]

    ours_randomization()  # warm-up (BLAS threads, imports)
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        ours = ours_randomization()
        times.append(time.perf_counter() - t0)
    t_ours = min(times)
    print(f"ours, randomization only (vectorised, incl. drawing signs): best of {args.repeat}:"
          f" {t_ours:.4f} s")

    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        systems_json(values, keys, hib, human, sources, cases, resamples=1000,
                     permutations=args.permutations, seed=0)
        times.append(time.perf_counter() - t0)
    t_full = min(times)
    print(f"ours, whole systems_json (matching by case, 1,000-resample CIs per source, ranking,"
          f" randomization): best of {args.repeat}: {t_full:.4f} s")

    t0 = time.perf_counter()
    max_dp = 0.0
    for (a, b), (_, p_ours, _) in zip(pairs, ours, strict=True):
        n = per_source[a].shape[0]
        # The same sign matrix as paired_randomization draws for this pair.
        signs = np.random.default_rng(0).integers(0, 2, size=(args.permutations, n)) * 2 - 1
        for k in range(per_source[a].shape[1]):
            _, p_loop = loop_randomization(per_source[a][:, k], per_source[b][:, k], signs)
            max_dp = max(max_dp, abs(p_loop - p_ours[k]))
    t_loop = time.perf_counter() - t0
    print(f"numpy loop (swap pair by pair, same signs): {t_loop:.3f} s;"
          f" speed-up {t_loop / t_ours:.0f}x; max |p_loop - p_ours| = {max_dp:.1e}")

    a, b = pairs[0]
    t0 = time.perf_counter()
    for k in range(SCIPY_METRICS):
        stats.permutation_test(
            (per_source[a][:, k], per_source[b][:, k]),
            lambda x, y: np.mean(x) - np.mean(y), permutation_type="samples",
            n_resamples=args.permutations, vectorized=False, random_state=0,
        )
    t_sp_sub = time.perf_counter() - t0
    n_tests = n_pairs_src * (args.metrics + 1)
    t_sp = t_sp_sub * n_tests / SCIPY_METRICS
    print(f"scipy.stats.permutation_test (paired, not vectorised): {t_sp_sub:.3f} s for"
          f" {SCIPY_METRICS} tests -> extrapolated to {n_tests}: {t_sp:.2f} s;"
          f" speed-up {t_sp / t_ours:.0f}x")
    verdict = "PASS" if t_ours < 1.0 else "FAIL"
    print(f"target: randomization under 1 s -> {verdict} ({t_ours:.4f} s)")


if __name__ == "__main__":
    main()
