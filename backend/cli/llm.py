"""LLM commands: ``llm-serve``, a local OpenAI-compatible chat server for the LLM metrics.

``python -m backend llm-serve --model PATH_OR_ID`` serves ``/v1/models`` and
``/v1/chat/completions`` (greedy, batched) for one causal LM, for users without vLLM or
llama.cpp; point a family at it with ``--set green.backend=openai --set
green.base_url=http://127.0.0.1:8000/v1`` or ``RADCONCORD_LLM_BASE_URL``. Torch and
transformers are imported only when the command runs.
"""

from __future__ import annotations

import argparse

from radconcord.backend.cli.common import Commands, UserError


def register(commands: Commands) -> None:
    """Add ``model serve-llm`` (old name ``llm-serve`` kept).

    Args:
        commands: The command line's commands and groups.
    """
    p = commands.group("model").add_parser(
        "serve-llm",
        help="serve a causal LM as an OpenAI-compatible chat endpoint (for the LLM metrics)",
        description="Load one causal LM (hub id with --revision, model folder or .gguf file) "
        "and serve GET /v1/models and POST /v1/chat/completions (greedy, non-streaming; "
        "concurrent requests are generated in batches) until interrupted.",
    )
    p.add_argument("--model", required=True, help="hub id, model folder or .gguf file")
    p.add_argument("--revision", default=None, help="hub revision (commit) of --model")
    p.add_argument("--host", default="127.0.0.1",
                   help="interface to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0: any)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--dtype", default="auto", help="auto (bf16 on CUDA), fp32, bf16 or fp16")
    p.add_argument("--model-id", default=None,
                   help="name served in /v1/models (default: the --model string)")
    p.add_argument("--max-batch", type=int, default=8, help="most requests per batch")
    p.add_argument("--batch-wait-ms", type=float, default=10.0,
                   help="how long a request waits for others to batch with")
    p.set_defaults(func=cmd_llm_serve)
    commands.alias("llm-serve", "model", "serve-llm")


def cmd_llm_serve(args: argparse.Namespace) -> int:
    """Load the model and serve until interrupted."""
    from radconcord.backend.metrics.hf import ModelNotAvailable
    from radconcord.backend.metrics.llm_server import LLMServer

    if not 0 <= args.port <= 65535:
        raise UserError(f"--port {args.port} is not a TCP port (0-65535)")
    if args.max_batch < 1:
        raise UserError("--max-batch must be at least 1")
    server = LLMServer(
        args.model, revision=args.revision, host=args.host, port=args.port,
        device=args.device, dtype=args.dtype, model_id=args.model_id,
        max_batch=args.max_batch, batch_wait_ms=args.batch_wait_ms,
    )
    try:
        server.load()
    except (ModelNotAvailable, FileNotFoundError, ValueError) as exc:
        raise UserError(f"cannot load --model {args.model}: {exc}") from None
    try:
        server.start()
    except OSError as exc:
        raise UserError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") \
            from None
    print(f"serving {server.model_id} at {server.base_url} (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    finally:
        server.stop()
    return 0
