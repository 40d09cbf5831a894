"""``python -m backend metrics [--json]``: every metric, available here or why not."""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(subparsers: Any) -> None:
    """Add the ``metrics`` subcommand."""
    p = subparsers.add_parser(
        "metrics",
        help="list every metric family and output key, available here or why not",
        description="List every registered metric family with its output keys, their "
        "direction, and whether it can run on this machine (with the reason when not).",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_metrics)

    u = subparsers.add_parser(
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


def _direction(value: bool | None) -> str:
    if value is None:
        return "unknown"
    return "higher" if value else "lower"


def cmd_metrics(args: argparse.Namespace) -> int:
    """Print the catalogue as a table or JSON."""
    from backend.services.scoring import metric_catalog

    catalog = metric_catalog()
    if args.json:
        payload = [
            {
                "family": m.family,
                "kind": m.kind,
                "available": m.available,
                "reason": m.reason,
                "signature": m.signature,
                "needs_model": m.needs_model,
                "needs_image": m.needs_image,
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
    return 0


def cmd_uncertainty(args: argparse.Namespace) -> int:
    """Score SMAS variance per case and write JSON atomically."""
    import os
    import tempfile
    from pathlib import Path

    from backend.cli import UserError
    from backend.metrics.base import MetricInputError
    from backend.metrics.smas import SmasVar
    from backend.scoring.io import ScoreInputError, read_pairs
    from backend.scoring.runner import ScoringError, parse_set_options

    try:
        pf = read_pairs(args.input)
        sets = parse_set_options(args.set)
    except (ScoreInputError, ScoringError) as exc:
        raise UserError(str(exc)) from None
    unknown = set(sets) - {"smas", "smas_var"}
    if unknown:
        raise UserError(f"--set: only smas.* options apply here (got {', '.join(sorted(unknown))})")
    options = {**sets.get("smas", {}), **sets.get("smas_var", {})}
    groups: dict[str, list[str]] = {}
    for rec in pf.pairs:
        if rec.case_id is None:
            raise UserError(f"{args.input}:{rec.row}: field 'case_id' is required here")
        if rec.candidate.strip():
            groups.setdefault(rec.case_id, []).append(rec.candidate)
    try:
        metric = SmasVar(**options)
    except ValueError as exc:
        raise UserError(str(exc)) from None
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
    fd, tmp = tempfile.mkstemp(dir=out.parent if str(out.parent) else ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, indent=2, allow_nan=True)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    n_bad = sum("error" in c for c in cases.values())
    print(f"wrote {out}: {len(cases) - n_bad} cases scored, {n_bad} with fewer than 2 samples")
    return 0
