"""Per-pair throughput of GREEN generation and ER2Score scoring (tiny Llama and SmolLM2).

Usage: ``python bench/bench_llm_metrics.py [--pairs 8] [--max-new-tokens 32] [--no-smollm2]``

Reports seconds per pair on CPU, and on CUDA when available. There is no reference
implementation in this environment (GREEN's own package needs the 7B checkpoint), so the ratio
printed is SmolLM2 versus the tiny model on the same device, run in the same process.
ER2Score adapters are trained for 2 steps first (untrained quality, real inference cost).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_ROOT))
# tests/ has no __init__.py (and an installed package may own the name "tests"), so the
# helper module is imported from its folder.
sys.path.insert(0, str(_ROOT / "tests"))

from helpers_llm import (  # noqa: E402
    SMOLLM2_CONVERTED_ROOT,
    build_tiny_llama,
    smollm2_gguf,
)

from radconcord.backend.metrics import er2score, llm  # noqa: E402
from radconcord.backend.metrics.green import Green  # noqa: E402

REFS = ("No acute cardiopulmonary process.", "Mild cardiomegaly. Small left pleural effusion.")
CANDS = ("Lungs are clear. No pleural effusion.", "Large right pleural effusion.")


def _pairs(n: int) -> tuple[list[str], list[str]]:
    return [REFS[i % 2] for i in range(n)], [CANDS[i % 2] for i in range(n)]


def bench_green(model: str, device: str, n: int, max_new: int) -> float:
    """Seconds per pair of GREEN generation + parsing (model load excluded)."""
    m = Green(model=model, max_new_tokens=max_new, batch_size=8)
    m.load(device)
    refs, cands = _pairs(n)
    m.score(references=refs[:1], candidates=cands[:1])  # warm-up
    t = time.perf_counter()
    m.score(references=refs, candidates=cands)
    return (time.perf_counter() - t) / n


def bench_er2(model: str, device: str, n: int, tmp: Path) -> float:
    """Seconds per pair of ER2Score scoring (adapter trained for 2 steps, load excluded)."""
    items = [
        er2score.RatedCandidate(f"{g}-{k}", f"g{g}", REFS[g], CANDS[g] + " Nodule." * k,
                                (float(k), 0, 0, 0, 0, 0))
        for g in range(2) for k in range(2)
    ]
    out = tmp / f"ad-{abs(hash((model, device)))}"
    er2score.train_reward_model(
        base=llm.LMRef(model), train_items=items, output=out, device=device,
        config=er2score.TrainConfig(epochs=1, max_steps=2, batch_size=2),
    )
    m = er2score.ER2Score(adapter=str(out))
    m.load(device)
    refs, cands = _pairs(n)
    m.score(references=refs[:1], candidates=cands[:1])
    t = time.perf_counter()
    m.score(references=refs, candidates=cands)
    return (time.perf_counter() - t) / n


def main() -> None:
    """Run the benchmark and print a table."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--no-smollm2", action="store_true")
    args = ap.parse_args()
    import os

    import torch

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        models = {"tiny-llama": str(build_tiny_llama(tmp))}
        if not args.no_smollm2:
            os.environ.setdefault("RADCONCORD_MODEL_DIR", str(SMOLLM2_CONVERTED_ROOT))
            models["smollm2-135m"] = str(smollm2_gguf())
        print(f"pairs={args.pairs} max_new_tokens={args.max_new_tokens} threads="
              f"{torch.get_num_threads()}")
        print(f"{'model':14s} {'device':6s} {'green s/pair':>13s} {'er2 s/pair':>11s}")
        rows: dict[tuple[str, str], tuple[float, float]] = {}
        for device in devices:
            for name, path in models.items():
                g = bench_green(path, device, args.pairs, args.max_new_tokens)
                e = bench_er2(path, device, args.pairs, tmp)
                rows[(name, device)] = (g, e)
                print(f"{name:14s} {device:6s} {g:13.4f} {e:11.4f}")
        for device in devices:
            if ("smollm2-135m", device) in rows:
                tg, te = rows[("tiny-llama", device)]
                sg, se = rows[("smollm2-135m", device)]
                print(f"ratio smollm2/tiny on {device}: green {sg / tg:.1f}x, er2 {se / te:.1f}x")


if __name__ == "__main__":
    main()
