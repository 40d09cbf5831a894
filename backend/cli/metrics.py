"""Metric commands: ``metrics``, ``uncertainty``, ``train-er2score`` and ``train-concord``.

``metrics [--json]`` lists every metric, available here or why not; ``uncertainty`` writes SMAS
variance per case; ``train-er2score`` trains an ER2Score adapter on a study's ratings;
``train-concord`` trains a Concord ``gbm`` or ``ce`` model on synthetic errors of public
reports (no human ratings). Torch, transformers and peft are imported only when a command
runs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from radconcord.backend.cli.common import Commands, UserError, database, service_errors, user_errors
from radconcord.backend.cli.progress import progress_bar


def register(commands: Commands) -> None:
    """Add ``metrics``, ``model uncertainty`` and ``model train-er2score`` (old flat names
    kept).

    Args:
        commands: The command line's commands and groups.
    """
    p = commands.add_parser(
        "metrics",
        help="list every metric family and output key, available here or why not",
        description="List every registered metric family with its output keys, their "
        "direction, and whether it can run on this machine (with the reason when not).",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_metrics)

    model = commands.group("model")
    u = model.add_parser(
        "uncertainty",
        help="SMAS variance over several sampled candidates of each case",
        description="Group the candidates of a PAIRS file by case_id (each group: several "
        "samples from one model for one case) and write report-level and sentence-level SMAS "
        "variance per case as JSON.",
    )
    u.add_argument("--input", required=True, help="PAIRS file (CSV/JSONL) with case_id")
    u.add_argument("--output", required=True, help="JSON file to write")
    u.add_argument("--set", action="append", default=[], metavar="smas.OPTION=VALUE",
                   help="encoder options, e.g. smas.model=/path/to/encoder")
    u.set_defaults(func=cmd_uncertainty)


    p = model.add_parser(
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
    p.set_defaults(func=cmd_train_er2score)

    p = model.add_parser(
        "train-concord",
        help="train a Concord gbm or ce model on synthetic errors of public reports",
        description="Split the reports (default: the IU reports, fetched when missing) into"
        " training and held-out reports, generate synthetic pairs with error counts known by"
        " construction, train the gradient-boosted model (gbm) or the MiniLM cross-encoder"
        " (ce), and print the held-out synthetic figures. No human ratings are used.",
    )
    p.add_argument("--variant", required=True, choices=("gbm", "ce"), help="what to train")
    p.add_argument("--output", required=True, type=Path, help="new folder for the model")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    p.add_argument("--pairs", type=int, default=None,
                   help="synthetic pairs, training and held-out together (default 40000 for"
                   " gbm, 20000 for ce)")
    p.add_argument("--heldout", type=float, default=0.1,
                   help="fraction of reports held out for the figures (default 0.1)")
    p.add_argument("--max-steps", type=int, default=None, help="optimiser steps (ce; default 800)")
    p.add_argument("--corpus", default=None,
                   help="CSV/JSONL file of reports (id, text) instead of the IU reports")
    p.add_argument("--base", type=Path, default=None,
                   help="encoder folder to fine-tune (ce; default the packaged MiniLM)")
    p.add_argument("--batch-size", type=int, default=16, help="pairs per step (ce)")
    p.add_argument("--lr", type=float, default=5e-5, help="encoder learning rate (ce)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda[:N] (default auto)")
    p.set_defaults(func=cmd_train_concord)

    commands.alias("uncertainty", "model", "uncertainty")
    commands.alias("train-er2score", "model", "train-er2score")
    commands.alias("train-concord", "model", "train-concord")


def _direction(value: bool | None) -> str:
    if value is None:
        return "unknown"
    return "higher" if value else "lower"


def cmd_metrics(args: argparse.Namespace) -> int:
    """Print the catalogue as a table or JSON.

    Plug-ins refused for a name clash are printed after the table (on stderr with ``--json``,
    so that stdout stays the list).
    """
    from radconcord.backend.services.scores.scoring import ignored_plugins, metric_catalog

    catalog = metric_catalog()
    ignored = ignored_plugins()
    if args.json:
        for message in ignored:
            print(f"warning: {message}", file=sys.stderr)
        payload = [
            {
                "family": m.family,
                "kind": m.kind,
                "available": m.available,
                "reason": m.reason,
                "signature": m.signature,
                "needs_model": m.needs_model,
                "needs_image": m.needs_image,
                "plugin": m.origin,
                "keys": [
                    {
                        "key": k,
                        "higher_is_better": m.directions.get(k),
                        "direction": _direction(m.directions.get(k)),
                    }
                    for k in m.keys
                ],
            }
            for m in catalog
        ]
        print(json.dumps(payload, indent=2))
        return 0
    rows = [("FAMILY", "KIND", "KEY", "BETTER", "STATUS")]
    for m in catalog:
        status = "available" if m.available else f"unavailable: {m.reason}"
        if not m.keys:  # a plug-in that could not be loaded: no keys known
            rows.append((m.family, m.kind, "-", "", status))
        for i, k in enumerate(m.keys):
            rows.append(
                (
                    m.family if i == 0 else "",
                    m.kind if i == 0 else "",
                    k,
                    _direction(m.directions.get(k)),
                    status if i == 0 else "",
                )
            )
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    for r in rows:
        print("  ".join(r[c].ljust(widths[c]) for c in range(4)) + "  " + r[4])
    n_ok = sum(m.available for m in catalog)
    print(f"\n{n_ok} of {len(catalog)} metric families available here")
    for m in catalog:
        if m.origin is not None:
            print(f"plug-in {m.family}: {m.origin}")
    for message in ignored:
        print(f"ignored: {message}")
    return 0


def cmd_uncertainty(args: argparse.Namespace) -> int:
    """Score SMAS variance per case and write JSON atomically."""
    from radconcord.backend.metrics.base import MetricInputError
    from radconcord.backend.metrics.smas import SmasVar
    from radconcord.backend.scoring.io import ScoreInputError, read_pairs
    from radconcord.backend.scoring.pairs_reader import field_error
    from radconcord.backend.scoring.runner import ScoringError, parse_set_options
    from radconcord.backend.util import atomic_write

    with user_errors(ScoreInputError, ScoringError):
        pf = read_pairs(args.input)
        sets = parse_set_options(args.set)
    unknown = set(sets) - {"smas", "smas_var"}
    if unknown:
        raise UserError(f"--set: only smas.* options apply here (got {', '.join(sorted(unknown))})")
    options = {**sets.get("smas", {}), **sets.get("smas_var", {})}
    groups: dict[str, list[str]] = {}
    for rec in pf.pairs:
        if rec.case_id is None:
            # The PAIRS reader's own wording and numbering ("row N (line L)" / "line L").
            raise UserError(str(field_error(args.input, rec.where, "case_id", "required here")))
        if rec.candidate.strip():
            groups.setdefault(rec.case_id, []).append(rec.candidate)
    with user_errors(ValueError):
        metric = SmasVar(**options)
    reason = metric.availability()
    if reason is not None:
        raise UserError(f"smas_var is unavailable: {reason}")
    metric.load("cpu")
    cases = {}
    for case_id, samples in groups.items():
        try:
            cases[case_id] = metric.score_samples(samples=samples)
        except MetricInputError as exc:
            cases[case_id] = {"error": str(exc)}
    payload = {"signature": metric.signature(), "input": str(args.input), "cases": cases}
    out = Path(args.output)
    with atomic_write(out) as fh:
        json.dump(payload, fh, indent=2, allow_nan=True)
    n_bad = sum("error" in c for c in cases.values())
    print(f"wrote {out}: {len(cases) - n_bad} cases scored, {n_bad} with fewer than 2 samples")
    return 0


def _fmt(x: float) -> str:
    return "nan" if math.isnan(x) else f"{x:.4f}"


def cmd_train_er2score(args: argparse.Namespace) -> int:
    """Train an ER2Score adapter on a study's ratings and print both held-out taus."""
    from radconcord.backend.metrics import hf
    from radconcord.backend.services.evaluation.er2train import train_from_study
    from radconcord.backend.types import Actor

    with user_errors(ValueError):
        device = hf.pick_device(args.device)

    with database() as db, service_errors(), progress_bar("train-er2score",
                                                         unit="step") as bar:

        last = {"step": 0, "total": 0}

        def progress(step: int, total: int, loss: float) -> None:
            last.update(step=step, total=total)
            bar(step, total, f"loss {loss:.4f}")

        def phase(message: str) -> None:
            # Stages without steps (loading the backbone, held-out scoring) take minutes on a
            # CPU: say what is happening instead of a frozen step counter.
            bar(last["step"], last["total"], message)

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
            phase=phase,
        )
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


