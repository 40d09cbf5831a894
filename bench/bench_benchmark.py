"""Benchmark: ``radconcord benchmark`` on a ReXVal-shaped and a RadPref-shaped set, cold and
then again on the warm cache, with every metric family that runs here without a download.

The sets are synthetic and written here in the published layouts (made-up chest X-ray
sentences and counts; the real data sets are access-controlled and never read):

- ReXVal-shaped: 50 studies x 4 candidate types (200 pairs), 6 raters, every cell present.
- RadPref-shaped: 100 cases x 2 candidates (200 candidates, 100 comparisons), 4 annotators.

Each run is the command line in a fresh process (imports and model loads included) on a new
data folder, so the first run is cold: empty score cache. The second run must score nothing
(its "scored N pair inputs now" line says 0) and is compared with the 10 s goal; the first
with the 2-minute goal on 2 cores.

Run: python bench/bench_benchmark.py [--bootstrap 1000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# Plain script run from anywhere: make the repository importable.
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from radconcord.backend.datasets import radpref, rexval  # noqa: E402

COLD_GOAL_S = 120.0
WARM_GOAL_S = 10.0
FINDINGS = (
    "Heart size is normal.", "The cardiomediastinal silhouette is within normal limits.",
    "No pleural effusion.", "No pneumothorax.", "Lungs are clear.",
    "Small left pleural effusion.", "Moderate right pleural effusion.",
    "Mild pulmonary vascular congestion.", "Mild pulmonary edema.",
    "Right lower lobe opacity concerning for pneumonia.", "Left basilar atelectasis.",
    "Moderate cardiomegaly.", "Stable 8 mm nodule in the right upper lobe.",
    "Endotracheal tube terminates 4 cm above the carina.",
    "Right internal jugular catheter tip in the lower SVC.",
    "Degenerative changes of the thoracic spine.", "No acute osseous abnormality.",
    "Interval increase in the left effusion compared with the prior study.",
    "Hyperinflated lungs consistent with emphysema.", "Healed left rib fractures.",
)
TYPES = ("radgraph", "bertscore", "s_emb", "bleu")


def _report(rng: np.random.Generator, base: list[int], n_wrong: int) -> str:
    picks = list(base)
    for j in range(n_wrong):
        picks[j % len(picks)] = int(rng.integers(len(FINDINGS)))
    if n_wrong and rng.random() < 0.5:
        picks = picks[:-1]
    return " ".join(FINDINGS[i] for i in picks)


def write_rexval(folder: Path, n_studies: int = 50, n_raters: int = 6, seed: int = 0) -> None:
    """ReXVal's two CSV files: ``n_studies`` x 4 candidate types, every cell present."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    gt_rows, rating_rows = [], []
    for s in range(n_studies):
        base = [int(i) for i in rng.choice(len(FINDINGS), size=4, replace=False)]
        reference = " ".join(FINDINGS[i] for i in base)
        wrong = rng.integers(0, 5, size=len(TYPES))
        gt_rows.append(rexval.GtRow(f"s{50000000 + s}", reference,
                                    tuple(_report(rng, base, int(w)) for w in wrong)))
        for t, ctype in enumerate(TYPES):
            for r in range(n_raters):
                for category in range(1, 7):
                    share = rng.multinomial(int(wrong[t]), [0.45, 0.35, 0.08, 0.07, 0.03, 0.02])
                    n = max(0, int(share[category - 1]) + int(rng.integers(-1, 2) * (
                        rng.random() < 0.15)))
                    sig = int(rng.binomial(n, 0.6))
                    rating_rows += [rexval.RatingRow(s, ctype, category, r, True, sig),
                                    rexval.RatingRow(s, ctype, category, r, False, n - sig)]
    rexval.write_gt(folder / rexval.GT_FILENAME, rexval.GtFile(TYPES, tuple(gt_rows)))
    rexval.write_ratings(folder / rexval.RATINGS_FILENAME, rexval.RatingsFile(tuple(rating_rows)))


