"""Benchmark: RadConcord BERTScore vs bert_score on ~2,000 synthetic report pairs.

Both run in this process on CPU with the packaged all-MiniLM-L6-v2 at layer 6, no idf, no
rescaling. Both sides are warmed up first on a few pairs (imports of the transformers model
code, first-call allocations), so neither pays the other's one-time process costs; then the
runs alternate (ours, bert_score, ours, ...) and the median is reported, with CPU seconds,
because the machine may be shared. Timings include model loading on both sides (bert_score
loads inside ``score``). Scenarios:

* ``one-call``: all pairs in one call each (``bert_score.score`` vs ``BertScore.score``);
* ``runner``: a study shape (each reference has several candidate systems, pairs in random
  order) scored in the scoring runner's 32-pair calls, bert_score through one ``BERTScorer``
  (model kept) and ours through one instance (embedding cache on);
* ``bf16``: ours with ``dtype="bf16"`` (opt-in, only where the CPU has native bf16) against
  bert_score in fp32: speed and how far the values move.

Prints pairs/second, the ratio (bert_score time / ours, >1 means ours is faster) and the max
absolute difference. ``--ours FILE`` takes ``BertScore`` from another copy of
``backend/metrics/bertscore.py`` (e.g. ``git show REV:backend/metrics/bertscore.py > /tmp/old.py``)
to measure a before/after in the same way.

Usage: python bench/bench_bertscore.py [--pairs 2000] [--seed 0] [--threads N] [--reps 3]
       [--idf] [--scenarios one-call,runner,bf16] [--ours FILE]
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def load_ours(path: str | None) -> Any:
    """``BertScore`` from this checkout, or from the module file ``path``."""
    if path is None:
        from radconcord.backend.metrics.bertscore import BertScore

        return BertScore
    spec = importlib.util.spec_from_file_location("bench_bertscore_ours", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module.BertScore


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """(wall seconds, CPU seconds of this process, result) of ``fn()``."""
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w, time.process_time() - c, out


def alternate(
    ours: Callable[[], Any], theirs: Callable[[], Any], reps: int
) -> tuple[list[tuple[float, float]], list[tuple[float, float]], Any, Any]:
    """Run ``ours`` and ``theirs`` alternately ``reps`` times; times and last results."""
    t_ours: list[tuple[float, float]] = []
    t_theirs: list[tuple[float, float]] = []
    r_ours = r_theirs = None
    for _ in range(reps):
        w, c, r_ours = timed(ours)
        t_ours.append((w, c))
        w, c, r_theirs = timed(theirs)
        t_theirs.append((w, c))
    return t_ours, t_theirs, r_ours, r_theirs


def report_line(
    name: str, n: int, t_ours: list[tuple[float, float]], t_theirs: list[tuple[float, float]]
) -> None:
    wo = statistics.median(w for w, _ in t_ours)
    co = statistics.median(c for _, c in t_ours)
    wt = statistics.median(w for w, _ in t_theirs)
    ct = statistics.median(c for _, c in t_theirs)
    print(
        f"{name:9} ours: {n / wo:7.1f} pairs/s ({wo:6.2f}s wall, {co:6.2f}s cpu)"
        f"  bert_score: {n / wt:7.1f} pairs/s ({wt:6.2f}s wall, {ct:6.2f}s cpu)"
        f"  ratio: {wt / wo:5.2f}x wall, {ct / co:5.2f}x cpu"
        f"  (wall per run ours {[round(w, 1) for w, _ in t_ours]},"
        f" bert_score {[round(w, 1) for w, _ in t_theirs]})"
    )


def differences(ours: Any, theirs: tuple[Any, Any, Any], n: int) -> tuple[float, float, int]:
    """Max |ours - bert_score| over all pairs, over pairs clear of the padding rule, count."""
    p, r, f = theirs
    ref = {"bertscore_p": p.tolist(), "bertscore_r": r.tolist(), "bertscore_f": f.tolist()}
    # bert_score lets a padded position (similarity 0) join the max, so a pair in which
    # some token's best real match is negative can differ; count those pairs apart.
    quirk = [any(v is not None and v < 0 for v in d.values()) for d in ours.details]
    diffs = [max(abs(ours.values[k][i] - ref[k][i]) for k in ref) for i in range(n)]
    clean = max((d for d, q in zip(diffs, quirk, strict=True) if not q), default=0.0)
    return max(diffs), clean, sum(quirk)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    ap.add_argument("--reps", type=int, default=3, help="alternating runs per side")
    ap.add_argument("--idf", action="store_true", help="one-call also with idf=True")
    ap.add_argument("--scenarios", default="one-call,runner,bf16")
    ap.add_argument("--systems", type=int, default=5, help="candidates per reference (runner)")
    ap.add_argument("--ours", default=None, help="bertscore.py to take BertScore from")
    args = ap.parse_args()
    scenarios = {s.strip() for s in args.scenarios.split(",") if s.strip()}

    import bert_score
    import torch
    import transformers

    from radconcord.backend.metrics import hf
    from radconcord.backend.metrics.base import MetricResult

    ours_cls = load_ours(args.ours)
    if args.threads:
        torch.set_num_threads(args.threads)
    rng = random.Random(args.seed)
    refs = [report(rng) for _ in range(args.pairs)]
    cands = [report(rng) if rng.random() < 0.8 else refs[i] for i in range(args.pairs)]
    model = str(hf.packaged_minilm_dir())
    n = args.pairs
    print(
        f"pairs={n} seed={args.seed} unique_texts={len(set(refs + cands))} reps={args.reps}"
        f" torch={torch.__version__} threads={torch.get_num_threads()}"
        f" transformers={transformers.__version__} bert_score={bert_score.__version__}"
        f" ours={args.ours or 'checkout'}"
    )

    def ours_once(r: list[str], c: list[str], **options: Any) -> MetricResult:
        metric = ours_cls(model=model, num_layers=6, rescale=False, **options)
        metric.load("cpu")
        return metric.score(references=r, candidates=c)

    def theirs_once(r: list[str], c: list[str], idf: bool = False) -> Any:
        return bert_score.score(
            c, r, model_type=model, num_layers=6, idf=idf, device="cpu", batch_size=64
        )

    # Warm-up: both sides pay the one-time process costs before any timing.
    ours_once(refs[:8], cands[:8])
    theirs_once(refs[:8], cands[:8])

    if "one-call" in scenarios:
        for idf in (False, True) if args.idf else (False,):
            t_o, t_t, res, ref = alternate(
                lambda idf=idf: ours_once(refs, cands, idf=idf),
                lambda idf=idf: theirs_once(refs, cands, idf=idf),
                args.reps,
            )
            report_line(f"one-call{'+idf' if idf else ''}", n, t_o, t_t)
            diff, clean, quirks = differences(res, ref, n)
            print(
                f"          max_abs_diff {diff:.2e}; pairs with a negative best token match:"
                f" {quirks}; max_abs_diff on the others: {clean:.2e}"
            )

    if "runner" in scenarios:
        k = max(args.systems, 1)
        s_refs = [report(rng) for _ in range(max(n // k, 1))]
        pairs = [(r, report(rng)) for r in s_refs for _ in range(k)]
        rng.shuffle(pairs)
        batches = [pairs[i : i + 32] for i in range(0, len(pairs), 32)]

        def ours_runner() -> list[float]:
            metric = ours_cls(model=model, num_layers=6, rescale=False)
            metric.load("cpu")
            out: list[float] = []
            for b in batches:
                res = metric.score(references=[r for r, _ in b], candidates=[c for _, c in b])
                out += res.values["bertscore_f"]
            return out

        def theirs_runner() -> list[float]:
            scorer = bert_score.BERTScorer(
                model_type=model, num_layers=6, device="cpu", batch_size=64
            )
            out: list[float] = []
            for b in batches:
                _, _, f = scorer.score([c for _, c in b], [r for r, _ in b])
                out += f.tolist()
            return out

        t_o, t_t, res, ref = alternate(ours_runner, theirs_runner, args.reps)
        print(f"runner: {len(s_refs)} references x {k} candidates, {len(batches)} calls of 32")
        report_line("runner", len(pairs), t_o, t_t)
        worst = max(abs(a - b) for a, b in zip(res, ref, strict=True))
        print(f"          max_abs_diff on F: {worst:.2e}")

    if "bf16" in scenarios:
        from radconcord.backend.metrics.bertscore import cpu_has_native_bf16

        if not cpu_has_native_bf16():
            print("bf16      skipped: this CPU has no native bf16")
        else:
            t_o, t_t, res, ref = alternate(
                lambda: ours_once(refs, cands, dtype="bf16"),
                lambda: theirs_once(refs, cands),
                args.reps,
            )
            report_line("bf16", n, t_o, t_t)
            diff, _, _ = differences(res, ref, n)
            print(f"          max_abs_diff (bf16 ours vs fp32 bert_score, raw P/R/F): {diff:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
