"""Benchmark: RadConcord BERTScore vs bert_score.score on ~2,000 synthetic report pairs.

Both run in this process on CPU with the packaged all-MiniLM-L6-v2 at layer 6, no idf, no
rescaling (and once more with idf). Timings include model loading on both sides (bert_score
loads inside ``score``); ours is also shown without the load. Prints pairs/second, the
speed ratio (ours / bert_score, >1 means faster) and the max absolute difference.

Usage: python bench/bench_bertscore.py [--pairs 2000] [--seed 0] [--threads N]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FINDINGS = [
    "pleural effusion",
    "pneumothorax",
    "consolidation",
    "atelectasis",
    "pulmonary edema",
    "cardiomegaly",
    "nodular opacity",
    "rib fracture",
    "hiatal hernia",
    "interstitial markings",
]
PLACES = [
    "right lower lobe",
    "left lower lobe",
    "right upper lobe",
    "left apex",
    "lung bases",
    "retrocardiac region",
    "right costophrenic angle",
    "left hemithorax",
]
SEVERITY = ["small", "moderate", "large", "mild", "severe", "trace", "new", "stable"]
TEMPLATES = [
    "No {f}.",
    "There is a {s} {f} in the {p}.",
    "{S} {f} is seen at the {p}.",
    "Interval increase in {f} in the {p} compared with the prior study.",
    "The {p} shows {s} {f}, unchanged.",
    "Heart size is normal and there is no {f}.",
    "Endotracheal tube terminates {n} cm above the carina.",
    "Low lung volumes with {s} {f} at the {p}.",
]


def sentence(rng: random.Random) -> str:
    t = rng.choice(TEMPLATES)
    s = rng.choice(SEVERITY)
    return t.format(
        f=rng.choice(FINDINGS), p=rng.choice(PLACES), s=s, S=s.capitalize(), n=rng.randint(2, 7)
    )


def report(rng: random.Random) -> str:
    return " ".join(sentence(rng) for _ in range(rng.randint(1, 6)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    ap.add_argument("--idf", action="store_true", help="also time idf=True")
    args = ap.parse_args()

    import bert_score
    import torch
    import transformers

    from backend.metrics import hf
    from backend.metrics.bertscore import BertScore

    if args.threads:
        torch.set_num_threads(args.threads)
    rng = random.Random(args.seed)
    refs = [report(rng) for _ in range(args.pairs)]
    cands = [report(rng) if rng.random() < 0.8 else refs[i] for i in range(args.pairs)]
    model = str(hf.packaged_minilm_dir())
    print(
        f"pairs={args.pairs} seed={args.seed} unique_texts={len(set(refs + cands))}"
        f" torch={torch.__version__} threads={torch.get_num_threads()}"
        f" transformers={transformers.__version__} bert_score={bert_score.__version__}"
    )

    for idf in (False, True) if args.idf else (False,):
        t0 = time.perf_counter()
        ours_metric = BertScore(model=model, num_layers=6, idf=idf, rescale=False)
        ours_metric.load("cpu")
        t1 = time.perf_counter()
        result = ours_metric.score(references=refs, candidates=cands)
        ours = result.values
        t2 = time.perf_counter()
        p, r, f = bert_score.score(
            cands, refs, model_type=model, num_layers=6, idf=idf, device="cpu", batch_size=64
        )
        t3 = time.perf_counter()
        theirs = {"bertscore_p": p.tolist(), "bertscore_r": r.tolist(), "bertscore_f": f.tolist()}
        # bert_score lets a padded position (similarity 0) join the max, so a pair in which
        # some token's best real match is negative can differ; count those pairs apart.
        quirk = [any(v is not None and v < 0 for v in d.values()) for d in result.details]
        diffs = [max(abs(ours[k][i] - theirs[k][i]) for k in theirs) for i in range(args.pairs)]
        diff = max(diffs)
        clean = max((d for d, q in zip(diffs, quirk, strict=True) if not q), default=0.0)
        ours_total, ours_score, ref_total = t2 - t0, t2 - t1, t3 - t2
        n = args.pairs
        print(
            f"idf={idf!s:5} ours: {n / ours_total:8.1f} pairs/s (load+score {ours_total:6.2f}s,"
            f" score only {n / ours_score:8.1f} pairs/s)  bert_score: {n / ref_total:8.1f}"
            f" pairs/s ({ref_total:6.2f}s)  ratio ours/bert_score: {ref_total / ours_total:5.2f}x"
            f"  max_abs_diff: {diff:.2e}"
        )
        print(
            f"           pairs with a negative best token match: {sum(quirk)};"
            f" max_abs_diff on the others: {clean:.2e}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
