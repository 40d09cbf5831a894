"""concord's check on the demo study's constructed ratings (no human data; issue 27).

Seeds the demo study into a temporary data folder, scores its 24 pairs with concord's
``rules`` and ``gbm`` variants and a few reference metrics, and prints Kendall tau-b (with a
95 % case-bootstrap interval, 1,000 resamples, seed 0) against the mean total errors of the
three constructed demo raters. Those ratings are the errors the demo candidates were written
with plus seeded noise (assets/demo/constructed_errors.json): a sanity check on reports
unlike the IU reports concord was trained on, not a human evaluation.

Usage: python scripts/check_concord_demo.py [--ce-model DIR]

``--ce-model DIR`` adds the ``ce`` variant from a folder ``train-concord --variant ce`` wrote.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

METRICS = [
    ("concord rules", "concord_total,concord_sig", {"concord": {"variant": "rules"}}),
    ("concord gbm", "concord_total,concord_sig", {"concord": {"variant": "gbm"}}),
    ("bleu", "bleu4", None),
    ("rouge", "rougeL", None),
    ("bertscore (MiniLM)", "bertscore_f", None),
    ("chexpert", "chexpert_f1", None),
    ("crg", "crg", None),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ce-model", metavar="DIR", help="a trained ce folder to check as well")
    args = ap.parse_args()
    metrics = list(METRICS)
    if args.ce_model:
        metrics.insert(2, ("concord ce", "concord_total,concord_sig",
                           {"concord": {"variant": "ce", "model": args.ce_model}}))
    folder = tempfile.mkdtemp(prefix="rc-concord-demo-")
    os.environ["RADCONCORD_DATA_DIR"] = folder
    os.environ["DATABASE_URL"] = f"sqlite:///{folder}/radconcord.db"
    subprocess.run([sys.executable, "-m", "backend", "db", "seed-demo"], check=True,
                   capture_output=True)
    from radconcord.api import correlate, load_study, score

    study = load_study("Demo study")
    target = study.errors().to_numpy()
    refs, cands = list(study.pairs.reference), list(study.pairs.candidate)
    print(f"{len(refs)} pairs, raters {', '.join(study.raters)}")
    for name, keys, options in metrics:
        frame = score(references=refs, candidates=cands, metrics=keys, options=options)
        table = correlate(scores=frame, ratings=target, bootstrap=1000, seed=0,
                          cases=list(study.pairs.case_id))
        for key, row in table.iterrows():
            print(f"{name:20s} {key:14s} tau-b {row.kendall_tau_b:6.3f}"
                  f"  [{row.kendall_ci_low:6.3f}, {row.kendall_ci_high:6.3f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
