"""``export``: a study's pairs and ratings as ReXVal files or JSONL with a manifest."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from backend.cli.common import database, service_errors


def cmd_export(args: argparse.Namespace) -> int:
    """Export a study as ReXVal files or JSONL with a manifest."""
    from backend.services.exports import export_study
    from backend.types import Actor

    with database() as db, service_errors():
        summary = export_study(
            db, Actor.system(), study_name=args.study, fmt=args.format,
            out_dir=Path(args.output),
        )
    print(f"wrote {len(summary.files)} files to {summary.out_dir}")
    return 0


def register(subparsers: Any) -> None:  # noqa: ANN401 - argparse's private subparsers type
    """Add ``export``.

    Args:
        subparsers: The object returned by ``ArgumentParser.add_subparsers``.
    """
    p = subparsers.add_parser("export", help="export a study (ReXVal files or JSONL)")
    p.add_argument("--study", required=True)
    p.add_argument("--format", required=True, choices=("rexval", "jsonl"))
    p.add_argument("--output", required=True, help="output folder (new or empty)")
    p.set_defaults(func=cmd_export)
