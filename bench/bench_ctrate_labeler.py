"""Accuracy of the rule-based CT-RATE labeler on the hand-labelled CT sentences, and its speed.

Run: ``python bench/bench_ctrate_labeler.py``. Prints, per abnormality, binarised precision,
recall and F1 (uncertain = positive) on ``tests/fixtures/ctrate_sentences.jsonl`` (whole set;
``--split dev|heldout|blind|added`` for one split), the macro-F1, four-way label accuracy and
sentences labelled exactly, then reports per second on multi-sentence reports built from the
sentences. CT-RATE's released classifier is not run here (its weights are gated), so there is
no reference labeler to compare against in the same process.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from radconcord.backend.metrics.ctrate import (  # noqa: E402
    CTRATE_LABELS,
    CtRateRuleLabeler,
    binarize_reading,
    label_report,
    rule_labeler,
)

FIXTURE = ROOT / "tests" / "fixtures" / "ctrate_sentences.jsonl"


def load(split: str | None = None) -> list[tuple[str, tuple[int | None, ...]]]:
    """``(sentence, hand labels)`` of the fixture, optionally one split."""
    out = []
    for line in FIXTURE.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if split and row["split"] != split:
            continue
        value: dict[str, int | None] = dict.fromkeys(CTRATE_LABELS)
        for key, v in (("positive", 1), ("negative", 0), ("uncertain", -1)):
            for name in row[key]:
                value[name] = v
        out.append((row["sentence"], tuple(value[n] for n in CTRATE_LABELS)))
    return out


def table(rows: list[tuple[str, tuple[int | None, ...]]]) -> float:
    """Print the per-abnormality table; return the macro-F1."""
    preds = [label_report(s) for s, _ in rows]
    counts = [[0, 0, 0, 0] for _ in CTRATE_LABELS]  # tp fp fn negatives-in-truth
    for (_, truth), pred in zip(rows, preds, strict=True):
        t, p = binarize_reading(truth), binarize_reading(pred)
        assert t is not None and p is not None
        for i, (a, b) in enumerate(zip(t, p, strict=True)):
            counts[i][0] += a and b
            counts[i][1] += b and not a
            counts[i][2] += a and not b
            counts[i][3] += truth[i] == 0
    print(f"labeler {CtRateRuleLabeler.version}: {len(rows)} sentences")
    print(f"| {'abnormality':34s} | {'P':>5s} | {'R':>5s} | {'F1':>5s} | pos | neg |")
    print(f"|{'-' * 36}|{'-' * 7}|{'-' * 7}|{'-' * 7}|-----|-----|")
    f1s = []
    for name, (tp, fp, fn, neg) in zip(CTRATE_LABELS, counts, strict=True):
        p = tp / (tp + fp) if tp + fp else float("nan")
        r = tp / (tp + fn) if tp + fn else float("nan")
        f1 = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else float("nan")
        f1s.append(f1)
        print(f"| {name:34s} | {p:5.3f} | {r:5.3f} | {f1:5.3f} | {tp + fn:3d} | {neg:3d} |")
    defined = [f for f in f1s if f == f]
    macro = sum(defined) / len(defined)
    four = sum(g == t for (_, truth), pred in zip(rows, preds, strict=True)
               for g, t in zip(pred, truth, strict=True))
    exact = sum(pred == truth for (_, truth), pred in zip(rows, preds, strict=True))
    print(f"macro-F1 {macro:.4f} (over {len(defined)} abnormalities with support);"
          f" four-way label accuracy {four}/{18 * len(rows)} = {four / (18 * len(rows)):.4f};"
          f" sentences exact {exact}/{len(rows)}")
    return macro


def speed(rows: list[tuple[str, tuple[int | None, ...]]], n_reports: int = 300) -> None:
    """Reports per second on 12-sentence reports built from the fixture."""
    rng = random.Random(0)
    sentences = [s for s, _ in rows]
    reports = [" ".join(rng.choice(sentences) for _ in range(12)) for _ in range(n_reports)]
    labeler = rule_labeler()
    labeler.label(reports[0])
    t0 = time.perf_counter()
    for text in reports:
        labeler.label(text)
    dt = time.perf_counter() - t0
    print(f"speed: {n_reports} reports of 12 sentences in {dt:.3f} s"
          f" = {n_reports / dt:.0f} reports/s (one core)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", choices=["dev", "heldout", "blind", "added"], default=None)
    args = ap.parse_args()
    rows = load(args.split)
    table(rows)
    speed(load())


if __name__ == "__main__":
    main()