def cmd_train_concord(args: argparse.Namespace) -> int:
    """Train a Concord model on synthetic pairs and print the held-out figures."""
    from radconcord.backend.metrics import hf
    from radconcord.backend.services.evaluation.concord_train import train_concord

    with user_errors(ValueError):
        device = hf.pick_device(args.device)
    with service_errors(), progress_bar(f"train-concord {args.variant}",
                                        unit="step") as bar:
        summary = train_concord(
            variant=args.variant,
            output=args.output,
            seed=args.seed,
            n_pairs=args.pairs,
            heldout=args.heldout,
            corpus=args.corpus,
            max_steps=args.max_steps,
            progress=bar,
            device=device,
            base=args.base,
            batch_size=args.batch_size,
            lr=args.lr,
        )
    f = summary.figures

    def num(key: str) -> str:
        value = f.get(key)
        return "n/a" if value is None else f"{value:.4f}"

    print(f"concord {summary.variant} written to {summary.output}")
    print(f"trained on {summary.n_train_pairs} synthetic pairs from {summary.n_reports_train}"
          f" reports of {summary.corpus} (sha256 {summary.corpus_sha256[:12]}), seed"
          f" {summary.seed}" + (f", {summary.steps} steps" if summary.steps else "")
          + f", {summary.seconds:.1f} s")
    print(f"held-out synthetic figures ({summary.n_heldout_pairs} pairs from"
          f" {summary.n_reports_heldout} other reports): Kendall tau total {num('tau_total')},"
          f" significant {num('tau_sig')}; MAE total {num('mae_total')}, significant"
          f" {num('mae_sig')}; exact match {num('exact_match')}, exact total"
          f" {num('exact_total')}")
    print(f"score with: --set concord.variant={summary.variant}"
          f" concord.model={summary.output}")
    return 0