def write_radpref(folder: Path, n_cases: int = 100, n_annotators: int = 4, seed: int = 1) -> None:
    """``preference_data.json`` and ``radiologist_annotations/user_N.json``."""
    rng = np.random.default_rng(seed)
    cases, users = [], [{"user_id": str(u + 1), "annotations": {}} for u in range(n_annotators)]
    for c in range(n_cases):
        base = [int(i) for i in rng.choice(len(FINDINGS), size=4, replace=False)]
        wrong = rng.integers(0, 5, size=2)
        texts = [_report(rng, base, int(w)) for w in wrong]
        case_id = f"case-{c:04d}"
        cases.append({
            "id": case_id, "ground_truth_report": " ".join(FINDINGS[i] for i in base),
            "ground_truth_findings": [FINDINGS[i] for i in base],
            "C1_report": texts[0], "C1_findings": texts[0].split(". "), "C1_source": "gen-a",
            "C2_report": texts[1], "C2_findings": texts[1].split(". "), "C2_source": "gen-b"})
        for user in users:
            user["annotations"][case_id] = {
                cand: {"finding_errors": {}, "missing_findings": {},
                       "rating": int(np.clip(5 - wrong[i] + rng.integers(-1, 2), 1, 5))}
                for i, cand in enumerate(radpref.CANDIDATES)}
    files = radpref.files_of(cases, [(radpref.user_file_name(u["user_id"]), u, None)
                                     for u in users])
    radpref.write_dir(files, folder)


def run(args: list[str], data: Path) -> tuple[float, str]:
    env = {**os.environ, "RADCONCORD_DATA_DIR": str(data), "HF_HUB_OFFLINE": "1"}
    env.pop("DATABASE_URL", None)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "backend", "benchmark", *args], cwd=REPO,
                          env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    if proc.returncode:
        sys.exit(f"benchmark failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return seconds, proc.stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--keep", type=Path, default=None,
                    help="write the sets and outputs here instead of a temporary folder")
    args = ap.parse_args()
    print(f"python {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} CPUs, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    with tempfile.TemporaryDirectory(prefix="bench-benchmark-") as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        write_rexval(root / "rexval")
        write_radpref(root / "radpref")
        data = root / "data"
        data.mkdir(exist_ok=True)
        common = ["--dataset", f"rexval={root / 'rexval'}", "--dataset",
                  f"radpref={root / 'radpref'}", "--metrics", "available", "--bootstrap",
                  str(args.bootstrap), "--seed", "0"]
        print("workload: ReXVal-shaped 200 pairs (6 raters) + RadPref-shaped 100 comparisons "
              f"(200 candidates, 4 annotators), --metrics available, {args.bootstrap} "
              "case-level resamples")
        cold, out_cold = run([*common, "--output", str(root / "cold")], data)
        warm, out_warm = run([*common, "--output", str(root / "warm")], data)
        doc = json.loads((root / "cold" / "leaderboard.json").read_text(encoding="utf-8"))
        scored = [f for f, s in doc["datasets"][0]["scoring"].items() if s["status"] == "done"]
        na = [f for f, s in doc["datasets"][0]["scoring"].items() if s["status"] != "done"]
        seconds = {}
        for ds in doc["datasets"]:
            for fam, s in ds["scoring"].items():
                seconds[fam] = seconds.get(fam, 0.0) + float(s.get("seconds") or 0.0)
        print(f"families scored: {', '.join(scored)}")
        print(f"families n/a here: {', '.join(na)}")
        print("metric compute seconds (cold, both sets): " + ", ".join(
            f"{f} {v:.1f}" for f, v in sorted(seconds.items(), key=lambda kv: -kv[1]) if v))
        line = re.search(r"scored (\d+) pair inputs now, (\d+) from the cache", out_cold)
        line2 = re.search(r"scored (\d+) pair inputs now, (\d+) from the cache", out_warm)
        print(f"cold run:  {cold:6.1f} s  ({line.group(0) if line else '?'});"
              f" goal {COLD_GOAL_S:.0f} s -> {cold / COLD_GOAL_S:.2f} of the goal")
        print(f"warm run:  {warm:6.1f} s  ({line2.group(0) if line2 else '?'});"
              f" goal {WARM_GOAL_S:.0f} s -> {warm / WARM_GOAL_S:.2f} of the goal")
        print(f"cold / warm: {cold / warm:.1f}x")
        for ds in doc["datasets"]:
            board = ds["board"]
            if board["kind"] == "counts":
                tb = board["targets"]["total"]
                print(f"{ds['name']}: best {tb['best']}, ceiling "
                      f"{(tb['ceiling'] or {}).get('value')}")


if __name__ == "__main__":
    main()
