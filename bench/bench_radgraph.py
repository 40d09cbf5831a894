"""Throughput of the RadGraph metric on a tiny random-weight checkpoint, and of its F1 code.

Run: ``python bench/bench_radgraph.py [--pairs 40] [--batch-size 8]``. Prints pairs/s of

* our batched inference vs the radgraph package's own ``RadGraph`` (one report per forward
  pass) on the same archive, on CPU and, when available, on CUDA;
* our F1 code alone vs the package's ``compute_reward`` on the resulting annotations.

The tiny model makes these numbers about overheads (preprocessing, span enumeration, Python
decoding), not about a 110M-parameter encoder. Its random weights also predict far more
entities and relations than a trained model (tens per report), so decoding and F1 dominate
more than they would with real weights; the ratios are what carries over.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _load_helpers() -> object:
    # The radgraph wheel installs a top-level ``tests`` package into site-packages that
    # shadows this repository's ``tests`` folder outside pytest, so load the helpers by path.
    mods = {}
    for name in ("helpers_models", "helpers_radgraph"):
        path = ROOT / "tests" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"tests.{name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[f"tests.{name}"] = module
        spec.loader.exec_module(module)
        mods[name] = module
    return mods["helpers_radgraph"]


def _pairs(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    from tests.helpers_models import CORPUS

    rng = random.Random(seed)
    refs = [" ".join(rng.sample(CORPUS, 2)) for _ in range(max(1, n // 4))]
    references = [refs[i % len(refs)] for i in range(n)]
    candidates = [" ".join(rng.sample(CORPUS, rng.randint(1, 3))) for _ in range(n)]
    return references, candidates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()

    import torch
    from radgraph import RadGraph as PackageRadGraph
    from radgraph.rewards import compute_reward

    helpers = _load_helpers()
    from radconcord.backend.metrics import radgraph as rg

    work = Path(tempfile.mkdtemp(prefix="bench-radgraph-"))
    os.environ.setdefault("RADCONCORD_DATA_DIR", str(work / "data"))
    archive = helpers.build_tiny_radgraph(work)
    references, candidates = _pairs(args.pairs)
    n = len(references)
    print(f"pairs={n} distinct texts={len(set(references) | set(candidates))}"
          f" batch_size={args.batch_size} torch={torch.__version__}")

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        metric = rg.RadGraph(checkpoint=str(archive), batch_size=args.batch_size, device=device)
        metric.load(device)
        metric.score(references=references[:4], candidates=candidates[:4])  # warm-up
        t0 = time.perf_counter()
        result = metric.score(references=references, candidates=candidates)
        ours = time.perf_counter() - t0

        cache = work / f"pkg-{device}"
        helpers.extract_for_package(archive, cache)
        package = PackageRadGraph(model_type="radgraph", model_cache_dir=str(cache),
                                  cuda=0 if device == "cuda" else -1)
        texts = references + candidates
        package(texts[:4])
        t0 = time.perf_counter()
        package(texts)  # what F1RadGraph does: every hyp and ref, duplicates included
        theirs = time.perf_counter() - t0
        print(f"[{device}] ours {n / ours:9.1f} pairs/s | package RadGraph {n / theirs:9.1f}"
              f" pairs/s | speed-up x{theirs / ours:.2f}")

    annotations = metric.annotate(sorted(set(references) | set(candidates)))
    by_text = dict(zip(sorted(set(references) | set(candidates)), annotations, strict=True))
    ref_ann = [by_text[t] for t in references]
    cand_ann = [by_text[t] for t in candidates]
    reps = max(1, 20000 // n)
    t0 = time.perf_counter()
    for _ in range(reps):
        for r, c in zip(ref_ann, cand_ann, strict=True):
            rg.pair_scores(r, c)
    ours_f1 = (time.perf_counter() - t0) / reps
    t0 = time.perf_counter()
    for _ in range(reps):
        for r, c in zip(ref_ann, cand_ann, strict=True):
            compute_reward({"entities": c}, {"entities": r}, "all")
    theirs_f1 = (time.perf_counter() - t0) / reps
    print(f"[f1] ours (4 keys + validation) {n / ours_f1:9.0f} pairs/s | package compute_reward"
          f" (3 keys) {n / theirs_f1:9.0f} pairs/s | ratio x{theirs_f1 / ours_f1:.2f}")
    print(f"mean radgraph_simple={sum(result.values['radgraph_simple']) / n:.4f}"
          " (random weights: arbitrary)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
