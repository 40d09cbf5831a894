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
