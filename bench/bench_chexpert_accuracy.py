"""Accuracy of the rule-based CheXpert labeler on the hand-labelled sentences, and its speed.

Run: ``python bench/bench_chexpert_accuracy.py``. Prints, per observation, four-way label
accuracy (1/0/-1/blank) and binarised F1 (uncertain = positive) on
``tests/fixtures/chexpert_sentences.tsv`` (dev and held-out splits), then reports per second
on multi-sentence reports built from those sentences. There is no reference labeler to run in
the same process here (the CheXpert labeler needs NegBio and a parser, CheXbert needs weights),
so the throughput is reported without a ratio.
"""

from __future__ import annotations

import csv
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from radconcord.backend.metrics.chexpert import ChexpertLabels, RuleLabeler, label_report  # noqa: E402
from radconcord.backend.metrics.labels import OBSERVATIONS, binarize, pair_counts  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "chexpert_sentences.tsv"


def load() -> list[tuple[str, tuple[int | None, ...], str]]:
    with FIXTURE.open(encoding="utf-8", newline="") as f:
        return [
            (
                r["sentence"],
                tuple(None if r[o] == "" else int(r[o]) for o in OBSERVATIONS),
                r["split"],
            )
            for r in csv.DictReader(f, delimiter="\t")
        ]


def accuracy_table(rows) -> None:
    preds = [label_report(s) for s, _, _ in rows]
    print(f"labeler {RuleLabeler.version}: {len(rows)} sentences")
    for split in ("dev", "heldout", None):
        idx = [i for i, r in enumerate(rows) if split is None or r[2] == split]
        correct = sum(
            p == e for i in idx for p, e in zip(preds[i], rows[i][1], strict=True)
        )
        exact = sum(preds[i] == rows[i][1] for i in idx)
        name = split or "all"
        print(
            f"  {name:8s} label accuracy {correct}/{14 * len(idx)} = "
            f"{correct / (14 * len(idx)):.4f}; sentences exact {exact}/{len(idx)}"
        )
    print(f"\n  {'observation':28s} {'acc':>6s} {'F1':>6s} {'support':>7s}")
    for j, name in enumerate(OBSERVATIONS):
        acc = sum(preds[i][j] == rows[i][1][j] for i in range(len(rows))) / len(rows)
        truth = [binarize([r[1][j]])[0] for r in rows]
        guess = [binarize([p[j]])[0] for p in preds]
        tp, fp, fn, _ = pair_counts(truth, guess)
        f1 = 2 * tp / (2 * tp + fp + fn) if (2 * tp + fp + fn) else float("nan")
        print(f"  {name:28s} {acc:6.3f} {f1:6.3f} {sum(truth):7d}")


def throughput(rows, n_reports: int = 5000) -> None:
    rng = random.Random(0)
    sentences = [s for s, _, _ in rows]
    reports = [" ".join(rng.sample(sentences, 6)) + f" Study {i}." for i in range(n_reports)]
    labeler = RuleLabeler()
    labeler.label(reports[0])
    t = time.perf_counter()
    for r in reports:
        labeler.label(r)
    dt = time.perf_counter() - t
    chars = sum(map(len, reports)) / len(reports)
    print(f"\n  labeler: {n_reports / dt:,.0f} reports/s (6 sentences, {chars:.0f} chars each)")
    metric = ChexpertLabels()
    half = n_reports // 2
    t = time.perf_counter()
    metric.score(references=reports[:half], candidates=reports[half:])
    dt = time.perf_counter() - t
    print(f"  ChexpertLabels.score: {half / dt:,.0f} pairs/s ({half} pairs, 2 reports each)")


if __name__ == "__main__":
    data = load()
    accuracy_table(data)
    throughput(data)
