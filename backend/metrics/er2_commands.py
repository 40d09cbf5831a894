"""``python -m backend train-er2score``: train an ER2Score adapter on a study's ratings.

Torch, transformers and peft are imported only when the command runs.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from backend.util import user_errors


def register(subparsers: Any) -> None:  # noqa: ANN401 - argparse's private subparsers type
    """Add the ``train-er2score`` subcommand.

    Args:
        subparsers: The object returned by ``ArgumentParser.add_subparsers``.
    """
    p = subparsers.add_parser(
        "train-er2score",
        help="train an ER2Score LoRA adapter + reward head on a study's radiologist ratings",
        description="Build (accepted, rejected) candidate pairs per reference from the study's"
        " error counts, train LoRA + a 6-way reward head on a causal LM, save the adapter, and"
        " print the held-out Kendall tau before and after training.",
    )
    p.add_argument("--study", required=True, help="study whose ratings are the training signal")
    p.add_argument(
        "--base", required=True, help="backbone causal LM: hub id, model folder or .gguf file"
    )
    p.add_argument("--base-revision", default=None, help="hub revision (commit) of --base")
    p.add_argument("--output", required=True, type=Path, help="new folder for the adapter")
    p.add_argument("--epochs", type=int, default=3, help="passes over the pairs (default 3)")
    p.add_argument("--lr", type=float, default=1e-4, help="AdamW learning rate (default 1e-4)")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    p.add_argument(
        "--heldout", type=float, default=0.3,
        help="fraction of references held out for evaluation (default 0.3)",
    )
    p.add_argument("--batch-size", type=int, default=8, help="preference pairs per step")
    p.add_argument("--max-steps", type=int, default=None, help="cap on optimiser steps")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda[:N] (default auto)")
    p.set_defaults(func=_run)


def _fmt(x: float) -> str:
    return "nan" if math.isnan(x) else f"{x:.4f}"


def _run(args: argparse.Namespace) -> int:
    from backend.cli import UserError
    from backend.metrics import hf
    from backend.services.er2train import train_from_study
    from backend.services.errors import ServiceError
    from backend.services.types import Actor
    from db.session import Database

    with user_errors(ValueError):
        device = hf.pick_device(args.device)

    def progress(step: int, total: int, loss: float) -> None:
        if step == total or step % 10 == 0:
            print(f"step {step}/{total} loss {loss:.4f}", file=sys.stderr)

    db = Database()
    try:
        summary = train_from_study(
            db,
            Actor.system(),
            study=args.study,
            base=args.base,
            base_revision=args.base_revision,
            output=args.output,
            epochs=args.epochs,
            lr=args.lr,
            seed=args.seed,
            heldout=args.heldout,
            batch_size=args.batch_size,
            max_steps=args.max_steps,
            device=device,
            progress=progress,
        )
    except ServiceError as exc:
        raise UserError(str(exc)) from exc
    finally:
        db.dispose()
    print(f"adapter written to {summary.output}")
    print(
        f"trained on {summary.n_train_pairs} preference pairs from {summary.n_train_items}"
        f" rated candidates; {summary.steps} steps in {summary.seconds:.1f} s;"
        f" final loss {_fmt(summary.final_loss)}"
    )
    print(
        f"held-out Kendall tau (ER2Score vs -total errors, {summary.n_heldout_items} pairs):"
        f" untrained {_fmt(summary.tau_untrained)}, trained {_fmt(summary.tau_trained)}"
    )
    print(f"score with: --set er2score.adapter={summary.output}")
    return 0
